// Kimi Delta Attention core kernel speed against Eigen's own matrix product
// and the Gated DeltaNet core at the same shapes, in one run, one kernel
// thread (SetKernelThreads(1)), float32:
//   Gemm/N            C (N, N) = A (N, N) B (N, N), 2 N^3 FLOPs
//   KdaForward/...    KdaCoreForward,  FLOPs from CountKdaCoreFlops
//   KdaBackward/...   KdaCoreBackward, FLOPs from CountKdaCoreFlops
//   GdnForward/...    GdnCoreForward on the same q, k, v, beta and a scalar
//   GdnBackward/...   decay per head: the time beside KDA's (FLOPs from
//                     CountGdnCoreFlops)
// at kda-tiny's head config (H = 2, d_k = d_v = 32) and the paper presets'
// (d = 128; one head: heads are independent), one sequence of T = 256, 1024,
// 4096 tokens. After the runs it prints each rate as a fraction of the best
// GEMM rate. Rates are per CPU second, medians when repeated; the GDN/KDA
// time ratio is what scripts/measure-family-kernels.sh reports.
//
//   OMP_NUM_THREADS=1 ./bench/bench_kda_kernel --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/kernels/gdn_core.h"
#include "backend/kernels/kda_core.h"
#include "backend/threading.h"
#include "bench/gemm_baseline.h"

namespace stateflow::backend {
namespace {

using bench::Gemm;

// Inputs as a KDA layer makes them: unit-norm q, k rows (q scaled by
// d_k^-1/2), log decays per channel in (-0.1, 0), beta in (0.1, 0.9).
// Layouts as in kda_core.h; g_head is GDN's decay per head (the first
// channel's).
struct KdaInputs {
  int64_t T, H, K, V;
  std::vector<float> q, k, v, g, g_head, beta, S_in;
  KdaInputs(int64_t T_, int64_t H_, int64_t K_, int64_t V_) : T(T_), H(H_), K(K_), V(V_) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](int64_t n, float scale, float shift) {
      std::vector<float> x(n);
      for (float& e : x) e = shift + scale * u(rng);
      return x;
    };
    const int64_t rows = T * H;
    const float unit = 1.0f / static_cast<float>(K);  // |row| about 1 / sqrt(K)
    q = fill(rows * K, unit, 0);
    k = fill(rows * K, 1.0f / std::sqrt(static_cast<float>(K)), 0);
    v = fill(rows * V, 1, 0);
    g = fill(rows * K, 0.05f, -0.05f);
    g_head.resize(rows);
    for (int64_t r = 0; r < rows; ++r) g_head[r] = g[r * K];
    beta = fill(rows, 0.4f, 0.5f);
    S_in = fill(H * V * K, 1, 0);
  }
};

void SetRate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void KdaForward(benchmark::State& state) {
  SetKernelThreads(1);
  const KdaInputs in(state.range(0), state.range(1), state.range(2), state.range(2));
  std::vector<float> o(in.T * in.H * in.V), S_out(in.H * in.V * in.K);
  for (auto _ : state) {
    KdaCoreForward<float>(o.data(), S_out.data(), in.q.data(), in.k.data(), in.v.data(),
                          in.g.data(), in.beta.data(), in.S_in.data(), in.T, in.H, in.K, in.V);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountKdaCoreFlops(in.T, in.H, in.K, in.V).forward);
}

void KdaBackward(benchmark::State& state) {
  SetKernelThreads(1);
  const KdaInputs in(state.range(0), state.range(1), state.range(2), state.range(2));
  const int64_t nk = in.T * in.H * in.K, nv = in.T * in.H * in.V, ns = in.H * in.V * in.K;
  std::vector<float> dO(nv, 0.01f), dS_out(ns, 0.01f), dq(nk), dk(nk), dv(nv), dg(nk),
      dbeta(in.T * in.H), dS_in(ns), ws(KdaCoreBackwardWorkspaceSize(in.T, in.H, in.K, in.V));
  for (auto _ : state) {
    KdaCoreBackward<float>(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                           dS_in.data(), ws.data(), dO.data(), dS_out.data(), in.q.data(),
                           in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                           in.S_in.data(), in.T, in.H, in.K, in.V);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountKdaCoreFlops(in.T, in.H, in.K, in.V).backward);
}

void GdnForward(benchmark::State& state) {
  SetKernelThreads(1);
  const KdaInputs in(state.range(0), state.range(1), state.range(2), state.range(2));
  std::vector<float> o(in.T * in.H * in.V), S_out(in.H * in.V * in.K);
  for (auto _ : state) {
    GdnCoreForward<float>(o.data(), S_out.data(), in.q.data(), in.k.data(), in.v.data(),
                          in.g_head.data(), in.beta.data(), in.S_in.data(), in.T, in.H, in.K,
                          in.V);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.K, in.V).forward);
}

void GdnBackward(benchmark::State& state) {
  SetKernelThreads(1);
  const KdaInputs in(state.range(0), state.range(1), state.range(2), state.range(2));
  const int64_t nk = in.T * in.H * in.K, nv = in.T * in.H * in.V, ns = in.H * in.V * in.K;
  std::vector<float> dO(nv, 0.01f), dS_out(ns, 0.01f), dq(nk), dk(nk), dv(nv),
      dg(in.T * in.H), dbeta(in.T * in.H), dS_in(ns),
      ws(GdnCoreBackwardWorkspaceSize(in.T, in.H, in.K, in.V));
  for (auto _ : state) {
    GdnCoreBackward<float>(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                           dS_in.data(), ws.data(), dO.data(), dS_out.data(), in.q.data(),
                           in.k.data(), in.v.data(), in.g_head.data(), in.beta.data(),
                           in.S_in.data(), in.T, in.H, in.K, in.V);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.K, in.V).backward);
}

void Configs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "H", "d"});
  for (int64_t T : {256, 1024, 4096}) {
    b->Args({T, 2, 32});   // kda-tiny
    b->Args({T, 1, 128});  // the paper presets' head
  }
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(Gemm)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(KdaForward)->Apply(Configs);
BENCHMARK(KdaBackward)->Apply(Configs);
BENCHMARK(GdnForward)->Apply(Configs);
BENCHMARK(GdnBackward)->Apply(Configs);

}  // namespace
}  // namespace stateflow::backend

int main(int argc, char** argv) {
  return stateflow::bench::RunWithGemmRatios(argc, argv, "KDA core", "Kda", 40);
}

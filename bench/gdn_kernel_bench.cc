// GDN core kernel speed against Eigen's own matrix product, in one run,
// one kernel thread (SetKernelThreads(1)), float32:
//   Gemm/N             C (N, N) = A (N, N) B (N, N), 2 N^3 FLOPs
//   GdnForward/...     GdnCoreForward,  FLOPs from CountGdnCoreFlops
//   GdnBackward/...    GdnCoreBackward, FLOPs from CountGdnCoreFlops
// at a tiny head config (H=2, d_k=d_v=32, T=1024) and a paper-shaped one
// (H=1, d_k=d_v=128, T=4096). After the runs it prints each GDN rate as a
// fraction of the best GEMM rate (the target is >= 40%). Rates are per CPU
// second (Google Benchmark's default), medians when repeated.
// Split-and-overlap (issue 15), one rank, wall time, float32, d_k = d_v = 128:
//   GdnForwardThreads/mode:0   GdnCoreForward on 1 thread (sequential)
//   GdnForwardThreads/mode:1   GdnCoreForward on 2 threads (heads split)
//   GdnForwardThreads/mode:2   GdnCoreForwardOverlapped on 2 threads
//   GdnBackwardThreads/mode:0  GdnCoreBackward on 1 thread (sequential)
//   GdnBackwardThreads/mode:1  GdnCoreBackward on 2 threads (heads split)
//   GdnBackwardThreads/mode:2  GdnCoreBackwardOverlapped on 2 threads
// at H = 1, 2, 4 and T = 256 to 4096:
//   ./bench/bench_gdn_kernel --benchmark_filter=Threads --benchmark_repetitions=3
//
//   ./bench/bench_gdn_kernel --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/kernels/gdn_core.h"
#include "backend/kernels/gdn_prep.h"
#include "backend/threading.h"
#include "bench/gemm_baseline.h"

namespace stateflow::backend {
namespace {


using bench::Gemm;

// Inputs as a GDN layer makes them: q, k L2-normalised (q scaled), decays
// in (0, 1), beta in (0, 1). Layouts as in gdn_core.h.
struct GdnInputs {
  int64_t T, H, Dk, Dv;
  std::vector<float> q, k, v, g, beta, S_in;
  GdnInputs(int64_t T_, int64_t H_, int64_t Dk_, int64_t Dv_)
      : T(T_), H(H_), Dk(Dk_), Dv(Dv_) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](int64_t n) {
      std::vector<float> x(n);
      for (float& e : x) e = u(rng);
      return x;
    };
    const int64_t rows = T * H;
    std::vector<float> rnorm(rows), raw = fill(rows * Dk);
    q.resize(rows * Dk);
    k.resize(rows * Dk);
    L2NormForward<float>(q.data(), rnorm.data(), raw.data(), rows, Dk,
                         1.0f / std::sqrt(static_cast<float>(Dk)), 1e-6f);
    raw = fill(rows * Dk);
    L2NormForward<float>(k.data(), rnorm.data(), raw.data(), rows, Dk, 1.0f,
                         1e-6f);
    v = fill(rows * Dv);
    g = fill(rows);
    for (float& e : g) e = -0.05f * (1.0f + e);   // alpha in (0.9, 1]
    beta = fill(rows);
    for (float& e : beta) e = 0.5f + 0.4f * e;    // (0.1, 0.9)
    S_in = fill(H * Dv * Dk);
  }
};

void SetRate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void GdnForward(benchmark::State& state) {
  SetKernelThreads(1);
  const GdnInputs in(state.range(0), state.range(1), state.range(2),
                     state.range(3));
  std::vector<float> o(in.T * in.H * in.Dv), S_out(in.H * in.Dv * in.Dk);
  for (auto _ : state) {
    GdnCoreForward<float>(o.data(), S_out.data(), in.q.data(), in.k.data(),
                          in.v.data(), in.g.data(), in.beta.data(),
                          in.S_in.data(), in.T, in.H, in.Dk, in.Dv);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.Dk, in.Dv).forward);
}

void GdnBackward(benchmark::State& state) {
  SetKernelThreads(1);
  const GdnInputs in(state.range(0), state.range(1), state.range(2),
                     state.range(3));
  const int64_t nk = in.T * in.H * in.Dk, nv = in.T * in.H * in.Dv,
                ns = in.H * in.Dv * in.Dk;
  std::vector<float> dO(nv, 0.01f), dS_out(ns, 0.01f), dq(nk), dk(nk), dv(nv),
      dg(in.T * in.H), dbeta(in.T * in.H), dS_in(ns),
      ws(GdnCoreBackwardWorkspaceSize(in.T, in.H, in.Dk, in.Dv));
  for (auto _ : state) {
    GdnCoreBackward<float>(dq.data(), dk.data(), dv.data(), dg.data(),
                           dbeta.data(), dS_in.data(), ws.data(), dO.data(),
                           dS_out.data(), in.q.data(), in.k.data(),
                           in.v.data(), in.g.data(), in.beta.data(),
                           in.S_in.data(), in.T, in.H, in.Dk, in.Dv);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.Dk, in.Dv).backward);
}

void GdnForwardThreads(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  SetKernelThreads(mode == 0 ? 1 : 2);
  const GdnInputs in(state.range(1), state.range(2), 128, 128);
  std::vector<float> o(in.T * in.H * in.Dv), S_out(in.H * in.Dv * in.Dk);
  for (auto _ : state) {
    if (mode == 2) {
      GdnCoreForwardOverlapped<float>(o.data(), S_out.data(), in.q.data(), in.k.data(),
                                      in.v.data(), in.g.data(), in.beta.data(),
                                      in.S_in.data(), in.T, in.H, in.Dk, in.Dv);
    } else {
      GdnCoreForward<float>(o.data(), S_out.data(), in.q.data(), in.k.data(),
                            in.v.data(), in.g.data(), in.beta.data(),
                            in.S_in.data(), in.T, in.H, in.Dk, in.Dv);
    }
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetKernelThreads(1);
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.Dk, in.Dv).forward);
}

void GdnBackwardThreads(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  SetKernelThreads(mode == 0 ? 1 : 2);
  const GdnInputs in(state.range(1), state.range(2), 128, 128);
  const int64_t nk = in.T * in.H * in.Dk, nv = in.T * in.H * in.Dv,
                ns = in.H * in.Dv * in.Dk;
  std::vector<float> dO(nv, 0.01f), dS_out(ns, 0.01f), dq(nk), dk(nk), dv(nv),
      dg(in.T * in.H), dbeta(in.T * in.H), dS_in(ns),
      ws(GdnCoreBackwardWorkspaceSize(in.T, in.H, in.Dk, in.Dv));
  auto* core = mode == 2 ? &GdnCoreBackwardOverlapped<float> : &GdnCoreBackward<float>;
  for (auto _ : state) {
    core(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dS_in.data(), ws.data(),
         dO.data(), dS_out.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
         in.beta.data(), in.S_in.data(), in.T, in.H, in.Dk, in.Dv, kGdnBlockSize, 0);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetKernelThreads(1);
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.Dk, in.Dv).backward);
}

// The ST tile on the CPU: one head of Dk = Dv = 128 (the case where heads
// alone leave a thread idle), sequential on 1 thread, and overlapped on 2
// threads untiled (B_V 0) and at B_V 64 and 32 (2 and 4 ST chains).
void GdnForwardStTile(benchmark::State& state) {
  const bool overlapped = state.range(0) != 0;
  const int64_t tile = state.range(2);
  SetKernelThreads(overlapped ? 2 : 1);
  const GdnInputs in(state.range(1), 1, 128, 128);
  std::vector<float> o(in.T * in.H * in.Dv), S_out(in.H * in.Dv * in.Dk);
  auto* core = overlapped ? &GdnCoreForwardOverlapped<float> : &GdnCoreForward<float>;
  for (auto _ : state) {
    core(o.data(), S_out.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
         in.beta.data(), in.S_in.data(), in.T, in.H, in.Dk, in.Dv, kGdnBlockSize, tile);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetKernelThreads(1);
  SetRate(state, CountGdnCoreFlops(in.T, in.H, in.Dk, in.Dv).forward);
}

BENCHMARK(GdnForwardStTile)
    ->ArgNames({"overlap", "T", "B_V"})
    ->ArgsProduct({{0, 1}, {1024, 4096}, {0, 64, 32}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(GdnForwardThreads)
    ->ArgNames({"mode", "T", "H"})
    ->ArgsProduct({{0, 1, 2}, {256, 1024, 4096}, {1, 2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(GdnBackwardThreads)
    ->ArgNames({"mode", "T", "H"})
    ->ArgsProduct({{0, 1, 2}, {256, 1024, 4096}, {1, 2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Gemm)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(GdnForward)
    ->ArgNames({"T", "H", "Dk", "Dv"})
    ->Args({1024, 2, 32, 32})
    ->Args({4096, 1, 128, 128})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(GdnBackward)
    ->ArgNames({"T", "H", "Dk", "Dv"})
    ->Args({1024, 2, 32, 32})
    ->Args({4096, 1, 128, 128})
    ->Unit(benchmark::kMillisecond);


}  // namespace
}  // namespace stateflow::backend

int main(int argc, char** argv) {
  return stateflow::bench::RunWithGemmRatios(argc, argv, "GDN core", "Gdn", 48);
}

// Mamba-3 core kernel speed against Eigen's own matrix product, in one run,
// one kernel thread (SetKernelThreads(1)), float32:
//   Gemm/N               C (N, N) = A (N, N) B (N, N), 2 N^3 FLOPs
//   Mamba3Forward/...    Mamba3CoreForward,  FLOPs from CountMamba3CoreFlops
//   Mamba3Backward/...   Mamba3CoreBackward, FLOPs from CountMamba3CoreFlops
// at mamba3-tiny's head config (H=4, head dim dp=32, d_state ds=16) and the
// paper presets' (dp=64, ds=128; one head: heads are independent), one
// sequence of T = 256, 1024, 4096 tokens. After the runs it prints each
// Mamba-3 rate as a fraction of the best GEMM rate (the target is >= 40%).
// Rates are per CPU second, medians when repeated.
// Split-and-overlap (issue 15), one rank, wall time, float32, the paper's
// head (d_state ds = 128, head dim dp = 64):
//   Mamba3ForwardThreads/mode:0   Mamba3CoreForward on 1 thread (sequential)
//   Mamba3ForwardThreads/mode:1   Mamba3CoreForward on 2 threads (heads split)
//   Mamba3ForwardThreads/mode:2   Mamba3CoreForwardOverlapped on 2 threads
//   Mamba3BackwardThreads/mode:0  Mamba3CoreBackward on 1 thread (sequential)
//   Mamba3BackwardThreads/mode:1  Mamba3CoreBackward on 2 threads (heads split)
//   Mamba3BackwardThreads/mode:2  Mamba3CoreBackwardOverlapped on 2 threads
// at H = 1, 2, 4 and T = 256 to 4096:
//   OMP_NUM_THREADS=2 ./bench/bench_mamba3_kernel --benchmark_filter=Threads --benchmark_repetitions=3
//
//   ./bench/bench_mamba3_kernel --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/kernels/mamba3_core.h"
#include "backend/threading.h"
#include "bench/gemm_baseline.h"

namespace stateflow::backend {
namespace {


using bench::Gemm;

// Inputs as a Mamba-3 layer makes them: unit-scale q, k, decays a = A dt in
// (-0.1, 0), gamma and beta in (0, 0.1). Layouts as in mamba3_core.h.
struct Mamba3Inputs {
  int64_t T, H, Ds, Dp;
  std::vector<float> q, k, v, a, gamma, beta, S_in, k_in, v_in;
  Mamba3Inputs(int64_t T_, int64_t H_, int64_t Ds_, int64_t Dp_)
      : T(T_), H(H_), Ds(Ds_), Dp(Dp_) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](int64_t n, float scale, float shift) {
      std::vector<float> x(n);
      for (float& e : x) e = shift + scale * u(rng);
      return x;
    };
    const int64_t rows = T * H;
    q = fill(rows * Ds, 1, 0);
    k = fill(rows * Ds, 1, 0);
    v = fill(rows * Dp, 1, 0);
    a = fill(rows, 0.05f, -0.05f);
    gamma = fill(rows, 0.05f, 0.05f);
    beta = fill(rows, 0.05f, 0.05f);
    S_in = fill(H * Dp * Ds, 1, 0);
    k_in = fill(H * Ds, 1, 0);
    v_in = fill(H * Dp, 1, 0);
  }
};

void SetRate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void Mamba3Forward(benchmark::State& state) {
  SetKernelThreads(1);
  const Mamba3Inputs in(state.range(0), state.range(1), state.range(2), state.range(3));
  std::vector<float> o(in.T * in.H * in.Dp), S_out(in.H * in.Dp * in.Ds),
      k_out(in.H * in.Ds), v_out(in.H * in.Dp);
  for (auto _ : state) {
    Mamba3CoreForward<float>(o.data(), S_out.data(), k_out.data(), v_out.data(),
                             in.q.data(), in.k.data(), in.v.data(), in.a.data(),
                             in.gamma.data(), in.beta.data(), in.S_in.data(),
                             in.k_in.data(), in.v_in.data(), in.T, in.H, in.Ds, in.Dp);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountMamba3CoreFlops(in.T, in.H, in.Ds, in.Dp).forward);
}

void Mamba3Backward(benchmark::State& state) {
  SetKernelThreads(1);
  const Mamba3Inputs in(state.range(0), state.range(1), state.range(2), state.range(3));
  const int64_t nk = in.T * in.H * in.Ds, nv = in.T * in.H * in.Dp,
                ns = in.H * in.Dp * in.Ds, nh = in.T * in.H;
  std::vector<float> dO(nv, 0.01f), dS_out(ns, 0.01f), dk_out(in.H * in.Ds, 0.01f),
      dv_out(in.H * in.Dp, 0.01f), dq(nk), dk(nk), dv(nv), da(nh), dgamma(nh),
      dbeta(nh), dS_in(ns), dk_in(in.H * in.Ds), dv_in(in.H * in.Dp),
      ws(Mamba3CoreBackwardWorkspaceSize(in.T, in.H, in.Ds, in.Dp));
  for (auto _ : state) {
    Mamba3CoreBackward<float>(
        dq.data(), dk.data(), dv.data(), da.data(), dgamma.data(), dbeta.data(),
        dS_in.data(), dk_in.data(), dv_in.data(), ws.data(), dO.data(),
        dS_out.data(), dk_out.data(), dv_out.data(), in.q.data(), in.k.data(),
        in.v.data(), in.a.data(), in.gamma.data(), in.beta.data(), in.S_in.data(),
        in.k_in.data(), in.v_in.data(), in.T, in.H, in.Ds, in.Dp);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountMamba3CoreFlops(in.T, in.H, in.Ds, in.Dp).backward);
}

void Mamba3ForwardThreads(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  SetKernelThreads(mode == 0 ? 1 : 2);
  const Mamba3Inputs in(state.range(1), state.range(2), 128, 64);
  std::vector<float> o(in.T * in.H * in.Dp), S_out(in.H * in.Dp * in.Ds),
      k_out(in.H * in.Ds), v_out(in.H * in.Dp);
  auto* core = mode == 2 ? &Mamba3CoreForwardOverlapped<float> : &Mamba3CoreForward<float>;
  for (auto _ : state) {
    core(o.data(), S_out.data(), k_out.data(), v_out.data(), in.q.data(), in.k.data(),
         in.v.data(), in.a.data(), in.gamma.data(), in.beta.data(), in.S_in.data(),
         in.k_in.data(), in.v_in.data(), in.T, in.H, in.Ds, in.Dp, kMamba3BlockSize, /*st_tile=*/0);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetKernelThreads(1);
  SetRate(state, CountMamba3CoreFlops(in.T, in.H, in.Ds, in.Dp).forward);
}

void Mamba3BackwardThreads(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  SetKernelThreads(mode == 0 ? 1 : 2);
  const Mamba3Inputs in(state.range(1), state.range(2), 128, 64);
  const int64_t nk = in.T * in.H * in.Ds, nv = in.T * in.H * in.Dp,
                ns = in.H * in.Dp * in.Ds, nh = in.T * in.H;
  std::vector<float> dO(nv, 0.01f), dS_out(ns, 0.01f), dk_out(in.H * in.Ds, 0.01f),
      dv_out(in.H * in.Dp, 0.01f), dq(nk), dk(nk), dv(nv), da(nh), dgamma(nh),
      dbeta(nh), dS_in(ns), dk_in(in.H * in.Ds), dv_in(in.H * in.Dp),
      ws(Mamba3CoreBackwardWorkspaceSize(in.T, in.H, in.Ds, in.Dp));
  auto* core = mode == 2 ? &Mamba3CoreBackwardOverlapped<float> : &Mamba3CoreBackward<float>;
  for (auto _ : state) {
    core(dq.data(), dk.data(), dv.data(), da.data(), dgamma.data(), dbeta.data(),
         dS_in.data(), dk_in.data(), dv_in.data(), ws.data(), dO.data(), dS_out.data(),
         dk_out.data(), dv_out.data(), in.q.data(), in.k.data(), in.v.data(), in.a.data(),
         in.gamma.data(), in.beta.data(), in.S_in.data(), in.k_in.data(), in.v_in.data(),
         in.T, in.H, in.Ds, in.Dp, kMamba3BlockSize, /*st_tile=*/0);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetKernelThreads(1);
  SetRate(state, CountMamba3CoreFlops(in.T, in.H, in.Ds, in.Dp).backward);
}

void Configs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "H", "ds", "dp"});
  for (int64_t T : {256, 1024, 4096}) {
    b->Args({T, 4, 16, 32});   // mamba3-tiny
    b->Args({T, 1, 128, 64});  // the paper presets' head
  }
  b->Unit(benchmark::kMillisecond);
}

// The ST tile on the CPU, as GdnForwardStTile: one head (d_state 128, head
// dim 64), sequential on 1 thread, and overlapped on 2 threads untiled (B_V
// 0) and at B_V 32 and 16 (2 and 4 ST chains per block).
void Mamba3ForwardStTile(benchmark::State& state) {
  const bool overlapped = state.range(0) != 0;
  const int64_t tile = state.range(2);
  SetKernelThreads(overlapped ? 2 : 1);
  const Mamba3Inputs in(state.range(1), 1, 128, 64);
  std::vector<float> o(in.T * in.H * in.Dp), S_out(in.H * in.Dp * in.Ds),
      k_out(in.H * in.Ds), v_out(in.H * in.Dp);
  auto* core = overlapped ? &Mamba3CoreForwardOverlapped<float> : &Mamba3CoreForward<float>;
  for (auto _ : state) {
    core(o.data(), S_out.data(), k_out.data(), v_out.data(), in.q.data(), in.k.data(),
         in.v.data(), in.a.data(), in.gamma.data(), in.beta.data(), in.S_in.data(),
         in.k_in.data(), in.v_in.data(), in.T, in.H, in.Ds, in.Dp, kMamba3BlockSize, tile);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  SetKernelThreads(1);
  SetRate(state, CountMamba3CoreFlops(in.T, in.H, in.Ds, in.Dp).forward);
}

BENCHMARK(Mamba3ForwardStTile)
    ->ArgNames({"overlap", "T", "B_V"})
    ->ArgsProduct({{0, 1}, {1024, 4096}, {0, 32, 16}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Mamba3ForwardThreads)
    ->ArgNames({"mode", "T", "H"})
    ->ArgsProduct({{0, 1, 2}, {256, 1024, 4096}, {1, 2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Mamba3BackwardThreads)
    ->ArgNames({"mode", "T", "H"})
    ->ArgsProduct({{0, 1, 2}, {256, 1024, 4096}, {1, 2, 4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Gemm)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(Mamba3Forward)->Apply(Configs);
BENCHMARK(Mamba3Backward)->Apply(Configs);


}  // namespace
}  // namespace stateflow::backend

int main(int argc, char** argv) {
  return stateflow::bench::RunWithGemmRatios(argc, argv, "Mamba-3 core", "Mamba3", 48);
}

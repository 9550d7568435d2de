// Causal attention kernel speed against Eigen's own matrix product, in one
// run, one kernel thread (SetKernelThreads(1)), float32:
//   Gemm/N                   C (N, N) = A (N, N) B (N, N), 2 N^3 FLOPs
//   AttentionForward/...     AttentionForward,  FLOPs from CountAttentionFlops
//   AttentionBackward/...    AttentionBackward, FLOPs from CountAttentionFlops
// (useful FLOPs over the causal pairs only: 4 d Hq and 10 d Hq per pair), at
// a tiny head config (Hq = 4, Hkv = 2, d = 16, s = 256) and paper-shaped ones
// (d = 128, Hq = 4, Hkv = 1: a chunk of s = 1024 or 4096 at start = 0, and a
// chunk of 1024 after a prefix of 3072). After the runs it prints each rate
// as a fraction of the best GEMM rate (the target is >= 40%). Rates are per
// CPU second (Google Benchmark's default), medians when repeated.
//
//   ./bench/bench_attention_kernel --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/kernels/attention.h"
#include "backend/threading.h"
#include "bench/gemm_baseline.h"

namespace stateflow::backend {
namespace {


using bench::Gemm;

// q (s, Hq, d), k, v (start + s, Hkv, d) uniform in (-1, 1), and the
// forward's o, lse for the backward.
struct AttnInputs {
  int64_t s, start, Hq, Hkv, d;
  std::vector<float> q, k, v, o, lse;
  explicit AttnInputs(const benchmark::State& st)
      : s(st.range(0)), start(st.range(1)), Hq(st.range(2)), Hkv(st.range(3)),
        d(st.range(4)) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    auto fill = [&](int64_t n) {
      std::vector<float> x(n);
      for (float& e : x) e = u(rng);
      return x;
    };
    q = fill(s * Hq * d);
    k = fill((start + s) * Hkv * d);
    v = fill((start + s) * Hkv * d);
    o.resize(q.size());
    lse.resize(s * Hq);
    AttentionForward<float>(o.data(), lse.data(), q.data(), k.data(), v.data(),
                            s, start, Hq, Hkv, d);
  }
};

void SetRate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void AttnForward(benchmark::State& state) {
  SetKernelThreads(1);
  AttnInputs in(state);
  for (auto _ : state) {
    AttentionForward<float>(in.o.data(), in.lse.data(), in.q.data(), in.k.data(),
                            in.v.data(), in.s, in.start, in.Hq, in.Hkv, in.d);
    benchmark::DoNotOptimize(in.o.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountAttentionFlops(in.s, in.start, in.Hq, in.d).forward);
}

void AttnBackward(benchmark::State& state) {
  SetKernelThreads(1);
  const AttnInputs in(state);
  std::vector<float> dO(in.q.size(), 0.01f), dq(in.q.size()), dk(in.k.size()),
      dv(in.v.size()), D(in.s * in.Hq);
  for (auto _ : state) {
    AttentionBackward<float>(dq.data(), dk.data(), dv.data(), D.data(), dO.data(),
                             in.o.data(), in.lse.data(), in.q.data(), in.k.data(),
                             in.v.data(), in.s, in.start, in.Hq, in.Hkv, in.d);
    benchmark::DoNotOptimize(dq.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, CountAttentionFlops(in.s, in.start, in.Hq, in.d).backward);
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"s", "start", "Hq", "Hkv", "d"})
      ->Args({256, 0, 4, 2, 16})
      ->Args({1024, 0, 4, 1, 128})
      ->Args({1024, 3072, 4, 1, 128})
      ->Args({4096, 0, 4, 1, 128})
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(Gemm)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(AttnForward)->Apply(Shapes);
BENCHMARK(AttnBackward)->Apply(Shapes);


}  // namespace
}  // namespace stateflow::backend

int main(int argc, char** argv) {
  return stateflow::bench::RunWithGemmRatios(argc, argv, "Attention", "Attn", 56);
}

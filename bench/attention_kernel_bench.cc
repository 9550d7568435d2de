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

namespace stateflow::backend {
namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;

void Gemm(benchmark::State& state) {
  SetKernelThreads(1);
  const Eigen::Index n = state.range(0);
  const Matrix a = Matrix::Random(n, n), b = Matrix::Random(n, n);
  Matrix c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(n * n * n) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
}

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

// The console output plus, at the end, each attention rate over the best
// GEMM rate.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      auto it = run.counters.find("GFLOP/s");
      if (it == run.counters.end()) continue;
      if (run.run_type == Run::RT_Iteration) {
        rates_[run.run_name.str()] = it->second;
      } else if (run.aggregate_name == "median") {
        medians_[run.run_name.str()] = it->second;
      }
    }
  }
  // With --benchmark_repetitions, the medians; otherwise the single runs.
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const auto& [name, rate] : medians_) rates_[name] = rate;
    double gemm = 0.0;
    std::string gemm_name;
    for (const auto& [name, rate] : rates_) {
      if (name.rfind("Gemm/", 0) == 0 && rate > gemm) {
        gemm = rate;
        gemm_name = name;
      }
    }
    if (gemm <= 0.0) return;
    std::printf("\nAttention rate / %s rate (%.2f GFLOP/s):\n", gemm_name.c_str(), gemm);
    for (const auto& [name, rate] : rates_) {
      if (name.rfind("Attn", 0) != 0) continue;
      std::printf("  %-56s %7.2f GFLOP/s  %5.1f%%\n", name.c_str(), rate,
                  100.0 * rate / gemm);
    }
  }

 private:
  std::map<std::string, double> rates_;
  std::map<std::string, double> medians_;
};

}  // namespace
}  // namespace stateflow::backend

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  stateflow::backend::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

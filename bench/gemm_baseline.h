// What every kernel benchmark measures itself against: Eigen's float32
// matrix product on one kernel thread (the Gemm benchmark, registered by
// each binary as BENCHMARK(Gemm)), and a reporter that ends the console
// output with each kernel's rate as a share of the best Gemm rate of the same
// run (the medians with --benchmark_repetitions).
//
//   BENCHMARK(Gemm)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
//   int main(int argc, char** argv) {
//     return stateflow::bench::RunWithGemmRatios(argc, argv, "GDN core", "Gdn", 48);
//   }
#pragma once

#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/threading.h"

namespace stateflow::bench {

// C = A B for n x n float32 matrices, n = state.range(0), one kernel thread.
inline void Gemm(benchmark::State& state) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
  backend::SetKernelThreads(1);
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

// The console output plus, at the end, each rate of a benchmark whose name
// starts with `prefix` over the best Gemm rate.
class GemmRatioReporter : public benchmark::ConsoleReporter {
 public:
  GemmRatioReporter(std::string title, std::string prefix, int name_width)
      : title_(std::move(title)), prefix_(std::move(prefix)), width_(name_width) {}

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
    std::printf("\n%s rate / %s rate (%.2f GFLOP/s):\n", title_.c_str(), gemm_name.c_str(), gemm);
    for (const auto& [name, rate] : rates_) {
      if (name.rfind(prefix_, 0) != 0) continue;
      std::printf("  %-*s %7.2f GFLOP/s  %5.1f%%\n", width_, name.c_str(), rate,
                  100.0 * rate / gemm);
    }
  }

 private:
  std::string title_, prefix_;
  int width_;
  std::map<std::string, double> rates_;
  std::map<std::string, double> medians_;
};

// Google Benchmark's main with a GemmRatioReporter.
inline int RunWithGemmRatios(int argc, char** argv, const std::string& title,
                             const std::string& prefix, int name_width) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  GemmRatioReporter reporter(title, prefix, name_width);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace stateflow::bench

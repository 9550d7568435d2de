// sf_memory_table: the "Memory: predicted vs measured" table of
// docs/validation.md. For the configurations of issue 5's benchmark (P = 2;
// M in {2, 4, 8}; N in {1, 2, 4, 8}, 1f1b at N = 1 and stateflow above;
// recompute none and full) it runs one training step of the GDN backend in
// this process and prints, as Markdown, per stage: the predicted and
// measured peak bytes and relative error, the relative error of every buffer
// class at the peak, and the worst relative error of the classes' own peaks;
// then the bytes per class of the first configuration.
//
// Not a test (tests/backend/memory_check_test.cc asserts the same numbers)
// and not `stateflow validate` (which runs MPI jobs and times them).
//
//   build/tests/backend/sf_memory_table --preset gdn-tiny --dtype float32 -T 256
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/train/memory_check.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend {

using ::stateflow::testing::MustResolve;
namespace {

struct Options {
  std::string preset = "gdn-tiny";
  std::string dtype = "float32";
  long long seq_len = 256;
};

struct Config {
  int M, N;
  const char* recompute;
  std::string Name() const {
    return std::string(N == 1 ? "1f1b" : "stateflow") + " M=" + std::to_string(M) +
           " N=" + std::to_string(N) + " " + recompute;
  }
};

pb::Scenario ScenarioFor(const Options& o, const Config& c) {
  pb::Scenario s;
  s.set_name("memory-table");
  *s.mutable_model() = *models::ModelPreset(o.preset);
  *s.mutable_cluster() = *models::ClusterPreset("cpu");
  pb::ParallelSpec* p = s.mutable_parallel();
  p->set_pipeline_size(2);
  p->set_tensor_size(1);
  p->set_data_size(1);
  p->set_microbatch_size(1);
  p->set_microbatches(c.M);
  s.set_seq_len(o.seq_len);
  pb::ScheduleSpec* sched = s.mutable_schedule();
  sched->set_policy(c.N == 1 ? "1f1b" : "stateflow");
  sched->set_chunks(c.N);
  sched->set_alpha(0);
  sched->set_granularity(1);
  sched->set_recompute(c.recompute);
  return s;
}

std::string Error(double predicted, double measured) {
  const double e = MemoryRelError(predicted, measured);
  if (e == 0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.3f %%", 100 * e);
  return buf;
}

// The classes a GDN run holds (no K/V buffers).
bool Shown(int c) { return c != static_cast<int>(BufferClass::kKvBuffers); }

void PrintHeader() {
  std::printf("| configuration | stage | predicted peak (B) | measured peak (B) | error |");
  for (int c = 0; c < kNumBufferClasses; ++c) {
    if (Shown(c)) std::printf(" %s |", std::string(kBufferClassNames[c]).c_str());
  }
  std::printf(" own peaks, worst |\n|---|---|---|---|---|");
  for (int c = 0; c < kNumBufferClasses; ++c) {
    if (Shown(c)) std::printf("---|");
  }
  std::printf("---|\n");
}

void PrintRow(const Config& config, const StageMemoryCheck& s) {
  std::printf("| %s | %d | %.0f | %.0f | %s |", config.Name().c_str(), s.stage,
              s.predicted.peak_total_bytes, s.measured.peak_total_bytes,
              Error(s.predicted.peak_total_bytes, s.measured.peak_total_bytes).c_str());
  double worst_own = 0;
  for (int c = 0; c < kNumBufferClasses; ++c) {
    if (Shown(c)) std::printf(" %s |", Error(s.predicted.at_peak[c], s.measured.at_peak[c]).c_str());
    const double e = MemoryRelError(s.predicted.class_peak[c], s.measured.class_peak[c]);
    if (std::abs(e) > std::abs(worst_own)) worst_own = e;
  }
  std::printf(" %s |\n", worst_own == 0 ? "0" : Error(1 + worst_own, 1).c_str());
}

void PrintBreakdown(const Config& config, const std::vector<StageMemoryCheck>& stages) {
  std::printf("\nBytes per class, %s:\n\n", config.Name().c_str());
  std::printf("| stage | class | at the peak, predicted | at the peak, measured | "
              "own peak, predicted | own peak, measured |\n|---|---|---|---|---|---|\n");
  for (const StageMemoryCheck& s : stages) {
    for (int c = 0; c < kNumBufferClasses; ++c) {
      if (!Shown(c)) continue;
      std::printf("| %d | %s | %.0f | %.0f | %.0f | %.0f |\n", s.stage,
                  std::string(kBufferClassNames[c]).c_str(), s.predicted.at_peak[c],
                  s.measured.at_peak[c], s.predicted.class_peak[c], s.measured.class_peak[c]);
    }
  }
}

int Run(const Options& o) {
  std::printf("%s, %s, T = %lld, P = 2, one step in one process (sf_memory_table --preset %s "
              "--dtype %s -T %lld)\n\n",
              o.preset.c_str(), o.dtype.c_str(), o.seq_len, o.preset.c_str(), o.dtype.c_str(),
              o.seq_len);
  PrintHeader();
  std::vector<StageMemoryCheck> first;
  double worst = 0;
  for (const char* recompute : {"none", "full"}) {
    for (int M : {2, 4, 8}) {
      for (int N : {1, 2, 4, 8}) {
        const Config config{M, N, recompute};
        Result<std::vector<StageMemoryCheck>> stages = CheckStepMemory(MustResolve(ScenarioFor(o, config)), o.dtype);
        if (!stages.ok()) {
          std::fprintf(stderr, "sf_memory_table: %s: %s\n", config.Name().c_str(),
                       stages.status().message().c_str());
          return 2;
        }
        for (const StageMemoryCheck& s : *stages) PrintRow(config, s);
        worst = std::max(worst, WorstRelError(*stages));
        if (first.empty()) first = *stages;
      }
    }
  }
  std::printf("\nWorst |relative error| over every stage, class and configuration: %g\n", worst);
  PrintBreakdown(Config{2, 1, "none"}, first);
  return 0;
}

}  // namespace
}  // namespace stateflow::backend

int main(int argc, char** argv) {
  stateflow::backend::Options o;
  for (int k = 1; k < argc; ++k) {
    const std::string flag = argv[k];
    if (k + 1 >= argc) {
      std::fprintf(stderr, "usage: sf_memory_table [--preset NAME] [--dtype float32|float64] [-T TOKENS]\n");
      return 2;
    }
    const std::string value = argv[++k];
    if (flag == "--preset") {
      o.preset = value;
    } else if (flag == "--dtype") {
      o.dtype = value;
    } else if (flag == "-T") {
      o.seq_len = std::atoll(value.c_str());
    } else {
      std::fprintf(stderr, "sf_memory_table: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (!stateflow::models::ModelPreset(o.preset).ok() || o.seq_len < 1) {
    std::fprintf(stderr, "sf_memory_table: --preset must name a model preset and -T be >= 1\n");
    return 2;
  }
  return stateflow::backend::Run(o);
}

// Helpers of the memory exactness tests (memory_check_test.cc, the fast
// cases; memory_grid_test.cc, issue 5's whole grid): a case is one scenario
// of a tiny GDN model, run for one step in this process and compared with the
// memory model and the simulator, exactly, printing its relative errors.
//
//   ExpectExactMemory(MemoryCase{"gdn-tiny", "stateflow", 2, 4, 8, "full", "float32", 256});
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/train/memory_check.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "sim/simulation.h"
#include "tests/family_presets.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend::testing {

using ::stateflow::testing::MustResolve;

struct MemoryCase {
  const char* preset;
  const char* policy;
  int P, M, N;
  const char* recompute;
  const char* dtype;
  std::int64_t T;
  double alpha = 0;  // the hybrid partition (schedule.alpha)
  int mbs = 1;       // sequences per microbatch (parallel.microbatch_size)
  const char* device = "cpu";  // train.device: the measured step's device
  int dp = 1;                  // parallel.data_size (replicas in one process)
  bool distributed = false;    // parallel.distributed_optimizer
  int v = 0;                   // schedule.virtual_stages (0: the policy's default)
};

inline std::string CaseName(const MemoryCase& c) {
  std::string name = std::string(c.preset) + "_" + c.policy + "_P" + std::to_string(c.P) + "_M" +
                     std::to_string(c.M) + "_N" + std::to_string(c.N) + "_" + c.recompute + "_" +
                     c.dtype + "_T" + std::to_string(c.T);
  if (c.alpha != 0) name += "_alpha" + std::to_string(static_cast<int>(std::lround(c.alpha * 100)));
  if (c.mbs != 1) name += "_mbs" + std::to_string(c.mbs);
  if (std::string(c.device) != "cpu") name += std::string("_") + c.device;
  if (c.dp != 1) name += "_dp" + std::to_string(c.dp);
  if (c.distributed) name += "_distopt";
  if (c.v != 0) name += "_v" + std::to_string(c.v);
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

// Readable parameters in test logs (gtest prints unknown types as bytes).
inline void PrintTo(const MemoryCase& c, std::ostream* os) { *os << CaseName(c); }

// The tiny presets of every family (tests/family_presets.h), kept for the
// life of the program (MemoryCase holds a pointer).
inline const std::vector<std::string>& MemoryFamilyPresets() {
  static const std::vector<std::string>* presets =
      new std::vector<std::string>(::stateflow::testing::TinyFamilyPresets());
  return *presets;
}

// The host-grid device's cases: every family's two tiny presets, P in {1, 2},
// N in {1, 2, 4}, recompute none and full, each of `dtypes` (M = 2,
// T = 256). kPairs picks 3 per preset in which every pair of values of any two
// of those factors occurs (preset i and N index j give P = 1 + (i + j) % 2,
// recompute (i / 2 + j) % 2 and dtype (i + i / 2 + j + 1) % 2): the
// sanitizer build runs these (memory_check_test.cc, which checks the
// covering). kRest is the rest of the product (memory_grid_test.cc, slow).
enum class HostGridSubset { kPairs, kRest };
inline std::vector<MemoryCase> HostGridCases(const std::vector<const char*>& dtypes,
                                             HostGridSubset subset) {
  const std::vector<std::string>& presets = MemoryFamilyPresets();
  const int ns[] = {1, 2, 4};
  const char* const recomputes[] = {"none", "full"};
  std::vector<MemoryCase> cases;
  for (int i = 0; i < static_cast<int>(presets.size()); ++i) {
    for (int P : {1, 2}) {
      for (int j = 0; j < 3; ++j) {
        for (int r = 0; r < 2; ++r) {
          for (std::size_t d = 0; d < dtypes.size(); ++d) {
            const bool pair = P == 1 + (i + j) % 2 && r == (i / 2 + j) % 2 &&
                              (dtypes.size() == 1 ||
                               static_cast<int>(d) == (i + i / 2 + j + 1) % 2);
            if (pair != (subset == HostGridSubset::kPairs)) continue;
            MemoryCase c{presets[i].c_str(), "stateflow", P, 2, ns[j], recomputes[r], dtypes[d],
                         256};
            c.device = "host-grid";
            cases.push_back(c);
          }
        }
      }
    }
  }
  return cases;
}

inline pb::Scenario ScenarioOf(const MemoryCase& c) {
  pb::Scenario s;
  s.set_name("memory-check");
  *s.mutable_model() = *models::ModelPreset(c.preset);
  *s.mutable_cluster() = *models::ClusterPreset("cpu");
  pb::ParallelSpec* p = s.mutable_parallel();
  p->set_pipeline_size(c.P);
  p->set_tensor_size(1);
  p->set_data_size(c.dp);
  p->set_distributed_optimizer(c.distributed);
  p->set_microbatch_size(c.mbs);
  p->set_microbatches(c.M);
  s.set_seq_len(c.T);
  pb::ScheduleSpec* sched = s.mutable_schedule();
  sched->set_policy(c.policy);
  sched->set_chunks(c.N);
  sched->set_alpha(c.alpha);
  sched->set_granularity(1);
  sched->set_recompute(c.recompute);
  if (c.v != 0) sched->set_virtual_stages(static_cast<std::uint32_t>(c.v));
  *s.mutable_precision() = *models::PrecisionForDtype(c.dtype);
  if (std::string(c.device) != "cpu") s.mutable_train()->set_device(c.device);
  return s;
}

// Runs the case and expects, per stage, the measured peak total, every class
// at the peak and every class's own peak to equal the prediction, and the
// simulator's report to carry the same peak and classes at it.
inline void ExpectExactMemory(const MemoryCase& c) {
  const pb::Scenario scenario = ScenarioOf(c);
  Result<std::vector<StageMemoryCheck>> checks = CheckStepMemory(MustResolve(scenario), c.dtype);
  ASSERT_TRUE(checks.ok()) << checks.status().message();
  ASSERT_EQ(checks->size(), static_cast<std::size_t>(c.P));
  Result<sim::Simulation> sim = sim::Simulate(MustResolve(scenario), scenario.schedule());
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  for (const StageMemoryCheck& s : *checks) {
    double worst_class = 0;
    for (int k = 0; k < kNumBufferClasses; ++k) {
      worst_class = std::max({worst_class,
                              std::abs(MemoryRelError(s.predicted.at_peak[k], s.measured.at_peak[k])),
                              std::abs(MemoryRelError(s.predicted.class_peak[k],
                                                      s.measured.class_peak[k]))});
    }
    std::printf("%s stage %d: peak %.0f predicted, %.0f measured, relative error %.3g; "
                "worst class %.3g\n",
                CaseName(c).c_str(), s.stage, s.predicted.peak_total_bytes,
                s.measured.peak_total_bytes,
                MemoryRelError(s.predicted.peak_total_bytes, s.measured.peak_total_bytes),
                worst_class);
    // Exact: both sides add the same integers of bytes.
    EXPECT_EQ(s.predicted.peak_total_bytes, s.measured.peak_total_bytes) << "stage " << s.stage;
    for (int k = 0; k < kNumBufferClasses; ++k) {
      EXPECT_EQ(s.predicted.at_peak[k], s.measured.at_peak[k])
          << "stage " << s.stage << " " << kBufferClassNames[k] << " at the peak";
      EXPECT_EQ(s.predicted.class_peak[k], s.measured.class_peak[k])
          << "stage " << s.stage << " " << kBufferClassNames[k] << "'s own peak";
    }
    // The simulator applies the same model.
    const pb::StageReport& report = sim->report.stages(s.stage);
    EXPECT_EQ(report.peak_memory_bytes(), s.predicted.peak_total_bytes) << "stage " << s.stage;
    for (int k = 0; k < kNumBufferClasses; ++k) {
      EXPECT_EQ(report.peak_by_class(k).bytes(), s.predicted.at_peak[k])
          << "stage " << s.stage << " " << kBufferClassNames[k];
    }
  }
  EXPECT_EQ(WorstRelError(*checks), 0.0);
}

}  // namespace stateflow::backend::testing

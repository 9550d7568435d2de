// Memory exactness over issue 5's whole grid on gdn-tiny: policies 1f1b
// (N = 1, its only N) and stateflow (N in {1, 2, 4, 8}), M in {1, 2, 4},
// P in {1, 2, 3, 4}, recompute none and full, float32 and float64: 240 steps
// of the real backend, each compared with the memory model and the
// simulator, exactly (memory_test_util.h). T = 128, so that N = 1 spans two
// kernel blocks and N = 8 has chunks of 16 tokens; memory_check_test.cc has
// longer sequences on fewer cases. Also the host-grid device's cases that
// memory_check_test.cc leaves to this file. Labelled slow: about 90 s of CPU
// in a Release build, so the sanitizer build leaves it out.
#include <gtest/gtest.h>

#include <vector>

#include "tests/backend/memory_test_util.h"

namespace stateflow::backend::testing {
namespace {

constexpr std::int64_t kGridT = 128;

std::vector<MemoryCase> Grid() {
  std::vector<MemoryCase> cases;
  for (const char* dtype : {"float32", "float64"}) {
    for (const char* recompute : {"none", "full"}) {
      for (int P : {1, 2, 3, 4}) {
        for (int M : {1, 2, 4}) {
          cases.push_back({"gdn-tiny", "1f1b", P, M, 1, recompute, dtype, kGridT});
          for (int N : {1, 2, 4, 8}) {
            cases.push_back({"gdn-tiny", "stateflow", P, M, N, recompute, dtype, kGridT});
          }
        }
      }
    }
  }
  // Issue 11: every family the backend runs, several sequences per
  // microbatch and alpha partitions.
  for (const char* preset :
       {"mamba3-tiny", "gdn-hybrid-tiny", "mamba3-hybrid-tiny", "kda-tiny", "kda-hybrid-tiny"}) {
    for (const char* recompute : {"none", "full"}) {
      for (int P : {1, 2, 4}) {
        for (int N : {1, 2, 4, 8}) {
          for (int mbs : {1, 2}) {
            cases.push_back({preset, "stateflow", P, 2, N, recompute, "float32", kGridT, 0, mbs});
          }
        }
        for (double alpha : {0.5, 1.0}) {
          cases.push_back({preset, "stateflow", P, 2, 4, recompute, "float64", kGridT, alpha, 1});
        }
      }
    }
  }
  for (const char* recompute : {"none", "full"}) {
    for (int P : {1, 2, 4}) {
      for (int N : {1, 2, 4}) {
        cases.push_back({"gdn-tiny", "stateflow", P, 2, N, recompute, "float32", kGridT, 0, 2});
      }
      for (double alpha : {0.5, 1.0}) {
        cases.push_back({"gdn-tiny", "stateflow", P, 2, 4, recompute, "float64", kGridT, alpha, 1});
      }
    }
  }
  return cases;
}

class StepMemoryGrid : public ::testing::TestWithParam<MemoryCase> {};

TEST_P(StepMemoryGrid, PredictedEqualsMeasuredPerStageAndClass) { ExpectExactMemory(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Issue5, StepMemoryGrid, ::testing::ValuesIn(Grid()),
                         [](const auto& info) { return CaseName(info.param); });

// The host-grid device's product (four families, P 1 and 2, N 1, 2 and 4,
// both recompute modes; float32, float64 and bf16) less the cases that
// memory_check_test.cc runs, also under the sanitizers (HostGridCases).
INSTANTIATE_TEST_SUITE_P(HostGrid, StepMemoryGrid,
                         ::testing::ValuesIn(HostGridCases({"float32", "float64"},
                                                           HostGridSubset::kRest)),
                         [](const auto& info) { return CaseName(info.param); });
INSTANTIATE_TEST_SUITE_P(HostGridBf16, StepMemoryGrid,
                         ::testing::ValuesIn(HostGridCases({"bf16"}, HostGridSubset::kRest)),
                         [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace stateflow::backend::testing

// Memory exactness, the fast cases (also run under the sanitizers): one
// training step of the real backend (every stage in this process, each with
// its own TrackingAllocator) holds, stage by stage, exactly the bytes the
// memory model predicts: the peak total, every buffer class at that peak,
// and every class's own peak (backend/train/memory_check.h); the simulator's
// report carries the same peak and bytes per class at it. Issue 5's whole
// grid is memory_grid_test.cc. Each case prints its relative errors.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "backend/model/model_stage_module.h"
#include "backend/train/trainer.h"
#include "tests/backend/memory_test_util.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend::testing {

using ::stateflow::testing::MustResolve;
namespace {

class StepMemory : public ::testing::TestWithParam<MemoryCase> {};

TEST_P(StepMemory, PredictedEqualsMeasuredPerStageAndClass) { ExpectExactMemory(GetParam()); }

// gdn-small (wider MLP, so that the last block's MLP, not the head, is a
// forward's largest moment), chunks over several kernel blocks of 64 tokens,
// uneven chunks (250 = 84 + 83 + 83), gpipe, and a corner of each policy.
INSTANTIATE_TEST_SUITE_P(
    Shapes, StepMemory,
    ::testing::Values(MemoryCase{"gdn-small", "stateflow", 3, 2, 4, "none", "float32", 256},
                      MemoryCase{"gdn-small", "1f1b", 2, 2, 1, "full", "float64", 192},
                      MemoryCase{"gdn-small", "stateflow", 4, 1, 8, "full", "float32", 256},
                      MemoryCase{"gdn-tiny", "stateflow", 2, 3, 3, "none", "float64", 250},
                      MemoryCase{"gdn-tiny", "gpipe", 3, 2, 2, "full", "float32", 256},
                      MemoryCase{"gdn-tiny", "stateflow", 4, 4, 8, "none", "float32", 256},
                      MemoryCase{"gdn-tiny", "1f1b", 1, 2, 1, "none", "float64", 256}),
    [](const auto& info) { return CaseName(info.param); });

// On the host-grid device (the CUDA kernels' arithmetic on host loops, whose
// recurrence cores' scratch is the grid layout: grid_kernels/gdn_common.h,
// mamba3_core.h) the memory model counts that device's workspace, and is
// exact too: the GDN and Mamba-3 models and their attention hybrids, P = 1
// and 2, N = 1, 2, 4, both recompute modes, both element types. Here the
// cases that cover every pair of those values (HostGridCases, also run under
// the sanitizers); memory_grid_test.cc has the rest of the product.
INSTANTIATE_TEST_SUITE_P(HostGrid, StepMemory,
                         ::testing::ValuesIn(HostGridCases({"float32", "float64"},
                                                           HostGridSubset::kPairs)),
                         [](const auto& info) { return CaseName(info.param); });

// bf16 on host-grid (issue 12): the memory model's mixed precision
// (models::PrecisionForDtype("bf16"): 2-byte weights and activations,
// 4-byte gradients, statistics and states, 12 optimizer bytes) is what the
// backend allocates, byte for byte: bf16 values, fp32 gradients and master
// weights, fp32 statistics, the recurrent cores' float copies and the
// head's bf16 d(logits) slice. Every family; two sequences per microbatch.
std::vector<MemoryCase> Bf16Cases() {
  std::vector<MemoryCase> cases = HostGridCases({"bf16"}, HostGridSubset::kPairs);
  MemoryCase mbs{"gdn-tiny", "stateflow", 2, 2, 4, "none", "bf16", 256, 0, 2};
  mbs.device = "host-grid";
  cases.push_back(mbs);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(HostGridBf16, StepMemory, ::testing::ValuesIn(Bf16Cases()),
                         [](const auto& info) { return CaseName(info.param); });

// Data parallelism (issue 26): D replicas in one process, each stage's
// ledger is replica 0's; the distributed optimizer's shard of the optimizer
// state (models::ShardOf: replica 0 holds ceil(n / D) of the stage's n
// parameters) is what AdamW allocates. Every family on host-grid, the CPU's
// GDN, float32 / float64 / bf16, D = 2 and 3 (uneven shards).
std::vector<MemoryCase> DataParallelCases() {
  std::vector<MemoryCase> cases;
  int k = 0;
  for (const std::string& preset : MemoryFamilyPresets()) {
    for (bool distributed : {false, true}) {
      MemoryCase c{preset.c_str(), "stateflow", 2, 2, 2, k % 2 ? "full" : "none",
                   k % 3 == 0 ? "bf16" : (k % 3 == 1 ? "float32" : "float64"), 128};
      c.device = "host-grid";
      c.dp = 2 + k % 2;
      c.distributed = distributed;
      cases.push_back(c);
      ++k;
    }
  }
  MemoryCase cpu{"gdn-tiny", "1f1b", 2, 3, 1, "none", "float64", 128};
  cpu.dp = 2;
  cases.push_back(cpu);
  cpu.distributed = true;
  cpu.dp = 3;
  cases.push_back(cpu);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(DataParallel, StepMemory, ::testing::ValuesIn(DataParallelCases()),
                         [](const auto& info) { return CaseName(info.param); });

// A split backward (zero-bubble plans, issue 27): each block's B makes its W
// store (each linear's input and output gradient) where models::ActionMemory
// says, the first stage keeps the embedding's output gradient, and W frees
// them; the ledger is the model's byte for byte. Every family (its two tiny
// presets, the hybrids with attention), both zero-bubble policies, both
// recompute modes, float32 and float64 on the CPU, bf16 and float32 on
// host-grid.
std::vector<MemoryCase> ZeroBubbleCases() {
  std::vector<MemoryCase> cases;
  int k = 0;
  for (const std::string& preset : MemoryFamilyPresets()) {
    for (const char* device : {"cpu", "host-grid"}) {
      MemoryCase c{preset.c_str(), k % 2 ? "zb-h2" : "zb-h1", 2 + k % 2, 3, 1 + k % 3,
                   (k / 2) % 2 ? "full" : "none",
                   std::string(device) == "cpu" ? (k % 3 ? "float32" : "float64")
                                                : (k % 3 ? "bf16" : "float32"),
                   192};
      c.device = device;
      cases.push_back(c);
      ++k;
    }
  }
  // Two sequences per microbatch: attention's k and v projections read one
  // sequence's rows of the stored input at a time.
  cases.push_back(MemoryCase{"gdn-hybrid-tiny", "zb-h1", 2, 2, 2, "none", "float32", 128, 0, 2});
  return cases;
}
INSTANTIATE_TEST_SUITE_P(ZeroBubble, StepMemory, ::testing::ValuesIn(ZeroBubbleCases()),
                         [](const auto& info) { return CaseName(info.param); });

// Virtual stages (issue 27): a stage holds v model stages, each its own
// module and optimizer on the stage's allocator; the ledger is the sum of
// their static bytes and each action's segment with its own model stage's
// layers (models::StageStepMemory over model stages), byte for byte, with
// the messages between model stages of one stage (P = 1, the V's turn)
// counted as from a neighbour. Every family, the three policies with
// virtual stages, both recompute modes, cpu and host-grid, P = 1 and 2.
std::vector<MemoryCase> VirtualStageCases() {
  std::vector<MemoryCase> cases;
  const char* const policies[] = {"interleaved", "zbv", "zb-interleaved"};
  int k = 0;
  for (const std::string& preset : MemoryFamilyPresets()) {
    for (const char* device : {"cpu", "host-grid"}) {
      const int P = k % 4 == 3 ? 1 : 2;
      MemoryCase c{preset.c_str(), policies[k % 3], P, 2, 1 + (k / 3) % 2,
                   (k / 2) % 2 ? "full" : "none",
                   std::string(device) == "cpu" ? (k % 2 ? "float32" : "float64")
                                                : (k % 2 ? "bf16" : "float32"),
                   128};
      c.device = device;
      c.v = 2;
      cases.push_back(c);
      ++k;
    }
  }
  // Data parallelism beside them: each model stage's own shard of the
  // distributed optimizer (ShardOf over its parameters, as the simulator's
  // static bytes per model stage have it).
  MemoryCase dp{"gdn-tiny", "interleaved", 2, 2, 2, "none", "float64", 128};
  dp.v = 2;
  dp.dp = 3;
  dp.distributed = true;
  cases.push_back(dp);
  return cases;
}
INSTANTIATE_TEST_SUITE_P(VirtualStages, StepMemory, ::testing::ValuesIn(VirtualStageCases()),
                         [](const auto& info) { return CaseName(info.param); });

// The sanitizer's share of the host-grid product is a covering array: every
// pair of values of any two factors occurs in one of its cases, and the two
// subsets split the product without overlap.
TEST(StepMemoryCases, TheHostGridPairsCoverEveryPairOfValues) {
  const std::vector<const char*> dtypes = {"float32", "float64"};
  const std::vector<MemoryCase> pairs = HostGridCases(dtypes, HostGridSubset::kPairs);
  const std::vector<MemoryCase> rest = HostGridCases(dtypes, HostGridSubset::kRest);
  const std::size_t presets = MemoryFamilyPresets().size();
  EXPECT_EQ(pairs.size(), presets * 3);
  EXPECT_EQ(pairs.size() + rest.size(), presets * 2 * 3 * 2 * 2);
  const auto factors = [](const MemoryCase& c) {
    return std::vector<std::string>{c.preset, std::to_string(c.P), std::to_string(c.N),
                                    c.recompute, c.dtype};
  };
  // Every pair of values of two factors, as "a:value|b:value".
  const auto pairs_of = [&factors](const std::vector<MemoryCase>& cases) {
    std::set<std::string> out;
    for (const MemoryCase& c : cases) {
      const std::vector<std::string> f = factors(c);
      for (std::size_t a = 0; a < f.size(); ++a) {
        for (std::size_t b = a + 1; b < f.size(); ++b) {
          out.insert(std::to_string(a) + ":" + f[a] + "|" + std::to_string(b) + ":" + f[b]);
        }
      }
    }
    return out;
  };
  std::set<std::string> all = pairs_of(rest);
  const std::set<std::string> covered = pairs_of(pairs);
  all.insert(covered.begin(), covered.end());
  EXPECT_EQ(covered, all);
  for (const MemoryCase& p : pairs) {
    for (const MemoryCase& r : rest) EXPECT_NE(CaseName(p), CaseName(r));
  }
}

// bf16's gradients, optimizer state and statistics are fp32 and its weights
// and activations bf16: against float32 on the same device, weights halve,
// gradients stay, the optimizer grows by a half (master, m, v).
TEST(StepMemoryDevice, Bf16CountsMixedPrecision) {
  MemoryCase c{"gdn-tiny", "stateflow", 1, 2, 2, "none", "float32", 256};
  c.device = "host-grid";
  Result<std::vector<StageMemoryCheck>> f32 = CheckStepMemory(MustResolve(ScenarioOf(c)), "float32");
  Result<std::vector<StageMemoryCheck>> b16 = CheckStepMemory(MustResolve(ScenarioOf(c)), "bf16");
  ASSERT_TRUE(f32.ok()) << f32.status().message();
  ASSERT_TRUE(b16.ok()) << b16.status().message();
  const auto peak = [](const Result<std::vector<StageMemoryCheck>>& r, BufferClass k) {
    return (*r)[0].measured.class_peak[static_cast<int>(k)];
  };
  EXPECT_EQ(2 * peak(b16, BufferClass::kWeights), peak(f32, BufferClass::kWeights));
  EXPECT_EQ(peak(b16, BufferClass::kGradients), peak(f32, BufferClass::kGradients));
  EXPECT_EQ(2 * peak(b16, BufferClass::kOptimizerState), 3 * peak(f32, BufferClass::kOptimizerState));
  EXPECT_LT(peak(b16, BufferClass::kActivations), peak(f32, BufferClass::kActivations));
}

TEST(StepMemoryDevice, Bf16IsRefusedOnTheCpu) {
  MemoryCase c{"gdn-tiny", "stateflow", 1, 2, 2, "none", "bf16", 256};
  Result<std::vector<StageMemoryCheck>> cpu = CheckStepMemory(MustResolve(ScenarioOf(c)), "bf16");
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("bf16 runs on the grid devices"), std::string::npos)
      << cpu.status().message();
}

// The same scenario on cpu and host-grid: the prediction differs by the GDN
// core's scratch alone, so the model really follows train.device (a formula
// that ignored it could not pass both the cpu and the host-grid cases above
// unless the two layouts were equal, which this rules out).
TEST(StepMemoryDevice, TheGridPredictionCountsMoreWorkspace) {
  MemoryCase c{"gdn-tiny", "stateflow", 1, 2, 2, "none", "float32", 256};
  Result<std::vector<StageMemoryCheck>> cpu = CheckStepMemory(MustResolve(ScenarioOf(c)), c.dtype);
  c.device = "host-grid";
  Result<std::vector<StageMemoryCheck>> grid = CheckStepMemory(MustResolve(ScenarioOf(c)), c.dtype);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  const int ws = static_cast<int>(BufferClass::kWorkspace);
  EXPECT_GT((*grid)[0].predicted.class_peak[ws], (*cpu)[0].predicted.class_peak[ws]);
  for (int k = 0; k < kNumBufferClasses; ++k) {
    if (k == ws) continue;
    EXPECT_EQ((*grid)[0].predicted.class_peak[k], (*cpu)[0].predicted.class_peak[k])
        << kBufferClassNames[k];
  }
}

// Messages never sit on a stage's ledger between actions: after every
// action of every step, no stage holds workspace or logits (its input and
// output lived inside the action; receive buffers posted ahead and sends in
// flight are on the transport's allocator).
TEST(StepMemoryTransport, NothingTransientOutlivesAnAction) {
  const MemoryCase c{"gdn-tiny", "stateflow", 3, 3, 4, "none", "float32", 64};
  const pb::Scenario scenario = ScenarioOf(c);
  Result<TrainSetup> setup = MakeTrainSetup(MustResolve(scenario), nullptr);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  StageModuleFactory<float> factory = [&](int, const models::StageLayers& layers,
                                          TrackingAllocator* alloc) {
    return MakeStageModule<float>(setup->model, layers, {.recompute = setup->recompute, .seed = 1}, alloc);
  };
  const TextData text = TextData::FromBytes(std::string(1000, 'a'), "a");
  auto trainer = Trainer<float>::Make(*setup, TrainOptions{}, text, factory,
                                      std::move(MakeSingleProcessTransport<float>(3)).value());
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  ASSERT_TRUE(Train(**trainer, 2, nullptr).status.ok());
  Result<std::vector<StageTimeline>> timelines = (*trainer)->GatherTimelines();
  ASSERT_TRUE(timelines.ok());
  for (const StageTimeline& t : *timelines) {
    ASSERT_EQ(t.memory.size(), 2 * setup->plan.stage(t.stage).size());
    for (std::size_t k = 0; k < t.memory.size(); ++k) {
      EXPECT_EQ(t.memory[k].bytes[static_cast<int>(BufferClass::kWorkspace)], 0)
          << "stage " << t.stage << " after " << schedule::ToString(t.actions[k].action);
      EXPECT_EQ(t.memory[k].bytes[static_cast<int>(BufferClass::kLogits)], 0)
          << "stage " << t.stage << " after " << schedule::ToString(t.actions[k].action);
    }
  }
}

TEST(StepMemoryErrors, NamesTheUnsupportedModelAndDtype) {
  MemoryCase c{"mamba3-tiny", "stateflow", 2, 1, 2, "none", "float32", 64};
  pb::Scenario tied = ScenarioOf(c);  // every family runs, but only untied
  tied.mutable_model()->set_untied_embeddings(false);
  Result<std::vector<StageMemoryCheck>> unsupported = CheckStepMemory(MustResolve(tied), "float32");
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.status().message().find("model.untied_embeddings"), std::string::npos);
  c.preset = "gdn-tiny";
  Result<std::vector<StageMemoryCheck>> dtype = CheckStepMemory(MustResolve(ScenarioOf(c)), "int8");
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("train.dtype"), std::string::npos);
}

TEST(StepMemoryErrors, RelativeErrorConventions) {
  EXPECT_EQ(MemoryRelError(0, 0), 0.0);
  EXPECT_EQ(MemoryRelError(5, 0), 1.0);
  EXPECT_DOUBLE_EQ(MemoryRelError(102, 100), 0.02);
  EXPECT_DOUBLE_EQ(MemoryRelError(98, 100), -0.02);
  StageMemoryCheck off;
  off.predicted.peak_total_bytes = 99;
  off.measured.peak_total_bytes = 100;
  off.predicted.class_peak[2] = 103;
  off.measured.class_peak[2] = 100;
  EXPECT_DOUBLE_EQ(WorstRelError({off}), 0.03);
}

}  // namespace
}  // namespace stateflow::backend::testing

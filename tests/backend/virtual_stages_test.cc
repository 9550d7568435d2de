// Virtual stages in the real backend (issue 27): a stage (one allocator, one
// comm endpoint, one runtime) holds v model stages, each its own module and
// optimizer; the plans of policies interleaved (a loop), zbv (a V) and
// zb-interleaved (a loop with the backward split) train exactly what
// StateFlow-1F1B trains over the same chunks: the same loss and every
// gradient, float64, every family (the tiny presets, attention hybrids and
// KDA included), P = 1 (every message from a stage to itself) and 2, both
// recompute modes. Each model stage's gradients are sums over the same
// chunks in the same order (microbatches first to last, each microbatch's
// chunks last to first), so the step is bit for bit the same: asserted
// with EXPECT_EQ. The memory ledger per stage is memory_check_test.cc's
// (VirtualStages), P ranks under mpirun mpi_test.cc's, resume
// checkpoint_test.cc's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/model/model_stage_module.h"
#include "backend/train/train_report.h"
#include "tests/backend/train_test_util.h"
#include "tests/family_presets.h"
#include "tests/sanitized.h"

namespace stateflow::backend::testing {
namespace {

struct VirtualRun {
  std::vector<StepResult> steps;
  std::vector<double> losses;
  Named grads;   // after the first step
  Named params;  // after the last
};

pb::Scenario VirtualScenario(const std::string& preset, const std::string& policy, int P, int v,
                             int N, const std::string& recompute) {
  pb::Scenario s = ToyScenario({P, /*microbatches=*/2, N, /*seq_len=*/48, policy});
  *s.mutable_model() = *models::ModelPreset(preset);
  s.mutable_schedule()->set_recompute(recompute);
  if (v > 0) s.mutable_schedule()->set_virtual_stages(static_cast<std::uint32_t>(v));
  return s;
}

VirtualRun TrainScenario(const pb::Scenario& scenario, int steps) {
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(scenario), nullptr));
  StageModuleFactory<double> factory = [&setup](int, const models::StageLayers& layers,
                                                TrackingAllocator* alloc) {
    return MakeStageModule<double>(setup.model, layers,
                                   {.recompute = setup.recompute,
                                    .seed = 11,
                                    .split_backward = schedule::SplitsBackward(setup.plan)},
                                   alloc);
  };
  const TextData text = Take(TextData::Load(kDefaultTextPath));
  TrainOptions options;
  options.seed = 3;
  auto trainer = Take(Trainer<double>::Make(
      setup, options, text, factory, Take(MakeSingleProcessTransport<double>(setup.stages))));
  VirtualRun run;
  for (int k = 0; k < steps; ++k) {
    const StepResult step = Take(trainer->Step(k));
    run.losses.push_back(step.loss);
    run.steps.push_back(step);
    if (k == 0) run.grads = CollectAll(*trainer, /*grads=*/true);
  }
  run.params = CollectAll(*trainer, /*grads=*/false);
  return run;
}

// Every family; per preset two cases in turn over (policy, P, N, recompute).
TEST(VirtualStages, TrainWhatStateFlowTrainsBitForBit) {
  const std::vector<std::string> presets = ::stateflow::testing::TinyFamilyPresets();
  const char* const policies[] = {"interleaved", "zbv", "zb-interleaved"};
  int k = 0;
  for (const std::string& preset : presets) {
    for (int c = 0; c < (::stateflow::testing::kSanitized ? 1 : 2); ++c, ++k) {
      const std::string policy = policies[k % 3];
      const int P = k % 4 == 3 ? 1 : 2, N = 1 + k % 2;
      const std::string recompute = (k / 2) % 2 ? "full" : "none";
      SCOPED_TRACE(preset + " " + policy + " P " + std::to_string(P) + " N " +
                   std::to_string(N) + " recompute " + recompute);
      const VirtualRun reference =
          TrainScenario(VirtualScenario(preset, "stateflow", P, 0, N, recompute), 2);
      const VirtualRun run = TrainScenario(VirtualScenario(preset, policy, P, 2, N, recompute), 2);
      ASSERT_EQ(run.losses.size(), 2u);
      EXPECT_EQ(run.losses, reference.losses);
      EXPECT_EQ(run.grads, reference.grads);
      EXPECT_EQ(run.params, reference.params);
      EXPECT_NE(run.losses[0], run.losses[1]);  // the parameters moved
    }
  }
}

// v = 3 in a loop at P = 1 (six model stages on... one stage: the gdn-tiny's
// four blocks cut in three) and v = 2 with four chunks: still StateFlow's step.
TEST(VirtualStages, MoreModelStagesAndChunks) {
  for (const auto& [P, v, N] : {std::tuple{1, 3, 2}, std::tuple{2, 2, 4}}) {
    SCOPED_TRACE("P " + std::to_string(P) + " v " + std::to_string(v) + " N " +
                 std::to_string(N));
    const VirtualRun reference =
        TrainScenario(VirtualScenario("gdn-tiny", "stateflow", P, 0, N, "none"), 2);
    const VirtualRun run =
        TrainScenario(VirtualScenario("gdn-tiny", "interleaved", P, v, N, "none"), 2);
    EXPECT_EQ(run.losses, reference.losses);
    EXPECT_EQ(run.grads, reference.grads);
  }
}

// The report names each stage's model stages and their layers, as the
// simulator's does, and each stage's peak is its allocator's: both model
// stages' parameters on it.
TEST(VirtualStages, TheTrainReportListsEachStagesModelStages) {
  const pb::Scenario scenario = VirtualScenario("gdn-tiny", "interleaved", 2, 2, 2, "none");
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(scenario), nullptr));
  ASSERT_EQ(setup.stage_layers.size(), 4u);
  const VirtualRun run = TrainScenario(scenario, 2);
  const pb::Report report = MakeTrainReport(setup, TrainOptions{}, run.steps);
  ASSERT_EQ(report.stages_size(), 2);
  for (int r = 0; r < 2; ++r) {
    const pb::StageReport& stage = report.stages(r);
    ASSERT_EQ(stage.model_stages_size(), 2);
    for (int k = 0; k < 2; ++k) {
      const int s = k * 2 + r;  // the loop: model stages r and r + P
      EXPECT_EQ(stage.model_stages(k).model_stage(), static_cast<std::uint32_t>(s));
      EXPECT_EQ(stage.model_stages(k).first_layer(), setup.stage_layers[s].first);
      EXPECT_EQ(stage.model_stages(k).last_layer(), setup.stage_layers[s].last);
    }
    EXPECT_EQ(stage.first_layer(), setup.stage_layers[r].first);
    EXPECT_GT(stage.peak_memory_bytes(), 0);
  }
}

}  // namespace
}  // namespace stateflow::backend::testing

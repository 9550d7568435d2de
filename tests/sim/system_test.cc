// Systems (ScheduleSpec.system) and the OOM verdict (DeviceSpec reserve):
// the frameworks' head memory worked by hand at TP 1 and TP 4, on its own
// (CostModel's events) and on the last stage of a simulated 1F1B; the
// system field's errors; the OOM rule at its boundary. docs/cost-model.md,
// "Systems" and "OOM verdict", derive the terms.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/cost_model.h"
#include "models/memory_model.h"
#include "models/model.h"
#include "sim/search.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {
namespace {

using ::stateflow::testing::MustResolve;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Simulates the scenario's own schedule.
Result<Simulation> SimulateOwn(const pb::Scenario& s) {
  const scenario::ResolvedScenario r = MustResolve(s);
  return Simulate(r, r.proto().schedule());
}

// The 3B GDN (h = 2560, V = 50304) on P stages at TP `tp`, 1F1B over 8192
// tokens, bf16 activations, full recompute, in `system`, with the
// frameworks' settings off (no vocabulary padding, no dropout, no mask:
// their tests set them), so that a framework differs only by its head.
pb::Scenario Gdn3b(int tp, const std::string& system) {
  pb::Scenario s;
  s.set_name("system-test");
  *s.mutable_model() = *models::ModelPreset("gdn-3b");
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  s.mutable_parallel()->set_pipeline_size(2);
  s.mutable_parallel()->set_tensor_size(tp);
  s.mutable_parallel()->set_microbatches(2);
  s.set_seq_len(8192);
  pb::ScheduleSpec* spec = s.mutable_schedule();
  spec->set_policy("1f1b");
  spec->set_recompute("full");
  spec->set_system(system);
  pb::FrameworkSpec* framework = s.mutable_framework();
  framework->set_vocab_divisible_by(1);
  framework->set_hidden_dropout(0);
  framework->set_attention_mask(false);
  return s;
}

Result<models::CostModel> HeadCostModel(int tp, models::System system) {
  models::CostModelOptions options;
  options.tensor_size = tp;
  options.recompute = models::Recompute::kFull;
  options.system = system;
  return models::CostModel::Make(*models::ModelPreset("gdn-3b"), pb::PrecisionSpec(),
                                 *models::ClusterPreset("a100-80gb-nvlink"), options);
}

// Megatron-Core's head over s = 8192 tokens, by hand (V = 50304, h = 2560,
// bf16 = 2 bytes, float32 = 4):
//   saved by the norm and output layer: x, xn = 2 * 8192 * 2560 * 2 = 83,886,080
//                                        rstd  = 8192 * 4             =     32,768
//   TP 1: logits (8192, 50304) bf16 = 824,180,736, their float32 copy (the
//         softmax) 1,648,361,472; the per-token losses 32,768 on top:
//         forward peak 83,886,080 + 32,768 + 2,472,542,208 + 32,768 = 2,556,493,824.
//         Backward: d(losses) 32,768 + d(logits) bf16 824,180,736 = 824,213,504
//         before the softmax is released.
//   TP 4: V / TP = 12576 columns: logits 206,045,184, copy 412,090,368:
//         forward peak 83,886,080 + 32,768 + 618,135,552 + 32,768 = 702,087,168;
//         backward 32,768 + 206,045,184 = 206,077,952.
TEST(SystemHead, MegatronCoreHeadMemoryByHand) {
  struct Case {
    int tp;
    double logits, softmax, forward_peak, backward_peak;
  };
  for (const Case& c : {Case{1, 824180736.0, 1648361472.0, 2556493824.0, 824213504.0},
                        Case{4, 206045184.0, 412090368.0, 702087168.0, 206077952.0}}) {
    SCOPED_TRACE("TP " + std::to_string(c.tp));
    for (models::System system : {models::System::kMegatronCore, models::System::kMsSwift}) {
      Result<models::CostModel> cm = HeadCostModel(c.tp, system);
      ASSERT_TRUE(cm.ok()) << cm.status().message();
      const int head = cm->num_layers() - 1;
      const models::MemorySegment f = cm->ForwardMemory(head, 8192);
      const models::MemorySegment b = cm->BackwardMemory(head, 8192);
      EXPECT_DOUBLE_EQ(f.class_peak(BufferClass::kLogits), c.logits + c.softmax);
      EXPECT_DOUBLE_EQ(cm->LogitsBytes(head, 8192), c.logits + c.softmax);
      EXPECT_DOUBLE_EQ(f.peak_total(), c.forward_peak);
      // Held from the forward to the backward: the softmax and the norm's tensors.
      EXPECT_DOUBLE_EQ(f.net(BufferClass::kLogits), c.softmax);
      EXPECT_DOUBLE_EQ(f.net(BufferClass::kActivations), 83886080.0 + 32768.0);
      EXPECT_DOUBLE_EQ(b.peak_total(), c.backward_peak);
      EXPECT_DOUBLE_EQ(b.net(BufferClass::kLogits), -c.softmax);
      EXPECT_DOUBLE_EQ(b.net(BufferClass::kActivations), -(83886080.0 + 32768.0));
      // It ends holding the input gradient dx, 8192 * 2560 * 2 = 41,943,040.
      EXPECT_DOUBLE_EQ(b.net(BufferClass::kWorkspace), 41943040.0);
    }
    // StateFlow's sliced loss: one (8192, 128) float32 slice, 4,194,304 bytes,
    // at TP 1 and TP 4 alike (128 < V / TP), never held across passes.
    Result<models::CostModel> sliced = HeadCostModel(c.tp, models::System::kStateFlow);
    ASSERT_TRUE(sliced.ok());
    const int head = sliced->num_layers() - 1;
    EXPECT_DOUBLE_EQ(sliced->ForwardMemory(head, 8192).class_peak(BufferClass::kLogits),
                     4194304.0);
    EXPECT_DOUBLE_EQ(sliced->ForwardMemory(head, 8192).net(BufferClass::kLogits), 0.0);
  }
}

double ClassAtPeak(const pb::StageReport& stage, const std::string& cls) {
  for (const pb::BufferBytes& b : stage.peak_by_class()) {
    if (b.buffer_class() == cls) return b.bytes();
  }
  return -1;
}

// The last stage of Megatron-Core's 1F1B peaks in the head's forward of a
// microbatch: the whole sequence's logits and their float32 copy (the bytes
// worked above), nothing of an earlier microbatch (1F1B's last stage runs
// each backward right after its forward).
TEST(SystemHead, LastStageOf1f1bHoldsTheFullLogits) {
  struct Case {
    int tp;
    double logits;
  };
  for (const Case& c : {Case{1, 824180736.0 + 1648361472.0}, Case{4, 206045184.0 + 412090368.0}}) {
    SCOPED_TRACE("TP " + std::to_string(c.tp));
    Result<Simulation> mc = SimulateOwn(Gdn3b(c.tp, "megatron-core"));
    ASSERT_TRUE(mc.ok()) << mc.status().message();
    EXPECT_EQ(mc->report.system(), "megatron-core");
    const pb::StageReport& last = mc->report.stages(1);
    EXPECT_DOUBLE_EQ(ClassAtPeak(last, "logits"), c.logits);
    Result<Simulation> sf = SimulateOwn(Gdn3b(c.tp, ""));
    ASSERT_TRUE(sf.ok()) << sf.status().message();
    EXPECT_EQ(sf->report.system(), "stateflow");
    EXPECT_DOUBLE_EQ(ClassAtPeak(sf->report.stages(1), "logits") <= 4194304.0, true);
    EXPECT_GT(last.peak_memory_bytes(), sf->report.stages(1).peak_memory_bytes());
    // Megatron-Core splits the 32 blocks evenly, 16 and 16 (layers 0-16 with
    // the embedding, 17-33 with the head); StateFlow's runtime balances
    // their cost, which moves blocks off the head's stage.
    EXPECT_EQ(mc->report.stages(0).last_layer(), 17u);
    EXPECT_EQ(mc->report.stages(1).first_layer(), 17u);
    EXPECT_GT(sf->report.stages(0).last_layer(), 17u);
    // The first stage has no head: between the frameworks, which split
    // alike, the system does not change it.
    Result<Simulation> swift = SimulateOwn(Gdn3b(c.tp, "ms-swift"));
    ASSERT_TRUE(swift.ok()) << swift.status().message();
    EXPECT_DOUBLE_EQ(mc->report.stages(0).peak_memory_bytes(),
                     swift->report.stages(0).peak_memory_bytes());
  }
}

// A framework's even split needs P to divide the layer count, as
// Megatron-Core's own check does; StateFlow's runtime does not.
TEST(SystemField, FrameworksSplitTheLayersEvenly) {
  pb::Scenario s = Gdn3b(1, "megatron-core");
  s.mutable_parallel()->set_pipeline_size(8);
  Result<Simulation> even = SimulateOwn(s);
  ASSERT_TRUE(even.ok()) << even.status().message();
  for (int r = 0; r < 8; ++r) {
    const pb::StageReport& stage = even->report.stages(r);
    const unsigned blocks = stage.last_layer() - stage.first_layer() - (r == 0) - (r == 7);
    EXPECT_EQ(blocks, 4u) << "stage " << r;
  }
  s.mutable_parallel()->set_pipeline_size(3);
  Result<Simulation> odd = SimulateOwn(s);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find(
                "parallel.pipeline_size: 3 does not divide model.num_layers 32"),
            std::string::npos)
      << odd.status().message();
  s.mutable_schedule()->set_system("stateflow");
  EXPECT_TRUE(SimulateOwn(s).ok());
}

TEST(SystemField, UnknownSystemIsAnErrorNamingTheField) {
  pb::Scenario s = Gdn3b(1, "nemo");
  Result<scenario::ResolvedScenario> r = scenario::Resolve(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("schedule.system: unknown 'nemo' (known: stateflow, "
                                      "megatron-core, ms-swift)"),
            std::string::npos)
      << r.status().message();
  s.mutable_schedule()->set_system("ms-swift");
  pb::ScheduleSpec* base = s.add_baselines();
  base->set_policy("gpipe");
  base->set_system("Megatron");
  r = scenario::Resolve(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("baselines[0].system: unknown 'Megatron'"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(MustResolve(Gdn3b(1, "")).proto().schedule().system(), "stateflow");
}

// ---- the frameworks' settings (Scenario.framework) ----

models::CostModelOptions SettingsOf(models::System system, const pb::FrameworkSpec& spec) {
  models::CostModelOptions options;
  options.system = system;
  const Status status = models::FrameworkSettingsFor(system, spec, &options);
  EXPECT_TRUE(status.ok()) << status.message();
  return options;
}

// Each framework's defaults as its code sets them; a set field overrides
// it; system stateflow has none of them, whatever the scenario says.
TEST(FrameworkSettings, DefaultsFollowEachFramework) {
  const pb::FrameworkSpec empty;
  const models::CostModelOptions mc = SettingsOf(models::System::kMegatronCore, empty);
  EXPECT_EQ(mc.vocab_divisible_by, 128);
  EXPECT_DOUBLE_EQ(mc.hidden_dropout, 0.1);
  EXPECT_TRUE(mc.attention_mask);
  const models::CostModelOptions swift = SettingsOf(models::System::kMsSwift, empty);
  EXPECT_EQ(swift.vocab_divisible_by, 1);
  EXPECT_DOUBLE_EQ(swift.hidden_dropout, 0.0);
  EXPECT_FALSE(swift.attention_mask);

  pb::FrameworkSpec set;
  set.set_vocab_divisible_by(64);
  set.set_hidden_dropout(0.0);
  set.set_attention_mask(false);
  const models::CostModelOptions mc_set = SettingsOf(models::System::kMegatronCore, set);
  EXPECT_EQ(mc_set.vocab_divisible_by, 64);
  EXPECT_DOUBLE_EQ(mc_set.hidden_dropout, 0.0);
  EXPECT_FALSE(mc_set.attention_mask);
  set.set_hidden_dropout(0.2);
  set.set_attention_mask(true);
  const models::CostModelOptions swift_set = SettingsOf(models::System::kMsSwift, set);
  EXPECT_EQ(swift_set.vocab_divisible_by, 64);
  EXPECT_DOUBLE_EQ(swift_set.hidden_dropout, 0.2);
  EXPECT_TRUE(swift_set.attention_mask);
  const models::CostModelOptions sf = SettingsOf(models::System::kStateFlow, set);
  EXPECT_EQ(sf.vocab_divisible_by, 1);
  EXPECT_DOUBLE_EQ(sf.hidden_dropout, 0.0);
  EXPECT_FALSE(sf.attention_mask);
}

TEST(FrameworkSettings, OutOfRangeFieldsAreOneLineErrors) {
  struct Case {
    pb::FrameworkSpec spec;
    std::string message;
  };
  std::vector<Case> cases(5);
  cases[0].spec.set_vocab_divisible_by(0);
  cases[0].message = "framework.vocab_divisible_by";
  cases[1].spec.set_vocab_divisible_by(5000);
  cases[1].message = "framework.vocab_divisible_by";
  cases[2].spec.set_hidden_dropout(1.0);
  cases[2].message = "framework.hidden_dropout must be in [0, 1), got 1";
  cases[3].spec.set_hidden_dropout(-0.1);
  cases[3].message = "framework.hidden_dropout must be in [0, 1), got -0.1";
  cases[4].spec.set_hidden_dropout(std::nan(""));
  cases[4].message = "framework.hidden_dropout must be in [0, 1)";
  // Checked under every system, stateflow too (which ignores the values).
  for (models::System system : {models::System::kMsSwift, models::System::kStateFlow}) {
    for (const Case& c : cases) {
      models::CostModelOptions options;
      const Status status = models::FrameworkSettingsFor(system, c.spec, &options);
      ASSERT_FALSE(status.ok()) << c.message;
      EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
      EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
    }
  }
  // Through a scenario: simulate names the field too.
  pb::Scenario s = Gdn3b(1, "megatron-core");
  s.mutable_framework()->set_hidden_dropout(2);
  Result<Simulation> sim = SimulateOwn(s);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("framework.hidden_dropout"), std::string::npos)
      << sim.status().message();
}

// Megatron's _vocab_size_with_padding: V rounded up to a multiple of
// 128 * TP. V = 50304 = 393 * 128:
//   TP 1: 50304; TP 2 (256): 197 * 256 = 50432; TP 4 (512): 99 * 512 = 50688;
//   TP 8 (1024): 50 * 1024 = 51200.
// The head's logits follow: at TP 4 and s = 8192, 8192 * 50688 / 4 * (2 + 4)
// = 622,854,144 bytes in the forward (ms-swift, unpadded: 12576 columns,
// 618,135,552).
TEST(FrameworkSettings, MegatronPadsTheVocabularyToTpTimes128) {
  for (const auto& [tp, padded] :
       std::map<int, int>{{1, 50304}, {2, 50432}, {4, 50688}, {8, 51200}}) {
    SCOPED_TRACE("TP " + std::to_string(tp));
    models::CostModelOptions options = SettingsOf(models::System::kMegatronCore, {});
    options.tensor_size = tp;
    // gdn-3b's 20 heads do not split over 8 ranks: TP 8 on gdn-15b (40
    // heads, h = 5120), the same vocabulary.
    const std::string preset = tp == 8 ? "gdn-15b" : "gdn-3b";
    const double hidden = tp == 8 ? 5120 : 2560;
    Result<models::CostModel> cm = models::CostModel::Make(
        *models::ModelPreset(preset), pb::PrecisionSpec(),
        *models::ClusterPreset("a100-80gb-nvlink"), options);
    ASSERT_TRUE(cm.ok()) << cm.status().message();
    EXPECT_EQ(cm->model().vocab_size(), static_cast<unsigned>(padded));
    const int head = cm->num_layers() - 1;
    EXPECT_DOUBLE_EQ(cm->LogitsBytes(head, 8192), 8192.0 * padded / tp * 6);
    // Both ends grow by the padded rows: the embedding's and the output
    // layer's V x h weights.
    EXPECT_DOUBLE_EQ(cm->ParamCount(0) * tp, static_cast<double>(padded) * hidden);
  }
  pb::Scenario s = Gdn3b(4, "megatron-core");
  s.mutable_framework()->clear_vocab_divisible_by();
  Result<Simulation> mc = SimulateOwn(s);
  ASSERT_TRUE(mc.ok()) << mc.status().message();
  EXPECT_DOUBLE_EQ(ClassAtPeak(mc->report.stages(1), "logits"), 622854144.0);
  s.mutable_schedule()->set_system("ms-swift");
  Result<Simulation> swift = SimulateOwn(s);
  ASSERT_TRUE(swift.ok()) << swift.status().message();
  EXPECT_DOUBLE_EQ(ClassAtPeak(swift->report.stages(1), "logits"), 618135552.0);
}

// Dropout masks, one byte per element, t = 8192 tokens, h = 2560:
//   the embedding's: t h = 20,971,520, from its forward to its backward;
//   a block's two bias-dropout-adds: 2 t h = 41,943,040, stored with its
//   activations, or (full recompute) made by its backward's replay and
//   freed at its end.
TEST(FrameworkSettings, DropoutKeepsOneByteMasks) {
  constexpr double kEmbeddingMask = 20971520.0, kBlockMasks = 41943040.0;
  for (models::Recompute recompute : {models::Recompute::kNone, models::Recompute::kFull}) {
    SCOPED_TRACE(std::string(models::RecomputeName(recompute)));
    models::CostModelOptions options;
    options.system = models::System::kMegatronCore;
    options.recompute = recompute;
    Result<models::CostModel> off = models::CostModel::Make(
        *models::ModelPreset("gdn-3b"), pb::PrecisionSpec(),
        *models::ClusterPreset("a100-80gb-nvlink"), options);
    options.hidden_dropout = 0.1;
    Result<models::CostModel> on = models::CostModel::Make(
        *models::ModelPreset("gdn-3b"), pb::PrecisionSpec(),
        *models::ClusterPreset("a100-80gb-nvlink"), options);
    ASSERT_TRUE(off.ok() && on.ok());
    constexpr BufferClass kAct = BufferClass::kActivations;
    EXPECT_DOUBLE_EQ(on->ForwardMemory(0, 8192).net(kAct) - off->ForwardMemory(0, 8192).net(kAct),
                     kEmbeddingMask);
    EXPECT_DOUBLE_EQ(on->BackwardMemory(0, 8192).net(kAct), -kEmbeddingMask);
    const bool full = recompute == models::Recompute::kFull;
    EXPECT_DOUBLE_EQ(on->ForwardMemory(1, 8192).net(kAct) - off->ForwardMemory(1, 8192).net(kAct),
                     full ? 0.0 : kBlockMasks);
    EXPECT_DOUBLE_EQ(on->StoredActivationBytes(1, 8192) - off->StoredActivationBytes(1, 8192),
                     full ? 0.0 : kBlockMasks);
    // Under recompute the replay makes them again in the backward (its
    // activations' peak rises by them); without, the backward only frees.
    EXPECT_DOUBLE_EQ(
        on->BackwardMemory(1, 8192).class_peak(kAct) - off->BackwardMemory(1, 8192).class_peak(kAct),
        full ? kBlockMasks : 0.0);
    // A pass's net is what the layer keeps: forward + backward frees it all.
    EXPECT_DOUBLE_EQ(on->ForwardMemory(1, 8192).net(kAct) + on->BackwardMemory(1, 8192).net(kAct),
                     0.0);
    // The head has no dropout.
    const int head = on->num_layers() - 1;
    EXPECT_DOUBLE_EQ(on->ForwardMemory(head, 8192).net(kAct),
                     off->ForwardMemory(head, 8192).net(kAct));
  }
}

// The data loader's mask, bool [1, 1, T, T] = 8192^2 = 67,108,864 bytes per
// microbatch, on the stages with the embedding or the head. Full recompute:
// the checkpoints keep it from F(a, 0) to B(a, 0), so 1F1B's first stage
// (P = 2: two microbatches in flight) holds two, the last one; a stage in
// the middle none. Without recompute it lives within each forward only.
TEST(FrameworkSettings, AttentionMaskOnTheEndStages) {
  constexpr double kMask = 67108864.0;
  auto activation_peaks = [](const pb::Scenario& s) {
    Result<Simulation> sim = SimulateOwn(s);
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    std::vector<double> peaks;
    for (const pb::StageReport& stage : sim->report.stages()) {
      peaks.push_back(stage.peak_memory_bytes());
    }
    return peaks;
  };
  for (int stages : {2, 4}) {
    SCOPED_TRACE("P " + std::to_string(stages));
    pb::Scenario s = Gdn3b(1, "megatron-core");
    s.mutable_parallel()->set_pipeline_size(stages);
    s.mutable_parallel()->set_microbatches(4);
    const std::vector<double> off = activation_peaks(s);
    s.mutable_framework()->set_attention_mask(true);
    const std::vector<double> on = activation_peaks(s);
    ASSERT_EQ(on.size(), static_cast<std::size_t>(stages));
    EXPECT_DOUBLE_EQ(on[0] - off[0], stages * kMask);  // 1F1B: P microbatches in flight
    EXPECT_DOUBLE_EQ(on[stages - 1] - off[stages - 1], kMask);
    for (int r = 1; r + 1 < stages; ++r) EXPECT_DOUBLE_EQ(on[r], off[r]) << "stage " << r;
  }
  // Without recompute the mask is within each forward: the stage ends its
  // forward without it.
  models::CostModelOptions options;
  options.system = models::System::kMegatronCore;
  options.attention_mask = true;
  Result<models::CostModel> cm = models::CostModel::Make(
      *models::ModelPreset("gdn-3b"), pb::PrecisionSpec(),
      *models::ClusterPreset("a100-80gb-nvlink"), options);
  ASSERT_TRUE(cm.ok());
  const schedule::Partition whole({0, 8192});
  const models::StageLayers first{0, 17};
  const models::MemorySegment f =
      models::ActionMemory(*cm, first, whole, {0, schedule::Pass::kForward, 0, 0});
  EXPECT_DOUBLE_EQ(f.net(BufferClass::kWorkspace), 0.0);
  EXPECT_GE(f.class_peak(BufferClass::kWorkspace), kMask);
  const models::StageLayers middle{17, 20};
  options.attention_mask = false;
  Result<models::CostModel> no_mask = models::CostModel::Make(
      *models::ModelPreset("gdn-3b"), pb::PrecisionSpec(),
      *models::ClusterPreset("a100-80gb-nvlink"), options);
  ASSERT_TRUE(no_mask.ok());
  EXPECT_DOUBLE_EQ(
      models::ActionMemory(*cm, middle, whole, {0, schedule::Pass::kForward, 0, 0}).peak_total(),
      models::ActionMemory(*no_mask, middle, whole, {0, schedule::Pass::kForward, 0, 0})
          .peak_total());
}

TEST(SystemField, SweepRunsSayTheirSystem) {
  pb::Scenario s = Gdn3b(1, "ms-swift");
  s.mutable_sweep()->add_policies("1f1b");
  Result<pb::SweepReport> report = RunSweep(MustResolve(s), s.sweep());
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_GT(report->runs_size(), 0);
  for (const pb::SweepRun& run : report->runs()) EXPECT_EQ(run.system(), "ms-swift");
}

// ---- OOM verdict --------------------------------------------------------------

TEST(OomVerdict, ReserveRuleAtTheBoundary) {
  pb::DeviceSpec d;
  d.set_memory_capacity_bytes(80 * kGiB);
  // Defaults: 1 GiB + 5 % of 80 GiB = 5 GiB reserved, 75 GiB usable.
  EXPECT_DOUBLE_EQ(models::MemoryReserveBytes(d), 5 * kGiB);
  EXPECT_DOUBLE_EQ(models::UsableMemoryBytes(d), 75 * kGiB);
  EXPECT_FALSE(models::OutOfMemory(75 * kGiB, d));
  EXPECT_TRUE(models::OutOfMemory(std::nextafter(75 * kGiB, 1e300), d));
  // Configured: 2 GiB + 10 % of 80 GiB = 10 GiB.
  d.set_memory_reserve_bytes(2 * kGiB);
  d.set_memory_reserve_fraction(0.10);
  EXPECT_FALSE(models::OutOfMemory(70 * kGiB, d));
  EXPECT_TRUE(models::OutOfMemory(std::nextafter(70 * kGiB, 1e300), d));
  // No reserve: the allocated peak against the capacity itself.
  d.set_memory_reserve_bytes(0);
  d.set_memory_reserve_fraction(0);
  EXPECT_FALSE(models::OutOfMemory(80 * kGiB, d));
  EXPECT_TRUE(models::OutOfMemory(std::nextafter(80 * kGiB, 1e300), d));
}

TEST(OomVerdict, SimulationJudgesEachStageByTheSameRule) {
  // Find the stages' peaks with no reserve, then set a reserve that leaves
  // exactly the highest peak usable (fits), and one byte less (OOM).
  pb::Scenario s = Gdn3b(1, "megatron-core");
  pb::DeviceSpec* d = s.mutable_cluster()->mutable_device();
  d->set_memory_reserve_bytes(0);
  d->set_memory_reserve_fraction(0);
  Result<Simulation> free_run = SimulateOwn(s);
  ASSERT_TRUE(free_run.ok()) << free_run.status().message();
  const double peak = free_run->report.peak_memory_bytes();
  ASSERT_LT(peak, d->memory_capacity_bytes());
  d->set_memory_reserve_bytes(d->memory_capacity_bytes() - peak);
  Result<Simulation> at = SimulateOwn(s);
  ASSERT_TRUE(at.ok());
  EXPECT_DOUBLE_EQ(at->report.usable_bytes(), peak);
  EXPECT_FALSE(at->report.oom()) << at->report.oom_detail();
  d->set_memory_reserve_bytes(d->memory_capacity_bytes() - peak + 1);
  Result<Simulation> over = SimulateOwn(s);
  ASSERT_TRUE(over.ok());
  EXPECT_TRUE(over->report.oom());
  EXPECT_NE(over->report.oom_detail().find("> usable"), std::string::npos)
      << over->report.oom_detail();
  // The sweep reaches the same verdict.
  s.mutable_sweep()->add_policies("1f1b");
  Result<pb::SweepReport> sweep = RunSweep(MustResolve(s), s.sweep());
  ASSERT_TRUE(sweep.ok()) << sweep.status().message();
  ASSERT_GT(sweep->runs_size(), 0);
  EXPECT_TRUE(sweep->runs(0).oom());
}

TEST(OomVerdict, ReserveFieldsAreChecked) {
  pb::ClusterSpec c = *models::ClusterPreset("a100-80gb-nvlink");
  c.mutable_device()->set_memory_reserve_fraction(1.0);
  Status st = models::ValidateCluster(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cluster.device.memory_reserve_fraction must be in [0, 1)"),
            std::string::npos)
      << st.message();
  c = *models::ClusterPreset("a100-80gb-nvlink");
  c.mutable_device()->set_memory_reserve_bytes(-1);
  st = models::ValidateCluster(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cluster.device.memory_reserve_bytes"), std::string::npos);
  c = *models::ClusterPreset("a100-80gb-nvlink");
  c.mutable_device()->set_memory_reserve_bytes(40 * kGiB);
  c.mutable_device()->set_memory_reserve_fraction(0.5);  // 40 + 40 = all of 80 GiB
  st = models::ValidateCluster(c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("leaves no memory"), std::string::npos) << st.message();
}

// The GPU presets order as their devices (issue 28): the 3B GDN's 1F1B
// step is shortest on the B200, then the H200 and H100 (the same compute;
// the H200's bandwidth only helps), then the A100 80 GB, then the 40 GB
// part (the same chip with less HBM bandwidth).
TEST(GpuPresets, StepTimesOrderAsTheDevices) {
  std::map<std::string, double> step;
  for (const char* name : {"a100-80gb-nvlink", "a100-40gb-nvlink", "h100-80gb-nvlink",
                           "h200-141gb-nvlink", "b200-180gb-nvlink"}) {
    pb::Scenario s = Gdn3b(1, "stateflow");
    *s.mutable_cluster() = *models::ClusterPreset(name);
    Result<Simulation> sim = SimulateOwn(s);
    ASSERT_TRUE(sim.ok()) << name << ": " << sim.status().message();
    step[name] = sim->report.step_time_s();
  }
  EXPECT_LT(step["b200-180gb-nvlink"], step["h200-141gb-nvlink"]);
  EXPECT_LE(step["h200-141gb-nvlink"], step["h100-80gb-nvlink"]);
  EXPECT_LT(step["h100-80gb-nvlink"], step["a100-80gb-nvlink"]);
  EXPECT_LE(step["a100-80gb-nvlink"], step["a100-40gb-nvlink"]);  // less HBM bandwidth
}

}  // namespace
}  // namespace stateflow::sim

// Validation as a library: comparing hand-made predicted and measured
// Reports, summarising runs, and reading measured durations from a
// hand-made trace. Every expected number is computed here from the inputs
// by the definition in sim/validation.h.
#include "sim/validation.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/buffer_class.h"
#include "schedule/action.h"

namespace stateflow::sim {
namespace {

using schedule::Action;
using schedule::Pass;

pb::StageReport Stage(int r, double busy_s, double peak_bytes, double activations_bytes) {
  pb::StageReport s;
  s.set_stage(static_cast<std::uint32_t>(r));
  s.set_busy_s(busy_s);
  s.set_peak_memory_bytes(peak_bytes);
  pb::BufferBytes* b = s.add_peak_by_class();
  b->set_buffer_class("activations");
  b->set_bytes(activations_bytes);
  return s;
}

// A measured report: `steps_s` as its step list (the first is the warm-up).
MeasuredRun Measured(const std::vector<double>& steps_s, const std::vector<double>& busy_s,
                     const std::vector<double>& peak_bytes) {
  MeasuredRun run;
  for (double t : steps_s) run.report.add_step_times_s(t);
  for (std::size_t r = 0; r < busy_s.size(); ++r) {
    *run.report.add_stages() = Stage(static_cast<int>(r), busy_s[r], peak_bytes[r], 1000);
  }
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

TEST(ValidationTest, RelErrorIsSignedAndZeroWithoutAMeasurement) {
  EXPECT_DOUBLE_EQ(RelError(3, 2), 0.5);
  EXPECT_DOUBLE_EQ(RelError(1, 2), -0.5);
  EXPECT_EQ(RelError(1, 0), 0.0);
}

TEST(ValidationTest, MeasuredStepTimeLeavesOutTheWarmUp) {
  pb::Report report;
  const std::vector<double> steps = {9.0, 1.0, 4.0, 2.0};
  for (double t : steps) report.add_step_times_s(t);
  const MeasuredStep m = MeasuredStepTime(report);
  EXPECT_DOUBLE_EQ(m.step_time_s, Median({steps.begin() + 1, steps.end()}));
  EXPECT_EQ(m.steps, steps.size() - 1);

  pb::Report one;
  one.add_step_times_s(7.0);
  EXPECT_DOUBLE_EQ(MeasuredStepTime(one).step_time_s, 7.0);
  EXPECT_EQ(MeasuredStepTime(one).steps, 1u);

  pb::Report none;
  none.set_step_time_s(5.0);
  EXPECT_DOUBLE_EQ(MeasuredStepTime(none).step_time_s, 5.0);
  EXPECT_EQ(MeasuredStepTime(none).steps, 0u);
}

TEST(ValidationTest, MedianRoundIsTheLowerMiddleByStepTime) {
  // Step times after the warm-up: 3, 1, 2, 4 -> sorted 1 2 3 4, lower middle 2 (round 2).
  std::vector<MeasuredRun> rounds;
  for (double t : {3.0, 1.0, 2.0, 4.0}) rounds.push_back(Measured({100, t}, {}, {}));
  EXPECT_EQ(MedianRound(rounds), 2u);
  rounds.pop_back();  // 3, 1, 2: the middle one is 2 again
  EXPECT_EQ(MedianRound(rounds), 2u);
  // Equal times: the first.
  std::vector<MeasuredRun> equal = {Measured({1, 5}, {}, {}), Measured({1, 5}, {}, {})};
  EXPECT_EQ(MedianRound(equal), 0u);

  std::vector<pb::Report> predicted(3);
  predicted[0].set_step_time_s(2);
  predicted[1].set_step_time_s(3);
  predicted[2].set_step_time_s(1);
  EXPECT_EQ(MedianReport(predicted), 0u);
}

TEST(ValidationTest, CompareStageListsEveryClassOnBothSides) {
  const pb::StageReport p = Stage(1, 0.3, 800, 600);
  pb::StageReport m = Stage(1, 0.4, 1000, 0);
  m.mutable_peak_by_class(0)->set_buffer_class("weights");
  m.mutable_peak_by_class(0)->set_bytes(700);
  const double step = 0.5;
  const pb::ValidationStage s = CompareStage(p, m, step);
  EXPECT_EQ(s.stage(), 1u);
  EXPECT_DOUBLE_EQ(s.busy_rel_error(), (0.3 - 0.4) / 0.4);
  EXPECT_DOUBLE_EQ(s.measured_bubble_fraction(), 1 - 0.4 / step);
  EXPECT_DOUBLE_EQ(s.peak_memory_rel_error(), (800.0 - 1000.0) / 1000.0);
  ASSERT_EQ(s.predicted_peak_by_class_size(), kNumBufferClasses);
  ASSERT_EQ(s.measured_peak_by_class_size(), kNumBufferClasses);
  for (int c = 0; c < kNumBufferClasses; ++c) {
    const std::string name(kBufferClassNames[c]);
    EXPECT_EQ(s.predicted_peak_by_class(c).buffer_class(), name);
    EXPECT_EQ(s.measured_peak_by_class(c).buffer_class(), name);
    EXPECT_EQ(s.predicted_peak_by_class(c).bytes(), name == "activations" ? 600 : 0) << name;
    EXPECT_EQ(s.measured_peak_by_class(c).bytes(), name == "weights" ? 700 : 0) << name;
  }
  EXPECT_EQ(CompareStage(p, m, 0).measured_bubble_fraction(), 0.0);
}

TEST(ValidationTest, CompareTakesTheMedianOverRoundsAndTheStagesOfTheMedianRun) {
  pb::Report predicted;
  predicted.set_policy("stateflow");
  predicted.set_pipeline_size(2);
  predicted.set_chunks(4);
  predicted.set_alpha(0.5);
  predicted.set_recompute("none");
  predicted.set_step_time_s(0.9);
  predicted.set_bubble_fraction(0.2);
  *predicted.add_stages() = Stage(0, 0.6, 1100, 500);
  *predicted.add_stages() = Stage(1, 0.7, 900, 400);
  // Three rounds; after the warm-up their medians are 1.0, 1.4 and 0.8.
  const std::vector<MeasuredRun> rounds = {
      Measured({5, 1.0, 1.0, 1.0}, {0.5, 0.6}, {1000, 1000}),
      Measured({5, 1.4, 1.3, 1.5}, {0.7, 0.8}, {1200, 1000}),
      Measured({5, 0.8, 0.8, 0.8}, {0.4, 0.5}, {900, 1100}),
  };
  pb::Report replayed;
  replayed.set_step_time_s(1.1);
  const pb::ValidationRun run =
      Compare(predicted, rounds, replayed, {.microbatches = 3, .seq_len = 256});

  const double step = Median({1.0, 1.4, 0.8});  // 1.0: round 0 is the median run
  EXPECT_EQ(run.policy(), "stateflow");
  EXPECT_EQ(run.pipeline_size(), 2u);
  EXPECT_EQ(run.microbatches(), 3u);
  EXPECT_EQ(run.chunks(), 4u);
  EXPECT_DOUBLE_EQ(run.alpha(), 0.5);
  EXPECT_DOUBLE_EQ(run.seq_len(), 256);
  EXPECT_EQ(run.recompute(), "none");
  EXPECT_EQ(run.rounds(), 3u);
  EXPECT_EQ(run.measured_steps(), 3u);
  EXPECT_DOUBLE_EQ(run.measured_step_time_s(), step);
  EXPECT_DOUBLE_EQ(run.measured_step_time_min_s(), 0.8);
  EXPECT_DOUBLE_EQ(run.measured_step_time_max_s(), 1.4);
  EXPECT_DOUBLE_EQ(run.step_time_rel_error(), (0.9 - step) / step);
  EXPECT_DOUBLE_EQ(run.replayed_step_time_s(), 1.1);
  EXPECT_DOUBLE_EQ(run.replayed_run_step_time_s(), 1.0);  // round 0's own
  EXPECT_DOUBLE_EQ(run.replay_step_time_rel_error(), (1.1 - 1.0) / 1.0);
  EXPECT_DOUBLE_EQ(run.predicted_bubble_fraction(), 0.2);
  // Round 0's stages: busy 0.5 and 0.6, peaks 1000 and 1000.
  EXPECT_DOUBLE_EQ(run.measured_bubble_fraction(), 1 - (0.5 + 0.6) / (2 * step));
  ASSERT_EQ(run.stages_size(), 2);
  EXPECT_DOUBLE_EQ(run.stages(0).measured_busy_s(), 0.5);
  EXPECT_DOUBLE_EQ(run.stages(1).measured_busy_s(), 0.6);
  // Peak errors +10 % and -10 %: equal magnitude, the later stage's sign.
  EXPECT_DOUBLE_EQ(run.stages(0).peak_memory_rel_error(), (1100.0 - 1000) / 1000);
  EXPECT_DOUBLE_EQ(run.peak_memory_rel_error(), (900.0 - 1000) / 1000);
}

pb::ValidationRun RunWithErrors(double step, double replay, double peak) {
  pb::ValidationRun r;
  r.set_step_time_rel_error(step);
  r.set_replay_step_time_rel_error(replay);
  r.set_peak_memory_rel_error(peak);
  return r;
}

TEST(ValidationTest, SummarizeTakesMediansAndMaximaOfMagnitudes) {
  pb::ValidationReport report;
  *report.add_runs() = RunWithErrors(0.1, -0.05, 0.01);
  *report.add_runs() = RunWithErrors(-0.3, 0.02, -0.04);
  *report.add_runs() = RunWithErrors(0.2, 0.03, 0.02);
  Summarize(&report);
  EXPECT_DOUBLE_EQ(report.median_abs_step_time_rel_error(), Median({0.1, 0.3, 0.2}));
  EXPECT_DOUBLE_EQ(report.max_abs_step_time_rel_error(), 0.3);
  EXPECT_DOUBLE_EQ(report.median_abs_replay_step_time_rel_error(), Median({0.05, 0.02, 0.03}));
  EXPECT_DOUBLE_EQ(report.max_abs_replay_step_time_rel_error(), 0.05);
  EXPECT_DOUBLE_EQ(report.max_abs_peak_memory_rel_error(), 0.04);

  pb::ValidationReport empty;
  Summarize(&empty);
  EXPECT_EQ(empty.median_abs_step_time_rel_error(), 0.0);
}

void AddSlice(pb::Trace* trace, int track, const std::string& name, double dur_us,
              const std::string& ph = "X") {
  pb::TraceEvent* e = trace->add_trace_events();
  e->set_ph(ph);
  e->set_tid(static_cast<std::uint32_t>(track));
  e->set_name(name);
  e->set_dur(dur_us);
}

TEST(ValidationTest, DurationsFromTraceAreMediansAfterTheFirstStep) {
  const int P = 2;
  pb::Trace trace;
  // Three steps; each action and optimizer step: the warm-up, then two.
  const std::vector<double> times_us = {500, 40, 60};
  for (double t : times_us) {
    for (int r = 0; r < P; ++r) {
      AddSlice(&trace, r, ToString(Action{r, Pass::kForward, 0, 1}), t * (r + 1));
      AddSlice(&trace, r, ToString(Action{r, Pass::kBackward, 1, 0}), 2 * t);
      AddSlice(&trace, r, "optimizer", 3 * t);
    }
    // Ignored: another phase, another track, another name.
    AddSlice(&trace, 0, ToString(Action{0, Pass::kForward, 0, 1}), 1e6, "C");
    AddSlice(&trace, P, ToString(Action{P, Pass::kForward, 0, 1}), 1e6);
    AddSlice(&trace, 0, "F m0 c1", 1e6);
  }
  Result<MeasuredDurations> d = DurationsFromTrace(trace, P);
  ASSERT_TRUE(d.ok()) << d.status().message();
  const double median_s = Median({times_us[1], times_us[2]}) * 1e-6;
  ASSERT_EQ(d->action_s.size(), 4u);
  for (int r = 0; r < P; ++r) {
    EXPECT_DOUBLE_EQ(d->action_s.at(Action{r, Pass::kForward, 0, 1}), median_s * (r + 1));
    EXPECT_DOUBLE_EQ(d->action_s.at(Action{r, Pass::kBackward, 1, 0}), 2 * median_s);
  }
  ASSERT_EQ(d->optimizer_s.size(), 2u);
  EXPECT_DOUBLE_EQ(d->optimizer_s[1], 3 * median_s);
}

TEST(ValidationTest, DurationsFromTraceRefuseAnActionOnAnotherStagesTrack) {
  pb::Trace trace;
  AddSlice(&trace, 1, "0F7.7", 10);
  Result<MeasuredDurations> d = DurationsFromTrace(trace, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("action 0F7.7 on the track of stage 1"), std::string::npos)
      << d.status().message();
}

// With virtual stages an action's track is its model stage's rank: model
// stage 3 of P 2 is on stage 1 in a loop and on stage 0 in the V.
TEST(ValidationTest, DurationsFromTraceFollowTheModelStagesPlacement) {
  pb::Trace trace;
  AddSlice(&trace, 0, "optimizer", 10);
  AddSlice(&trace, 1, "optimizer", 10);
  AddSlice(&trace, 1, "3F0.0", 10);
  Result<MeasuredDurations> loop = DurationsFromTrace(trace, 2, 2, schedule::StagePlacement::kLoop);
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  EXPECT_EQ(loop->action_s.size(), 1u);
  Result<MeasuredDurations> v = DurationsFromTrace(trace, 2, 2, schedule::StagePlacement::kVShape);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("action 3F0.0 on the track of stage 1"), std::string::npos)
      << v.status().message();
  pb::Trace beyond;  // model stage 4 of P 2, v 2 does not exist
  AddSlice(&beyond, 0, "4F0.0", 10);
  EXPECT_FALSE(DurationsFromTrace(beyond, 2, 2, schedule::StagePlacement::kLoop).ok());
}

TEST(ValidationTest, DurationsFromTraceNeedAnOptimizerStepPerStage) {
  pb::Trace trace;
  AddSlice(&trace, 0, "optimizer", 10);
  AddSlice(&trace, 1, "1F0.0", 10);
  Result<MeasuredDurations> d = DurationsFromTrace(trace, 2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("stage 1 has no optimizer step"), std::string::npos)
      << d.status().message();
}

}  // namespace
}  // namespace stateflow::sim

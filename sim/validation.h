// Validation: how well a simulated Report predicts a measured one of the same
// configuration (the product's third use, beside simulating and running).
// Compares step time, bubble fraction, per-stage busy time and peak memory,
// and the bytes per buffer class at each stage's peak, as relative errors
// (predicted - measured) / measured; summarises many configurations; and
// reads every action's measured duration from a run's trace, so that the
// simulator can replay that run's own costs.
//
// Not the running: the real runs, the profiles and the simulations are made
// by `stateflow validate` (tools/validate_command.cc); this file only
// compares Reports and Traces it is given, and so is tested without mpirun.
//
//   std::vector<MeasuredRun> rounds = ...;       // one real run per round
//   pb::ValidationRun run = Compare(predicted, rounds, replayed, {.microbatches = M, .seq_len = T});
//   *report.add_runs() = run;
//   Summarize(&report);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "schedule/plan.h"
#include "sim/cost_source.h"

namespace stateflow::sim {

// (predicted - measured) / measured; 0 when measured is 0.
double RelError(double predicted, double measured);

// One real run of a configuration: the Report it printed and every action's
// and optimizer step's measured time (DurationsFromTrace).
struct MeasuredRun {
  pb::Report report;
  MeasuredDurations durations;
};

// The step time a measured Report stands for: the median of its steps after
// the first (the warm-up, with its page faults), or its only step;
// `report.step_time_s()` when it lists no steps.
struct MeasuredStep {
  double step_time_s = 0;
  std::uint32_t steps = 0;  // steps the median is over
};
MeasuredStep MeasuredStepTime(const pb::Report& measured);

// The index of the run whose MeasuredStepTime is the median (the lower middle
// one when the count is even; the first of equal times).
// REQUIRES: rounds non-empty.
std::size_t MedianRound(const std::vector<MeasuredRun>& rounds);

// The index of the report whose step_time_s is the median (the lower middle
// one when the count is even). REQUIRES: reports non-empty.
std::size_t MedianReport(const std::vector<pb::Report>& reports);

// What a ValidationRun records of the configuration beside the Reports.
struct RunShape {
  int microbatches = 1;  // M
  double seq_len = 1;    // T, tokens
};

// One stage: predicted `p` against measured `m`; the measured bubble fraction
// is 1 - busy / `measured_step_s` (0 when that is 0). Both sides list the
// eight buffer classes in ledger order, 0 bytes for a class a side lacks.
pb::ValidationStage CompareStage(const pb::StageReport& p, const pb::StageReport& m,
                                 double measured_step_s);

// One configuration: `predicted` (simulated with the profiled costs) against
// the real runs `rounds` (one per round): the measured step time is the
// median over the rounds of each run's MeasuredStepTime, with their range;
// the stages' measured numbers are those of the MedianRound run, and
// `replayed` (simulated with that run's own durations) is set beside that
// run's own step time. The run's peak-memory error is the signed error of
// the stage whose error is largest in magnitude (the last such stage).
// REQUIRES: rounds non-empty; every Report has the same number of stages.
pb::ValidationRun Compare(const pb::Report& predicted, const std::vector<MeasuredRun>& rounds,
                          const pb::Report& replayed, const RunShape& shape);

// Sets the report's medians and maxima over its runs: |step time error|,
// |replayed step time error| and the largest |peak memory error|. Leaves the
// medians 0 when there are no runs.
void Summarize(pb::ValidationReport* report);

// Every action's and each stage's optimizer time from a trace the backend
// wrote (`stateflow train --trace`): slices ("X") on track r (stage r < P =
// `stages`) named by an action's text form (schedule/action.h, "2F0.3"),
// and slices named "optimizer", once per step in step order. Each time is
// the median over the steps after the first, when there are two or more.
// Slices of other phases or names, or on other tracks, are ignored. Errors:
// an action on the track of another stage; a stage with no optimizer slice.
// With virtual stages, `virtual_stages` model stages per stage placed by
// `placement`: an action's track is its model stage's rank.
Result<MeasuredDurations> DurationsFromTrace(
    const pb::Trace& trace, int stages, int virtual_stages = 1,
    schedule::StagePlacement placement = schedule::StagePlacement::kLoop);

}  // namespace stateflow::sim

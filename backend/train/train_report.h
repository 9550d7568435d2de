// A training run as the simulator reports a simulated one: a pb::Report with
// source "train" (same schema, so the two can be compared field by field)
// and a Chrome/Perfetto trace with the simulator's track layout (one track
// per stage, slices named by the action's text form "2F5.3", a memory
// counter per stage).
//
// Step time and tokens/s are means over the measured steps: every step after
// the first (which pays for first-touch page faults), or the only one.
// Per-stage peaks are the maxima over all steps, with the bytes per buffer
// class at the moment the stage's total peaked.
//
// Not the printing (tools/) and not provenance (machine, commit).
//
//   pb::Report report = MakeTrainReport(setup, options, run.steps);
//   AddTrainTrace(timelines, "train stateflow N=4", 0, &trace);
#pragma once

#include <string>
#include <vector>

#include "backend/train/train_setup.h"
#include "backend/train/trainer.h"
#include "common/trace.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// REQUIRES: steps hold every stage's stats (rank 0's results).
pb::Report MakeTrainReport(const TrainSetup& setup, const TrainOptions& options,
                           const std::vector<StepResult>& steps);

// The measured steps of `steps` (all but the first when there are two or more).
std::vector<StepResult> MeasuredSteps(const std::vector<StepResult>& steps);

// Adds one process group `label` (pid) with a track per stage: action
// slices, "optimizer" slices and the memory counters, in seconds since the
// run's start.
void AddTrainTrace(const std::vector<StageTimeline>& timelines, const std::string& label,
                   int pid, TraceWriter* trace);

}  // namespace stateflow::backend

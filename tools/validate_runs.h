// The two sides of one configuration of `stateflow validate`: its prediction
// (the simulator replaying a CostTable, one for all stages or one per stage,
// optionally with a real run's own durations) and its real run (`stateflow
// train --json --trace` of this program, under `mpirun -n P` when P > 1,
// its Report and the durations from its trace).
//
// Not the comparison (sim/validation.h) nor the command's loop over rounds
// and configurations (validate_command.cc).
//
//   SF_ASSIGN_OR_RETURN(pb::Report predicted, Predict(scenario, config, index, precision));
//   SF_ASSIGN_OR_RETURN(sim::MeasuredRun run, RunTrain(ScenarioFor(scenario, config), options, precision));
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "sim/cost_source.h"
#include "sim/cost_table.h"
#include "sim/validation.h"
#include "tools/profiling.h"
#include "tools/run_configs.h"

namespace stateflow::tools {

// The simulated Report of `config` replaying `costs` on every stage, the
// ledger counted at the backend's element size (precision.dtype); with
// `durations`, every action's and optimizer step's time from them instead.
// Errors are prefixed with the configuration's name.
Result<pb::Report> Predict(const pb::Scenario& scenario, const RunConfig& config,
                           const sim::CostTableIndex& costs, const Precision& precision,
                           const sim::MeasuredDurations* durations = nullptr);

// The prediction of one configuration from one profile: stage r replays the
// costs of the profile's process r when there is one per stage, else the
// profile's merged table.
Result<pb::Report> PredictFromProfile(const pb::Scenario& scenario, const RunConfig& config,
                                      const pb::CostTable& merged,
                                      const std::vector<pb::CostTable>& per_stage,
                                      const Precision& precision,
                                      const sim::MeasuredDurations* durations = nullptr);

// How to run train.
struct TrainRunOptions {
  int steps = 5;            // the first is the warm-up
  double timeout_s = 600;
  std::string mpirun = "mpirun";
};

// One real run of `scenario` (narrowed to one configuration). Errors: a
// failed or timed-out run (kInvalidInput when train refused its input, with
// train's own message), no usable report or trace.
Result<sim::MeasuredRun> RunTrain(const pb::Scenario& scenario, const TrainRunOptions& options,
                                  const Precision& precision);

}  // namespace stateflow::tools

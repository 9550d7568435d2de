// The observations of `stateflow validate`: for each configuration and round,
// its prediction (the simulator replaying a CostTable, one for all stages
// or, from a profile taken right before the run, one per stage; optionally
// with a real run's own durations) and its real run (`stateflow train
// --json --trace` of this program, under `mpirun -n P` when P > 1: its
// Report and the durations from its trace); then each configuration's
// comparison (sim::Compare) from them.
//
// Not the comparison itself (sim/validation.h), nor the flags, the costs'
// files and the report's notes (validate_command.cc).
//
//   SF_ASSIGN_OR_RETURN(Observations seen, Observe(scenario, configs, profile, train, precision, nullptr, 3, nullptr));
//   SF_ASSIGN_OR_RETURN(pb::ValidationRun run, CompareConfig(scenario, configs[0], 0, configs.size(), seen, precision, nullptr));
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
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
Result<pb::Report> Predict(const scenario::ResolvedScenario& scenario, const RunConfig& config,
                           const sim::CostTableIndex& costs, const Precision& precision,
                           const sim::MeasuredDurations* durations = nullptr);

// The prediction of one configuration from one profile: stage r replays the
// costs of the profile's process r when there is one per stage, else the
// profile's merged table.
Result<pb::Report> PredictFromProfile(const scenario::ResolvedScenario& scenario,
                                      const RunConfig& config,
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
Result<sim::MeasuredRun> RunMeasuredTrain(const pb::Scenario& scenario, const TrainRunOptions& options,
                                  const Precision& precision);

// Everything the rounds observed, per configuration k and round: the
// prediction, the real run, and (profiling) the profile's merged and
// per-process tables.
struct Observations {
  std::vector<pb::CostTable> tables;  // every profile, round by round, merged over processes
  std::vector<std::vector<pb::Report>> predicted;                   // [k][round]
  std::vector<std::vector<sim::MeasuredRun>> measured;              // [k][round]
  std::vector<std::vector<std::vector<pb::CostTable>>> stage_tables;  // [k][round][r]
};

// Every round runs every configuration once: unless `given` (a --costs
// table), a profile of its chunk lengths (`profile`, in P processes unless
// --concurrent says otherwise), then its prediction, then its real run.
// Progress lines go to `log` (may be null). Errors name the configuration.
Result<Observations> Observe(const scenario::ResolvedScenario& scenario,
                             const std::vector<RunConfig>& configs,
                             const ProfileFlags& profile, const TrainRunOptions& train,
                             const Precision& precision, const sim::CostTableIndex* given,
                             int rounds, std::ostream* log);

// Configuration k (of `num_configs`) compared: the median prediction against
// the rounds' runs, and the median run replayed with its own durations
// (transfers from the costs of its round: `given`, or its profile).
Result<pb::ValidationRun> CompareConfig(const scenario::ResolvedScenario& scenario,
                                        const RunConfig& config,
                                        std::size_t k, std::size_t num_configs,
                                        const Observations& seen, const Precision& precision,
                                        const sim::CostTableIndex* given);

}  // namespace stateflow::tools

// One simulated configuration, end to end: from a resolved scenario (model and
// cluster filled in, see tools/scenario.h) and one schedule, build the cost
// model, assign layers to stages, cut the sequence, make and validate the
// plan, run the engine and summarise it as a Report.
//
// Not the command line (tools/) and not a search over configurations
// (sim/search.h).
//
//   Result<Simulation> sim = Simulate(scenario, scenario.schedule());
//   std::cout << sim->report.step_time_s();
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "models/cost_model.h"
#include "models/memory_model.h"
#include "models/model.h"
#include "models/placement.h"
#include "proto/stateflow.pb.h"
#include "schedule/partition.h"
#include "schedule/plan.h"
#include "sim/cost_source.h"
#include "sim/cost_table.h"
#include "sim/engine.h"

namespace stateflow::sim {

struct SimulationOptions {
  bool record_timeline = false;
  // Run this plan instead of the policy's (e.g. one edited by hand). Its
  // stages, microbatches and chunks must match the scenario.
  const schedule::Plan* plan = nullptr;
  // Replay these measured costs instead of the scenario's cost model.
  const CostTableIndex* costs = nullptr;
  // Or these, stage r's from stage_costs[r] (one per stage).
  const std::vector<const CostTableIndex*>* stage_costs = nullptr;
  // And then take every action's and optimizer step's time from a real run
  // (cost_source.h, MakeMeasuredDurationSource).
  const MeasuredDurations* durations = nullptr;
};

struct Simulation {
  pb::Report report;
  schedule::Plan plan;
  schedule::Partition partition;
  std::vector<models::StageLayers> stage_layers;
  EngineResult engine;
};

// Errors name the scenario field at fault. Same as PrepareScenario followed
// by SimulatePrepared.
Result<Simulation> Simulate(const pb::Scenario& scenario,
                            const pb::ScheduleSpec& schedule,
                            const SimulationOptions& options = {});

// What the schedules of one scenario share when only the policy, N, alpha and
// M change: the cost model (TP, DP, microbatch size, recompute mode) and the
// stage assignment (which depends on P and the sequence length). A search
// prepares it once and simulates each candidate with SimulatePrepared.
struct PreparedScenario {
  models::CostModel cost_model;
  std::vector<models::StageLayers> stage_layers;  // (P)
  // Every action memory composed so far, shared by the candidates (so a
  // prepared scenario is simulated from one thread at a time).
  std::shared_ptr<models::ActionMemoryCache> memory_cache;
};

// Errors name the scenario field at fault (the model, cluster, TP, P).
Result<PreparedScenario> PrepareScenario(const pb::Scenario& scenario,
                                         const pb::ScheduleSpec& schedule);

// One schedule on a prepared scenario. REQUIRES: `prepared` came from
// PrepareScenario on a scenario that differs from `scenario` at most in
// parallel.microbatches, and on a schedule with the same recompute mode
// (a different P or recompute mode is an Internal error; other differences
// are not detected).
Result<Simulation> SimulatePrepared(const pb::Scenario& scenario,
                                    const PreparedScenario& prepared,
                                    const pb::ScheduleSpec& schedule,
                                    const SimulationOptions& options = {});

}  // namespace stateflow::sim

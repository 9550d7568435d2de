// One simulated configuration, end to end: a configured run
// (scenario/configure.h: cost model, stage assignment, partition, validated
// plan) driven through the discrete-event engine with a cost source, and
// summarised as a Report.
//
// Not the command line (tools/), not the configuration step (scenario/), and
// not a search over configurations (sim/search.h).
//
//   Result<Simulation> sim = Simulate(resolved, resolved.proto().schedule());
//   std::cout << sim->report.step_time_s();
#pragma once

#include <optional>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/configure.h"
#include "scenario/resolve.h"
#include "schedule/plan.h"
#include "sim/cost_source.h"
#include "sim/cost_table.h"
#include "sim/engine.h"

namespace stateflow::sim {

struct SimulationOptions {
  bool record_timeline = false;
  // Simulate only: run this plan instead of the policy's (e.g. one edited by
  // hand); see scenario::ConfigureOptions.
  const schedule::Plan* plan = nullptr;
  // Replay these measured costs instead of the scenario's cost model.
  const CostTableIndex* costs = nullptr;
  // Or these, stage r's from stage_costs[r] (one per stage; with virtual
  // stages one per model stage, or one per stage for all its model stages).
  const std::vector<const CostTableIndex*>* stage_costs = nullptr;
  // And then take every action's and optimizer step's time from a real run
  // (cost_source.h, MakeMeasuredDurationSource).
  const MeasuredDurations* durations = nullptr;
};

struct Simulation {
  pb::Report report;
  scenario::Configuration config;  // what ran: placement, partition, plan
  EngineResult engine;
};

// Configure (scenario/configure.h, with options.plan), then
// SimulateConfigured. Errors name the scenario field at fault.
Result<Simulation> Simulate(const scenario::ResolvedScenario& scenario,
                            const pb::ScheduleSpec& schedule,
                            const SimulationOptions& options = {});

// Runs a configuration of `scenario` made by Configure or ConfigurePlaced
// (options.plan is ignored: the configuration holds the plan). The cost
// source is options' measured tables if given, else the scenario's cost
// model (analytic or uniform).
Result<Simulation> SimulateConfigured(const scenario::ResolvedScenario& scenario,
                                      scenario::Configuration config,
                                      const SimulationOptions& options = {});

}  // namespace stateflow::sim

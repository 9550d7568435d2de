// The one configuration step between a resolved scenario and either
// executor: the cost model, the assignment of layers to stages, the cut of
// the sequence into N chunks, and the validated Plan of the schedule's
// policy (or of a plan given by the user). The simulator (sim/simulation.h)
// and the backend (backend/train/train_setup.h) both start from a
// Configuration, so they run the same configuration, with one source for N
// (the partition's chunk count) and one error for a plan of the wrong shape.
//
// Not execution: nothing here runs or simulates anything.
//
//   SF_ASSIGN_OR_RETURN(Configuration c, Configure(resolved, resolved.proto().schedule()));
//   // c.plan, c.partition, c.placement->stage_layers, c.placement->cost_model
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "models/cost_model.h"
#include "models/layer_time_cache.h"
#include "models/memory_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "schedule/partition.h"
#include "schedule/plan.h"

namespace stateflow::scenario {

// What the configurations of one scenario share when only the policy, N,
// alpha and M change: the cost model (precision, TP, DP, microbatch size,
// recompute mode) and the stage assignment (which depends on P and T). A
// search places once and configures each candidate from the same Placement.
struct Placement {
  models::CostModel cost_model;
  std::vector<models::StageLayers> stage_layers;  // (P v) per model stage
  // The memory of each distinct action shape, composed once and shared by
  // every configuration made from this placement (a memo: filling it
  // changes no result; models/memory_model.h).
  std::shared_ptr<models::ActionMemoryCache> memory_cache;
  // The layers' pass times per (kind, chunk shape), likewise (a memo;
  // models/layer_time_cache.h).
  std::shared_ptr<models::LayerTimeCache> time_cache;
};

struct Configuration {
  pb::ScheduleSpec schedule;  // the schedule configured (policy, N, alpha, recompute)
  std::shared_ptr<const Placement> placement;
  schedule::Partition partition;  // N chunks of T tokens; N = partition.num_chunks()
  schedule::Plan plan;            // validated (ValidatePlan)
};

struct ConfigureOptions {
  // Run this plan instead of the policy's (e.g. one edited by hand). Its
  // stages, microbatches and chunks must match the scenario.
  const schedule::Plan* plan = nullptr;
  // Count bytes in this precision instead of the scenario's (a backend run
  // counts its dtype's bytes: models::PrecisionForDtype).
  const pb::PrecisionSpec* precision = nullptr;
};

// The cost model and stage assignment of `schedule` (its recompute mode) on
// `scenario`. Errors name the scenario field at fault.
Result<std::shared_ptr<const Placement>> Place(const ResolvedScenario& scenario,
                                               const pb::ScheduleSpec& schedule,
                                               const pb::PrecisionSpec* precision = nullptr);

// Place, then ConfigurePlaced.
Result<Configuration> Configure(const ResolvedScenario& scenario,
                                const pb::ScheduleSpec& schedule,
                                const ConfigureOptions& options = {});

// A policy's plans, made and validated once per (policy, P, M, N, v) and
// shared by the configurations that differ in nothing else (a sweep's alphas,
// sequence lengths, ST settings): a memo, filling it changes no result.
//
//   PlanCache plans;
//   Result<const schedule::Plan*> p = plans.Get("stateflow", 4, 8, 16);
class PlanCache {
 public:
  // MakePlan's plan, validated; MakePlan's or ValidatePlan's error.
  Result<const schedule::Plan*> Get(const std::string& policy, int stages, int microbatches,
                                    int chunks, int virtual_stages = 1);
  std::size_t size() const { return plans_.size(); }

 private:
  std::map<std::tuple<std::string, int, int, int, int>, schedule::Plan> plans_;
};

// The partition and plan of `schedule` on a placement made by Place for the
// same scenario's P and recompute mode (a different P or recompute mode is an
// Internal error). Errors: a length that cannot be cut into N chunks, a plan
// of another shape ("plan is for stages 2 microbatches 4 chunks 8 but the
// scenario has ..."), a plan that breaks a precedence rule. Without `plan`,
// the policy's, from `plans` when given (a memo) or made here.
Result<Configuration> ConfigurePlaced(const ResolvedScenario& scenario,
                                      std::shared_ptr<const Placement> placement,
                                      const pb::ScheduleSpec& schedule,
                                      const schedule::Plan* plan = nullptr,
                                      PlanCache* plans = nullptr);

// The check ConfigurePlaced makes of a given plan's shape; the message names
// both shapes.
Status CheckPlanShape(const schedule::Plan& plan, int stages, int microbatches, int chunks,
                      int virtual_stages = 1);

// Whether the P v model stages of `schedule` can be placed: at most one per
// block, and P v dividing the blocks for a framework system's even split.
// Ok at v = 1; else the error Place gives, naming both fields.
Status CheckModelStages(const ResolvedScenario& scenario, const pb::ScheduleSpec& schedule);

// schedule.virtual_stages; when unset, the policy's own (2 for zbv, else 1).
int VirtualStagesOf(const pb::ScheduleSpec& schedule);

}  // namespace stateflow::scenario

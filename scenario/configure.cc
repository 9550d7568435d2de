#include "scenario/configure.h"

#include <algorithm>
#include <string>

#include "models/placement.h"
#include "schedule/policies.h"
#include "schedule/validator.h"

namespace stateflow::scenario {

int VirtualStagesOf(const pb::ScheduleSpec& schedule) {
  if (schedule.virtual_stages() == 0) return schedule::DefaultVirtualStages(schedule.policy());
  return static_cast<int>(schedule.virtual_stages());
}

Status CheckPlanShape(const schedule::Plan& plan, int stages, int microbatches, int chunks,
                      int virtual_stages) {
  if (plan.stages() == stages && plan.microbatches() == microbatches &&
      plan.chunks() == chunks && plan.virtual_stages() == virtual_stages) {
    return Status::Ok();
  }
  if (plan.virtual_stages() != virtual_stages) {
    return Status::Invalid("plan has virtual_stages " + std::to_string(plan.virtual_stages()) +
                           " but the scenario has schedule.virtual_stages " +
                           std::to_string(virtual_stages));
  }
  return Status::Invalid("plan is for stages " + std::to_string(plan.stages()) +
                         " microbatches " + std::to_string(plan.microbatches()) + " chunks " +
                         std::to_string(plan.chunks()) +
                         " but the scenario has parallel.pipeline_size " +
                         std::to_string(stages) + ", parallel.microbatches " +
                         std::to_string(microbatches) + ", schedule.chunks " +
                         std::to_string(chunks));
}

Status CheckModelStages(const ResolvedScenario& resolved, const pb::ScheduleSpec& schedule) {
  const int v = VirtualStagesOf(schedule);
  if (v == 1) return Status::Ok();
  SF_ASSIGN_OR_RETURN(models::CostModelOptions cost_options,
                      models::CostOptionsFor(resolved.proto(), schedule));
  const long long blocks = resolved.proto().model().num_layers();
  const long long model_stages = static_cast<long long>(resolved.stages()) * v;
  if (models::FrameworkLayerSplit(cost_options.system) && blocks % model_stages != 0) {
    return Status::Invalid("parallel.pipeline_size * schedule.virtual_stages = " +
                           std::to_string(model_stages) + " does not divide model.num_layers " +
                           std::to_string(blocks) + " (" +
                           std::string(models::SystemName(cost_options.system)) +
                           " splits the layers evenly over the model stages)");
  }
  if (model_stages > blocks) {
    return Status::Invalid("parallel.pipeline_size * schedule.virtual_stages = " +
                           std::to_string(model_stages) + " model stages exceed the model's " +
                           std::to_string(blocks) + " blocks");
  }
  return Status::Ok();
}

Result<std::shared_ptr<const Placement>> Place(const ResolvedScenario& resolved,
                                               const pb::ScheduleSpec& schedule,
                                               const pb::PrecisionSpec* precision) {
  const pb::Scenario& scenario = resolved.proto();
  SF_ASSIGN_OR_RETURN(models::CostModelOptions cost_options,
                      models::CostOptionsFor(scenario, schedule));
  SF_ASSIGN_OR_RETURN(
      models::CostModel cm,
      models::CostModel::Make(scenario.model(),
                              precision != nullptr ? *precision : scenario.precision(),
                              scenario.cluster(), cost_options));
  // With virtual stages the layers are cut into P v model stages.
  SF_RETURN_IF_ERROR(CheckModelStages(resolved, schedule));
  const long long model_stages = static_cast<long long>(resolved.stages()) * VirtualStagesOf(schedule);
  SF_ASSIGN_OR_RETURN(std::vector<models::StageLayers> layers,
                      models::AssignScenarioStages(cm, static_cast<int>(model_stages),
                                                   resolved.seq_len()));
  auto memory_cache = std::make_shared<models::ActionMemoryCache>(cm);
  auto time_cache = std::make_shared<models::LayerTimeCache>(cm);
  return std::make_shared<const Placement>(Placement{std::move(cm), std::move(layers),
                                                     std::move(memory_cache),
                                                     std::move(time_cache)});
}

Result<Configuration> Configure(const ResolvedScenario& scenario,
                                const pb::ScheduleSpec& schedule,
                                const ConfigureOptions& options) {
  SF_ASSIGN_OR_RETURN(std::shared_ptr<const Placement> placement,
                      Place(scenario, schedule, options.precision));
  return ConfigurePlaced(scenario, std::move(placement), schedule, options.plan);
}

Result<const schedule::Plan*> PlanCache::Get(const std::string& policy, int stages,
                                             int microbatches, int chunks, int virtual_stages) {
  const auto key = std::make_tuple(policy, stages, microbatches, chunks, virtual_stages);
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    SF_ASSIGN_OR_RETURN(schedule::Plan plan, schedule::MakePlan(policy, stages, microbatches,
                                                                chunks, virtual_stages));
    SF_RETURN_IF_ERROR(schedule::ValidatePlan(plan));
    it = plans_.emplace(key, std::move(plan)).first;
  }
  return &it->second;
}

Result<Configuration> ConfigurePlaced(const ResolvedScenario& scenario,
                                      std::shared_ptr<const Placement> placement,
                                      const pb::ScheduleSpec& schedule,
                                      const schedule::Plan* plan, PlanCache* plans) {
  const int stages = scenario.stages();
  const int microbatches = scenario.microbatches();
  const models::CostModel& cm = placement->cost_model;
  SF_ASSIGN_OR_RETURN(models::Recompute recompute, models::ParseRecompute(schedule.recompute()));
  const int v = VirtualStagesOf(schedule);
  if (static_cast<int>(placement->stage_layers.size()) != stages * v ||
      recompute != cm.options().recompute) {
    return Status::Internal("ConfigurePlaced: placed for " +
                            std::to_string(placement->stage_layers.size()) +
                            " stages and recompute " +
                            std::string(models::RecomputeName(cm.options().recompute)) +
                            ", asked for " + std::to_string(stages) + " and " +
                            std::string(models::RecomputeName(recompute)));
  }
  Configuration config;
  SF_ASSIGN_OR_RETURN(config.partition,
                      models::PartitionFor(cm, scenario.seq_len(), schedule));
  const int chunks = config.partition.num_chunks();
  // Context parallelism splits every chunk's tokens over CP devices: a
  // chunk shorter than CP would leave devices without a token.
  const int cp = cm.options().context_size;
  for (int i = 0; cp > 1 && i < chunks; ++i) {
    if (config.partition.length(i) < cp) {
      return Status::Invalid("parallel.context_size " + std::to_string(cp) + " exceeds chunk " +
                             std::to_string(i) + "'s " +
                             std::to_string(config.partition.length(i)) +
                             " tokens (schedule.chunks " + std::to_string(chunks) +
                             "): every CP device needs a token of every chunk");
    }
  }
  if (plan != nullptr) {
    SF_RETURN_IF_ERROR(CheckPlanShape(*plan, stages, microbatches, chunks, v));
    config.plan = *plan;
    SF_RETURN_IF_ERROR(schedule::ValidatePlan(config.plan));
  } else if (plans != nullptr) {
    SF_ASSIGN_OR_RETURN(const schedule::Plan* made,
                        plans->Get(schedule.policy(), stages, microbatches, chunks, v));
    config.plan = *made;
  } else {
    SF_ASSIGN_OR_RETURN(config.plan,
                        schedule::MakePlan(schedule.policy(), stages, microbatches, chunks, v));
    SF_RETURN_IF_ERROR(schedule::ValidatePlan(config.plan));
  }
  config.schedule = schedule;
  config.placement = std::move(placement);
  return config;
}

}  // namespace stateflow::scenario

// Where a scenario's work goes, shared by both executors so that the
// simulator and the backend run the same configuration: the cost-model
// options of a scenario, the assignment of layers to stages, and the chunk
// boundaries of a schedule.
//
// Not the schedule's order (schedule/plan.h) and not costs (cost_model.h).
//
//   Result<std::vector<StageLayers>> stages = AssignScenarioStages(cm, 4, 65536);
//   Result<schedule::Partition> chunks = PartitionFor(cm, 65536, scenario.schedule());
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"
#include "schedule/partition.h"

namespace stateflow::models {

// TP and DP degrees, microbatch size (1 when unset) and recompute mode.
Result<CostModelOptions> CostOptionsFor(const pb::Scenario& scenario,
                                        const pb::ScheduleSpec& schedule);

// Layers balanced by their forward+backward FLOPs over the whole sequence
// (AssignStages: embedding on stage 0, head on the last); in a framework's
// system (megatron-core, ms-swift), its even split instead (EvenLayerStages).
Result<std::vector<StageLayers>> AssignScenarioStages(const CostModel& cost_model,
                                                      int stages, std::int64_t seq_len);

// Alpha-interpolated between equal and FLOP-balanced boundaries for the whole
// model, rounded to the granularity (128 when unset).
Result<schedule::Partition> PartitionFor(const CostModel& cost_model, std::int64_t seq_len,
                                         const pb::ScheduleSpec& schedule);

}  // namespace stateflow::models

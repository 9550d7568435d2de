#include "models/placement.h"

#include "models/limits.h"

namespace stateflow::models {

Result<CostModelOptions> CostOptionsFor(const pb::Scenario& scenario,
                                        const pb::ScheduleSpec& schedule) {
  CostModelOptions options;
  const pb::ParallelSpec& par = scenario.parallel();
  options.tensor_size = par.tensor_size() == 0 ? 1 : static_cast<int>(par.tensor_size());
  options.data_size = par.data_size() == 0 ? 1 : static_cast<int>(par.data_size());
  options.distributed_optimizer = par.distributed_optimizer();
  options.overlap_grad_reduce = par.overlap_grad_reduce();
  if (par.grad_bucket_size() != 0) {
    SF_RETURN_IF_ERROR(
        CheckRange("parallel.grad_bucket_size", par.grad_bucket_size(), kGradBucketSize));
    options.grad_bucket_size = static_cast<std::int64_t>(par.grad_bucket_size());
  }
  options.context_size = par.context_size() == 0 ? 1 : static_cast<int>(par.context_size());
  options.context_contiguous = par.context_contiguous();
  options.microbatch_size =
      par.microbatch_size() == 0 ? 1 : static_cast<int>(par.microbatch_size());
  SF_ASSIGN_OR_RETURN(options.recompute, ParseRecompute(schedule.recompute()));
  SF_ASSIGN_OR_RETURN(options.system, ParseSystem(schedule.system()));
  SF_RETURN_IF_ERROR(FrameworkSettingsFor(options.system, scenario.framework(), &options));
  options.st_overlap = schedule.st_overlap();
  // The backend's memory events count the scratch of the device it runs on
  // (the grid devices share one layout); a scenario without train.device
  // (the simulator's GPU presets) keeps the CPU kernels' as before.
  const std::string& device = scenario.train().device();
  if (device == "host-grid" || device == "cuda") options.core_workspace = CoreWorkspace::kGrid;
  if (schedule.has_st_tile()) {
    SF_RETURN_IF_ERROR(CheckRange("schedule.st_tile", schedule.st_tile(), kStTile));
    options.st_tile = static_cast<int>(schedule.st_tile());
  }
  return options;
}

Result<std::vector<StageLayers>> AssignScenarioStages(const CostModel& cm, int stages,
                                                      std::int64_t seq_len) {
  if (FrameworkLayerSplit(cm.options().system)) {
    return EvenLayerStages(cm.num_layers() - 2, stages);
  }
  std::vector<double> layer_costs(cm.num_layers());
  for (int l = 0; l < cm.num_layers(); ++l) {
    layer_costs[l] = cm.ForwardFlops(l, 0, seq_len) + cm.BackwardFlops(l, 0, seq_len);
  }
  return AssignStages(layer_costs, stages);
}

Result<schedule::Partition> PartitionFor(const CostModel& cm, std::int64_t seq_len,
                                         const pb::ScheduleSpec& schedule) {
  const int granularity =
      schedule.has_granularity() ? static_cast<int>(schedule.granularity()) : 128;
  const int chunks = schedule.has_chunks() ? static_cast<int>(schedule.chunks()) : 1;
  return schedule::MakePartition(seq_len, chunks, schedule.alpha(),
                                 cm.ChunkCoefficients(0, cm.num_layers()), granularity);
}

}  // namespace stateflow::models

#include "backend/train/train_setup.h"

#include <algorithm>
#include <cmath>

#include "backend/train/text_data.h"
#include "models/placement.h"
#include "scenario/configure.h"

namespace stateflow::backend {
namespace {

constexpr int kByteVocab = 256;

}  // namespace

Result<TrainSetup> MakeTrainSetup(const scenario::ResolvedScenario& resolved,
                                  const schedule::Plan* plan) {
  TrainSetup setup;
  const pb::Scenario& scenario = resolved.proto();
  const pb::ScheduleSpec& schedule = scenario.schedule();
  setup.scenario_name = scenario.name();
  setup.model = scenario.model();
  setup.stages = resolved.stages();
  setup.microbatches = resolved.microbatches();
  setup.microbatch_size = static_cast<int>(scenario.parallel().microbatch_size());  // >= 1 once resolved
  setup.seq_len = resolved.seq_len();
  setup.alpha = schedule.alpha();
  if (setup.model.vocab_size() < kByteVocab) {
    return Status::Invalid("model.vocab_size " + std::to_string(setup.model.vocab_size()) +
                           " is below 256, the byte-level vocabulary of training");
  }
  setup.tensor_size = static_cast<int>(std::max(1u, scenario.parallel().tensor_size()));
  SF_RETURN_IF_ERROR(models::CheckTensorParallelModel(setup.model, setup.tensor_size));
  if (scenario.parallel().context_size() > 1) {
    return Status::Invalid("parallel.context_size must be 1 for training (context parallelism "
                           "is simulated only)");
  }
  if (scenario.parallel().overlap_grad_reduce()) {
    return Status::Invalid("parallel.overlap_grad_reduce must be off for training (the "
                           "backend's DP sync runs after the last backward; the overlap is "
                           "simulated only)");
  }
  setup.data_size = static_cast<int>(std::max(1u, scenario.parallel().data_size()));
  setup.distributed_optimizer = scenario.parallel().distributed_optimizer();
  if (!schedule.system().empty() && schedule.system() != "stateflow") {
    return Status::Invalid("schedule.system '" + schedule.system() +
                           "' cannot be trained: the backend runs only system stateflow");
  }
  // The run's own scenario (scenario::ForBackendRun: the precision of its
  // dtype, not the scenario's, which describes a simulated run, bf16 by
  // default): placement depends on FLOPs only, so this changes no result,
  // but the setup's cost model is the one that counts the backend's bytes,
  // as the memory check's does.
  SF_ASSIGN_OR_RETURN(const scenario::ResolvedScenario run,
                      scenario::ForBackendRun(resolved, scenario.train().dtype(), ""));
  SF_ASSIGN_OR_RETURN(scenario::Configuration config,
                      scenario::Configure(run, schedule, {.plan = plan}));
  setup.recompute = config.placement->cost_model.options().recompute;
  setup.st_overlap = schedule.st_overlap();
  setup.st_tile = schedule.has_st_tile() ? static_cast<int64_t>(schedule.st_tile()) : 0;
  setup.stage_layers = config.placement->stage_layers;
  setup.partition = std::move(config.partition);
  setup.plan = std::move(config.plan);
  return setup;
}

Result<TrainOptions> TrainOptionsFromSpec(const pb::TrainSpec& spec) {
  TrainOptions options;
  if (spec.steps() > 0) options.steps = static_cast<int>(std::min<std::uint32_t>(spec.steps(), 1u << 30));
  if (spec.seed() != 0) options.seed = spec.seed();
  if (spec.learning_rate() != 0) options.adamw.learning_rate = spec.learning_rate();
  options.adamw.weight_decay = spec.weight_decay();
  options.text_path = spec.text_path().empty() ? kDefaultTextPath : spec.text_path();
  if (!spec.dtype().empty()) options.dtype = spec.dtype();
  if (!spec.device().empty()) options.device = spec.device();
  if (spec.threads() > 0) options.threads = static_cast<int>(std::min<std::uint32_t>(spec.threads(), 1024));
  if (!std::isfinite(options.adamw.learning_rate) || options.adamw.learning_rate <= 0) {
    return Status::Invalid("train.learning_rate must be finite and > 0 (got " +
                           std::to_string(options.adamw.learning_rate) + ")");
  }
  if (!std::isfinite(options.adamw.weight_decay) || options.adamw.weight_decay < 0) {
    return Status::Invalid("train.weight_decay must be finite and >= 0 (got " +
                           std::to_string(options.adamw.weight_decay) + ")");
  }
  if (options.dtype != "float32" && options.dtype != "float64" && options.dtype != "bf16") {
    return Status::Invalid("train.dtype: unknown '" + options.dtype +
                           "' (known: float32, float64, bf16)");
  }
  if (options.device != "cpu" && options.device != "host-grid" && options.device != "cuda") {
    return Status::Invalid("train.device: unknown '" + options.device +
                           "' (known: cpu, host-grid, cuda)");
  }
  if (options.dtype == "bf16" && options.device == "cpu") {
    return Status::Invalid(
        "train.dtype: bf16 runs on the grid devices (--device host-grid or cuda); the cpu "
        "device's kernels are float32 and float64");
  }
  return options;
}

}  // namespace stateflow::backend

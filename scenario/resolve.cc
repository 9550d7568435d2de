#include "scenario/resolve.h"

#include <cmath>
#include <string>
#include <vector>

#include "models/cost_model.h"
#include "models/limits.h"
#include "models/model.h"
#include "schedule/plan.h"
#include "schedule/policies.h"

namespace stateflow::scenario {
namespace {

std::string Known(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Status ResolveModel(pb::Scenario* s) {
  if (!s->model_preset().empty()) {
    Result<pb::ModelSpec> preset = models::ModelPreset(s->model_preset());
    if (!preset.ok()) return preset.status();
    pb::ModelSpec merged = *preset;
    merged.MergeFrom(s->model());
    *s->mutable_model() = merged;
  }
  if (s->model().architecture().empty() && s->model().num_layers() == 0) {
    return Status::Invalid("model: neither model_preset nor model fields given (presets: " +
                           Known(models::ModelPresetNames()) + ")");
  }
  const int tp = static_cast<int>(s->parallel().tensor_size());
  return models::ValidateModel(s->model(), tp);
}

Status ResolveCluster(pb::Scenario* s) {
  if (!s->cluster_preset().empty()) {
    Result<pb::ClusterSpec> preset = models::ClusterPreset(s->cluster_preset());
    if (!preset.ok()) return preset.status();
    pb::ClusterSpec merged = *preset;
    // Efficiency points given in the scenario replace the preset's curve.
    if (s->cluster().device().efficiency_size() > 0) {
      merged.mutable_device()->clear_efficiency();
    }
    // So do kernel costs (an empty `kernel_costs {}` drops the preset's).
    if (s->cluster().has_kernel_costs()) merged.clear_kernel_costs();
    merged.MergeFrom(s->cluster());
    *s->mutable_cluster() = merged;
  }
  if (!s->cluster().has_device()) {
    return Status::Invalid("cluster: neither cluster_preset nor cluster.device given (presets: " +
                           Known(models::ClusterPresetNames()) + ")");
  }
  return models::ValidateCluster(s->cluster());
}

// Fills TP, DP and microbatch size (1 when unset) and checks every size's range.
Status ResolveParallel(pb::ParallelSpec* par) {
  using models::CheckRange;
  if (par->tensor_size() == 0) par->set_tensor_size(1);
  if (par->data_size() == 0) par->set_data_size(1);
  if (par->microbatch_size() == 0) par->set_microbatch_size(1);
  SF_RETURN_IF_ERROR(
      CheckRange("parallel.pipeline_size", par->pipeline_size(), models::kPipelineSize));
  SF_RETURN_IF_ERROR(CheckRange("parallel.tensor_size", par->tensor_size(), models::kTensorSize));
  SF_RETURN_IF_ERROR(CheckRange("parallel.data_size", par->data_size(), models::kDataSize));
  if (par->context_size() != 0) {  // unset reads as 1
    SF_RETURN_IF_ERROR(
        CheckRange("parallel.context_size", par->context_size(), models::kContextSize));
  }
  SF_RETURN_IF_ERROR(CheckRange("parallel.microbatch_size", par->microbatch_size(),
                                models::kMicrobatchSize));
  SF_RETURN_IF_ERROR(
      CheckRange("parallel.microbatches", par->microbatches(), models::kMicrobatches));
  // 64-bit: each factor is at most 2^20.
  const std::uint64_t global_batch = std::uint64_t{par->microbatches()} *
                                     par->microbatch_size() * par->data_size();
  return CheckRange("global batch (parallel.microbatches * microbatch_size * data_size)",
                    global_batch, models::kGlobalBatch);
}

// Every stage holds at least one layer.
Status CheckStagesFitLayers(const pb::Scenario& s) {
  if (s.parallel().pipeline_size() > s.model().num_layers()) {
    return Status::Invalid("parallel.pipeline_size " + std::to_string(s.parallel().pipeline_size()) +
                           " exceeds model.num_layers " +
                           std::to_string(s.model().num_layers()));
  }
  return Status::Ok();
}

void FillScheduleDefaults(pb::ScheduleSpec* schedule) {
  if (schedule->policy().empty()) schedule->set_policy("stateflow");
  if (!schedule->has_chunks()) schedule->set_chunks(1);
  if (!schedule->has_granularity()) schedule->set_granularity(128);
  if (schedule->recompute().empty()) schedule->set_recompute("none");
  if (schedule->system().empty()) schedule->set_system("stateflow");
}

}  // namespace

Status ValidateSchedule(const pb::ScheduleSpec& schedule, std::string_view field) {
  const std::string f(field);
  bool known = false;
  for (const auto& name : schedule::PolicyNames()) known |= (name == schedule.policy());
  if (!known) {
    return Status::Invalid(f + ".policy: unknown '" + schedule.policy() + "' (known: " +
                           Known(schedule::PolicyNames()) + ")");
  }
  SF_RETURN_IF_ERROR(models::CheckRange(f + ".chunks", schedule.chunks(), models::kChunks));
  SF_RETURN_IF_ERROR(schedule::CheckPolicyChunks(schedule.policy(), schedule.chunks(),
                                                 f + ".chunks"));
  SF_RETURN_IF_ERROR(models::CheckRange(f + ".alpha", schedule.alpha(), models::kAlpha));
  if (schedule.virtual_stages() != 0) {
    SF_RETURN_IF_ERROR(models::CheckRange(f + ".virtual_stages", schedule.virtual_stages(),
                                          models::kVirtualStages));
    if (schedule.policy() == "zbv" && schedule.virtual_stages() != 2) {
      return Status::Invalid(f + ".virtual_stages must be 2 for policy zbv (its V places two "
                             "model stages on each stage), got " +
                             std::to_string(schedule.virtual_stages()));
    }
    if (schedule.virtual_stages() > 1 && !schedule::VirtualStagesFree(schedule.policy()) &&
        schedule.policy() != "zbv") {
      return Status::Invalid(f + ".virtual_stages must be 1 for policy " + schedule.policy() +
                             ", got " + std::to_string(schedule.virtual_stages()) +
                             " (policies interleaved, zb-interleaved and zbv place virtual "
                             "stages)");
    }
  }
  SF_RETURN_IF_ERROR(
      models::CheckRange(f + ".granularity", schedule.granularity(), models::kGranularity));
  if (schedule.recompute() != "none" && schedule.recompute() != "full") {
    return Status::Invalid(f + ".recompute: unknown '" + schedule.recompute() +
                           "' (known: none, full)");
  }
  if (!models::ParseSystem(schedule.system()).ok()) {
    return Status::Invalid(f + ".system: unknown '" + schedule.system() +
                           "' (known: stateflow, megatron-core, ms-swift)");
  }
  return Status::Ok();
}

Result<pb::ScheduleSpec> ResolveSchedule(pb::ScheduleSpec schedule, std::string_view field) {
  FillScheduleDefaults(&schedule);
  SF_RETURN_IF_ERROR(ValidateSchedule(schedule, field));
  return schedule;
}

Result<ResolvedScenario> Resolve(pb::Scenario s) {
  SF_RETURN_IF_ERROR(ResolveParallel(s.mutable_parallel()));
  SF_RETURN_IF_ERROR(models::CheckRange("seq_len", s.seq_len(), models::kSeqLen));
  if (s.cost_model().empty()) s.set_cost_model("analytic");
  if (s.cost_model() != "analytic" && s.cost_model() != "uniform" &&
      s.cost_model() != "replay") {
    return Status::Invalid("cost_model: unknown '" + s.cost_model() +
                           "' (known: analytic, uniform, replay)");
  }
  SF_RETURN_IF_ERROR(ResolveModel(&s));
  SF_RETURN_IF_ERROR(ResolveCluster(&s));
  SF_RETURN_IF_ERROR(CheckStagesFitLayers(s));
  SF_ASSIGN_OR_RETURN(*s.mutable_schedule(), ResolveSchedule(s.schedule(), "schedule"));
  for (int b = 0; b < s.baselines_size(); ++b) {
    SF_ASSIGN_OR_RETURN(*s.mutable_baselines(b),
                        ResolveSchedule(s.baselines(b), "baselines[" + std::to_string(b) + "]"));
  }
  return ResolvedScenario(std::move(s));
}

Result<ResolvedScenario> ResolvedScenario::WithSeqLen(std::int64_t seq_len) const {
  SF_RETURN_IF_ERROR(models::CheckRange("seq_len", seq_len, models::kSeqLen));
  ResolvedScenario out = *this;
  out.scenario_.set_seq_len(static_cast<std::uint64_t>(seq_len));
  return out;
}

Result<ResolvedScenario> ResolvedScenario::WithMicrobatches(std::int64_t microbatches) const {
  SF_RETURN_IF_ERROR(
      models::CheckRange("parallel.microbatches", microbatches, models::kMicrobatches));
  ResolvedScenario out = *this;
  out.scenario_.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(microbatches));
  return out;
}

Result<ResolvedScenario> ResolvedScenario::WithSchedule(pb::ScheduleSpec schedule) const {
  ResolvedScenario out = *this;
  SF_ASSIGN_OR_RETURN(*out.scenario_.mutable_schedule(),
                      ResolveSchedule(std::move(schedule), "schedule"));
  return out;
}

Result<ResolvedScenario> ForBackendRun(const ResolvedScenario& scenario, std::string_view dtype,
                                       std::string_view device) {
  SF_ASSIGN_OR_RETURN(const pb::PrecisionSpec precision, models::PrecisionForDtype(dtype));
  pb::Scenario s = scenario.proto();
  *s.mutable_precision() = precision;
  if (!device.empty()) s.mutable_train()->set_device(std::string(device));
  s.clear_baselines();
  s.clear_sweep();
  return Resolve(std::move(s));
}

Result<ResolvedScenario> ResolvedScenario::WithParallel(const pb::ParallelSpec& parallel) const {
  ResolvedScenario out = *this;
  pb::Scenario& s = out.scenario_;
  *s.mutable_parallel() = parallel;
  SF_RETURN_IF_ERROR(ResolveParallel(s.mutable_parallel()));
  SF_RETURN_IF_ERROR(models::ValidateModel(s.model(), static_cast<int>(s.parallel().tensor_size())));
  SF_RETURN_IF_ERROR(CheckStagesFitLayers(s));
  return out;
}

}  // namespace stateflow::scenario

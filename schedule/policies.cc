// The issue policies: each turns (P, M, N) into per-stage action lists.
#include <algorithm>
#include <string>

#include "schedule/policies.h"

namespace stateflow::schedule {
namespace {

Action Make(int stage, Pass pass, int microbatch, int chunk) {
  return Action{.stage = stage, .pass = pass, .microbatch = microbatch, .chunk = chunk};
}

// The k-th forward of a stage: units in (microbatch, chunk) order.
Action KthForward(int stage, int chunks, long long k) {
  return Make(stage, Pass::kForward, static_cast<int>(k / chunks),
              static_cast<int>(k % chunks));
}

// The k-th backward of a stage: microbatch by microbatch, last chunk first.
Action KthBackward(int stage, int chunks, long long k) {
  return Make(stage, Pass::kBackward, static_cast<int>(k / chunks),
              chunks - 1 - static_cast<int>(k % chunks));
}

// `warmup` forwards, then one backward and one forward alternately while
// forwards remain, then the remaining backwards. warmup = M N is GPipe.
std::vector<Action> OneForwardOneBackward(int stage, int microbatches, int chunks,
                                          long long warmup) {
  const long long units = static_cast<long long>(microbatches) * chunks;
  std::vector<Action> actions;
  actions.reserve(2 * units);
  long long forwards = 0;
  long long backwards = 0;
  while (forwards < warmup) actions.push_back(KthForward(stage, chunks, forwards++));
  while (backwards < units) {
    actions.push_back(KthBackward(stage, chunks, backwards++));
    if (forwards < units) actions.push_back(KthForward(stage, chunks, forwards++));
  }
  return actions;
}

std::string KnownPolicies() {
  std::string known;
  for (const std::string& name : PolicyNames()) {
    if (!known.empty()) known += ", ";
    known += name;
  }
  return known;
}

}  // namespace

Status CheckPlanDimensions(int stages, int microbatches, int chunks) {
  if (stages < 1) {
    return Status::Invalid("stages (parallel.pipeline_size) must be >= 1, got " +
                           std::to_string(stages));
  }
  if (microbatches < 1) {
    return Status::Invalid("microbatches (parallel.microbatches) must be >= 1, got " +
                           std::to_string(microbatches));
  }
  if (chunks < 1) {
    return Status::Invalid("chunks (schedule.chunks) must be >= 1, got " + std::to_string(chunks));
  }
  const long long units = static_cast<long long>(microbatches) * chunks;
  if (units > kMaxUnitsPerStage) {
    return Status::Invalid("microbatches * chunks (parallel.microbatches * schedule.chunks) = " +
                           std::to_string(units) + " exceeds the limit " +
                           std::to_string(kMaxUnitsPerStage));
  }
  return Status::Ok();
}


const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> kNames = {"gpipe", "1f1b", "stateflow"};
  return kNames;
}

int StateflowWarmupForwards(int stages, int microbatches, int chunks, int stage) {
  const long long units = static_cast<long long>(microbatches) * chunks;
  const long long pipeline = static_cast<long long>(chunks) + stages - stage - 1;
  return static_cast<int>(std::min(units, pipeline));
}

bool WholeSequencePolicy(std::string_view policy) { return policy == "1f1b"; }

std::optional<long long> ChunksFor(std::string_view policy, std::optional<long long> requested) {
  if (!requested && WholeSequencePolicy(policy)) return 1;
  return requested;
}

Status CheckPolicyChunks(std::string_view policy, long long chunks, std::string_view field) {
  if (!WholeSequencePolicy(policy) || chunks == 1) return Status::Ok();
  return Status::Invalid(std::string(field) + " must be 1 for policy " + std::string(policy) +
                         " (whole-sequence microbatches), got " + std::to_string(chunks) +
                         "; policy stateflow runs 1F1B over chunks");
}

Result<Plan> MakePlan(std::string_view policy, int stages, int microbatches, int chunks) {
  const bool gpipe = policy == "gpipe";
  const bool one_f_one_b = WholeSequencePolicy(policy);
  if (!gpipe && !one_f_one_b && policy != "stateflow") {
    return Status::Invalid("schedule.policy '" + std::string(policy) +
                           "' is unknown (known: " + KnownPolicies() + ")");
  }
  SF_RETURN_IF_ERROR(CheckPlanDimensions(stages, microbatches, chunks));
  SF_RETURN_IF_ERROR(CheckPolicyChunks(policy, chunks, "schedule.chunks"));
  const long long units = static_cast<long long>(microbatches) * chunks;
  std::vector<std::vector<Action>> per_stage(stages);
  for (int r = 0; r < stages; ++r) {
    const long long warmup =
        gpipe ? units : StateflowWarmupForwards(stages, microbatches, chunks, r);
    per_stage[r] = OneForwardOneBackward(r, microbatches, chunks, warmup);
  }
  return Plan(std::string(policy), stages, microbatches, chunks, std::move(per_stage));
}

}  // namespace stateflow::schedule

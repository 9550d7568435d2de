// The schedule core's greedy executor: a plan made by an issue policy given
// as a function (a Python callable, a test's lambda) rather than by name.
//
// The executor plays the pipeline forward in time with fixed durations per
// pass (by default a forward 1 unit, a backward 2). Whenever a stage is idle
// it asks the policy which of its *ready* actions to issue next: those whose
// every dependency (the five precedence rules of plan.h) has finished by
// then. The policy returns one of them, or none to wait until something else
// finishes. The plan is each stage's actions in the order they were issued,
// so it is valid by construction (ValidatePlan checks it again).
//
// What a policy can get wrong is refused in one line naming the stage and the
// step (the index in that stage's list the choice would fill):
//   - choosing an action that is not in the ready list;
//   - a deadlock: every stage idle, work left, and every stage that has
//     ready actions waiting (nothing will ever finish to change that).
//
// Not a simulator of costs: durations only decide which actions are ready
// when, so that a policy sees the pipeline fill and drain; the plan is then
// simulated with the scenario's costs like any other.
//
//   Result<Plan> plan = PlanFromPolicy(4, 8, 2, [](int stage, int step,
//       const std::vector<Action>& ready) -> Result<std::optional<Action>> {
//     return ready.front();  // the earliest ready action, backwards first
//   });
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "schedule/action.h"
#include "schedule/plan.h"

namespace stateflow::schedule {

// The policy: stage r, the step its next action fills (0-based), and its
// ready actions (never empty) in a fixed order: backwards before forwards,
// each over the stage's model stages from the last in the layer order to the
// first (with virtual stages) and by (microbatch, chunk) ascending, then
// (with split_backward) the W actions whose B has run, oldest B first. Returns the chosen action, nullopt
// to wait, or an error (passed through, prefixed with the stage and step).
using ChoosePolicy = std::function<Result<std::optional<Action>>(
    int stage, int step, const std::vector<Action>& ready)>;

struct GreedyOptions {
  // The plan's policy name (one token, no whitespace or '#').
  std::string policy_name = "custom";
  // How long each pass holds its stage, in any unit (> 0).
  double forward_time = 1;
  double backward_time = 2;
  // Split every backward into B (input gradient) and W (weight gradient):
  // the plan then has a W for every B, each W ready once its B has run, and
  // B holds its stage backward_time, W weight_time.
  bool split_backward = false;
  double weight_time = 1;
  // v model stages per stage (virtual stages, plan.h) and where they sit;
  // actions then name their model stage, the policy is still asked per
  // stage (rank). kVShape needs v = 2.
  int virtual_stages = 1;
  StagePlacement placement = StagePlacement::kLoop;
};

// Errors (kInvalidInput): stages, microbatches or chunks < 1 or too many
// units (as MakePlan's, naming the field); virtual_stages out of [1, 64] or
// not 2 for placement v; a bad duration or policy name; a
// choice not in the ready list ("policy chose 1B0.2 on stage 1 at step 5,
// which is not ready there (ready: 1F1.0 1F2.0)"); a deadlock ("policy
// deadlocks: every stage is idle and waits, 12 actions left; stage 0 at step
// 4 waited with ready: 0F2.0").
Result<Plan> PlanFromPolicy(int stages, int microbatches, int chunks, const ChoosePolicy& choose,
                            const GreedyOptions& options = {});

}  // namespace stateflow::schedule

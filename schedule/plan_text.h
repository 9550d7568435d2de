// The text form of a plan, for users to read and edit by hand, and the
// per-stage grid that errors and tools print.
//
// Not validation: ParsePlanText checks the text, ValidatePlan (validator.h)
// the order.
//
//   std::string text = PlanToText(plan);        // "plan stateflow stages 4 ..."
//   Result<Plan> back = ParsePlanText(text);    // equals plan
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schedule/plan.h"

namespace stateflow::schedule {

// Text form:
//   # comments and blank lines are ignored
//   plan stateflow stages 4 microbatches 2 chunks 3
//   stage 0: 0F0.0 0F0.1 0F0.2 ...
//   stage 1: ...
// Every stage line lists that stage's actions in order. '#' starts a comment
// anywhere on a line. With virtual stages the header goes on with
// "virtual_stages <v> placement <loop|v>" and each action names its model
// stage (on stage 1 of P 4, v 2, loop: "1F0.0 ... 5F0.0 ..."); without, the
// header stops at chunks (every plan written before virtual stages reads
// as before). REQUIRES: the policy name is one token (no whitespace
// or '#'), as MakePlan's names are.
std::string PlanToText(const Plan& plan);

// Parses the text form. Errors are "<source_name>:<line>:<column>: message"
// (1-based; a missing stage line points one past the last line). Checked
// here, because they are about the text: the header's form and numbers
// (>= 1, microbatches * chunks <= kMaxUnitsPerStage), one line per stage
// in order 0..P-1 and exactly P of them, each action's syntax, and that each
// action names the stage of its line and a microbatch and chunk below the
// header's counts. Not checked: precedence, duplicates, completeness; call
// ValidatePlan for those.
Result<Plan> ParsePlanText(std::string_view text,
                           std::string_view source_name = "<plan>");

// The per-stage grid (one row per stage, one column per step), for humans;
// `mark` (if given) is surrounded by [brackets].
std::string PlanGrid(const Plan& plan, const Action* mark = nullptr);

// A rectangle of the grid: stages [first_stage, first_stage + num_stages) and
// steps [first_step, first_step + num_steps), clipped to the plan; a negative
// count means "to the end".
struct GridWindow {
  int first_stage = 0;
  int num_stages = -1;
  int first_step = 0;
  int num_steps = -1;
};

// The grid restricted to `window`, with a first line saying which steps and
// stages are shown when that is not all of them.
std::string PlanGrid(const Plan& plan, const Action* mark, const GridWindow& window);

// The window of +-radius steps and stages around (stage, step), for printing
// one spot of a big plan.
GridWindow GridWindowAround(int stage, int step, int radius);

}  // namespace stateflow::schedule

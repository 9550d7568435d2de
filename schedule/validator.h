// The plan validator: the paper's five precedence rules (schedule/plan.h
// lists them) and deadlock freedom, checked for any P, M, N and any policy,
// with errors that name the rule, stage, step, microbatch and chunk.
//
// Not a scheduler: it never reorders a plan, it only says why one is wrong.
//
//   Status ok = ValidatePlan(plan);  // message(): one line; detail(): the grid
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schedule/plan.h"

namespace stateflow::schedule {

// Ok, or an error naming the broken rule (or missing/duplicate/out-of-range
// action, or deadlock), the stage, step (index in the stage's list),
// microbatch and chunk, in one line (message()), with the per-stage grid and
// the bad step marked as its detail() (printed as lines after it). The
// message alone is complete.
//
// Checked in this order, the first failure reported:
//   1. dimensions >= 1, microbatches * chunks <= kMaxUnitsPerStage, one list
//      per stage;
//   2. every action valid, in range, and in the list of its own stage;
//   3. each F and B of every (r, a, i) exactly once in stage r's list; W for
//      every (r, a, i) once, or for none (all or none over the whole plan);
//   4. same-stage order by position: rules 2, 3, 5 and B < W;
//   5. no deadlock: each stage runs its list in order, the head waiting for
//      its cross-stage dependency (rules 1 and 4, which the executors enforce
//      by waiting). A deadlock is always a pair of neighbouring stages r and
//      r + 1, r waiting for a backward of r + 1 (rule 4) and r + 1 for a
//      forward of r (rule 1); the message names both, the detail's first
//      lines the stages blocked behind them.
// Big plans show only a window of +-8 steps and stages around the bad step.
// Time O(total actions), extra memory 4 bytes per action: P = 64, M = 512,
// N = 128 (8.4 million actions) takes well under a second.
Status ValidatePlan(const Plan& plan);

}  // namespace stateflow::schedule

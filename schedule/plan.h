// A Plan: the order in which each pipeline stage runs its actions. It is the
// only thing either executor (simulator, backend) is told about order
// (ARCHITECTURE.md, invariant 1). A plan is data: it prints to and parses from
// a text form that a user can edit by hand, and ValidatePlan proves that it
// respects the paper's five precedence rules and cannot deadlock.
//
// Precedence rules (paper, "Scheduling Dependencies"), numbered as there:
//   1. F(r-1,a,i) < F(r,a,i)     activation flows to the next stage
//   2. F(r,a,i-1) < F(r,a,i)     boundary state flows to the next chunk
//   3. F(r,a,i)   < B(r,a,i)     backward needs its forward
//   4. B(r+1,a,i) < B(r,a,i)     activation gradient flows back
//   5. B(r,a,i+1) < B(r,a,i)     boundary-state gradient flows back
// and, when W actions are present, B(r,a,i) < W(r,a,i) on the same stage.
//
//   Result<Plan> plan = MakePlan("stateflow", /*P=*/4, /*M=*/2, /*N=*/3);
//   Status ok = ValidatePlan(*plan);
//   std::string text = PlanToText(*plan);  // ParsePlanText(text) gives it back
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schedule/action.h"

namespace stateflow::schedule {

class Plan {
 public:
  Plan() = default;
  Plan(std::string policy, int stages, int microbatches, int chunks,
       std::vector<std::vector<Action>> per_stage)
      : policy_(std::move(policy)),
        stages_(stages),
        microbatches_(microbatches),
        chunks_(chunks),
        per_stage_(std::move(per_stage)) {}

  const std::string& policy() const { return policy_; }
  int stages() const { return stages_; }              // P
  int microbatches() const { return microbatches_; }  // M
  int chunks() const { return chunks_; }              // N
  // The actions of stage r in issue order.
  const std::vector<Action>& stage(int r) const { return per_stage_[r]; }
  const std::vector<std::vector<Action>>& per_stage() const { return per_stage_; }
  std::size_t num_actions() const;

  // Same policy name, dimensions and per-stage lists.
  bool operator==(const Plan&) const = default;

 private:
  std::string policy_;
  int stages_ = 0;
  int microbatches_ = 0;
  int chunks_ = 0;
  std::vector<std::vector<Action>> per_stage_;  // (P) lists
};

// The largest microbatches * chunks a plan may have (so that every stage
// list, up to 3 M N actions with W, is indexable by a 32-bit step).
inline constexpr long long kMaxUnitsPerStage = 715'827'882;  // (2^31 - 1) / 3

// The issue policies, by name:
//   "gpipe":     all forwards in (microbatch, chunk) order, then all
//                backwards, microbatch by microbatch, last chunk first.
//   "1f1b":      conventional 1F1B over whole-sequence microbatches;
//                requires chunks == 1.
//   "stateflow": 1F1B over the M*N chunk units: stage r runs
//                min(M*N, N + P - r - 1) forwards, then alternates one
//                backward and one forward; forwards in (microbatch, chunk)
//                order; backwards per microbatch from the last chunk to the
//                first. With N = 1 it is 1f1b.
// Errors name the field: unknown policy (listing the known ones), stages,
// microbatches or chunks < 1, microbatches * chunks > kMaxUnitsPerStage,
// 1f1b with chunks != 1.
Result<Plan> MakePlan(std::string_view policy, int stages, int microbatches,
                      int chunks);

// The names MakePlan accepts.
const std::vector<std::string>& PolicyNames();

// The number of forwards stage r of the "stateflow" policy runs before its
// first backward: min(M N, N + P - r - 1) (for "1f1b", N = 1: min(M, P - r)).
// REQUIRES: stages, microbatches, chunks >= 1 and 0 <= stage < stages.
int StateflowWarmupForwards(int stages, int microbatches, int chunks, int stage);

// Ok, or an error naming the broken rule (or missing/duplicate/out-of-range
// action, or deadlock), the stage, step (index in the stage's list),
// microbatch and chunk, followed (after the first line) by the per-stage grid
// with the bad step marked. The first line alone is a complete message.
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
//      forward of r (rule 1); the first line names both, later lines the
//      stages blocked behind them.
// Big plans show only a window of +-8 steps and stages around the bad step.
// Time O(total actions), extra memory 4 bytes per action: P = 64, M = 512,
// N = 128 (8.4 million actions) takes well under a second.
Status ValidatePlan(const Plan& plan);

// Text form:
//   # comments and blank lines are ignored
//   plan stateflow stages 4 microbatches 2 chunks 3
//   stage 0: 0F0.0 0F0.1 0F0.2 ...
//   stage 1: ...
// Every stage line lists that stage's actions in order. '#' starts a comment
// anywhere on a line. REQUIRES: the policy name is one token (no whitespace
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

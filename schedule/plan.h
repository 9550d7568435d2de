// A Plan: the order in which each pipeline stage runs its actions. It is the
// only thing either executor (simulator, backend) is told about order
// (ARCHITECTURE.md, invariant 1). A plan is data: the policies make one
// (schedule/policies.h), it prints to and parses from a text form that a user
// can edit by hand (schedule/plan_text.h), and ValidatePlan proves that it
// respects the paper's five precedence rules and cannot deadlock
// (schedule/validator.h). This header is the data alone.
//
// Precedence rules (paper, "Scheduling Dependencies"), numbered as there:
//   1. F(r-1,a,i) < F(r,a,i)     activation flows to the next stage
//   2. F(r,a,i-1) < F(r,a,i)     boundary state flows to the next chunk
//   3. F(r,a,i)   < B(r,a,i)     backward needs its forward
//   4. B(r+1,a,i) < B(r,a,i)     activation gradient flows back
//   5. B(r,a,i+1) < B(r,a,i)     boundary-state gradient flows back
// and, when W actions are present, B(r,a,i) < W(r,a,i) on the same stage.
//
//   Result<Plan> plan = MakePlan("stateflow", /*P=*/4, /*M=*/2, /*N=*/3);  // policies.h
//   for (const Action& a : plan->stage(1)) ...  // stage 1's actions in issue order
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schedule/action.h"

namespace stateflow::schedule {

// Virtual stages (issue 27): a pipeline stage (a rank, one list of the
// plan) may hold v model stages, the model cut into P v consecutive pieces;
// an action's `stage` is then its model stage (0 .. P v - 1), and the
// precedence rules above run over model stages (rule 1: F(s-1,a,i) <
// F(s,a,i), ...). Where the model stages sit:
enum class StagePlacement : std::uint8_t {
  kLoop,    // model stage s on rank s mod P: interleaved (Megatron's virtual pipeline)
  kVShape,  // v = 2, model stage s on rank s for s < P and 2P - 1 - s after (ZBV)
};
// "loop" or "v", and back (nullopt for another word).
std::string_view StagePlacementName(StagePlacement placement);
std::optional<StagePlacement> ParseStagePlacement(std::string_view name);

// The rank holding model stage s of P stages with v model stages each
// placed by `placement` (Plan::RankOf).
inline int RankOfModelStage(int s, int stages, int virtual_stages, StagePlacement placement) {
  if (virtual_stages == 1) return s;
  if (placement == StagePlacement::kVShape) return s < stages ? s : 2 * stages - 1 - s;
  return s % stages;
}

class Plan {
 public:
  Plan() = default;
  Plan(std::string policy, int stages, int microbatches, int chunks,
       std::vector<std::vector<Action>> per_stage, int virtual_stages = 1,
       StagePlacement placement = StagePlacement::kLoop)
      : policy_(std::move(policy)),
        stages_(stages),
        microbatches_(microbatches),
        chunks_(chunks),
        virtual_stages_(virtual_stages),
        placement_(placement),
        per_stage_(std::move(per_stage)),
        splits_backward_(HasWeightPass(per_stage_)) {}

  const std::string& policy() const { return policy_; }
  int stages() const { return stages_; }              // P, the ranks (lists)
  int microbatches() const { return microbatches_; }  // M
  int chunks() const { return chunks_; }              // N
  int virtual_stages() const { return virtual_stages_; }  // v (1: none)
  StagePlacement placement() const { return placement_; }
  int model_stages() const { return stages_ * virtual_stages_; }  // P v
  // The rank holding model stage s, and the k-th model stage of rank r.
  // REQUIRES: 0 <= s < model_stages(), 0 <= r < stages(), 0 <= k < v.
  int RankOf(int s) const { return RankOfModelStage(s, stages_, virtual_stages_, placement_); }
  int ModelStageOf(int r, int k) const {
    if (placement_ == StagePlacement::kVShape && k == 1) return 2 * stages_ - 1 - r;
    return k * stages_ + r;
  }
  // k for model stage s: which of its rank's model stages it is.
  int VirtualIndex(int s) const {
    if (virtual_stages_ == 1) return 0;
    if (placement_ == StagePlacement::kVShape) return s < stages_ ? 0 : 1;
    return s / stages_;
  }
  // The actions of stage (rank) r in issue order.
  const std::vector<Action>& stage(int r) const { return per_stage_[r]; }
  const std::vector<std::vector<Action>>& per_stage() const { return per_stage_; }
  std::size_t num_actions() const;
  // Whether the plan has W actions (SplitsBackward), found once when made.
  bool splits_backward() const { return splits_backward_; }

  // Same policy name, dimensions, placement and per-stage lists.
  bool operator==(const Plan&) const = default;

 private:
  std::string policy_;
  int stages_ = 0;
  int microbatches_ = 0;
  int chunks_ = 0;
  int virtual_stages_ = 1;
  StagePlacement placement_ = StagePlacement::kLoop;
  std::vector<std::vector<Action>> per_stage_;  // (P) lists
  bool splits_backward_ = false;

  static bool HasWeightPass(const std::vector<std::vector<Action>>& per_stage);
};

// Whether the plan splits the backward: it has W actions (a valid plan has
// one for every B or none), each B then the input-gradient pass I.
inline bool SplitsBackward(const Plan& plan) { return plan.splits_backward(); }

// The largest microbatches * chunks a plan may have (so that every stage
// list, up to 3 M N actions with W, is indexable by a 32-bit step).
inline constexpr long long kMaxUnitsPerStage = 715'827'882;  // (2^31 - 1) / 3

}  // namespace stateflow::schedule

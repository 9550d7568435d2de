// ValidatePlan: structure, same-stage precedence by position, and deadlock
// freedom by running the per-stage orders as a dependency-driven loop.
//
// Every action of the plan has a slot in one flat array indexed by
// (r, a, i, pass), holding its step in stage r's list. All checks are a
// constant number of passes over the plan: O(total actions) time and
// 4 bytes of index per action.
#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/validator.h"

namespace stateflow::schedule {
namespace {

constexpr const char* kRule1 = "rule 1: F(r-1,a,i) < F(r,a,i)";
constexpr const char* kRule2 = "rule 2: F(r,a,i-1) < F(r,a,i)";
constexpr const char* kRule3 = "rule 3: F(r,a,i) < B(r,a,i)";
constexpr const char* kRule4 = "rule 4: B(r+1,a,i) < B(r,a,i)";
constexpr const char* kRule5 = "rule 5: B(r,a,i+1) < B(r,a,i)";
constexpr const char* kRuleW = "B(r,a,i) < W(r,a,i)";
constexpr int kGridRadius = 8;          // steps and stages shown around a bad step
constexpr std::size_t kMaxBlockedLines = 16;  // deadlock: blocked stages listed

std::string Where(int stage, long long step) {
  return "stage " + std::to_string(stage) + " step " + std::to_string(step);
}


std::string UnitOf(const Action& x) {
  return "microbatch " + std::to_string(x.microbatch) + ", chunk " + std::to_string(x.chunk);
}

// An action that must come before another, and the rule that says so.
struct Dependency {
  Action action;
  const char* rule;
};

class Validator {
 public:
  explicit Validator(const Plan& plan)
      : plan_(plan),
        stages_(plan.stages()),
        virtual_(plan.virtual_stages()),
        model_stages_(plan.stages() * std::max(1, plan.virtual_stages())),
        microbatches_(plan.microbatches()),
        chunks_(plan.chunks()) {}

  Status Run() {
    SF_RETURN_IF_ERROR(CheckDimensions());
    SF_RETURN_IF_ERROR(CheckActionsInRange());
    SF_RETURN_IF_ERROR(CheckMembership());
    SF_RETURN_IF_ERROR(CheckSameStageOrder());
    return CheckDeadlockFree();
  }

 private:
  long long units() const { return static_cast<long long>(microbatches_) * chunks_; }
  // E: actions per stage (rank): each of its v model stages' units' passes.
  long long per_stage() const { return passes_ * units() * virtual_; }
  int RankOf(int s) const { return plan_.RankOf(s); }

  // Index of (k, a, i, pass) inside one rank's block of slots, k the model
  // stage's index on its rank.
  long long KeyInStage(const Action& x) const {
    return ((static_cast<long long>(plan_.VirtualIndex(x.stage)) * microbatches_ + x.microbatch) *
                chunks_ +
            x.chunk) *
               passes_ +
           static_cast<int>(x.pass);
  }
  Action ActionOfKey(int stage, long long key) const {
    const long long unit = key / passes_;
    const long long k = unit / units();
    return Action{.stage = plan_.ModelStageOf(stage, static_cast<int>(k)),
                  .pass = static_cast<Pass>(key % passes_),
                  .microbatch = static_cast<int>(unit % units() / chunks_),
                  .chunk = static_cast<int>(unit % chunks_)};
  }
  // Step of x in its rank's list. REQUIRES: CheckMembership passed.
  std::int32_t StepOf(const Action& x) const {
    return step_of_[RankOf(x.stage) * per_stage() + KeyInStage(x)];
  }

  // The grid of +-kGridRadius steps and stages around (stage, step), with
  // that step marked, without a final newline.
  std::string GridAround(int stage, long long step) const {
    const Action& mark = plan_.stage(stage)[step];
    std::string grid = PlanGrid(plan_, &mark,
                                GridWindowAround(stage, static_cast<int>(step), kGridRadius));
    if (!grid.empty() && grid.back() == '\n') grid.pop_back();
    return grid;
  }
  // `line` followed by the grid around (stage, step).
  Status Located(const std::string& line, int stage, long long step) const {
    return Status::Invalid(line).WithDetail(GridAround(stage, step));
  }

  Status CheckDimensions();
  Status CheckActionsInRange();
  Status CheckMembership();
  Status CheckStageBySorting(int r);
  Status CheckSameStageOrder();
  Status CheckDeadlockFree();
  // The same-stage dependencies of x (rules 2, 3, 5, B < W) into deps;
  // returns how many (0..2).
  int SameStageDependencies(const Action& x, Dependency deps[2]) const;
  bool CrossStageDependency(const Action& x, Dependency* dep) const;
  Status ReportDeadlock(const std::vector<long long>& head) const;

  const Plan& plan_;
  const int stages_;        // P, the ranks (lists)
  const int virtual_;       // v
  const int model_stages_;  // P v
  const int microbatches_;  // M
  const int chunks_;        // N
  int passes_ = 2;          // 2 (F, B) or 3 (F, B, W)
  std::vector<std::int32_t> step_of_;  // (P, M, N, passes): step in the stage list
};

Status Validator::CheckDimensions() {
  const std::pair<const char*, int> dims[] = {
      {"stages", stages_}, {"microbatches", microbatches_}, {"chunks", chunks_}};
  for (const auto& [name, value] : dims) {
    if (value < 1) {
      return Status::Invalid(std::string("plan ") + name + " must be >= 1, got " +
                             std::to_string(value));
    }
  }
  if (virtual_ < 1) {
    return Status::Invalid("plan virtual_stages must be >= 1, got " + std::to_string(virtual_));
  }
  if (plan_.placement() == StagePlacement::kVShape && virtual_ != 2) {
    return Status::Invalid("plan placement v needs virtual_stages 2, got " +
                           std::to_string(virtual_));
  }
  if (units() * virtual_ > kMaxUnitsPerStage) {
    return Status::Invalid("plan microbatches * chunks = " + std::to_string(units()) +
                           " exceeds the limit " + std::to_string(kMaxUnitsPerStage));
  }
  if (plan_.per_stage().size() != static_cast<std::size_t>(stages_)) {
    return Status::Invalid("plan has " + std::to_string(plan_.per_stage().size()) +
                           " stage lists but stages is " + std::to_string(stages_));
  }
  return Status::Ok();
}

Status Validator::CheckActionsInRange() {
  bool has_weight = false;
  for (int r = 0; r < stages_; ++r) {
    const std::vector<Action>& actions = plan_.stage(r);
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const Action& x = actions[k];
      const bool in_range = static_cast<int>(x.pass) <= static_cast<int>(Pass::kWeight) &&
                            x.stage >= 0 && x.stage < model_stages_ && RankOf(x.stage) == r &&
                            x.microbatch >= 0 && x.microbatch < microbatches_ &&
                            x.chunk >= 0 && x.chunk < chunks_;
      has_weight = has_weight || x.pass == Pass::kWeight;
      if (in_range) continue;
      const std::string at = Where(r, static_cast<long long>(k)) + ": action ";
      if (static_cast<int>(x.pass) > static_cast<int>(Pass::kWeight)) {
        return Status::Invalid(at + "has an invalid pass value " +
                               std::to_string(static_cast<int>(x.pass)));
      }
      if (virtual_ == 1 && x.stage != r) {
        return Located(at + ToString(x) + " names stage " + std::to_string(x.stage) +
                           " but is in the list of stage " + std::to_string(r), r, k);
      }
      if (x.stage < 0 || x.stage >= model_stages_) {
        return Located(at + ToString(x) + " names model stage " + std::to_string(x.stage) +
                           ", outside [0, " + std::to_string(model_stages_) + ")", r, k);
      }
      if (RankOf(x.stage) != r) {
        return Located(at + ToString(x) + " names model stage " + std::to_string(x.stage) +
                           ", which placement " +
                           std::string(StagePlacementName(plan_.placement())) +
                           " puts on stage " + std::to_string(RankOf(x.stage)) +
                           ", but is in the list of stage " + std::to_string(r), r, k);
      }
      if (x.microbatch < 0 || x.microbatch >= microbatches_) {
        return Located(at + ToString(x) + " has microbatch " + std::to_string(x.microbatch) +
                           ", outside [0, " + std::to_string(microbatches_) + ")", r, k);
      }
      if (x.chunk < 0 || x.chunk >= chunks_) {
        return Located(at + ToString(x) + " has chunk " + std::to_string(x.chunk) +
                           ", outside [0, " + std::to_string(chunks_) + ")", r, k);
      }
    }
  }
  passes_ = has_weight ? 3 : 2;
  return Status::Ok();
}

// Every stage must hold each of its E = passes * M * N actions exactly once.
// Stages of exactly E actions are checked through the flat index (a repeat
// is a duplicate; with the count exact, no repeat means none missing); the
// others by sorting, which costs only their own length even when M * N is
// huge (a typo in a plan file's header).
Status Validator::CheckMembership() {
  const long long expected = per_stage();
  bool all_exact = true;
  for (int r = 0; r < stages_; ++r) {
    all_exact = all_exact && static_cast<long long>(plan_.stage(r).size()) == expected;
  }
  std::vector<std::int32_t> scratch;
  if (all_exact) step_of_.assign(static_cast<std::size_t>(stages_ * expected), -1);
  for (int r = 0; r < stages_; ++r) {
    const std::vector<Action>& actions = plan_.stage(r);
    if (static_cast<long long>(actions.size()) != expected) {
      SF_RETURN_IF_ERROR(CheckStageBySorting(r));
      continue;
    }
    std::int32_t* steps = all_exact ? step_of_.data() + r * expected : nullptr;
    if (!all_exact) {
      scratch.assign(static_cast<std::size_t>(expected), -1);
      steps = scratch.data();
    }
    for (std::size_t k = 0; k < actions.size(); ++k) {
      std::int32_t& slot = steps[KeyInStage(actions[k])];
      if (slot >= 0) {
        return Located(Where(r, static_cast<long long>(k)) + ": duplicate action " +
                           ToString(actions[k]) + " (first at step " + std::to_string(slot) + ")",
                       r, k);
      }
      slot = static_cast<std::int32_t>(k);
    }
  }
  if (!all_exact) {
    return Status::Internal("plan validator: a stage of the wrong length passed the sort check");
  }
  return Status::Ok();
}

// For a stage whose length is not E: report its earliest repeated action (by
// the step of the repeat), or else its first missing action.
Status Validator::CheckStageBySorting(int r) {
  const std::vector<Action>& actions = plan_.stage(r);
  std::vector<std::pair<long long, std::int32_t>> keyed;  // (key, step)
  keyed.reserve(actions.size());
  for (std::size_t k = 0; k < actions.size(); ++k) {
    keyed.emplace_back(KeyInStage(actions[k]), static_cast<std::int32_t>(k));
  }
  std::sort(keyed.begin(), keyed.end());
  // Among equal keys the first of the sorted pair is the first occurrence;
  // report the repeat that comes earliest in the list.
  long long repeat_step = -1;
  long long first_step = -1;
  for (std::size_t j = 1; j < keyed.size(); ++j) {
    if (keyed[j].first != keyed[j - 1].first) continue;
    if (repeat_step < 0 || keyed[j].second < repeat_step) {
      repeat_step = keyed[j].second;
      std::size_t first = j - 1;
      while (first > 0 && keyed[first - 1].first == keyed[j].first) --first;
      first_step = keyed[first].second;
    }
  }
  if (repeat_step >= 0) {
    return Located(Where(r, repeat_step) + ": duplicate action " +
                       ToString(actions[repeat_step]) + " (first at step " +
                       std::to_string(first_step) + ")",
                   r, repeat_step);
  }
  long long missing = 0;  // keys are distinct and sorted: the first gap
  while (missing < static_cast<long long>(keyed.size()) && keyed[missing].first == missing) {
    ++missing;
  }
  if (missing >= per_stage()) {
    return Status::Internal("plan validator: stage " + std::to_string(r) +
                            " has distinct in-range actions but the wrong count");
  }
  const Action x = ActionOfKey(r, missing);
  std::string why = virtual_ > 1 ? " (each microbatch and chunk needs one F and one B on every "
                                   "model stage"
                                 : " (each microbatch and chunk needs one F and one B on every stage";
  why += passes_ == 3 ? ", and one W since the plan has W actions)" : ")";
  return Status::Invalid("stage " + std::to_string(r) + ": missing action " + ToString(x) +
                         " (" + UnitOf(x) + ")" + why);
}

int Validator::SameStageDependencies(const Action& x, Dependency deps[2]) const {
  Action before = x;
  switch (x.pass) {
    case Pass::kForward:
      if (x.chunk == 0) return 0;
      before.chunk = x.chunk - 1;
      deps[0] = {before, kRule2};
      return 1;
    case Pass::kBackward: {
      before.pass = Pass::kForward;
      deps[0] = {before, kRule3};
      if (x.chunk + 1 == chunks_) return 1;
      Action next = x;
      next.chunk = x.chunk + 1;
      deps[1] = {next, kRule5};
      return 2;
    }
    case Pass::kWeight:
      before.pass = Pass::kBackward;
      deps[0] = {before, kRuleW};
      return 1;
  }
  return 0;
}

Status Validator::CheckSameStageOrder() {
  for (int r = 0; r < stages_; ++r) {
    const std::vector<Action>& actions = plan_.stage(r);
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const Action& x = actions[k];
      Dependency deps[3];
      int num_deps = SameStageDependencies(x, deps);
      // With virtual stages the action sending x its input may sit on x's
      // own rank: then it must come first by position too.
      if (const std::optional<int> from = InputFrom(x, model_stages_);
          from && RankOf(*from) == r) {
        deps[num_deps] = {x, x.pass == Pass::kForward ? kRule1 : kRule4};
        deps[num_deps].action.stage = *from;
        ++num_deps;
      }
      for (int j = 0; j < num_deps; ++j) {
        const Dependency& dep = deps[j];
        const std::int32_t dep_step = StepOf(dep.action);
        if (dep_step < static_cast<std::int32_t>(k)) continue;
        return Located(Where(r, static_cast<long long>(k)) + ": " + ToString(x) +
                           " runs before " + ToString(dep.action) + " (step " +
                           std::to_string(dep_step) + "), breaking " + dep.rule + " (" +
                           UnitOf(x) + ")",
                       r, k);
      }
    }
  }
  return Status::Ok();
}

// The dependency of x on another stage, if any (rules 1 and 4).
// The action that sends x its input (InputFrom) runs the same pass, microbatch and chunk.
bool Validator::CrossStageDependency(const Action& x, Dependency* dep) const {
  const std::optional<int> from = InputFrom(x, model_stages_);
  if (!from || RankOf(*from) == RankOf(x.stage)) return false;  // same rank: by position
  *dep = {x, x.pass == Pass::kForward ? kRule1 : kRule4};
  dep->action.stage = *from;
  return true;
}

// Each stage runs its list in order; the head of a list runs once its
// cross-stage dependency has run (same-stage ones have, by position). A stage
// is revisited only when a neighbour finishes an action it may be waiting
// for, so the loop is O(total actions).
Status Validator::CheckDeadlockFree() {
  std::vector<long long> head(stages_, 0);  // (P) steps run so far
  std::vector<char> queued(stages_, 1);
  std::vector<int> work(stages_);
  for (int r = 0; r < stages_; ++r) work[r] = stages_ - 1 - r;  // stage 0 first
  auto wake = [&](int s) {
    if (s >= 0 && s < stages_ && !queued[s]) {
      queued[s] = 1;
      work.push_back(s);
    }
  };
  while (!work.empty()) {
    const int r = work.back();
    work.pop_back();
    queued[r] = 0;
    const std::vector<Action>& actions = plan_.stage(r);
    while (head[r] < static_cast<long long>(actions.size())) {
      const Action& x = actions[head[r]];
      Dependency dep;
      if (CrossStageDependency(x, &dep) && StepOf(dep.action) >= head[RankOf(dep.action.stage)]) {
        break;
      }
      ++head[r];
      if (const std::optional<int> to = OutputTo(x, model_stages_)) wake(RankOf(*to));
    }
  }
  for (int r = 0; r < stages_; ++r) {
    if (head[r] < static_cast<long long>(plan_.stage(r).size())) return ReportDeadlock(head);
  }
  return Status::Ok();
}

// Every blocked head waits on a neighbouring stage (rule 1 looks at r - 1,
// rule 4 at r + 1), so following the waits from any blocked stage ends in a
// pair r, r + 1 that wait on each other: r for a backward of r + 1 (rule 4),
// r + 1 for a forward of r (rule 1). The first line names that pair; the
// other blocked stages wait behind it.
Status Validator::ReportDeadlock(const std::vector<long long>& head) const {
  auto blocked = [&](int r) { return head[r] < static_cast<long long>(plan_.stage(r).size()); };
  auto waited_stage = [&](int r) {
    Dependency dep;
    const bool has_dep = CrossStageDependency(plan_.stage(r)[head[r]], &dep);
    assert(has_dep && "a blocked head must wait on another stage");
    (void)has_dep;
    return RankOf(dep.action.stage);
  };
  auto waits = [&](int r) {
    const Action& x = plan_.stage(r)[head[r]];
    Dependency dep;
    CrossStageDependency(x, &dep);
    return Where(r, head[r]) + " waits for " + ToString(dep.action) + " (" + dep.rule +
           ") before running " + ToString(x) + " (" + UnitOf(x) + ")";
  };
  int first = 0;
  while (!blocked(first)) ++first;
  std::vector<char> seen(stages_, 0);
  while (!seen[first]) {
    seen[first] = 1;
    first = waited_stage(first);
  }
  const int second = waited_stage(first);
  const int low = std::min(first, second), high = std::max(first, second);
  std::string message = "deadlock: " + waits(low) + ", but " + waits(high);
  if (waited_stage(second) != first) {
    // A longer cycle (virtual stages: the last rank waits on the first):
    // name every stage of it, in the order they wait.
    std::vector<int> cycle = {first};
    for (int r = second; r != first; r = waited_stage(r)) cycle.push_back(r);
    message = "deadlock: a cycle of " + std::to_string(cycle.size()) + " stages: ";
    for (std::size_t j = 0; j < cycle.size(); ++j) {
      if (j > 0) message += "; ";
      message += waits(cycle[j]);
    }
  }
  std::string detail;
  std::vector<int> others;
  for (int r = 0; r < stages_; ++r) {
    if (blocked(r) && r != low && r != high) others.push_back(r);
  }
  // (Appending piece by piece: GCC 12 warns falsely on "literal" + string&&.)
  auto add_line = [&detail](const std::string& line) {
    if (!detail.empty()) detail += '\n';
    detail += line;
  };
  if (!others.empty()) {
    add_line(std::to_string(others.size()) + " more stages blocked behind them:");
  }
  for (std::size_t j = 0; j < others.size() && j < kMaxBlockedLines; ++j) {
    add_line("  " + waits(others[j]));
  }
  if (others.size() > kMaxBlockedLines) {
    add_line("  ... and " + std::to_string(others.size() - kMaxBlockedLines) + " more");
  }
  add_line(GridAround(low, head[low]));
  if (std::abs(head[high] - head[low]) > kGridRadius) {  // partner off that window
    add_line(GridAround(high, head[high]));
  }
  return Status::Invalid(message).WithDetail(detail);
}

}  // namespace

Status ValidatePlan(const Plan& plan) { return Validator(plan).Run(); }

}  // namespace stateflow::schedule

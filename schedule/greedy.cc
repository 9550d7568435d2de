// The greedy executor: per-stage lists from a policy function, played
// forward in time with fixed pass durations (greedy.h).
#include "schedule/greedy.h"

#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>

#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/validator.h"

namespace stateflow::schedule {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
// P M N units tracked (two finish times each): 2^26 is 1 GiB of times.
constexpr std::int64_t kMaxGreedyUnits = std::int64_t{1} << 26;
constexpr int kMaxGreedyVirtualStages = 64;

std::string Join(const std::vector<Action>& actions, std::size_t at_most = 8) {
  std::string out;
  for (std::size_t k = 0; k < actions.size() && k < at_most; ++k) {
    if (k > 0) out += ' ';
    out += ToString(actions[k]);
  }
  if (actions.size() > at_most) out += " ... (" + std::to_string(actions.size()) + " in all)";
  return out;
}

class Executor {
 public:
  // `layout`: a plan with no actions that says where model stages sit.
  Executor(const Plan& layout)
      : layout_(layout),
        S_(layout.model_stages()),
        M_(layout.microbatches()),
        N_(layout.chunks()),
        fin_f_(static_cast<std::size_t>(S_) * M_ * N_, kNever),
        fin_b_(fin_f_.size(), kNever),
        next_f_(static_cast<std::size_t>(S_) * M_, 0),
        next_b_(next_f_.size(), N_ - 1),
        pending_w_(static_cast<std::size_t>(layout.stages())),
        lists_(static_cast<std::size_t>(layout.stages())) {}

  // Stage r's ready actions at time `now`: backwards, then forwards, each
  // over r's model stages from the last in the layer order to the first,
  // each by (microbatch, chunk); then the W actions of its backwards in their
  // order. (A stage is idle at `now`, so whatever it issued has finished.)
  void Ready(int r, double now, std::vector<Action>* ready) const {
    ready->clear();
    const int v = layout_.virtual_stages();
    for (int k = v - 1; k >= 0; --k) {
      const int s = layout_.ModelStageOf(r, k);
      for (int a = 0; a < M_; ++a) {
        const int j = next_b_[Su(s, a)];
        // Rule 3 (its forward ran), rule 5 by next_b_'s order, rule 4 from
        // the next model stage.
        if (j >= 0 && next_f_[Su(s, a)] > j && (s + 1 == S_ || fin_b_[U(s + 1, a, j)] <= now)) {
          ready->push_back({.stage = s, .pass = Pass::kBackward, .microbatch = a, .chunk = j});
        }
      }
    }
    for (int k = v - 1; k >= 0; --k) {
      const int s = layout_.ModelStageOf(r, k);
      for (int a = 0; a < M_; ++a) {
        const int i = next_f_[Su(s, a)];
        // Rule 2 by next_f_'s order, rule 1 from the previous model stage.
        if (i < N_ && (s == 0 || fin_f_[U(s - 1, a, i)] <= now)) {
          ready->push_back({.stage = s, .pass = Pass::kForward, .microbatch = a, .chunk = i});
        }
      }
    }
    for (const Action& w : pending_w_[static_cast<std::size_t>(r)]) ready->push_back(w);
  }

  // `split`: a backward leaves its W to be issued later.
  void Issue(const Action& x, double finish, bool split) {
    const auto r = static_cast<std::size_t>(layout_.RankOf(x.stage));
    lists_[r].push_back(x);
    std::deque<Action>& pending = pending_w_[r];
    switch (x.pass) {
      case Pass::kForward:
        fin_f_[U(x.stage, x.microbatch, x.chunk)] = finish;
        ++next_f_[Su(x.stage, x.microbatch)];
        break;
      case Pass::kBackward:
        fin_b_[U(x.stage, x.microbatch, x.chunk)] = finish;
        --next_b_[Su(x.stage, x.microbatch)];
        if (split) pending.push_back({x.stage, Pass::kWeight, x.microbatch, x.chunk});
        break;
      case Pass::kWeight:
        for (auto it = pending.begin(); it != pending.end(); ++it) {
          if (*it == x) {
            pending.erase(it);
            break;
          }
        }
        break;
    }
  }

  int Step(int r) const { return static_cast<int>(lists_[static_cast<std::size_t>(r)].size()); }
  std::vector<std::vector<Action>> TakeLists() { return std::move(lists_); }

 private:
  std::size_t Su(int s, int a) const { return static_cast<std::size_t>(s) * M_ + a; }
  std::size_t U(int s, int a, int i) const { return Su(s, a) * N_ + i; }

  const Plan& layout_;
  int S_, M_, N_;                      // model stages, microbatches, chunks
  std::vector<double> fin_f_, fin_b_;  // (S, M, N) finish times, kNever until issued
  std::vector<int> next_f_;            // (S, M) the next chunk to forward
  std::vector<int> next_b_;            // (S, M) the next chunk to backward, N-1 down to -1
  std::vector<std::deque<Action>> pending_w_;  // (P) W actions not yet issued, in B order
  std::vector<std::vector<Action>> lists_;     // (P)
};

}  // namespace

Result<Plan> PlanFromPolicy(int stages, int microbatches, int chunks, const ChoosePolicy& choose,
                            const GreedyOptions& options) {
  SF_RETURN_IF_ERROR(CheckPlanDimensions(stages, microbatches, chunks));
  const int v = options.virtual_stages;
  if (v < 1 || v > kMaxGreedyVirtualStages) {
    return Status::Invalid("virtual_stages must be in [1, " +
                           std::to_string(kMaxGreedyVirtualStages) + "], got " + std::to_string(v));
  }
  if (options.placement == StagePlacement::kVShape && v != 2) {
    return Status::Invalid("placement v needs virtual_stages 2, got " + std::to_string(v));
  }
  const std::int64_t units = std::int64_t{stages} * v * microbatches * chunks;
  if (units > kMaxGreedyUnits || std::int64_t{microbatches} * chunks * v > kMaxUnitsPerStage) {
    return Status::Invalid("stages * virtual_stages * microbatches * chunks = " +
                           std::to_string(units) +
                           " exceeds the greedy executor's limit " +
                           std::to_string(kMaxGreedyUnits));
  }
  const auto check_time = [](const char* field, double t) -> Status {
    if (!(t > 0) || !std::isfinite(t)) {
      return Status::Invalid(std::string(field) + " must be a finite number > 0, got " +
                             std::to_string(t));
    }
    return Status::Ok();
  };
  SF_RETURN_IF_ERROR(check_time("forward_time", options.forward_time));
  SF_RETURN_IF_ERROR(check_time("backward_time", options.backward_time));
  if (options.split_backward) SF_RETURN_IF_ERROR(check_time("weight_time", options.weight_time));
  const std::string& name = options.policy_name;
  if (name.empty() || name.find_first_of(" \t\r\n#") != std::string::npos) {
    return Status::Invalid("policy name '" + name +
                           "' must be one token (no whitespace or '#')");
  }
  if (!choose) return Status::Invalid("no policy function given");

  const Plan layout(name, stages, microbatches, chunks, {}, v, options.placement);
  Executor ex(layout);
  std::vector<double> busy_until(static_cast<std::size_t>(stages), 0);
  std::int64_t left = (options.split_backward ? 3 : 2) * units;
  std::vector<Action> ready;
  double now = 0;
  std::string waited;  // "stage r at step k waited with ready: ..." of this round
  while (left > 0) {
    waited.clear();
    for (int r = 0; r < stages; ++r) {
      if (busy_until[static_cast<std::size_t>(r)] > now) continue;
      ex.Ready(r, now, &ready);
      if (ready.empty()) continue;
      const int step = ex.Step(r);
      Result<std::optional<Action>> chosen = choose(r, step, ready);
      const std::string where = "stage " + std::to_string(r) + " at step " + std::to_string(step);
      if (!chosen.ok()) return chosen.status().WithPrefix("policy on " + where);
      if (!chosen->has_value()) {
        if (waited.empty()) waited = where + " waited with ready: " + Join(ready);
        continue;
      }
      const Action& x = **chosen;
      bool found = false;
      for (const Action& a : ready) found = found || a == x;
      if (!found) {
        return Status::Invalid("policy chose " + ToString(x) + " on " + where +
                               ", which is not ready there (ready: " + Join(ready) + ")");
      }
      const double t = x.pass == Pass::kForward    ? options.forward_time
                       : x.pass == Pass::kBackward ? options.backward_time
                                                   : options.weight_time;
      busy_until[static_cast<std::size_t>(r)] = now + t;
      ex.Issue(x, now + t, options.split_backward);
      --left;
    }
    double next = kNever;
    for (double b : busy_until) {
      if (b > now && b < next) next = b;
    }
    if (next == kNever) {
      if (left == 0) break;
      return Status::Invalid("policy deadlocks: every stage is idle and waits, " +
                             std::to_string(left) + " actions left; " +
                             (waited.empty() ? std::string("no stage has a ready action")
                                             : waited));
    }
    now = next;
  }
  Plan plan(name, stages, microbatches, chunks, ex.TakeLists(), v, options.placement);
  // Valid by construction; checked again so that a defect here cannot
  // reach an executor.
  if (Status s = ValidatePlan(plan); !s.ok()) {
    return Status::Internal("the greedy executor made an invalid plan: " + s.message());
  }
  return plan;
}

}  // namespace stateflow::schedule

#include "sim/engine.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace stateflow::sim {
namespace {

using schedule::Action;
using schedule::Pass;

// arrival_s_ of an input that has not arrived (arrival times are >= 0).
constexpr double kNotArrived = -1.0;

// The plan evaluated as a dataflow (see engine.h for why that is exact):
// each stage runs its actions in order for as long as their inputs have
// arrived; a stage that sends to another puts that one on the list of stages
// to run again. Every action is handled once, in its stage's order.
class Engine {
 public:
  Engine(const schedule::Plan& plan, const CostSource& costs, const EngineOptions& options)
      : plan_(plan),
        costs_(costs),
        options_(options),
        stages_(plan.stages()),
        model_stages_(plan.model_stages()),
        arrival_s_(static_cast<std::size_t>(plan.model_stages()) * plan.microbatches() *
                       plan.chunks() * 2,
                   kNotArrived),
        next_(stages_, 0),
        free_s_(stages_, 0.0),
        pending_(stages_, 1),
        live_(stages_),
        link_free_s_(static_cast<std::size_t>(stages_) * 2, 0.0) {
    result_.stages.resize(stages_);
    for (int r = 0; r < stages_; ++r) {
      live_[r] = costs_.StaticBytes(plan_.ModelStageOf(r, 0));
      for (int k = 1; k < plan_.virtual_stages(); ++k) {
        const ClassBytes more = costs_.StaticBytes(plan_.ModelStageOf(r, k));
        for (int c = 0; c < kNumBufferClasses; ++c) live_[r][c] += more[c];
      }
      NoteMemory(r, 0.0);
    }
  }

  Result<EngineResult> Run() {
    // Stages to run, popped from the back: 0, 1, ... first.
    std::vector<int> ready;
    ready.reserve(static_cast<std::size_t>(stages_));
    for (int r = stages_ - 1; r >= 0; --r) ready.push_back(r);
    while (!ready.empty() && error_.ok()) {
      const int r = ready.back();
      ready.pop_back();
      pending_[r] = 0;
      Advance(r, &ready);
    }
    if (!error_.ok()) return error_;
    for (int r = 0; r < stages_; ++r) {
      if (next_[r] < plan_.stage(r).size()) {
        return Status::Internal("simulator stuck: stage " + std::to_string(r) +
                                " waits forever at step " + std::to_string(next_[r]) +
                                " (" + schedule::ToString(plan_.stage(r)[next_[r]]) +
                                "); was the plan validated?");
      }
      StageResult& stage = result_.stages[r];
      const std::optional<double> exposed =
          has_final_[r] && plan_.virtual_stages() == 1
              ? costs_.ExposedGradientSync(r, final_action_[r], final_start_s_[r], stage.end_s)
              : std::nullopt;
      stage.sync_s = exposed ? *exposed : costs_.GradientSyncTime(plan_.ModelStageOf(r, 0));
      stage.optimizer_s = costs_.OptimizerTime(plan_.ModelStageOf(r, 0));
      for (int k = 1; k < plan_.virtual_stages(); ++k) {  // its other model stages'
        stage.sync_s += costs_.GradientSyncTime(plan_.ModelStageOf(r, k));
        stage.optimizer_s += costs_.OptimizerTime(plan_.ModelStageOf(r, k));
      }
      result_.step_time_s =
          std::max(result_.step_time_s, stage.end_s + stage.sync_s + stage.optimizer_s);
      // Each time is finite, their sum may not be (absurd but finite inputs).
      if (!std::isfinite(result_.step_time_s) || !std::isfinite(stage.peak_bytes)) {
        return Status::Invalid("stage " + std::to_string(r) +
                               ": the step time or peak memory overflows a double (the "
                               "scenario's sizes, rates or costs are out of any sane range)");
      }
    }
    return std::move(result_);
  }

 private:
  // Index of "the input of action (s, a, i, F|B)", s its model stage.
  std::size_t InputKey(int stage, Pass pass, int microbatch, int chunk) const {
    const std::size_t per_stage =
        static_cast<std::size_t>(plan_.microbatches()) * plan_.chunks();
    return ((static_cast<std::size_t>(stage) * per_stage +
             static_cast<std::size_t>(microbatch) * plan_.chunks() + chunk) << 1) |
           (pass == Pass::kBackward ? 1u : 0u);
  }

  // Runs stage r's actions from next_[r] until one waits for an input that
  // has not arrived (or the stage is done). An action starts when the stage
  // is free and its input is there: the later of the two times, which is the
  // time of the event that would start it in an event simulation.
  void Advance(int r, std::vector<int>* ready) {
    const std::vector<Action>& actions = plan_.stage(r);
    StageResult& out = result_.stages[r];
    std::size_t next = next_[r];
    double now = free_s_[r];
    for (; next < actions.size(); ++next) {
      const Action& a = actions[next];
      if (schedule::InputFrom(a, model_stages_)) {
        const double arrival = arrival_s_[InputKey(a.stage, a.pass, a.microbatch, a.chunk)];
        if (arrival == kNotArrived) break;
        now = std::max(now, arrival);
      }
      const double duration = DurationOf(a);
      if (!CheckTime(duration, "duration", a)) break;
      const MemoryEffect& effect = MemoryOf(a);
      if (a.pass != Pass::kForward) {
        final_action_[r] = a;
        final_start_s_[r] = now;
        has_final_[r] = 1;
      }
      Apply(r, effect.at_start, now);
      const double end = now + duration;
      out.busy_s += duration;
      if (options_.record_timeline) out.slices.push_back({a, now, end});
      // The action's end: its frees, then its output leaves.
      Apply(r, effect.at_end, end);
      ++result_.num_events;
      now = end;
      out.end_s = end;
      if (const std::optional<int> to = schedule::OutputTo(a, model_stages_)) {
        const std::size_t key = InputKey(*to, a.pass, a.microbatch, a.chunk);
        const int to_rank = plan_.RankOf(*to);
        if (to_rank == r) {  // the next model stage on this stage: no link
          arrival_s_[key] = end;
          continue;
        }
        if (!Send(a, to_rank, key, end)) break;
        ++result_.num_events;  // the arrival
        // A stage off the list waits for its next action's input: run it
        // again only if this is that input.
        if (!pending_[to_rank] && WaitsFor(to_rank, key)) {
          pending_[to_rank] = 1;
          ready->push_back(to_rank);
        }
      }
    }
    next_[r] = next;
    free_s_[r] = now;
  }

  // The cost source's answers, from its tables when it has them (the same
  // numbers: CostSource::Tables).
  std::size_t TableKey(const Action& a) const {
    return static_cast<std::size_t>(a.stage) * static_cast<std::size_t>(tables_->chunks) +
           static_cast<std::size_t>(a.chunk);
  }
  double DurationOf(const Action& a) const {
    if (tables_ == nullptr) return costs_.Duration(a);
    switch (a.pass) {
      case Pass::kForward: return tables_->forward_s[TableKey(a)];
      case Pass::kBackward: return tables_->backward_s[TableKey(a)];
      case Pass::kWeight: return tables_->weight_s[TableKey(a)];
    }
    return 0.0;
  }
  const MemoryEffect& MemoryOf(const Action& a) const {
    if (tables_ == nullptr) return costs_.Memory(a);
    switch (a.pass) {
      case Pass::kForward: return tables_->forward_memory[TableKey(a)];
      case Pass::kBackward: return tables_->backward_memory[TableKey(a)];
      case Pass::kWeight: return tables_->weight_memory[TableKey(a)];
    }
    return kNothing;
  }

  // Whether stage r's next action is there and waits for the input `key`.
  bool WaitsFor(int r, std::size_t key) const {
    if (next_[r] >= plan_.stage(r).size()) return false;
    const Action& a = plan_.stage(r)[next_[r]];
    return schedule::InputFrom(a, model_stages_) &&
           InputKey(a.stage, a.pass, a.microbatch, a.chunk) == key;
  }

  // Directed link r -> r + 1 (mod P) is 2r, any other r -> q (r - 1, or
  // r + 1 at P = 2 going back) 2r + 1: a stage sends to its two neighbours
  // only (with virtual stages in a loop, stage P - 1 to stage 0).
  std::size_t LinkIndex(int from, int to) const {
    return static_cast<std::size_t>(2 * from + (to == (from + 1) % stages_ ? 0 : 1));
  }

  // Sends `a`'s output to stage `to` (its input `key` there) over the
  // directed link between them, whose only sender is a's stage (so its FIFO
  // order is that stage's plan order). False on a bad time (error_ set).
  bool Send(const Action& a, int to, std::size_t key, double now) {
    const std::size_t link = LinkIndex(plan_.RankOf(a.stage), to);
    const double start = std::max(now, link_free_s_[link]);
    double occupancy, latency;
    if (tables_ != nullptr) {
      occupancy = tables_->transfer_occupancy_s[TableKey(a)];
      latency = tables_->transfer_latency_s[TableKey(a)];
    } else {
      occupancy = costs_.TransferOccupancy(a);
      latency = costs_.TransferLatency(a);
    }
    if (!CheckTime(occupancy, "transfer occupancy", a) ||
        !CheckTime(latency, "transfer latency", a)) {
      return false;
    }
    link_free_s_[link] = start + occupancy;
    arrival_s_[key] = start + latency;
    return true;
  }

  // Adds `delta` to stage r's live bytes, every class without a branch:
  // adding a zero leaves a class as it was (live bytes are never -0). The
  // total is summed again only if some class grew (or for the timeline, on
  // any change): when none grew, every class is at most what it was, and so
  // is their sum (rounding is monotonic), so the peak cannot have been passed.
  void Apply(int r, const MemoryDelta& delta, double now) {
    if (!delta.changes()) return;
    ClassBytes& live = live_[r];
    for (int c = 0; c < kNumBufferClasses; ++c) live[c] += delta.bytes()[c];
    if (delta.grows() || options_.record_timeline) NoteMemory(r, now);
  }

  void NoteMemory(int r, double now) {
    double total = 0.0;
    for (double b : live_[r]) total += b;
    StageResult& s = result_.stages[r];
    if (total > s.peak_bytes) {
      s.peak_bytes = total;
      s.peak_time_s = now;
      s.peak_by_class = live_[r];
    }
    if (options_.record_timeline) s.memory.push_back({now, live_[r]});
  }

  // Time never goes backwards: a cost source's negative or non-finite time
  // (a bad cost table, an overflow) stops the run with an error naming the
  // action, in every build, instead of a silently wrong step time.
  bool CheckTime(double seconds, const char* what, const Action& a) {
    if (std::isfinite(seconds) && seconds >= 0.0) [[likely]] return true;
    BadTime(seconds, what, a);
    return false;
  }
  [[gnu::noinline, gnu::cold]] void BadTime(double seconds, const char* what, const Action& a) {
    if (error_.ok()) {
      error_ = Status::Invalid("cost source " + costs_.name() + " gives action " +
                               schedule::ToString(a) + " a " + what + " of " +
                               std::to_string(seconds) + " (must be finite and >= 0)");
    }
  }

  const schedule::Plan& plan_;
  const CostSource& costs_;
  const CostSource::ChunkTables* const tables_ = costs_.Tables();  // may be null
  static constexpr MemoryEffect kNothing{};  // a W action's
  const EngineOptions options_;
  const int stages_;        // P, the ranks
  const int model_stages_;  // P v
  std::vector<double> arrival_s_;     // (P v * M * N * 2) when each input arrives
  std::vector<std::size_t> next_;     // (P) index of the next action
  std::vector<double> free_s_;        // (P) when the stage's last action ended
  std::vector<char> pending_;         // (P) on the list of stages to run
  std::vector<ClassBytes> live_;      // (P)
  std::vector<double> link_free_s_;   // (2P) directed links
  // (P) the last B or W started so far and when: the action after which the
  // stage's gradients are final, once the stage is done.
  std::vector<schedule::Action> final_action_ = std::vector<schedule::Action>(stages_);
  std::vector<double> final_start_s_ = std::vector<double>(stages_, 0.0);
  std::vector<char> has_final_ = std::vector<char>(stages_, 0);
  EngineResult result_;
  Status error_;  // the first bad time a cost source gave
};

}  // namespace

Result<EngineResult> RunPlan(const schedule::Plan& plan, const CostSource& costs,
                             const EngineOptions& options) {
  Engine engine(plan, costs, options);
  return engine.Run();
}

}  // namespace stateflow::sim

// The reference engine: the same semantics as RunPlan (sim/engine.h)
// written as a discrete-event simulation with a global event queue ordered
// by (time, sequence number). Tests check RunPlan against it bit for bit;
// bench_sim times both.
#include "sim/engine.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stateflow::sim {
namespace {

using schedule::Action;
using schedule::Pass;

struct Event {
  enum Kind : std::uint8_t { kActionEnd, kArrival };
  double time_s;
  std::uint64_t seq;
  Kind kind;
  int stage;        // the stage the event happens on
  std::size_t key;  // kArrival: InputKey of the action whose input arrived

  // Min-heap on (time, seq).
  bool operator>(const Event& other) const {
    if (time_s != other.time_s) return time_s > other.time_s;
    return seq > other.seq;
  }
};

// A binary min-heap of events on (time, seq). Besides push and pop it
// replaces its top in one pass: the engine pops an event and usually pushes
// one while handling it, and doing both at once saves a sift. Since no two
// events have the same (time, seq), the order of pops does not depend on how
// the heap is kept.
class EventQueue {
 public:
  bool empty() const { return heap_.empty(); }
  const Event& top() const { return heap_.front(); }
  void Push(const Event& e) {
    heap_.push_back(e);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Event>());
  }
  void Pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Event>());
    heap_.pop_back();
  }
  // Pop() then Push(e), in one sift down from the root.
  void ReplaceTop(const Event& e) {
    const std::size_t n = heap_.size();
    std::size_t hole = 0;
    while (true) {
      std::size_t child = 2 * hole + 1;
      if (child >= n) break;
      if (child + 1 < n && heap_[child] > heap_[child + 1]) ++child;
      if (!(e > heap_[child])) break;
      heap_[hole] = heap_[child];
      hole = child;
    }
    heap_[hole] = e;
  }

 private:
  std::vector<Event> heap_;
};

class EventEngine {
 public:
  EventEngine(const schedule::Plan& plan, const CostSource& costs,
         const EngineOptions& options)
      : plan_(plan),
        costs_(costs),
        options_(options),
        stages_(plan.stages()),
        model_stages_(plan.model_stages()),
        arrived_(static_cast<std::size_t>(plan.model_stages()) * plan.microbatches() *
                     plan.chunks() * 2,
                 0),
        next_(stages_, 0),
        busy_until_(stages_, -1.0),
        running_end_(stages_, nullptr),
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
    for (int r = 0; r < stages_; ++r) TryStart(r, 0.0);
    double now = 0.0;
    while (!queue_.empty() && error_.ok()) {
      const Event event = queue_.top();
      top_popped_ = false;  // the first Push while handling it replaces it
      assert(event.time_s >= now && "simulated time went backwards");
      now = event.time_s;
      ++result_.num_events;
      if (event.kind == Event::kActionEnd) {
        FinishAction(event.stage, now);
      } else {
        arrived_[event.key] = 1;
      }
      TryStart(event.stage, now);
      if (!top_popped_) queue_.Pop();
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
      for (int k = 1; k < plan_.virtual_stages(); ++k) {
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
  // Index of "the input of action (r, a, i, F|B) has arrived".
  std::size_t InputKey(int stage, Pass pass, int microbatch, int chunk) const {
    const std::size_t per_stage =
        static_cast<std::size_t>(plan_.microbatches()) * plan_.chunks();
    return ((static_cast<std::size_t>(stage) * per_stage +
             static_cast<std::size_t>(microbatch) * plan_.chunks() + chunk) << 1) |
           (pass == Pass::kBackward ? 1u : 0u);
  }

  bool InputReady(const Action& a) const {
    if (!schedule::InputFrom(a, model_stages_)) return true;  // no input crosses stages
    return arrived_[InputKey(a.stage, a.pass, a.microbatch, a.chunk)] != 0;
  }

  void TryStart(int r, double now) {
    if (busy_until_[r] >= 0.0) return;  // running
    if (next_[r] >= plan_.stage(r).size()) return;
    const Action& a = plan_.stage(r)[next_[r]];
    if (!InputReady(a)) return;
    const double duration = costs_.Duration(a);
    if (!CheckTime(duration, "duration", a)) return;
    const MemoryEffect& effect = costs_.Memory(a);
    if (a.pass != Pass::kForward) {
      final_action_[r] = a;
      final_start_s_[r] = now;
      has_final_[r] = 1;
    }
    Apply(r, effect.at_start, now);
    running_end_[r] = &effect.at_end;
    busy_until_[r] = now + duration;
    result_.stages[r].busy_s += duration;
    if (options_.record_timeline) {
      result_.stages[r].slices.push_back({a, now, now + duration});
    }
    Push({now + duration, 0, Event::kActionEnd, r, 0});
  }

  void FinishAction(int r, double now) {
    const Action& a = plan_.stage(r)[next_[r]];
    Apply(r, *running_end_[r], now);
    busy_until_[r] = -1.0;
    ++next_[r];
    result_.stages[r].end_s = now;
    if (const std::optional<int> to = schedule::OutputTo(a, model_stages_)) {
      if (plan_.RankOf(*to) == r) {  // the next model stage on this stage: no link
        arrived_[InputKey(*to, a.pass, a.microbatch, a.chunk)] = 1;
      } else {
        Send(a, *to, now);
      }
    }
  }

  // Directed link r -> r + 1 (mod P) is 2r, any other from r 2r + 1.
  std::size_t LinkIndex(int from, int to) const {
    return static_cast<std::size_t>(2 * from + (to == (from + 1) % stages_ ? 0 : 1));
  }

  // Sends `a`'s output to model stage `to` over the directed link between
  // their stages.
  void Send(const Action& a, int to, double now) {
    const std::size_t link = LinkIndex(plan_.RankOf(a.stage), plan_.RankOf(to));
    const double start = std::max(now, link_free_s_[link]);
    const double occupancy = costs_.TransferOccupancy(a);
    const double latency = costs_.TransferLatency(a);
    if (!CheckTime(occupancy, "transfer occupancy", a) ||
        !CheckTime(latency, "transfer latency", a)) {
      return;
    }
    link_free_s_[link] = start + occupancy;
    const double arrival = start + latency;
    Push({arrival, 0, Event::kArrival, plan_.RankOf(to),
          InputKey(to, a.pass, a.microbatch, a.chunk)});
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

  void Push(Event e) {
    e.seq = seq_++;
    if (top_popped_) {
      queue_.Push(e);
    } else {
      queue_.ReplaceTop(e);
      top_popped_ = true;
    }
  }

  const schedule::Plan& plan_;
  const CostSource& costs_;
  const EngineOptions options_;
  const int stages_;        // P, the ranks
  const int model_stages_;  // P v
  std::vector<char> arrived_;         // (P * M * N * 2)
  std::vector<std::size_t> next_;     // (P) index of the next action
  std::vector<double> busy_until_;    // (P) < 0 when idle
  std::vector<const MemoryDelta*> running_end_;  // (P) at_end of the running action
  std::vector<ClassBytes> live_;      // (P)
  std::vector<double> link_free_s_;   // (2P) directed links
  EventQueue queue_;
  // Whether the event being handled has left the queue (true outside the
  // loop, so that the first actions are pushed).
  bool top_popped_ = true;
  std::uint64_t seq_ = 0;
  // (P) the last B or W started so far and when: the action after which the
  // stage's gradients are final, once the stage is done.
  std::vector<schedule::Action> final_action_ = std::vector<schedule::Action>(stages_);
  std::vector<double> final_start_s_ = std::vector<double>(stages_, 0.0);
  std::vector<char> has_final_ = std::vector<char>(stages_, 0);
  EngineResult result_;
  Status error_;  // the first bad time a cost source gave
};

}  // namespace

Result<EngineResult> RunPlanByEvents(const schedule::Plan& plan, const CostSource& costs,
                                     const EngineOptions& options) {
  EventEngine engine(plan, costs, options);
  return engine.Run();
}

}  // namespace stateflow::sim

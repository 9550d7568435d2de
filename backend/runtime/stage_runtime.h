// The stage runtime: executes one pipeline stage's actions of a Plan, in
// plan order, on that stage's StageModule, moving activations and their
// gradients through a Comm:
//   F(a, i): receive the (s_i, H) activation from stage r - 1 (if r > 0),
//            module.Forward, send the output to stage r + 1 (if r < P - 1);
//   B(a, i): receive the (s_i, H) gradient from stage r + 1 (if r < P - 1),
//            module.Backward, send the input gradient to stage r - 1 (if r > 0).
// The receive of the next action's input is posted before the current action
// computes (lookahead), so a transfer overlaps compute. It records, per
// action, wall-clock start and end of the compute and the time spent waiting
// for the input, and the stage's live bytes per buffer class after each
// action (for the trace and for comparison with the simulator).
//
// Memory: with a `transport` allocator (the trainer gives one per stage),
// the stage's own allocator holds an action's input and output only while
// the action runs: a received message is copied from its receive buffer into
// the stage's allocator (kWorkspace, (s_i, H)) when the action starts and
// freed when it ends; the module's output is copied into a send buffer when
// the action ends. Receive buffers (posted ahead) and sends in flight, whose
// lives depend on when the neighbours get there, are counted on `transport`,
// so that the stage's ledger, and its peaks, depend only on the stage's own
// action order, as the simulator's memory model has it
// (models/memory_model.h). Without `transport`, receive buffers are the
// stage's workspace from their post to the end of the consuming action and
// the module's output stays held by the Comm until its send completes.
//
// Not the step: the trainer starts the module's step (BeginStep) and steps
// the optimizer. Not a scheduler: the order is the plan's.
//
// Virtual stages (schedule/plan.h): a stage holding v model stages has one
// module per model stage (the k-th runs its rank's model stage
// Plan::ModelStageOf(r, k)); an action runs on its model stage's module, its
// input comes from the rank of the model stage before (forward) or after
// (backward), that rank's own when both are here (P = 1, the V's turn): the
// message then goes through the comm to itself, so the stage's ledger is
// the same as for a message from a neighbour. Messages name the receiving
// model stage's index (MessageKey::virtual_index).
//
// Two ways to drive it: one rank per stage (RunStepAlone blocks for inputs),
// or one process for all stages (RunStepInProcess sweeps them).
//
//   StageRuntime<double> rt(&plan, r, &partition, module.get(), comm.get(), &alloc, &clock);
//   rt.BeginStep(); SF_RETURN_IF_ERROR(RunStepAlone(rt));
#pragma once

#include <chrono>
#include <vector>

#include "backend/allocator.h"
#include "backend/comm/comm.h"
#include "backend/stage_module.h"
#include "common/status.h"
#include "schedule/partition.h"
#include "schedule/plan.h"

namespace stateflow::backend {

// Seconds since an origin on the steady clock, which all processes of one
// machine share (Linux CLOCK_MONOTONIC); ranks on one host therefore place
// their actions on one time axis. Across hosts the trainer aligns origins
// with a barrier.
class RunClock {
 public:
  RunClock() : origin_(std::chrono::steady_clock::now()) {}
  void Restart() { origin_ = std::chrono::steady_clock::now(); }
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

 private:
  std::chrono::steady_clock::time_point origin_;
};

// One executed action. Times in seconds on the RunClock.
struct ActionRecord {
  schedule::Action action;
  double start_s = 0;  // compute start: the input is in hand
  double end_s = 0;    // compute end, before the output is sent
  double wait_s = 0;   // blocked waiting for the input before start_s
};

// Live bytes per buffer class after a change, at time_s on the RunClock.
struct MemorySample {
  double time_s = 0;
  ClassBytes bytes{};
};

template <typename T>
class StageRuntime {
 public:
  // REQUIRES: `plan` validated (W actions: the module splits its backward,
  // StageModuleOptions::split_backward); `partition` has
  // plan->chunks() chunks; every pointer outlives the runtime; `transport`
  // (may be null: messages on `alloc`) outlives the comm's buffers too.
  StageRuntime(const schedule::Plan* plan, int stage, const schedule::Partition* partition,
               StageModule<T>* module, Comm<T>* comm, TrackingAllocator* alloc,
               const RunClock* clock, TrackingAllocator* transport = nullptr);
  // With virtual stages: `modules[k]` runs model stage plan->ModelStageOf(stage, k).
  // REQUIRES: modules.size() == plan->virtual_stages(), all of one hidden and
  // microbatch size.
  StageRuntime(const schedule::Plan* plan, int stage, const schedule::Partition* partition,
               std::vector<StageModule<T>*> modules, Comm<T>* comm, TrackingAllocator* alloc,
               const RunClock* clock, TrackingAllocator* transport = nullptr);

  StageRuntime(const StageRuntime&) = delete;
  StageRuntime& operator=(const StageRuntime&) = delete;

  // Back to the stage's first action; forgets the last step's records.
  void BeginStep();
  bool done() const { return cursor_ == actions_->size(); }
  // REQUIRES: !done().
  const schedule::Action& next() const { return (*actions_)[cursor_]; }

  // Runs the next action if its input has arrived; returns whether it ran.
  // REQUIRES: !done().
  Result<bool> TryRunNext();
  // Waits for the next action's input and runs it. REQUIRES: !done().
  Status RunNext();

  int stage() const { return stage_; }
  Comm<T>& comm() { return *comm_; }
  const std::vector<ActionRecord>& records() const { return records_; }  // this step
  const std::vector<MemorySample>& memory() const { return memory_; }     // this step
  // Compute time of this step's actions so far (sum of end - start).
  double busy_s() const { return busy_s_; }
  // Start of the action during which this step's allocator peak was last
  // raised (RunClock seconds), or -1 if no action raised it.
  double peak_time_s() const { return peak_time_s_; }

 private:
  // Whether action k needs an input message (from schedule::InputFrom over
  // model stages), and its key.
  bool NeedsInput(const schedule::Action& a) const;
  MessageKey KeyOf(const schedule::Action& a) const;
  // The module of the action's model stage.
  StageModule<T>* ModuleOf(const schedule::Action& a) const {
    return modules_[static_cast<std::size_t>(plan_->VirtualIndex(a.stage))];
  }
  Status PostAhead();
  Status Execute(Tensor<T> input, double wait_s);
  // Where receive and send buffers live: `transport` if given, else `alloc`.
  TrackingAllocator& MessageAlloc() { return transport_ != nullptr ? *transport_ : *alloc_; }

  const schedule::Plan* plan_;
  const std::vector<schedule::Action>* actions_;
  int stage_;
  const schedule::Partition* partition_;
  std::vector<StageModule<T>*> modules_;  // (v) by virtual index
  StageModule<T>* module_;                // modules_[0]: sizes
  Comm<T>* comm_;
  TrackingAllocator* alloc_;
  const RunClock* clock_;
  TrackingAllocator* transport_;  // null: messages on alloc_
  std::size_t cursor_ = 0;        // next action to run
  std::size_t posted_until_ = 0;  // receives of actions [cursor_, posted_until_) are posted
  std::vector<ActionRecord> records_;
  std::vector<MemorySample> memory_;
  double busy_s_ = 0;
  double peak_time_s_ = -1;
};

// One rank per stage: runs every action of the stage's list, blocking for
// inputs, then waits for its sends.
template <typename T>
Status RunStepAlone(StageRuntime<T>& stage);

// One process for all stages: sweeps stages 0..P-1 in order, each running its
// next action if its input has arrived, until all lists are done (the same
// order every time, so runs are reproducible). An Internal error if a sweep
// makes no progress (impossible for a validated plan), naming each stage's
// blocked action.
template <typename T>
Status RunStepInProcess(const std::vector<StageRuntime<T>*>& stages);

}  // namespace stateflow::backend

#include "backend/device/device.h"
#include "backend/runtime/stage_runtime.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "backend/layers/copy.h"

namespace stateflow::backend {

using schedule::Action;
using schedule::Pass;

namespace {

// The module's error with the action it happened in: "... (during 1F0.2)".
Status During(const Status& status, const Action& a) {
  const std::string message = status.message() + " (during " + ToString(a) + ")";
  switch (status.code()) {
    case Status::Code::kInvalidInput: return Status::Invalid(message);
    case Status::Code::kResource: return Status::Resource(message);
    default: return Status::Internal(message);
  }
}

}  // namespace

template <typename T>
StageRuntime<T>::StageRuntime(const schedule::Plan* plan, int stage,
                              const schedule::Partition* partition, StageModule<T>* module,
                              Comm<T>* comm, TrackingAllocator* alloc, const RunClock* clock,
                              TrackingAllocator* transport)
    : StageRuntime(plan, stage, partition, std::vector<StageModule<T>*>{module}, comm, alloc,
                   clock, transport) {}

template <typename T>
StageRuntime<T>::StageRuntime(const schedule::Plan* plan, int stage,
                              const schedule::Partition* partition,
                              std::vector<StageModule<T>*> modules, Comm<T>* comm,
                              TrackingAllocator* alloc, const RunClock* clock,
                              TrackingAllocator* transport)
    : plan_(plan),
      actions_(&plan->stage(stage)),
      stage_(stage),
      partition_(partition),
      modules_(std::move(modules)),
      module_(modules_.front()),
      comm_(comm),
      alloc_(alloc),
      clock_(clock),
      transport_(transport) {}

template <typename T>
void StageRuntime<T>::BeginStep() {
  cursor_ = 0;
  posted_until_ = 0;
  records_.clear();
  memory_.clear();
  busy_s_ = 0;
  peak_time_s_ = -1;
  if (transport_ != nullptr) transport_->ResetPeaks();
}

template <typename T>
bool StageRuntime<T>::NeedsInput(const Action& a) const {
  return schedule::InputFrom(a, plan_->model_stages()).has_value();
}

template <typename T>
MessageKey StageRuntime<T>::KeyOf(const Action& a) const {
  return MessageKey{a.microbatch, a.chunk, a.pass, plan_->VirtualIndex(a.stage)};
}

// Posts the receives of the next action and the one after it (lookahead 1).
template <typename T>
Status StageRuntime<T>::PostAhead() {
  constexpr std::size_t kLookahead = 1;
  if (posted_until_ < cursor_) posted_until_ = cursor_;
  const std::size_t limit = std::min(actions_->size(), cursor_ + 1 + kLookahead);
  const std::int64_t hidden = module_->hidden_size();
  for (; posted_until_ < limit; ++posted_until_) {
    const Action& a = (*actions_)[posted_until_];
    const std::optional<int> from_stage = schedule::InputFrom(a, plan_->model_stages());
    if (!from_stage) continue;
    const std::optional<int> from = plan_->RankOf(*from_stage);
    const std::int64_t rows = module_->microbatch_size() * partition_->length(a.chunk);  // B s
    SF_ASSIGN_OR_RETURN(Tensor<T> buffer, Tensor<T>::Uninitialized(
                                              MessageAlloc(), BufferClass::kWorkspace, {rows, hidden}));
    SF_RETURN_IF_ERROR(comm_->PostRecv(*from, KeyOf(a), std::move(buffer)));
  }
  return Status::Ok();
}

template <typename T>
Result<bool> StageRuntime<T>::TryRunNext() {
  SF_RETURN_IF_ERROR(PostAhead());
  const Action& a = next();
  if (NeedsInput(a)) {
    SF_ASSIGN_OR_RETURN(bool arrived, comm_->Arrived(KeyOf(a)));
    if (!arrived) return false;
    SF_ASSIGN_OR_RETURN(Tensor<T> input, comm_->Wait(KeyOf(a)));
    SF_RETURN_IF_ERROR(Execute(std::move(input), 0.0));
  } else {
    SF_RETURN_IF_ERROR(Execute(Tensor<T>(), 0.0));
  }
  return true;
}

template <typename T>
Status StageRuntime<T>::RunNext() {
  SF_RETURN_IF_ERROR(PostAhead());
  const Action& a = next();
  if (!NeedsInput(a)) return Execute(Tensor<T>(), 0.0);
  const double wait_start = clock_->Now();
  SF_ASSIGN_OR_RETURN(Tensor<T> input, comm_->Wait(KeyOf(a)));
  return Execute(std::move(input), clock_->Now() - wait_start);
}

// Runs the module on the next action with `input` (empty when the action
// has no input message), sends the output, records time and memory.
template <typename T>
Status StageRuntime<T>::Execute(Tensor<T> input, double wait_s) {
  const Action a = next();
  const Tensor<T>* in = NeedsInput(a) ? &input : nullptr;
  const std::int64_t peak_before = alloc_->PeakTotalBytes();
  const double start = clock_->Now();
  if (in != nullptr && transport_ != nullptr) {  // the stage's own copy, for this action
    Result<Tensor<T>> copy = CopyTensor(*alloc_, BufferClass::kWorkspace, input);
    if (!copy.ok()) return During(copy.status(), a);
    input = std::move(copy).value();  // frees the receive buffer
  }
  Result<Tensor<T>> out = Tensor<T>();
  StageModule<T>* module = ModuleOf(a);
  switch (a.pass) {
    case Pass::kForward: out = module->Forward(a.microbatch, a.chunk, in); break;
    case Pass::kBackward: out = module->Backward(a.microbatch, a.chunk, in); break;
    case Pass::kWeight:
      if (Status w = module->Weight(a.microbatch, a.chunk); !w.ok()) out = w;
      break;
  }
  if (!out.ok()) return During(out.status(), a);
  // The action ends when its device has finished it (a GPU runs the
  // module's kernels asynchronously; on the CPU this returns at once), so
  // traces, busy times and step times are the device's.
  if (Status done = alloc_->device().Synchronize(); !done.ok()) return During(done, a);
  const double end = clock_->Now();
  input = Tensor<T>();  // the receive buffer ends with its action
  if (const std::optional<int> to_stage = schedule::OutputTo(a, plan_->model_stages())) {
    const int to = plan_->RankOf(*to_stage);
    const MessageKey key{a.microbatch, a.chunk, a.pass, plan_->VirtualIndex(*to_stage)};
    const std::int64_t rows = module_->microbatch_size() * partition_->length(a.chunk);  // B s
    if (out->numel() != rows * module_->hidden_size()) {
      return Status::Internal(ToString(a) + ": the module returned " + ShapeString(out->shape()) +
                              ", expected (" + std::to_string(rows) + ", " +
                              std::to_string(module_->hidden_size()) + ")");
    }
    if (transport_ != nullptr) {  // the send buffer; the module's output ends here
      Result<Tensor<T>> message = CopyTensor(*transport_, BufferClass::kWorkspace, *out);
      if (!message.ok()) return During(message.status(), a);
      out = std::move(message).value();
    }
    SF_RETURN_IF_ERROR(comm_->Send(to, key, std::move(out).value()));
  }
  SF_RETURN_IF_ERROR(comm_->Progress());
  records_.push_back(ActionRecord{a, start, end, wait_s});
  memory_.push_back(MemorySample{clock_->Now(), alloc_->Stats().live_bytes});
  busy_s_ += end - start;
  if (alloc_->PeakTotalBytes() > peak_before) peak_time_s_ = start;
  ++cursor_;
  return Status::Ok();
}

template <typename T>
Status RunStepAlone(StageRuntime<T>& stage) {
  while (!stage.done()) SF_RETURN_IF_ERROR(stage.RunNext());
  return stage.comm().Flush();
}

template <typename T>
Status RunStepInProcess(const std::vector<StageRuntime<T>*>& stages) {
  for (;;) {
    bool all_done = true, progress = false;
    for (StageRuntime<T>* stage : stages) {
      if (stage->done()) continue;
      all_done = false;
      SF_ASSIGN_OR_RETURN(bool ran, stage->TryRunNext());
      progress |= ran;
    }
    if (all_done) break;
    if (!progress) {
      std::string blocked;
      for (StageRuntime<T>* stage : stages) {
        if (stage->done()) continue;
        blocked += (blocked.empty() ? "" : ", ") + ToString(stage->next());
      }
      return Status::Internal("no stage can run; blocked: " + blocked);
    }
  }
  for (StageRuntime<T>* stage : stages) SF_RETURN_IF_ERROR(stage->comm().Flush());
  return Status::Ok();
}

template class StageRuntime<float>;
template class StageRuntime<double>;
template Status RunStepAlone<float>(StageRuntime<float>&);
template Status RunStepAlone<double>(StageRuntime<double>&);
template Status RunStepInProcess<float>(const std::vector<StageRuntime<float>*>&);
template Status RunStepInProcess<double>(const std::vector<StageRuntime<double>*>&);
template class StageRuntime<bf16>;
template Status RunStepAlone<bf16>(StageRuntime<bf16>&);
template Status RunStepInProcess<bf16>(const std::vector<StageRuntime<bf16>*>&);

}  // namespace stateflow::backend

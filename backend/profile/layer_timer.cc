#include "backend/profile/layer_timer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/comm/tensor_group.h"
#include "backend/layers/core_phases.h"
#include "backend/model/layer_family.h"
#include "backend/model/model_stage_module.h"
#include "backend/train/adamw.h"

namespace stateflow::backend {
namespace {

// Parameters are seeded from this; their values do not change the time.
constexpr std::uint64_t kSeed = 1;
constexpr int kChunks = 3;  // the middle one is timed

Status CheckOptions(std::int64_t tokens, const TimingOptions& options) {
  if (tokens < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  if (options.repetitions < 1) return Status::Invalid("--repetitions must be >= 1");
  if (options.warmup < 0) return Status::Invalid("--warmup must be >= 0");
  return Status::Ok();
}

// One microbatch of B sequences of seq_len byte tokens (inputs and targets).
Batch MakeBatch(std::int64_t seq_len, std::int64_t vocab, int B) {
  Batch batch;
  batch.microbatches = 1;
  batch.microbatch_size = B;
  batch.seq_len = seq_len;
  batch.tokens.resize(static_cast<std::size_t>(B) * static_cast<std::size_t>(seq_len + 1));
  for (std::size_t k = 0; k < batch.tokens.size(); ++k) {
    batch.tokens[k] = static_cast<std::int32_t>((k * 2654435761u >> 7) % vocab);
  }
  return batch;
}

// The (B s_i, C) inputs of each chunk for a module that takes them (else
// empty).
template <typename T>
Result<std::vector<Tensor<T>>> ChunkInputs(TrackingAllocator& alloc, bool needed,
                                           const schedule::Partition& partition, int B,
                                           std::int64_t hidden, double scale, std::uint64_t seed) {
  std::vector<Tensor<T>> inputs;
  if (!needed) return inputs;
  for (int i = 0; i < partition.num_chunks(); ++i) {
    SF_ASSIGN_OR_RETURN(Tensor<T> t,
                        Tensor<T>::Uninitialized(alloc, BufferClass::kWorkspace,
                                                 {B * partition.length(i), hidden}));
    FillPattern(&t, seed + i, scale);
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// One repetition; chunk `timed`'s forward and backward seconds.
template <typename T>
Status RunRepetition(Device& device, StageModule<T>& module, const Batch& batch,
                     const schedule::Partition& partition, int timed, std::vector<Tensor<T>>& xs,
                     std::vector<Tensor<T>>& dys, double* forward_s, double* backward_s,
                     double* weight_s = nullptr) {
  auto input = [](std::vector<Tensor<T>>& v, int i) { return v.empty() ? nullptr : &v[i]; };
  const int N = partition.num_chunks();
  module.ZeroGrads();
  SF_RETURN_IF_ERROR(module.BeginStep(
      &batch, &partition, 1.0 / (static_cast<double>(batch.seq_len) * batch.microbatch_size)));
  for (int i = 0; i < N; ++i) {
    SF_RETURN_IF_ERROR(device.TimerStart());
    Result<Tensor<T>> y = module.Forward(0, i, input(xs, i));
    if (!y.ok()) return y.status();
    SF_ASSIGN_OR_RETURN(const double seconds, device.TimerStop());
    if (i == timed) *forward_s = seconds;
  }
  for (int i = N - 1; i >= 0; --i) {
    SF_RETURN_IF_ERROR(device.TimerStart());
    Result<Tensor<T>> dx = module.Backward(0, i, input(dys, i));
    if (!dx.ok()) return dx.status();
    SF_ASSIGN_OR_RETURN(const double seconds, device.TimerStop());
    if (i == timed) *backward_s = seconds;
    if (weight_s != nullptr) {  // a split backward: its W right after its B
      SF_RETURN_IF_ERROR(device.TimerStart());
      SF_RETURN_IF_ERROR(module.Weight(0, i));
      SF_ASSIGN_OR_RETURN(const double w, device.TimerStop());
      if (i == timed) *weight_s = w;
    }
  }
  return Status::Ok();
}

// The layer family of a recurrence layer of `model` (a hybrid's recurrence
// layers are its architecture's), or nullptr: its core can be timed phase
// by phase.
const LayerFamily* RecurrenceFamily(const pb::ModelSpec& model, models::LayerKind kind) {
  if (kind != models::LayerKind::kRecurrence) return nullptr;
  return FindLayerFamily(model.architecture());
}

}  // namespace

bool HasCorePhases(const pb::ModelSpec& model) {
  const std::vector<models::LayerKind> layers = models::LayerList(model);
  return std::find(layers.begin(), layers.end(), models::LayerKind::kRecurrence) != layers.end() &&
         RecurrenceFamily(model, models::LayerKind::kRecurrence) != nullptr;
}

Result<models::StageLayers> OneLayerOf(const pb::ModelSpec& model, models::LayerKind kind) {
  const std::vector<models::LayerKind> layers = models::LayerList(model);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (layers[l] == kind) return models::StageLayers{static_cast<int>(l), static_cast<int>(l) + 1};
  }
  return Status::Invalid("model " + model.name() + " has no " +
                         std::string(models::LayerKindName(kind)) + " layer");
}

template <typename T>
struct LayerTimer<T>::State {
  // Declared first: the module's tensors come from it. Capped at the
  // machine's memory, so that a chunk too long to profile here is an error.
  explicit State(Device* device) : alloc(0, PhysicalMemoryBytes(), device) {}
  // Before the module, which points at it (tensor_size > 1).
  std::unique_ptr<TensorGroup> tp_group;
  TrackingAllocator alloc;
  std::unique_ptr<StageModule<T>> module;
  std::unique_ptr<StageModule<T>> split_module;  // the same, its backward split
  std::int64_t vocab = 0;
  models::LayerKind kind = models::LayerKind::kRecurrence;
  // A recurrence layer's family (TimePhasesOnce applies), or nullptr.
  const LayerFamily* family = nullptr;
  pb::ModelSpec model;
  std::int64_t st_tile = 0;  // the core's ST tile (schedule.st_tile)
};

template <typename T>
Result<std::unique_ptr<LayerTimer<T>>> LayerTimer<T>::Make(const pb::ModelSpec& model,
                                                           models::LayerKind kind,
                                                           models::Recompute recompute,
                                                           int microbatch_size,
                                                           Device* device,
                                                           bool st_overlap,
                                                           std::int64_t st_tile,
                                                           int tensor_size) {
  SF_ASSIGN_OR_RETURN(models::StageLayers layers, OneLayerOf(model, kind));
  SF_RETURN_IF_ERROR(models::CheckTensorParallelModel(model, tensor_size));
  std::unique_ptr<LayerTimer> timer(new LayerTimer());
  timer->state_ = std::make_unique<State>(device);
  TpShard tp;
  if (tensor_size > 1) {
    timer->state_->tp_group = MakeTimingTensorGroup(tensor_size);
    tp = TpShard{0, tensor_size, timer->state_->tp_group.get()};
  }
  SF_ASSIGN_OR_RETURN(timer->state_->module,
                      MakeStageModule<T>(model, layers,
                                         {.recompute = recompute,
                                          .seed = kSeed,
                                          .microbatch_size = microbatch_size,
                                          .st_overlap = st_overlap,
                                          .st_tile = st_tile,
                                          .tp = tp},
                                         &timer->state_->alloc));
  SF_ASSIGN_OR_RETURN(timer->state_->split_module,
                      MakeStageModule<T>(model, layers,
                                         {.recompute = recompute,
                                          .seed = kSeed,
                                          .microbatch_size = microbatch_size,
                                          .st_overlap = st_overlap,
                                          .st_tile = st_tile,
                                          .tp = tp,
                                          .split_backward = true},
                                         &timer->state_->alloc));
  timer->state_->vocab = model.vocab_size();
  timer->state_->kind = kind;
  timer->state_->model = model;
  // The phases over this rank's heads: the core sees H / TP of them.
  if (tensor_size > 1) timer->state_->model.set_num_heads(model.num_heads() / tensor_size);
  timer->state_->family = RecurrenceFamily(model, kind);
  timer->state_->st_tile = st_tile;
  return timer;
}

template <typename T>
LayerTimer<T>::~LayerTimer() {
  if (state_) {  // before the allocator
    state_->module.reset();
    state_->split_module.reset();
  }
}

template <typename T>
Result<std::pair<double, double>> LayerTimer<T>::TimeOnce(std::int64_t tokens,
                                                          std::int64_t prefix) {
  return Time(tokens, prefix, /*split=*/false);
}

template <typename T>
Result<std::pair<double, double>> LayerTimer<T>::TimeSplitOnce(std::int64_t tokens,
                                                               std::int64_t prefix) {
  return Time(tokens, prefix, /*split=*/true);
}

template <typename T>
Result<std::pair<double, double>> LayerTimer<T>::Time(std::int64_t tokens, std::int64_t prefix,
                                                      bool split) {
  if (tokens < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  if (prefix < 0) return Status::Invalid("profile: a chunk's prefix must be >= 0 tokens");
  StageModule<T>& module = split ? *state_->split_module : *state_->module;
  const int B = module.microbatch_size();
  const std::int64_t s = tokens, C = module.hidden_size();
  // Attention: [prefix | timed chunk | one token], or [timed | one token]
  // without a prefix, so that the timed chunk attends to `prefix` earlier
  // tokens and later chunks exist. Other kinds: the middle of three chunks of
  // s (a boundary state in and out).
  const bool attention = state_->kind == models::LayerKind::kAttention;
  std::vector<std::int64_t> bounds = {0, s, 2 * s, kChunks * s};
  int timed = 1;
  if (attention) {
    bounds = prefix > 0 ? std::vector<std::int64_t>{0, prefix, prefix + s, prefix + s + 1}
                        : std::vector<std::int64_t>{0, s, s + 1};
    timed = prefix > 0 ? 1 : 0;
  }
  const double total_tokens = static_cast<double>(bounds.back()) * B;
  // The token ids and the inputs and output gradients alone, in double (no
  // overflow): a chunk beyond the machine's memory is refused up front.
  const double needed_bytes =
      total_tokens * (sizeof(std::int32_t) + 2.0 * static_cast<double>(C) * sizeof(T));
  if (needed_bytes > static_cast<double>(PhysicalMemoryBytes())) {
    return Status::Invalid("a chunk of " + std::to_string(s) + " tokens needs over " +
                           FormatBytes(static_cast<std::int64_t>(
                               std::min(needed_bytes, 9.0e18))) +
                           ", more than this machine's memory (" +
                           FormatBytes(PhysicalMemoryBytes()) +
                           "); profile shorter chunks (lower -T or raise -N)");
  }
  const schedule::Partition partition(bounds);
  const Batch batch = MakeBatch(bounds.back(), state_->vocab, B);
  SF_ASSIGN_OR_RETURN(std::vector<Tensor<T>> xs,
                      ChunkInputs<T>(state_->alloc, !module.is_first(), partition, B, C, 1.0, 11));
  // Output gradients of the size a mean loss over the chunk's tokens gives.
  SF_ASSIGN_OR_RETURN(std::vector<Tensor<T>> dys,
                      ChunkInputs<T>(state_->alloc, !module.is_last(), partition, B, C,
                                     1.0 / (static_cast<double>(s) * B), 23));
  std::pair<double, double> seconds;
  double forward_s = 0;
  if (split) {  // (B, W)
    SF_RETURN_IF_ERROR(RunRepetition(state_->alloc.device(), module, batch, partition, timed, xs,
                                     dys, &forward_s, &seconds.first, &seconds.second));
  } else {  // (F, B)
    SF_RETURN_IF_ERROR(RunRepetition(state_->alloc.device(), module, batch, partition, timed, xs,
                                     dys, &seconds.first, &seconds.second));
  }
  return seconds;
}

template <typename T>
bool LayerTimer<T>::has_phases() const {
  return state_->family != nullptr;
}

template <typename T>
Result<CorePhaseSeconds> LayerTimer<T>::TimePhasesOnce(std::int64_t tokens) {
  if (state_->family == nullptr) {
    return Status::Invalid(std::string("profile: no core phases to time for a ") +
                           std::string(models::LayerKindName(state_->kind)) + " layer of a " +
                           state_->model.architecture() +
                           " model (recurrence layers only)");
  }
  if (tokens < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  const std::int64_t B = state_->module->microbatch_size();
  Device& device = state_->alloc.device();
  SF_ASSIGN_OR_RETURN(std::unique_ptr<CorePhaseRunner<T>> runner,
                      state_->family->template phases<T>()(state_->model, state_->alloc, B, tokens,
                                                  state_->st_tile));
  CorePhaseSeconds seconds;
  for (bool backward : {false, true}) {
    for (int p = 0; p < 3; ++p) {
      SF_RETURN_IF_ERROR(device.TimerStart());
      runner->Run(kCorePhases[p], backward);
      SF_ASSIGN_OR_RETURN(const double s, device.TimerStop());
      (backward ? seconds.backward : seconds.forward)[p] = s;
    }
  }
  return seconds;
}

template <typename T>
Result<PassSamples> TimeLayerPasses(const pb::ModelSpec& model, models::LayerKind kind,
                                    models::Recompute recompute, std::int64_t tokens,
                                    const TimingOptions& options) {
  SF_RETURN_IF_ERROR(CheckOptions(tokens, options));
  SF_ASSIGN_OR_RETURN(std::unique_ptr<LayerTimer<T>> timer,
                      LayerTimer<T>::Make(model, kind, recompute));
  PassSamples samples;
  for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
    SF_ASSIGN_OR_RETURN(auto seconds, timer->TimeOnce(tokens));
    if (rep < options.warmup) continue;
    samples.forward_s.push_back(seconds.first);
    samples.backward_s.push_back(seconds.second);
  }
  return samples;
}

std::pair<int, int> OptimizerTimingLayers(const pb::ModelSpec& model) {
  const int layers = static_cast<int>(models::LayerList(model).size());
  if (models::ModelParamCount(model) <= kOptimizerTimingMaxParams || layers < 3) {
    return {0, layers};
  }
  return {1, 2};
}

template <typename T>
Result<std::vector<double>> TimeOptimizerPerParam(const pb::ModelSpec& model,
                                                  const TimingOptions& options,
                                                  Device* device) {
  SF_RETURN_IF_ERROR(CheckOptions(1, options));
  TrackingAllocator alloc(0, std::nullopt, device);
  const auto [begin, end] = OptimizerTimingLayers(model);
  SF_ASSIGN_OR_RETURN(
      std::unique_ptr<StageModule<T>> module,
      MakeStageModule<T>(model, {begin, end}, {.recompute = models::Recompute::kNone, .seed = kSeed}, &alloc));
  std::vector<ParamRef<T>> params = module->Parameters();
  double count = 0;
  for (const ParamRef<T>& p : params) {
    FillPattern(p.grad, 7, 1e-3);
    count += static_cast<double>(p.value->numel());
  }
  SF_ASSIGN_OR_RETURN(AdamW<T> optimizer, AdamW<T>::Make(params, alloc, AdamWOptions{}));
  std::vector<double> per_param;
  for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
    SF_RETURN_IF_ERROR(alloc.device().TimerStart());
    optimizer.Step();
    module->ZeroGrads();
    SF_ASSIGN_OR_RETURN(const double seconds, alloc.device().TimerStop());
    for (const ParamRef<T>& p : params) FillPattern(p.grad, 7 + rep, 1e-3);  // untimed
    if (rep >= options.warmup) per_param.push_back(seconds / count);
  }
  return per_param;
}

template class LayerTimer<float>;
template class LayerTimer<double>;
template Result<PassSamples> TimeLayerPasses<float>(const pb::ModelSpec&, models::LayerKind,
                                                    models::Recompute, std::int64_t,
                                                    const TimingOptions&);
template Result<PassSamples> TimeLayerPasses<double>(const pb::ModelSpec&, models::LayerKind,
                                                     models::Recompute, std::int64_t,
                                                     const TimingOptions&);
template Result<std::vector<double>> TimeOptimizerPerParam<float>(const pb::ModelSpec&,
                                                                  const TimingOptions&,
                                                                  Device*);
template Result<std::vector<double>> TimeOptimizerPerParam<double>(const pb::ModelSpec&,
                                                                   const TimingOptions&,
                                                                   Device*);
template class LayerTimer<bf16>;
template Result<PassSamples> TimeLayerPasses<bf16>(const pb::ModelSpec&, models::LayerKind,
                                                     models::Recompute, std::int64_t,
                                                     const TimingOptions&);
template Result<std::vector<double>> TimeOptimizerPerParam<bf16>(const pb::ModelSpec&,
                                                                   const TimingOptions&,
                                                                   Device*);

}  // namespace stateflow::backend

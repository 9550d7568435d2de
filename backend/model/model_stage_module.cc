// ModelStageModule: the bookkeeping of microbatches and chunks around the
// embedding, the SequenceLayers and the head. Lifetimes as in
// model_stage_module.h. Dimension legend: B sequences per microbatch, s
// tokens of the chunk, C hidden size.
#include "backend/model/model_stage_module.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/kernels/embedding.h"
#include "backend/layers/embedding_layer.h"
#include "backend/layers/head_layer.h"
#include "backend/model/sequence_layer.h"
#include "backend/model/weight_grad_store.h"
#include "models/layer_formulas.h"
#include "models/model.h"

namespace stateflow::backend {
namespace {

// Ok if `batch` holds microbatches * B * (seq_len + 1) tokens (B sequences
// per microbatch), `partition` covers seq_len, and, when vocab > 0, every
// token is in [0, vocab). Errors start with `stage`.
Status CheckBatch(const std::string& stage, const Batch* batch,
                  const schedule::Partition* partition, std::int64_t vocab, int B) {
  if (batch == nullptr || partition == nullptr) {
    return Status::Invalid(stage + ": BeginStep needs a batch and a partition");
  }
  const int M = batch->microbatches;
  const std::int64_t T_len = batch->seq_len;
  if (M < 1 || T_len < 1) {
    return Status::Invalid(stage + ": batch has " + std::to_string(M) +
                           " microbatches of " + std::to_string(T_len) +
                           " tokens; both must be >= 1");
  }
  if (batch->microbatch_size != B) {
    return Status::Invalid(stage + ": batch has " + std::to_string(batch->microbatch_size) +
                           " sequences per microbatch, the stage module was made for "
                           "microbatch_size " + std::to_string(B));
  }
  const std::int64_t expected = static_cast<std::int64_t>(M) * B * (T_len + 1);
  if (static_cast<std::int64_t>(batch->tokens.size()) != expected) {
    return Status::Invalid(stage + ": batch.tokens has " + std::to_string(batch->tokens.size()) +
                           " tokens, expected microbatches * microbatch_size * (seq_len + 1) = " +
                           std::to_string(expected));
  }
  if (partition->num_chunks() < 1 || partition->seq_len() != T_len) {
    return Status::Invalid(stage + ": the partition covers " +
                           std::to_string(partition->num_chunks() < 1 ? 0 : partition->seq_len()) +
                           " tokens, the batch's seq_len is " + std::to_string(T_len));
  }
  if (vocab == 0) return Status::Ok();  // a middle stage reads no tokens
  Status ids = CheckTokenIds(batch->tokens.data(), expected, vocab);
  return ids.WithPrefix(stage + ": batch.tokens");
}

// A chunk's token ids where the device's kernels read them: the host vector
// itself on a device whose memory the host reaches (the CPU: no copy); else a
// copy in device memory, held for one call. Those 4 bytes a token (and the
// targets' 4) are the only device bytes outside the tracked classes.
class DeviceIds {
 public:
  static Result<DeviceIds> Make(MemoryResource& memory, std::vector<std::int32_t> host) {
    DeviceIds ids;
    ids.host_ = std::move(host);
    if (memory.host_accessible() || ids.host_.empty()) return ids;
    const std::int64_t bytes = ids.bytes();
    SF_ASSIGN_OR_RETURN(void* p, memory.Allocate(bytes));
    memory.CopyFromHost(p, ids.host_.data(), bytes);
    ids.memory_ = &memory;
    ids.device_ = static_cast<std::int32_t*>(p);
    return ids;
  }
  DeviceIds(DeviceIds&& o) noexcept
      : host_(std::move(o.host_)),
        memory_(std::exchange(o.memory_, nullptr)),
        device_(std::exchange(o.device_, nullptr)) {}
  DeviceIds& operator=(DeviceIds&&) = delete;
  ~DeviceIds() {
    if (device_ != nullptr) memory_->Free(device_, bytes());
  }
  const std::int32_t* data() const { return device_ != nullptr ? device_ : host_.data(); }
  std::int64_t size() const { return static_cast<std::int64_t>(host_.size()); }

 private:
  DeviceIds() = default;
  std::int64_t bytes() const { return size() * std::int64_t{sizeof(std::int32_t)}; }

  std::vector<std::int32_t> host_;
  MemoryResource* memory_ = nullptr;
  std::int32_t* device_ = nullptr;
};

template <typename T>
class ModelStageModule final : public StageModule<T> {
 public:
  ModelStageModule(TrackingAllocator* alloc, std::int64_t hidden, models::BlockShape shape,
                   std::int64_t vocab, models::StageLayers layers, int num_layer_list,
                   const StageModuleOptions& options)
      : alloc_(alloc), C_(hidden), shape_(shape), vocab_(vocab), layers_(layers),
        num_layer_list_(num_layer_list), options_(options) {}

  Status Init(const pb::ModelSpec& model);

  bool is_first() const override { return layers_.first == 0; }
  bool is_last() const override { return layers_.last == num_layer_list_; }
  std::int64_t hidden_size() const override { return C_; }
  int microbatch_size() const override { return options_.microbatch_size; }
  Status BeginStep(const Batch* batch, const schedule::Partition* partition,
                   double loss_scale) override;
  Result<Tensor<T>> Forward(int microbatch, int chunk, const Tensor<T>* x) override;
  Result<Tensor<T>> Backward(int microbatch, int chunk, const Tensor<T>* dy) override;
  Status Weight(int microbatch, int chunk) override;
  double loss() const override { return loss_; }
  std::vector<ParamRef<T>> Parameters() override;
  void ZeroGrads() override;

 private:
  // One microbatch's progress and its chunks' head tensors (the blocks keep
  // their own: sequence_layer.h).
  // `head` exists from F(a, 0) to B(a, 0) (issue 31: a few bytes per
  // microbatch outside that, so host memory follows the microbatches in
  // flight, not M).
  // What a split backward's B leaves for its W: the blocks' W store and
  // the embedding's output gradient.
  struct WeightPass {
    explicit WeightPass(TrackingAllocator* alloc) : store(alloc) {}
    WeightGradStore<T> store;
    Tensor<T> embedding_dy;  // (B s, C) on the first stage
  };
  struct MicrobatchContext {
    std::vector<HeadSaved<T>> head;  // (N) on the last stage, while in flight
    // (N) with split_backward: chunk i's, from its B until its W.
    std::vector<std::unique_ptr<WeightPass>> weight;
    int next_forward = 0;            // chunks [0, next_forward) ran F
    int next_backward = 0;           // the only chunk B may run next
  };

  std::string Where(int a, int i) const {
    return "stage " + std::to_string(alloc_->stage()) + ": microbatch " +
           std::to_string(a) + " chunk " + std::to_string(i);
  }
  Status CheckUnit(const char* pass, int a, int i) const;
  Status CheckOrder(bool forward, int a, int i) const;
  Status CheckActivation(const char* what, const Tensor<T>* t, int a, int i) const;
  Status RunForward(Tensor<T>* out, int a, int i, const Tensor<T>* x);
  Status RunBackward(Tensor<T>* out, int a, int i, const Tensor<T>* dy);
  bool StepComplete(int* a, int* i) const;
  // The chunk's (B s) token ids (inputs or targets), sequence-major.
  std::vector<std::int32_t> ChunkTokens(int a, int i, bool targets) const;

  TrackingAllocator* alloc_;
  std::int64_t C_;  // hidden size
  models::BlockShape shape_;  // the head's final norm
  std::int64_t vocab_;  // V
  models::StageLayers layers_;
  int num_layer_list_;  // L + 2
  StageModuleOptions options_;
  std::vector<EmbeddingLayer<T>> embedding_;                // 0 or 1
  std::vector<std::unique_ptr<SequenceLayer<T>>> blocks_;  // in layer order
  std::vector<HeadLayer<T>> head_;                          // 0 or 1
  // Per block: its W store's elements per token (split_backward).
  std::vector<double> store_per_token_;
  double embedding_store_per_token_ = 0;

  const Batch* batch_ = nullptr;
  const schedule::Partition* partition_ = nullptr;
  double loss_scale_ = 0.0;
  double loss_ = 0.0;
  bool step_failed_ = false;
  std::vector<MicrobatchContext> mb_;  // (M)
};

template <typename T>
Status ModelStageModule<T>::Init(const pb::ModelSpec& model) {
  const std::uint64_t seed = options_.seed;
  for (int l = layers_.first; l < layers_.last; ++l) {
    if (l == 0) {
      SF_ASSIGN_OR_RETURN(auto e,
                          EmbeddingLayer<T>::Make(*alloc_, vocab_, C_, l, seed, options_.tp));
      embedding_.push_back(std::move(e));
    } else if (l == num_layer_list_ - 1) {
      SF_ASSIGN_OR_RETURN(auto h, HeadLayer<T>::Make(*alloc_, C_, vocab_, kHeadVocabSlice, l,
                                                     seed, shape_, options_.tp));
      head_.push_back(std::move(h));
    } else {
      SF_ASSIGN_OR_RETURN(auto b, MakeSequenceLayer<T>(model, l, alloc_,
                                                       {.recompute = options_.recompute,
                                                        .seed = seed,
                                                        .st_overlap = options_.st_overlap,
                                                        .st_tile = options_.st_tile,
                                                        .tp = options_.tp}));
      blocks_.push_back(std::move(b));
      store_per_token_.push_back(models::WeightGradStoreElementsPerToken(
          model, models::LayerList(model)[static_cast<std::size_t>(l)], options_.tp.size));
    }
  }
  embedding_store_per_token_ =
      models::WeightGradStoreElementsPerToken(model, models::LayerKind::kEmbedding, options_.tp.size);
  return Status::Ok();
}

// ---- step -------------------------------------------------------------------

template <typename T>
bool ModelStageModule<T>::StepComplete(int* a, int* i) const {
  for (size_t m = 0; m < mb_.size(); ++m) {
    if (mb_[m].next_backward >= 0) {
      *a = static_cast<int>(m);
      *i = mb_[m].next_backward;
      return false;
    }
    for (std::size_t k = 0; k < mb_[m].weight.size(); ++k) {
      if (mb_[m].weight[k] != nullptr) {  // its W has not run
        *a = static_cast<int>(m);
        *i = static_cast<int>(k);
        return false;
      }
    }
  }
  return true;
}

template <typename T>
Status ModelStageModule<T>::BeginStep(const Batch* batch,
                                    const schedule::Partition* partition,
                                    double loss_scale) {
  int a = 0, i = 0;
  if (!step_failed_ && !StepComplete(&a, &i)) {
    return Status::Invalid(Where(a, i) + " has not run backward" +
                           (options_.split_backward ? " and W" : "") +
                           "; a new step cannot begin");
  }
  SF_RETURN_IF_ERROR(CheckBatch("stage " + std::to_string(alloc_->stage()), batch,
                                partition, is_first() || is_last() ? vocab_ : 0,
                                options_.microbatch_size));
  const int M = batch->microbatches;
  batch_ = batch;
  partition_ = partition;
  loss_scale_ = loss_scale;
  loss_ = 0.0;
  step_failed_ = false;
  mb_.clear();
  mb_.resize(M);
  for (MicrobatchContext& m : mb_) {
    m.next_backward = partition->num_chunks() - 1;
    if (options_.split_backward) m.weight.resize(static_cast<std::size_t>(partition->num_chunks()));
  }
  for (auto& b : blocks_) b->BeginStep(M, options_.microbatch_size, partition);
  return Status::Ok();
}

template <typename T>
Status ModelStageModule<T>::CheckUnit(const char* pass, int a, int i) const {
  const std::string stage = "stage " + std::to_string(alloc_->stage());
  if (batch_ == nullptr) {
    return Status::Invalid(stage + ": " + pass + " before BeginStep");
  }
  if (step_failed_) {
    return Status::Invalid(stage + ": " + pass + " after an earlier error in this step; call BeginStep");
  }
  if (a < 0 || a >= static_cast<int>(mb_.size())) {
    return Status::Invalid(stage + ": " + pass + " of microbatch " + std::to_string(a) +
                           " outside [0, " + std::to_string(mb_.size()) + ")");
  }
  if (i < 0 || i >= partition_->num_chunks()) {
    return Status::Invalid(stage + ": " + pass + " of chunk " + std::to_string(i) +
                           " outside [0, " + std::to_string(partition_->num_chunks()) + ")");
  }
  return Status::Ok();
}

// The paper's same-stage rules: F(i-1) < F(i), F(i) < B(i), B(i+1) < B(i).
template <typename T>
Status ModelStageModule<T>::CheckOrder(bool forward, int a, int i) const {
  const MicrobatchContext& m = mb_[a];
  if (forward) {
    if (i < m.next_forward) return Status::Invalid(Where(a, i) + ": forward ran already");
    if (i > m.next_forward) {
      return Status::Invalid(Where(a, i) + ": forward before the forward of chunk " +
                             std::to_string(i - 1));
    }
    return Status::Ok();
  }
  if (i >= m.next_forward) return Status::Invalid(Where(a, i) + ": backward before its forward");
  if (i > m.next_backward) return Status::Invalid(Where(a, i) + ": backward ran already");
  if (i < m.next_backward) {
    return Status::Invalid(Where(a, i) + ": backward before the backward of chunk " +
                           std::to_string(i + 1));
  }
  return Status::Ok();
}

// `t` must be a (B s_i, C) tensor.
template <typename T>
Status ModelStageModule<T>::CheckActivation(const char* what, const Tensor<T>* t,
                                          int a, int i) const {
  const Shape expected = {options_.microbatch_size * partition_->length(i), C_};
  if (t == nullptr) {
    return Status::Invalid(Where(a, i) + ": " + what + " is missing, expected " +
                           ShapeString(expected));
  }
  if (t->shape() != expected) {
    return Status::Invalid(Where(a, i) + ": " + what + " has shape " +
                           ShapeString(t->shape()) + ", expected " + ShapeString(expected));
  }
  return Status::Ok();
}

// ---- forward and backward -----------------------------------------------------

template <typename T>
Result<Tensor<T>> ModelStageModule<T>::Forward(int a, int i, const Tensor<T>* x) {
  SF_RETURN_IF_ERROR(CheckUnit("forward", a, i));
  SF_RETURN_IF_ERROR(CheckOrder(/*forward=*/true, a, i));
  if (is_first() && x != nullptr) {
    return Status::Invalid(Where(a, i) + ": the first stage embeds the batch's tokens; x must be null");
  }
  if (!is_first()) SF_RETURN_IF_ERROR(CheckActivation("input x", x, a, i));
  Tensor<T> out;
  Status status = RunForward(&out, a, i, x);
  if (!status.ok()) {
    step_failed_ = true;
    return status;
  }
  ++mb_[a].next_forward;
  return out;
}

template <typename T>
std::vector<std::int32_t> ModelStageModule<T>::ChunkTokens(int a, int i, bool targets) const {
  const std::int64_t start = partition_->start(i), s = partition_->length(i);
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(options_.microbatch_size * s));
  for (int b = 0; b < options_.microbatch_size; ++b) {
    const std::int32_t* seq = (targets ? batch_->targets(a, b) : batch_->inputs(a, b)) + start;
    ids.insert(ids.end(), seq, seq + s);
  }
  if (options_.tp.on()) {  // this rank's vocabulary rows: its own numbering, -1 elsewhere
    const std::int64_t first = options_.tp.Offset(vocab_), rows = options_.tp.Part(vocab_);
    for (std::int32_t& id : ids) {
      id = id >= first && id < first + rows ? static_cast<std::int32_t>(id - first) : -1;
    }
  }
  return ids;
}

template <typename T>
Status ModelStageModule<T>::RunForward(Tensor<T>* out, int a, int i,
                                     const Tensor<T>* x) {
  if (i == 0) {
    for (auto& b : blocks_) SF_RETURN_IF_ERROR(b->StartSequence(a));
  }
  Tensor<T> h;  // (B s, C) the activation between layers
  const Tensor<T>* cur = x;
  if (is_first()) {
    SF_ASSIGN_OR_RETURN(DeviceIds ids, DeviceIds::Make(alloc_->memory(),
                                                       ChunkTokens(a, i, /*targets=*/false)));
    SF_RETURN_IF_ERROR(embedding_[0].Forward(&h, ids.data(), ids.size()));
    cur = &h;
  }
  for (auto& b : blocks_) {
    Tensor<T> y;  // (B s, C)
    SF_RETURN_IF_ERROR(b->Forward(&y, a, i, *cur));
    h = std::move(y);
    cur = &h;
  }
  if (is_last()) {
    double loss_sum = 0.0;
    SF_ASSIGN_OR_RETURN(DeviceIds targets, DeviceIds::Make(alloc_->memory(),
                                                           ChunkTokens(a, i, /*targets=*/true)));
    if (i == 0) mb_[a].head.resize(partition_->num_chunks());
    SF_RETURN_IF_ERROR(head_[0].Forward(&loss_sum, &mb_[a].head[i], *cur, targets.data()));
    loss_ += loss_scale_ * loss_sum;
    return Status::Ok();
  }
  *out = std::move(h);  // not empty: a middle stage holds at least one layer
  return Status::Ok();
}

template <typename T>
Result<Tensor<T>> ModelStageModule<T>::Backward(int a, int i, const Tensor<T>* dy) {
  SF_RETURN_IF_ERROR(CheckUnit("backward", a, i));
  SF_RETURN_IF_ERROR(CheckOrder(/*forward=*/false, a, i));
  if (is_last() && dy != nullptr) {
    return Status::Invalid(Where(a, i) + ": the last stage starts the backward from its loss; dy must be null");
  }
  if (!is_last()) SF_RETURN_IF_ERROR(CheckActivation("output gradient dy", dy, a, i));
  Tensor<T> out;
  Status status = RunBackward(&out, a, i, dy);
  if (!status.ok()) {
    step_failed_ = true;
    return status;
  }
  --mb_[a].next_backward;
  return out;
}

template <typename T>
Status ModelStageModule<T>::RunBackward(Tensor<T>* out, int a, int i,
                                      const Tensor<T>* dy) {
  Tensor<T> d;  // (B s, C) the gradient between layers
  const Tensor<T>* cur = dy;
  if (is_last()) {
    SF_ASSIGN_OR_RETURN(DeviceIds targets, DeviceIds::Make(alloc_->memory(),
                                                           ChunkTokens(a, i, /*targets=*/true)));
    SF_RETURN_IF_ERROR(head_[0].Backward(&d, &mb_[a].head[i], targets.data(), loss_scale_));
    if (i == 0) std::vector<HeadSaved<T>>().swap(mb_[a].head);  // its last backward
    cur = &d;
  }
  std::unique_ptr<WeightPass> weight;
  if (options_.split_backward) weight = std::make_unique<WeightPass>(alloc_);
  const std::int64_t rows =
      static_cast<std::int64_t>(options_.microbatch_size) * partition_->length(i);  // B s
  for (std::size_t b = blocks_.size(); b-- > 0;) {
    Tensor<T> dx;  // (B s, C)
    if (weight != nullptr) {  // B: the block's W store first (models::ActionMemory's order)
      SF_RETURN_IF_ERROR(weight->store.BeginLayer(
          Where(a, i) + ": block " + std::to_string(blocks_[b]->layer()) + " (" +
              blocks_[b]->kind_name() + ")",
          rows * static_cast<std::int64_t>(store_per_token_[b])));
      ScopedWeightGradSink<T> sink(&weight->store);
      SF_RETURN_IF_ERROR(blocks_[b]->Backward(&dx, a, i, *cur));
      SF_RETURN_IF_ERROR(weight->store.EndLayer());
    } else {
      SF_RETURN_IF_ERROR(blocks_[b]->Backward(&dx, a, i, *cur));
    }
    d = std::move(dx);
    cur = &d;
  }
  if (weight != nullptr && is_first()) {  // the embedding's W store: its output gradient
    if (static_cast<std::int64_t>(embedding_store_per_token_) != C_) {
      return Status::Internal("the embedding's W store is not its output gradient");
    }
    SF_ASSIGN_OR_RETURN(weight->embedding_dy, cur->CloneAs(BufferClass::kActivations));
  }
  for (auto& b : blocks_) b->FinishBackward(a, i);
  if (weight != nullptr) {
    mb_[a].weight[static_cast<std::size_t>(i)] = std::move(weight);
    if (is_first()) return Status::Ok();  // the embedding's backward is its W
  }
  if (is_first()) {
    SF_ASSIGN_OR_RETURN(DeviceIds ids, DeviceIds::Make(alloc_->memory(),
                                                       ChunkTokens(a, i, /*targets=*/false)));
    return embedding_[0].Backward(*cur, ids.data());
  }
  *out = std::move(d);  // not empty: a stage after the first holds a block or the head
  return Status::Ok();
}

template <typename T>
Status ModelStageModule<T>::Weight(int a, int i) {
  SF_RETURN_IF_ERROR(CheckUnit("W", a, i));
  if (!options_.split_backward) {
    return Status::Invalid(Where(a, i) + ": W, but this stage does not split its backward");
  }
  std::unique_ptr<WeightPass>& slot = mb_[a].weight[static_cast<std::size_t>(i)];
  if (slot == nullptr) {
    return Status::Invalid(Where(a, i) + ": W before its B (or twice)");
  }
  ScopedWeightGradSink<T> none(nullptr);
  slot->store.Weight(alloc_->device().template ops<T>());
  if (is_first()) {
    Result<DeviceIds> ids =
        DeviceIds::Make(alloc_->memory(), ChunkTokens(a, i, /*targets=*/false));
    if (!ids.ok()) {
      step_failed_ = true;
      return ids.status();
    }
    if (Status s = embedding_[0].Backward(slot->embedding_dy, ids->data()); !s.ok()) {
      step_failed_ = true;
      return s;
    }
  }
  slot.reset();
  return Status::Ok();
}

// ---- parameters ---------------------------------------------------------------

template <typename T>
std::vector<ParamRef<T>> ModelStageModule<T>::Parameters() {
  std::vector<ParamRef<T>> refs;
  auto add = [&refs](const std::string& prefix, std::vector<Param<T>>& params) {
    for (Param<T>& p : params) {
      refs.push_back({prefix + p.name, &p.value, &p.grad, p.tp_partial_grad, p.tp_split_dim});
    }
  };
  for (auto& e : embedding_) add("embedding.", e.params());
  for (auto& b : blocks_) add("layer" + std::to_string(b->layer() - 1) + ".", b->params());
  for (auto& h : head_) add("head.", h.params());
  return refs;
}

template <typename T>
void ModelStageModule<T>::ZeroGrads() {
  for (ParamRef<T>& p : Parameters()) p.grad->SetZero();
}

}  // namespace

template <typename T>
Result<std::unique_ptr<StageModule<T>>> MakeStageModule(const pb::ModelSpec& model,
                                                        models::StageLayers layers,
                                                        const StageModuleOptions& options,
                                                        TrackingAllocator* alloc) {
  SF_RETURN_IF_ERROR(models::ValidateModel(model));
  if (!model.untied_embeddings()) {
    return Status::Invalid("model.untied_embeddings: tied embeddings are not supported "
                           "by the backend (the embedding and head may sit on different stages)");
  }
  const int num_layer_list = static_cast<int>(model.num_layers()) + 2;
  if (layers.first < 0 || layers.first >= layers.last || layers.last > num_layer_list) {
    return Status::Invalid("stage layers [" + std::to_string(layers.first) + ", " +
                           std::to_string(layers.last) + ") are not a non-empty range of the " +
                           std::to_string(num_layer_list) + " layers of the layer list");
  }
  if (options.microbatch_size < 1) {
    return Status::Invalid("parallel.microbatch_size must be >= 1, got " +
                           std::to_string(options.microbatch_size));
  }
  if (alloc == nullptr) return Status::Invalid("MakeStageModule: alloc is null");
  SF_RETURN_IF_ERROR(models::CheckTensorParallelModel(model, options.tp.size));
  if (options.tp.on() && !alloc->memory().host_accessible()) {
    return Status::Invalid("parallel.tensor_size " + std::to_string(options.tp.size) +
                           ": tensor parallelism's sums run on host memory (the cpu and "
                           "host-grid devices), not on " + alloc->device().name());
  }
  auto module = std::make_unique<ModelStageModule<T>>(
      alloc, model.hidden_size(), models::BlockShapeOf(model), model.vocab_size(), layers,
      num_layer_list,
      options);
  SF_RETURN_IF_ERROR(module->Init(model));
  return std::unique_ptr<StageModule<T>>(std::move(module));
}

template Result<std::unique_ptr<StageModule<float>>> MakeStageModule<float>(
    const pb::ModelSpec&, models::StageLayers, const StageModuleOptions&, TrackingAllocator*);
template Result<std::unique_ptr<StageModule<double>>> MakeStageModule<double>(
    const pb::ModelSpec&, models::StageLayers, const StageModuleOptions&, TrackingAllocator*);
template Result<std::unique_ptr<StageModule<bf16>>> MakeStageModule<bf16>(
    const pb::ModelSpec&, models::StageLayers, const StageModuleOptions&, TrackingAllocator*);

}  // namespace stateflow::backend

// GdnStageModule: the bookkeeping of chunks, boundary states and their
// gradients around the layers of backend/layers/. Lifetimes as in
// gdn_stage_module.h. Dimension legend: s tokens of the chunk, C hidden size.
#include "backend/model/gdn_stage_module.h"

#include <string>
#include <utility>
#include <vector>

#include "backend/kernels/embedding.h"
#include "backend/layers/embedding_layer.h"
#include "backend/layers/gdn_layer.h"
#include "backend/layers/head_layer.h"

namespace stateflow::backend {
namespace {

// Ok if `batch` holds microbatches * (seq_len + 1) tokens (one sequence per
// microbatch), `partition` covers seq_len, and, when vocab > 0, every token
// is in [0, vocab). Errors start with `stage`.
Status CheckBatch(const std::string& stage, const Batch* batch,
                  const schedule::Partition* partition, std::int64_t vocab) {
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
  const std::int64_t expected = static_cast<std::int64_t>(M) * (T_len + 1);
  if (static_cast<std::int64_t>(batch->tokens.size()) != expected) {
    return Status::Invalid(stage + ": batch.tokens has " + std::to_string(batch->tokens.size()) +
                           " tokens, expected microbatches * (seq_len + 1) = " +
                           std::to_string(expected) + " (one sequence per microbatch)");
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

template <typename T>
class GdnStageModule final : public StageModule<T> {
 public:
  GdnStageModule(TrackingAllocator* alloc, const GdnLayerDims& dims,
                 std::int64_t vocab, models::StageLayers layers,
                 int num_layer_list, models::Recompute recompute)
      : alloc_(alloc), dims_(dims), vocab_(vocab), layers_(layers),
        num_layer_list_(num_layer_list), recompute_(recompute) {}

  Status Init(const pb::ModelSpec& model, std::uint64_t seed);

  bool is_first() const override { return layers_.first == 0; }
  bool is_last() const override { return layers_.last == num_layer_list_; }
  std::int64_t hidden_size() const override { return dims_.C; }
  Status BeginStep(const Batch* batch, const schedule::Partition* partition,
                   double loss_scale) override;
  Result<Tensor<T>> Forward(int microbatch, int chunk, const Tensor<T>* x) override;
  Result<Tensor<T>> Backward(int microbatch, int chunk, const Tensor<T>* dy) override;
  double loss() const override { return loss_; }
  std::vector<ParamRef<T>> Parameters() override;
  void ZeroGrads() override;

 private:
  // What one (microbatch, chunk) keeps between its forward and backward.
  struct ChunkContext {
    std::vector<GdnLayerSaved<T>> layers;  // (GDN layers on this stage)
    HeadSaved<T> head;
  };
  // One microbatch's chunks, boundary states and their gradients.
  struct MicrobatchContext {
    std::vector<ChunkContext> chunks;                 // (N)
    std::vector<std::vector<GdnState<T>>> states_in;  // (N, GDN layers), live
                                                      // from the forward
                                                      // before to B(i)
    std::vector<GdnState<T>> dstates;  // (GDN layers) d(state in) of the chunk
                                       // after the next one to run backward
    int next_forward = 0;              // chunks [0, next_forward) ran F
    int next_backward = 0;             // the only chunk B may run next
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

  TrackingAllocator* alloc_;
  GdnLayerDims dims_;
  std::int64_t vocab_;  // V
  models::StageLayers layers_;
  int num_layer_list_;  // L + 2
  models::Recompute recompute_;
  std::vector<EmbeddingLayer<T>> embedding_;  // 0 or 1
  std::vector<GdnLayer<T>> gdn_layers_;
  std::vector<HeadLayer<T>> head_;            // 0 or 1

  const Batch* batch_ = nullptr;
  const schedule::Partition* partition_ = nullptr;
  double loss_scale_ = 0.0;
  double loss_ = 0.0;
  bool step_failed_ = false;
  std::vector<MicrobatchContext> mb_;  // (M)
};

template <typename T>
Status GdnStageModule<T>::Init(const pb::ModelSpec& model, std::uint64_t seed) {
  const int num_layers = static_cast<int>(model.num_layers());
  for (int l = layers_.first; l < layers_.last; ++l) {
    if (l == 0) {
      SF_ASSIGN_OR_RETURN(auto e, EmbeddingLayer<T>::Make(*alloc_, vocab_, dims_.C, l, seed));
      embedding_.push_back(std::move(e));
    } else if (l == num_layer_list_ - 1) {
      SF_ASSIGN_OR_RETURN(auto h, HeadLayer<T>::Make(*alloc_, dims_.C, vocab_,
                                                     kHeadVocabSlice, l, seed,
                                                     dims_.norm_eps));
      head_.push_back(std::move(h));
    } else {
      SF_ASSIGN_OR_RETURN(auto b, GdnLayer<T>::Make(*alloc_, dims_, l, num_layers, seed));
      gdn_layers_.push_back(std::move(b));
    }
  }
  return Status::Ok();
}

// ---- step -------------------------------------------------------------------

template <typename T>
bool GdnStageModule<T>::StepComplete(int* a, int* i) const {
  for (size_t m = 0; m < mb_.size(); ++m) {
    if (mb_[m].next_backward >= 0) {
      *a = static_cast<int>(m);
      *i = mb_[m].next_backward;
      return false;
    }
  }
  return true;
}

template <typename T>
Status GdnStageModule<T>::BeginStep(const Batch* batch,
                                    const schedule::Partition* partition,
                                    double loss_scale) {
  int a = 0, i = 0;
  if (!step_failed_ && !StepComplete(&a, &i)) {
    return Status::Invalid(Where(a, i) + " has not run backward; a new step cannot begin");
  }
  SF_RETURN_IF_ERROR(CheckBatch("stage " + std::to_string(alloc_->stage()), batch,
                                partition, is_first() || is_last() ? vocab_ : 0));
  const int M = batch->microbatches;
  batch_ = batch;
  partition_ = partition;
  loss_scale_ = loss_scale;
  loss_ = 0.0;
  step_failed_ = false;
  mb_.clear();
  mb_.resize(M);
  for (MicrobatchContext& m : mb_) {
    m.chunks.resize(partition->num_chunks());
    m.states_in.resize(partition->num_chunks());
    m.next_backward = partition->num_chunks() - 1;
  }
  return Status::Ok();
}

template <typename T>
Status GdnStageModule<T>::CheckUnit(const char* pass, int a, int i) const {
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
Status GdnStageModule<T>::CheckOrder(bool forward, int a, int i) const {
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

// `t` must be an (s_i, C) tensor.
template <typename T>
Status GdnStageModule<T>::CheckActivation(const char* what, const Tensor<T>* t,
                                          int a, int i) const {
  const Shape expected = {partition_->length(i), dims_.C};
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
Result<Tensor<T>> GdnStageModule<T>::Forward(int a, int i, const Tensor<T>* x) {
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
Status GdnStageModule<T>::RunForward(Tensor<T>* out, int a, int i,
                                     const Tensor<T>* x) {
  MicrobatchContext& m = mb_[a];
  ChunkContext& ctx = m.chunks[i];
  const int N = partition_->num_chunks();
  const std::int64_t start = partition_->start(i), s = partition_->length(i);
  const size_t B = gdn_layers_.size();
  if (i == 0) {
    for (size_t b = 0; b < B; ++b) {
      SF_ASSIGN_OR_RETURN(auto zero, GdnState<T>::Zeros(*alloc_, dims_,
                                                        BufferClass::kBoundaryStates));
      m.states_in[0].push_back(std::move(zero));
    }
  }
  if (i + 1 < N) m.states_in[i + 1].resize(B);
  ctx.layers.resize(B);
  Tensor<T> h;  // (s, C) the activation between layers
  const Tensor<T>* cur = x;
  if (is_first()) {
    SF_RETURN_IF_ERROR(embedding_[0].Forward(&h, batch_->inputs(a) + start, s));
    cur = &h;
  }
  for (size_t b = 0; b < B; ++b) {
    Tensor<T> y;  // (s, C)
    GdnState<T>* state_out = i + 1 < N ? &m.states_in[i + 1][b] : nullptr;
    SF_RETURN_IF_ERROR(gdn_layers_[b].Forward(&y, state_out, &ctx.layers[b], *cur,
                                          m.states_in[i][b], recompute_));
    h = std::move(y);
    cur = &h;
  }
  if (is_last()) {
    double loss_sum = 0.0;
    SF_RETURN_IF_ERROR(head_[0].Forward(&loss_sum, &ctx.head, *cur,
                                        batch_->targets(a) + start));
    loss_ += loss_scale_ * loss_sum;
    return Status::Ok();
  }
  *out = std::move(h);  // not empty: a middle stage holds at least one layer
  return Status::Ok();
}

template <typename T>
Result<Tensor<T>> GdnStageModule<T>::Backward(int a, int i, const Tensor<T>* dy) {
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
Status GdnStageModule<T>::RunBackward(Tensor<T>* out, int a, int i,
                                      const Tensor<T>* dy) {
  MicrobatchContext& m = mb_[a];
  ChunkContext& ctx = m.chunks[i];
  const int N = partition_->num_chunks();
  const std::int64_t start = partition_->start(i);
  Tensor<T> d;  // (s, C) the gradient between layers
  const Tensor<T>* cur = dy;
  if (is_last()) {
    SF_RETURN_IF_ERROR(head_[0].Backward(&d, &ctx.head, batch_->targets(a) + start,
                                         loss_scale_));
    cur = &d;
  }
  std::vector<GdnState<T>> dstates_in(i > 0 ? gdn_layers_.size() : 0);
  for (size_t b = gdn_layers_.size(); b-- > 0;) {
    Tensor<T> dx;  // (s, C)
    const GdnState<T>* dstate_out = i + 1 < N ? &m.dstates[b] : nullptr;
    SF_RETURN_IF_ERROR(gdn_layers_[b].Backward(&dx, i > 0 ? &dstates_in[b] : nullptr,
                                           &ctx.layers[b], *cur, dstate_out,
                                           m.states_in[i][b]));
    if (i + 1 < N) m.dstates[b] = GdnState<T>{};  // consumed
    d = std::move(dx);
    cur = &d;
  }
  m.states_in[i].clear();
  m.dstates = std::move(dstates_in);
  ctx = ChunkContext{};
  if (is_first()) return embedding_[0].Backward(*cur, batch_->inputs(a) + start);
  *out = std::move(d);  // not empty: a stage after the first holds a GDN layer or the head
  return Status::Ok();
}

// ---- parameters ---------------------------------------------------------------

template <typename T>
std::vector<ParamRef<T>> GdnStageModule<T>::Parameters() {
  std::vector<ParamRef<T>> refs;
  auto add = [&refs](const std::string& prefix, std::vector<Param<T>>& params) {
    for (Param<T>& p : params) refs.push_back({prefix + p.name, &p.value, &p.grad});
  };
  for (auto& e : embedding_) add("embedding.", e.params());
  for (auto& b : gdn_layers_) add("layer" + std::to_string(b.layer() - 1) + ".", b.params());
  for (auto& h : head_) add("head.", h.params());
  return refs;
}

template <typename T>
void GdnStageModule<T>::ZeroGrads() {
  for (ParamRef<T>& p : Parameters()) p.grad->SetZero();
}

}  // namespace

template <typename T>
Result<std::unique_ptr<StageModule<T>>> MakeGdnStageModule(
    const pb::ModelSpec& model, models::StageLayers layers,
    models::Recompute recompute, std::uint64_t seed, TrackingAllocator* alloc) {
  if (model.architecture() != "gdn") {
    return Status::Invalid("model.architecture: '" + model.architecture() +
                           "' is not supported by the GDN stage module (only 'gdn')");
  }
  if (model.layer_pattern() != "recurrent") {
    return Status::Invalid("model.layer_pattern: '" + model.layer_pattern() +
                           "' is not supported by the GDN stage module (only 'recurrent')");
  }
  SF_RETURN_IF_ERROR(models::ValidateModel(model));
  if (!model.untied_embeddings()) {
    return Status::Invalid("model.untied_embeddings: tied embeddings are not supported "
                           "by the GDN stage module (the embedding and head may sit on different stages)");
  }
  const int num_layer_list = static_cast<int>(model.num_layers()) + 2;
  if (layers.first < 0 || layers.first >= layers.last || layers.last > num_layer_list) {
    return Status::Invalid("stage layers [" + std::to_string(layers.first) + ", " +
                           std::to_string(layers.last) + ") are not a non-empty range of the " +
                           std::to_string(num_layer_list) + " layers of the layer list");
  }
  if (alloc == nullptr) return Status::Invalid("MakeGdnStageModule: alloc is null");
  auto module = std::make_unique<GdnStageModule<T>>(
      alloc, GdnLayerDims::FromModel(model), model.vocab_size(), layers,
      num_layer_list, recompute);
  SF_RETURN_IF_ERROR(module->Init(model, seed));
  return std::unique_ptr<StageModule<T>>(std::move(module));
}

template Result<std::unique_ptr<StageModule<float>>> MakeGdnStageModule<float>(
    const pb::ModelSpec&, models::StageLayers, models::Recompute, std::uint64_t,
    TrackingAllocator*);
template Result<std::unique_ptr<StageModule<double>>> MakeGdnStageModule<double>(
    const pb::ModelSpec&, models::StageLayers, models::Recompute, std::uint64_t,
    TrackingAllocator*);

}  // namespace stateflow::backend

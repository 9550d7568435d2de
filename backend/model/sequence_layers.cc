// The SequenceLayer adapters (sequence_layer.h): each keeps, per microbatch,
// what its layer kind carries between chunks, and calls the layer of
// backend/layers/ in the memory model's order.
#include <string>
#include <utility>
#include <vector>

#include "backend/layers/attention_layer.h"
#include "backend/layers/gdn_layer.h"
#include "backend/layers/mamba3_layer.h"
#include "backend/model/sequence_layer.h"
#include "models/model.h"

namespace stateflow::backend {
namespace {

// The recurrence layer kinds: GdnLayer and Mamba3Layer are called alike
// (recurrent_entry.h) and differ in their types and names.
template <typename T>
struct GdnKind {
  using Layer = GdnLayer<T>;
  static constexpr const char* kName = "gdn";
};

template <typename T>
struct Mamba3Kind {
  using Layer = Mamba3Layer<T>;
  static constexpr const char* kName = "mamba3";
};

// A recurrence layer (GDN, Mamba-3): per microbatch, chunk i's saved
// tensors, the state entering every chunk that ran forward and not yet
// backward, and the d(state out) the last backward handed down.
template <typename T, typename Kind>
class RecurrentSequenceLayer final : public SequenceLayer<T> {
 public:
  using Layer = typename Kind::Layer;
  using State = typename Layer::State;
  using Saved = typename Layer::Saved;

  RecurrentSequenceLayer(Layer layer, TrackingAllocator* alloc, models::Recompute recompute)
      : layer_(std::move(layer)), alloc_(alloc), recompute_(recompute) {}

  int layer() const override { return layer_.layer(); }
  const char* kind_name() const override { return Kind::kName; }
  std::vector<Param<T>>& params() override { return layer_.params(); }

  void BeginStep(int microbatches, std::int64_t batch,
                 const schedule::Partition* partition) override {
    batch_ = batch;
    partition_ = partition;
    mb_.clear();
    mb_.resize(microbatches);
    for (Microbatch& m : mb_) {
      m.saved.resize(partition->num_chunks());
      m.states_in.resize(partition->num_chunks());
    }
  }

  Status StartSequence(int a) override {
    SF_ASSIGN_OR_RETURN(mb_[a].states_in[0], State::Zeros(*alloc_, layer_.dims(), batch_,
                                                          BufferClass::kBoundaryStates));
    return Status::Ok();
  }

  Status Forward(Tensor<T>* y, int a, int i, const Tensor<T>& x) override {
    Microbatch& m = mb_[a];
    State* state_out = i + 1 < partition_->num_chunks() ? &m.states_in[i + 1] : nullptr;
    return layer_.Forward(y, state_out, &m.saved[i], x, batch_, m.states_in[i], recompute_);
  }

  Status Backward(Tensor<T>* dx, int a, int i, const Tensor<T>& dy) override {
    Microbatch& m = mb_[a];
    const State* dstate_out = i + 1 < partition_->num_chunks() ? &m.dstate : nullptr;
    State dstate_in;
    SF_RETURN_IF_ERROR(layer_.Backward(dx, i > 0 ? &dstate_in : nullptr, &m.saved[i], dy, batch_,
                                       dstate_out, m.states_in[i]));
    m.dstate = std::move(dstate_in);  // frees the d(state out) it was handed
    return Status::Ok();
  }

  void FinishBackward(int a, int i) override { mb_[a].states_in[i] = State{}; }

 private:
  struct Microbatch {
    std::vector<Saved> saved;      // (N)
    std::vector<State> states_in;  // (N) live from the forward before to B(i)
    State dstate;                  // d(state in) of the chunk that ran backward last
  };

  Layer layer_;
  TrackingAllocator* alloc_;  // not owned
  models::Recompute recompute_;
  std::int64_t batch_ = 1;
  const schedule::Partition* partition_ = nullptr;
  std::vector<Microbatch> mb_;  // (M)
};

// A softmax-attention layer: per microbatch, chunk i's saved tensors and the
// sequence-wide K/V buffer (from the forward of chunk 0 to the end of the
// backward of chunk 0) with its gradient accumulator (from the start of the
// backward of chunk N-1).
template <typename T>
class AttentionSequenceLayer final : public SequenceLayer<T> {
 public:
  AttentionSequenceLayer(AttentionLayer<T> layer, TrackingAllocator* alloc,
                         models::Recompute recompute)
      : layer_(std::move(layer)), alloc_(alloc), recompute_(recompute) {}

  int layer() const override { return layer_.layer(); }
  const char* kind_name() const override { return "attention"; }
  std::vector<Param<T>>& params() override { return layer_.params(); }

  void BeginStep(int microbatches, std::int64_t batch,
                 const schedule::Partition* partition) override {
    batch_ = batch;
    partition_ = partition;
    mb_.clear();
    mb_.resize(microbatches);
    for (Microbatch& m : mb_) m.saved.resize(partition->num_chunks());
  }

  Status StartSequence(int) override { return Status::Ok(); }  // the buffer comes with the layer's turn

  Status Forward(Tensor<T>* y, int a, int i, const Tensor<T>& x) override {
    Microbatch& m = mb_[a];
    if (i == 0) {
      SF_ASSIGN_OR_RETURN(m.kv, KvBuffer<T>::Make(*alloc_, layer_.dims(), batch_,
                                                  partition_->seq_len()));
    }
    return layer_.Forward(y, &m.saved[i], x, batch_, partition_->start(i), &m.kv, recompute_);
  }

  Status Backward(Tensor<T>* dx, int a, int i, const Tensor<T>& dy) override {
    Microbatch& m = mb_[a];
    if (i == partition_->num_chunks() - 1) SF_RETURN_IF_ERROR(m.kv.MakeGrads(*alloc_));
    SF_RETURN_IF_ERROR(layer_.Backward(dx, &m.saved[i], dy, batch_, partition_->start(i), &m.kv));
    if (i == 0) m.kv = KvBuffer<T>{};  // every chunk's backward has read it
    return Status::Ok();
  }

  void FinishBackward(int, int) override {}

 private:
  struct Microbatch {
    std::vector<AttentionLayerSaved<T>> saved;  // (N)
    KvBuffer<T> kv;
  };

  AttentionLayer<T> layer_;
  TrackingAllocator* alloc_;  // not owned
  models::Recompute recompute_;
  std::int64_t batch_ = 1;
  const schedule::Partition* partition_ = nullptr;
  std::vector<Microbatch> mb_;  // (M)
};

}  // namespace

template <typename T>
Result<std::unique_ptr<SequenceLayer<T>>> MakeSequenceLayer(
    const pb::ModelSpec& model, int l, TrackingAllocator* alloc,
    const SequenceLayerOptions& options) {
  const int num_layers = static_cast<int>(model.num_layers());
  if (l < 1 || l > num_layers) {
    return Status::Invalid("layer " + std::to_string(l) + " is not a block of the layer list (1.." +
                           std::to_string(num_layers) + ")");
  }
  if (models::IsAttentionBlock(model, l - 1)) {
    SF_ASSIGN_OR_RETURN(auto attn, AttentionLayer<T>::Make(*alloc, AttentionLayerDims::FromModel(model),
                                                           l, num_layers, options.seed));
    return std::unique_ptr<SequenceLayer<T>>(
        std::make_unique<AttentionSequenceLayer<T>>(std::move(attn), alloc, options.recompute));
  }
  if (model.architecture() == "gdn") {
    GdnLayerDims dims = GdnLayerDims::FromModel(model);
    dims.st_overlap = options.st_overlap;
    dims.st_tile = options.st_tile;
    SF_ASSIGN_OR_RETURN(auto gdn, GdnLayer<T>::Make(*alloc, dims, l, num_layers, options.seed));
    return std::unique_ptr<SequenceLayer<T>>(
        std::make_unique<RecurrentSequenceLayer<T, GdnKind<T>>>(std::move(gdn), alloc,
                                                                options.recompute));
  }
  if (model.architecture() == "mamba3") {
    Mamba3LayerDims dims = Mamba3LayerDims::FromModel(model);
    dims.st_overlap = options.st_overlap;
    dims.st_tile = options.st_tile;
    SF_ASSIGN_OR_RETURN(auto m3, Mamba3Layer<T>::Make(*alloc, dims, l, num_layers, options.seed));
    return std::unique_ptr<SequenceLayer<T>>(
        std::make_unique<RecurrentSequenceLayer<T, Mamba3Kind<T>>>(std::move(m3), alloc,
                                                                   options.recompute));
  }
  return Status::Invalid("model.architecture: '" + model.architecture() +
                         "' is not supported by the backend (layer " + std::to_string(l) + ")");
}

template Result<std::unique_ptr<SequenceLayer<float>>> MakeSequenceLayer<float>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);
template Result<std::unique_ptr<SequenceLayer<double>>> MakeSequenceLayer<double>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);
template Result<std::unique_ptr<SequenceLayer<bf16>>> MakeSequenceLayer<bf16>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);

}  // namespace stateflow::backend

// The SequenceLayer adapters (sequence_layer.h): each keeps, per microbatch,
// what its layer kind carries between chunks, and calls the layer of
// backend/layers/ in the memory model's order.
#include <string>
#include <utility>
#include <vector>

#include "backend/layers/gdn_layer.h"
#include "backend/model/sequence_layer.h"
#include "models/model.h"

namespace stateflow::backend {
namespace {

// A recurrence layer (GDN): per microbatch, chunk i's saved tensors, the
// state entering every chunk that ran forward and not yet backward, and the
// d(state out) the last backward handed down.
template <typename T>
class GdnSequenceLayer final : public SequenceLayer<T> {
 public:
  GdnSequenceLayer(GdnLayer<T> layer, TrackingAllocator* alloc,
                   models::Recompute recompute)
      : layer_(std::move(layer)), alloc_(alloc), recompute_(recompute) {}

  int layer() const override { return layer_.layer(); }
  const char* kind_name() const override { return "gdn"; }
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
    SF_ASSIGN_OR_RETURN(mb_[a].states_in[0],
                        GdnState<T>::Zeros(*alloc_, layer_.dims(), batch_,
                                           BufferClass::kBoundaryStates));
    return Status::Ok();
  }

  Status Forward(Tensor<T>* y, int a, int i, const Tensor<T>& x) override {
    Microbatch& m = mb_[a];
    GdnState<T>* state_out = i + 1 < partition_->num_chunks() ? &m.states_in[i + 1] : nullptr;
    return layer_.Forward(y, state_out, &m.saved[i], x, batch_, m.states_in[i], recompute_);
  }

  Status Backward(Tensor<T>* dx, int a, int i, const Tensor<T>& dy) override {
    Microbatch& m = mb_[a];
    const GdnState<T>* dstate_out = i + 1 < partition_->num_chunks() ? &m.dstate : nullptr;
    GdnState<T> dstate_in;
    SF_RETURN_IF_ERROR(layer_.Backward(dx, i > 0 ? &dstate_in : nullptr, &m.saved[i], dy,
                                       dstate_out, m.states_in[i]));
    m.dstate = std::move(dstate_in);  // frees the d(state out) it was handed
    return Status::Ok();
  }

  void FinishBackward(int a, int i) override { mb_[a].states_in[i] = GdnState<T>{}; }

 private:
  struct Microbatch {
    std::vector<GdnLayerSaved<T>> saved;  // (N)
    std::vector<GdnState<T>> states_in;   // (N) live from the forward before to B(i)
    GdnState<T> dstate;                   // d(state in) of the chunk that ran backward last
  };

  GdnLayer<T> layer_;
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
    return Status::Invalid("layer " + std::to_string(l) +
                           ": softmax attention is not supported by the backend yet");
  }
  if (model.architecture() == "gdn") {
    SF_ASSIGN_OR_RETURN(auto gdn, GdnLayer<T>::Make(*alloc, GdnLayerDims::FromModel(model), l,
                                                    num_layers, options.seed));
    return std::unique_ptr<SequenceLayer<T>>(
        std::make_unique<GdnSequenceLayer<T>>(std::move(gdn), alloc, options.recompute));
  }
  return Status::Invalid("model.architecture: '" + model.architecture() +
                         "' is not supported by the backend (layer " + std::to_string(l) + ")");
}

template Result<std::unique_ptr<SequenceLayer<float>>> MakeSequenceLayer<float>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);
template Result<std::unique_ptr<SequenceLayer<double>>> MakeSequenceLayer<double>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);

}  // namespace stateflow::backend

// MakeSequenceLayer (sequence_layer.h): softmax attention's adapter here, a
// recurrent family's through its layer family (layer_family.h). Each keeps,
// per microbatch, what its layer kind carries between chunks, and calls the
// layer of backend/layers/ in the memory model's order.
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/layers/attention_layer.h"
#include "backend/model/layer_family.h"
#include "backend/model/sequence_layer.h"
#include "models/model.h"

namespace stateflow::backend {
namespace {

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
    (void)microbatches;  // a microbatch's slots exist from F(a, 0) to B(a, 0)
    batch_ = batch;
    partition_ = partition;
    mb_.clear();
  }

  Status StartSequence(int) override { return Status::Ok(); }  // the buffer comes with the layer's turn

  Status Forward(Tensor<T>* y, int a, int i, const Tensor<T>& x) override {
    if (i == 0) mb_[a].saved.resize(partition_->num_chunks());
    Microbatch& m = mb_.at(a);
    if (i == 0) {
      SF_ASSIGN_OR_RETURN(m.kv, KvBuffer<T>::Make(*alloc_, layer_.dims(), batch_,
                                                  partition_->seq_len()));
    }
    return layer_.Forward(y, &m.saved[i], x, batch_, partition_->start(i), &m.kv, recompute_);
  }

  Status Backward(Tensor<T>* dx, int a, int i, const Tensor<T>& dy) override {
    Microbatch& m = mb_.at(a);
    if (i == partition_->num_chunks() - 1) SF_RETURN_IF_ERROR(m.kv.MakeGrads(*alloc_));
    SF_RETURN_IF_ERROR(layer_.Backward(dx, &m.saved[i], dy, batch_, partition_->start(i), &m.kv));
    if (i == 0) mb_.erase(a);  // every chunk's backward has read the K/V buffer: freed
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
  // The microbatches between F(a, 0) and B(a, 0) on this stage (issue 31:
  // host memory follows the microbatches in flight, not M).
  std::unordered_map<int, Microbatch> mb_;
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
  if (models::IsAttentionLayer(model, l - 1)) {
    SF_ASSIGN_OR_RETURN(auto attn, AttentionLayer<T>::Make(*alloc, AttentionLayerDims::FromModel(model).Sharded(options.tp),
                                                           l, num_layers, options.seed));
    return std::unique_ptr<SequenceLayer<T>>(
        std::make_unique<AttentionSequenceLayer<T>>(std::move(attn), alloc, options.recompute));
  }
  const LayerFamily* family = FindLayerFamily(model.architecture());
  if (family == nullptr) {
    return Status::Invalid("model.architecture: '" + model.architecture() +
                           "' is not supported by the backend (layer " + std::to_string(l) + ")");
  }
  return family->layer<T>()(model, l, alloc, options);
}

template Result<std::unique_ptr<SequenceLayer<float>>> MakeSequenceLayer<float>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);
template Result<std::unique_ptr<SequenceLayer<double>>> MakeSequenceLayer<double>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);
template Result<std::unique_ptr<SequenceLayer<bf16>>> MakeSequenceLayer<bf16>(
    const pb::ModelSpec&, int, TrackingAllocator*, const SequenceLayerOptions&);

}  // namespace stateflow::backend

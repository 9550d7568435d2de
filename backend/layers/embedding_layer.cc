#include "backend/layers/embedding_layer.h"

#include <string>

#include "backend/kernels/embedding.h"

namespace stateflow::backend {

template <typename T>
Result<EmbeddingLayer<T>> EmbeddingLayer<T>::Make(TrackingAllocator& alloc,
                                                  int64_t V, int64_t C,
                                                  int layer,
                                                  std::uint64_t seed, const TpShard& tp) {
  EmbeddingLayer e(&alloc, tp.Part(V), C, layer);
  e.tp_ = tp;
  SF_ASSIGN_OR_RETURN(Param<T> table,
                      MakeParam<T>(alloc, "weight", {tp.Part(V), C},
                                   InitSpec::Normal(0.02), seed, layer,
                                   tp.on() ? ParamSplit::Along(0, tp.size, tp.rank)
                                           : ParamSplit::Whole()));
  e.params_.push_back(std::move(table));
  return e;
}

template <typename T>
Status EmbeddingLayer<T>::Forward(Tensor<T>* y, const int32_t* ids,
                                  int64_t S) {
  SF_ASSIGN_OR_RETURN(*y, Tensor<T>::Uninitialized(
                              *alloc_, BufferClass::kWorkspace, {S, C_}));
  ops().EmbeddingForward(y->data(), ids, params_[0].value.data(), S, C_, V_);
  return TpAllReduceSum(tp_, y->data(), S * C_);  // vocabulary-parallel rows
}

template <typename T>
Status EmbeddingLayer<T>::Backward(const Tensor<T>& dy, const int32_t* ids) {
  if (dy.rank() != 2 || dy.dim(1) != C_) {
    return Status::Invalid("layer " + std::to_string(layer_) +
                           " (embedding): output gradient has shape " +
                           ShapeString(dy.shape()) + ", expected (S, " +
                           std::to_string(C_) + ")");
  }
  ops().EmbeddingBackward(params_[0].grad.data(), dy.data(), ids, dy.dim(0), C_,
                       V_);
  return Status::Ok();
}

template class EmbeddingLayer<float>;
template class EmbeddingLayer<double>;
template class EmbeddingLayer<bf16>;

}  // namespace stateflow::backend

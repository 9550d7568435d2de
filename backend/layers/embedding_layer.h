// The token embedding as a layer of the model's layer list (layer 0, on the
// first pipeline stage): forward gathers rows of the (V, C) table, backward
// scatter-adds the output gradient into the table's gradient.
//
// It saves nothing: the token ids it needs again in the backward belong to
// the step's Batch, which outlives the step (the analytic cost model counts
// them as 4 bytes per token of stored activations; here they are not
// allocated). Not the output layer (head_layer.h); the table is never tied.
//
//   SF_ASSIGN_OR_RETURN(auto emb, EmbeddingLayer<float>::Make(alloc, V, C, /*layer=*/0, seed));
//   SF_RETURN_IF_ERROR(emb.Forward(&y, ids, S));   // y (S, C)
//
// Vocabulary-parallel under tensor parallelism (tensor_parallel.h, as
// Megatron's VocabParallelEmbedding): TP rank t holds rows [t V/TP,
// (t+1) V/TP) and is given ids in its own numbering (-1 where another rank
// holds the row: a zero row); the forward sums the rows over the group.
//
// Dimensions: S tokens in the chunk, C hidden size, V vocabulary size.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device/device.h"
#include "backend/layers/param.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/tensor.h"
#include "common/status.h"

namespace stateflow::backend {

template <typename T>
class EmbeddingLayer {
 public:
  // The table "weight" (V, C), N(0, 0.02^2) from (seed, layer, "weight");
  // under TP its rows V/TP. REQUIRES: tp.size divides V.
  static Result<EmbeddingLayer> Make(TrackingAllocator& alloc, int64_t V,
                                     int64_t C, int layer, std::uint64_t seed,
                                     const TpShard& tp = {});

  EmbeddingLayer(EmbeddingLayer&&) = default;
  EmbeddingLayer& operator=(EmbeddingLayer&&) = default;

  // y (S, C), kWorkspace: y[s] = table[ids[s]] (0 for id -1). ids (S).
  // REQUIRES: CheckTokenIds(ids, S, V).ok() (the caller checks the batch).
  Status Forward(Tensor<T>* y, const int32_t* ids, int64_t S);

  // d(table) += dy[s] at row ids[s]. dy (S, C); ids as in the forward.
  Status Backward(const Tensor<T>& dy, const int32_t* ids);

  std::vector<Param<T>>& params() { return params_; }
  int64_t vocab_size() const { return V_; }
  int64_t hidden_size() const { return C_; }
  int layer() const { return layer_; }

 private:
  EmbeddingLayer(TrackingAllocator* alloc, int64_t V, int64_t C, int layer)
      : alloc_(alloc), V_(V), C_(C), layer_(layer) {}

  // The kernels of the device the allocator's memory lives on.
  Ops<T>& ops() const { return alloc_->device().template ops<T>(); }
  TrackingAllocator* alloc_;  // not owned
  int64_t V_, C_;  // V_: this rank's rows
  int layer_;
  TpShard tp_;
  std::vector<Param<T>> params_;  // {weight}
};

}  // namespace stateflow::backend

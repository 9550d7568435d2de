// The model's head as a layer (the last of the layer list, on the last
// pipeline stage): final norm, output layer and cross-entropy, per token
//   xn = RMSNorm(x) * norm;  loss_s = logsumexp_v(xn_s . W_v) - xn_s . W_{target_s}
// (LayerNorm(x) * norm + norm.bias where the model's BlockShape says so:
// DeltaNet).
// The logits are computed over vocabulary slices of `vocab_slice` columns
// (output_loss.h), so only an (S, vocab_slice) buffer of them exists at a
// time (BufferClass::kLogits, within one forward or backward); the backward
// recomputes them slice by slice from the saved xn and log-sum-exps.
//
// Saved for the backward (kActivations): x, xn (S, C), rstd (the norm's
// statistics, block_norm.h: (S), or (2, S) for LayerNorm), lse (S).
// Not the embedding (untied: the output weight is its own parameter), no
// label smoothing, no ignored positions.
//
//   SF_ASSIGN_OR_RETURN(auto head, HeadLayer<float>::Make(alloc, C, V, 128, /*layer=*/5, seed));
//   double loss_sum; SF_RETURN_IF_ERROR(head.Forward(&loss_sum, &saved, x, targets));
//
// Vocabulary-parallel under tensor parallelism (tensor_parallel.h, as
// Megatron's VocabParallelCrossEntropy): TP rank t holds rows [t V/TP,
// (t+1) V/TP) of the output weight and is given targets in its own numbering
// (target - t V/TP, or -1 where another rank holds the target); each rank's
// log-sum-exp and target logit over its columns are gathered and combined in
// rank order (every rank gets the same loss and lse), and the backward sums
// d(xn) over the group. The norm is whole on every rank.
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
#include "models/model.h"

namespace stateflow::backend {

template <typename T>
struct HeadSaved {
  Tensor<T> x, xn;    // (S, C) head input, normalised
  Tensor<StatOf<T>> rstd;  // (S) 1/rms of x, or (2, S) LayerNorm's mean and 1/std
  Tensor<StatOf<T>> lse;   // (S) logsumexp of the logits

  // RMSNorm's; LayerNorm's is one more.
  static int64_t NumelPerToken(int64_t C) { return 2 * C + 2; }
};

template <typename T>
class HeadLayer {
 public:
  // Parameters "norm.weight" (C) = 1 and "output.weight" (V, C) N(0, 0.02^2)
  // from (seed, layer, name), and "norm.bias" (C) = 0 for LayerNorm; the
  // norm's kind and eps from `shape`; under TP rows V/TP of the output
  // weight. REQUIRES: vocab_slice >= 1; tp.size divides V.
  static Result<HeadLayer> Make(TrackingAllocator& alloc, int64_t C,
                                int64_t V, int64_t vocab_slice, int layer,
                                std::uint64_t seed, const models::BlockShape& shape = {},
                                const TpShard& tp = {});

  HeadLayer(HeadLayer&&) = default;
  HeadLayer& operator=(HeadLayer&&) = default;

  // loss_sum = sum over the chunk's S tokens of loss_s (in double).
  // saved: filled. x (S, C); targets (S) in [0, V) (the caller checks); under
  // TP this rank's numbering, -1 for another rank's.
  Status Forward(double* loss_sum, HeadSaved<T>* saved, const Tensor<T>& x,
                 const int32_t* targets);

  // dx (S, C), kWorkspace: the gradient of loss_scale * loss_sum; parameter
  // gradients added to; saved emptied. Error: an empty `saved`.
  Status Backward(Tensor<T>* dx, HeadSaved<T>* saved, const int32_t* targets,
                  double loss_scale);

  std::vector<Param<T>>& params() { return params_; }
  int layer() const { return layer_; }

 private:
  HeadLayer(TrackingAllocator* alloc, int64_t C, int64_t V, int64_t Vs,
            int layer, const models::BlockShape& shape)
      : alloc_(alloc), C_(C), V_(V), Vs_(Vs), layer_(layer), shape_(shape) {}

  // Under TP: the whole vocabulary's lse and losses from every rank's (S).
  Status CombineVocabShards(double* loss_sum, StatOf<T>* lse, StatOf<T>* losses, int64_t S);

  // The kernels of the device the allocator's memory lives on.
  Ops<T>& ops() const { return alloc_->device().template ops<T>(); }
  TrackingAllocator* alloc_;  // not owned
  int64_t C_, V_, Vs_;  // V_: this rank's vocabulary rows
  int layer_;
  models::BlockShape shape_;
  TpShard tp_;
  std::vector<Param<T>> params_;  // {norm.weight, output.weight[, norm.bias]}
};

}  // namespace stateflow::backend

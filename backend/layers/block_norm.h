// The pre-norm of a block and the head's final norm, of the model's kind
// (models::BlockShape): RMSNorm, y = x / rms(x) * w, saving 1/rms per row; or
// LayerNorm, y = (x - mean) / std * w + b, saving the mean and 1/std per
// row. One statistics tensor either way: (R) for RMSNorm, (2, R) for
// LayerNorm (row 0 the means, row 1 the 1/std), in StatOf<T>.
//
//   SF_ASSIGN_OR_RETURN(s->rstd1, NewNormStats<T>(alloc, cls, S, shape.layer_norm));
//   NormForward(ops, shape, xn, s->rstd1.data(), x, w, b, S, C);
#pragma once

#include <cstdint>

#include "backend/device/ops.h"
#include "backend/device/precision.h"
#include "backend/tensor.h"
#include "models/model.h"

namespace stateflow::backend {

template <typename T>
Result<Tensor<StatOf<T>>> NewNormStats(TrackingAllocator& alloc, BufferClass cls, int64_t R,
                                       bool layer_norm) {
  if (layer_norm) return Tensor<StatOf<T>>::Uninitialized(alloc, cls, {2, R});
  return Tensor<StatOf<T>>::Uninitialized(alloc, cls, {R});
}

// y (R, C) = norm(x) w (+ b). `b` is LayerNorm's bias (ignored by RMSNorm).
template <typename T>
void NormForward(Ops<T>& ops, const models::BlockShape& shape, T* y, StatOf<T>* stats,
                 const T* x, const T* w, const T* b, int64_t R, int64_t C) {
  const auto eps = static_cast<ComputeOf<T>>(shape.norm_eps);
  if (shape.layer_norm) {
    ops.LayerNormForward(y, stats, stats + R, x, w, b, R, C, eps);
  } else {
    ops.RmsNormForward(y, stats, x, w, R, C, eps);
  }
}

// dx (R, C) written; dw (and LayerNorm's db) accumulated.
template <typename T>
void NormBackward(Ops<T>& ops, const models::BlockShape& shape, T* dx, GradOf<T>* dw,
                  GradOf<T>* db, const T* dy, const T* x, const T* w, const StatOf<T>* stats,
                  int64_t R, int64_t C) {
  if (shape.layer_norm) {
    ops.LayerNormBackward(dx, dw, db, dy, x, w, stats, stats + R, R, C);
  } else {
    ops.RmsNormBackward(dx, dw, dy, x, w, stats, R, C);
  }
}

}  // namespace stateflow::backend

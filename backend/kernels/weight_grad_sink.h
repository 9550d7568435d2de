// Where a split backward's weight gradients go (issue 27, zero-bubble
// schedules): while a sink is active on the calling thread, every linear
// layer's backward (LinearBackward of backend/kernels/linear.h and of every
// device's Ops<T>) computes its input gradient only and hands the sink what
// its weight gradient needs (dw, db, dy, x and the sizes); the sink copies
// dy and x and runs the weight gradients later, in the order it got them,
// through the same LinearBackward with dx null and no sink active, so that
// each gradient gets the same additions in the same order as the fused
// backward (bit for bit).
//
// Not the store (backend/model/weight_grad_store.h) and not a scheduler:
// the stage module activates a store around each block's B and runs it at
// the chunk's W.
//
//   ActiveWeightGradSink<float, float>() = &store;   // deferring from here
//   ops.LinearBackward(dx, dw, db, dy, x, w, R, C, D);  // dx now, dw later
//   ActiveWeightGradSink<float, float>() = nullptr;
#pragma once

#include <cstdint>

namespace stateflow::backend {

// T: the activations' type; G: the gradients' (GradOf<T>).
template <typename T, typename G>
class WeightGradSink {
 public:
  virtual ~WeightGradSink() = default;
  // dw (D, C) += dy^T x and db (D) += column sums of dy (db may be null),
  // for dy (R, D) and x (R, C), to be run later. The pointers dy and x are
  // valid only during the call.
  virtual void DeferLinear(G* dw, G* db, const T* dy, const T* x, int64_t R, int64_t C,
                           int64_t D) = 0;
};

// The calling thread's active sink (null: none, weight gradients now).
template <typename T, typename G>
WeightGradSink<T, G>*& ActiveWeightGradSink() {
  thread_local WeightGradSink<T, G>* sink = nullptr;
  return sink;
}

}  // namespace stateflow::backend

// What the recurrent layers (GdnLayer, Mamba3Layer) do alike around their
// passes, in one place: checking the input, the batch and the boundary
// states; making the state out (or the gradient of the state in) as zeros in
// kBoundaryStates; saving x; and the recompute modes (kNone keeps the
// forward's tensors in kActivations; kFull keeps x only, and the backward
// replays the forward from it, its tensors transient, before the backward
// pass). `Layer` has, as those two do:
//   types State (its boundary state: Zeros(alloc, dims, batch, cls)) and
//   Saved (x, batch, recompute_full, ...), a kKind name for errors
//   ("gdn layer"), and, reachable by this friend, alloc_, dims_ (C), layer_,
//   CheckState(state, batch, what), ForwardPass(y, state_out, saved,
//   state_in, cls) and BackwardPass(dx, dstate_in, saved, dy, dstate_out,
//   state_in).
//
//   template <typename T>
//   Status GdnLayer<T>::Forward(...) {
//     return RecurrentEntry<GdnLayer>::Forward(*this, y, state_out, saved, x, batch,
//                                              state_in, recompute);
//   }
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "backend/layers/copy.h"
#include "backend/tensor.h"
#include "models/cost_model.h"

namespace stateflow::backend {

template <class Layer>
struct RecurrentEntry {
  // Errors name the layer and its kind: "layer 3 (gdn layer): ...".
  static Status Error(const Layer& l, const std::string& what) {
    return Status::Invalid("layer " + std::to_string(l.layer_) + " (" + Layer::kKind + "): " +
                           what);
  }
  static Status CheckShape(const Layer& l, const char* what, const Shape& actual,
                           const Shape& expected) {
    if (actual == expected) return Status::Ok();
    return Error(l, std::string(what) + " has shape " + ShapeString(actual) + ", expected " +
                        ShapeString(expected));
  }

  template <typename T>
  static Status Forward(Layer& l, Tensor<T>* y, typename Layer::State* state_out,
                        typename Layer::Saved* saved, const Tensor<T>& x, int64_t batch,
                        const typename Layer::State& state_in, models::Recompute recompute) {
    const int64_t C = l.dims_.C;
    if (x.rank() != 2) return CheckShape(l, "input x", x.shape(), {x.numel() / C, C});
    SF_RETURN_IF_ERROR(CheckShape(l, "input x", x.shape(), {x.dim(0), C}));
    if (batch < 1 || x.dim(0) % batch != 0) {
      return Error(l, "batch " + std::to_string(batch) + " does not divide the " +
                          std::to_string(x.dim(0)) + " rows of input x");
    }
    SF_RETURN_IF_ERROR(l.CheckState(state_in, batch, "state_in"));
    if (state_out != nullptr) {
      SF_ASSIGN_OR_RETURN(*state_out, Layer::State::Zeros(*l.alloc_, l.dims_, batch,
                                                          BufferClass::kBoundaryStates));
    }
    *saved = typename Layer::Saved{};
    saved->batch = batch;
    SF_ASSIGN_OR_RETURN(saved->x, CopyTensor(*l.alloc_, BufferClass::kActivations, x));
    if (recompute == models::Recompute::kNone) {
      return l.ForwardPass(y, state_out, saved, state_in, BufferClass::kActivations);
    }
    // kFull: run the forward with transient tensors, keep only x.
    typename Layer::Saved transient;
    transient.batch = batch;
    transient.x = std::move(saved->x);
    SF_RETURN_IF_ERROR(
        l.ForwardPass(y, state_out, &transient, state_in, BufferClass::kWorkspace));
    saved->x = std::move(transient.x);
    saved->recompute_full = true;
    return Status::Ok();
  }

  template <typename T>
  static Status Backward(Layer& l, Tensor<T>* dx, typename Layer::State* dstate_in,
                         typename Layer::Saved* saved, const Tensor<T>& dy, int64_t batch,
                         const typename Layer::State* dstate_out,
                         const typename Layer::State& state_in) {
    if (saved->x.rank() != 2) return Error(l, "backward without a saved forward");
    const int64_t S = saved->x.dim(0), B = saved->batch;
    if (batch != B) {
      return Error(l, "batch " + std::to_string(batch) + " in the backward, " +
                          std::to_string(B) + " in the forward");
    }
    SF_RETURN_IF_ERROR(CheckShape(l, "output gradient dy", dy.shape(), {S, l.dims_.C}));
    SF_RETURN_IF_ERROR(l.CheckState(state_in, B, "state_in"));
    if (dstate_out != nullptr) SF_RETURN_IF_ERROR(l.CheckState(*dstate_out, B, "dstate_out"));
    if (dstate_in != nullptr) {
      SF_ASSIGN_OR_RETURN(*dstate_in, Layer::State::Zeros(*l.alloc_, l.dims_, B,
                                                          BufferClass::kBoundaryStates));
    }
    Status status;
    if (!saved->recompute_full) {
      status = l.BackwardPass(dx, dstate_in, *saved, dy, dstate_out, state_in);
    } else {  // replay the forward from x, its tensors transient
      typename Layer::Saved replay;
      replay.batch = B;
      replay.x = std::move(saved->x);
      Tensor<T> y_unused;
      status = l.ForwardPass(&y_unused, nullptr, &replay, state_in, BufferClass::kWorkspace);
      y_unused = Tensor<T>();
      if (status.ok()) status = l.BackwardPass(dx, dstate_in, replay, dy, dstate_out, state_in);
    }
    *saved = typename Layer::Saved{};
    return status;
  }
};

}  // namespace stateflow::backend

// The short causal convolution of the delta-rule layers (GDN, KDA) with its
// SiLU and, for q and k, the L2 norm that follows, forward and backward, in
// one place: each of q, k, v goes through
//   act = silu(conv(in; tail_in)),   q = scale L2norm(act) per head
// sequence by sequence of a microbatch (the conv's tail of W-1 raw inputs is
// carried between chunks in the boundary state). The backward replays conv
// from `in` and `tail_in` instead of saving it.
//
// Not a layer: the layers (gdn_layer.cc, kda_layer.cc) call these with their
// own weights; every transient is kWorkspace, freed on return, in the order
// the memory model lists (models/families/gdn.cc, kda.cc).
//
//   ConvSiluForward(ops, &act, &state_out->tail_q, s->q_in, B, w_conv, W, state_in.tail_q);
#pragma once

#include <cstdint>

#include "backend/device/ops.h"
#include "backend/device/precision.h"
#include "backend/tensor.h"

namespace stateflow::backend {

// act (S, Ch) = silu(conv(in (S, Ch); tail_in)), sequence by sequence of the
// `batch` in S rows; tail_out (B, W-1, Ch) written unless nullptr.
// REQUIRES: act allocated with S * Ch elements; w (W, Ch).
template <typename T>
void ConvSiluForward(Ops<T>& ops, Tensor<T>* act, Tensor<T>* tail_out, const Tensor<T>& in,
                     int64_t batch, const T* w, int64_t W, const Tensor<T>& tail_in) {
  const int64_t S = in.dim(0), Ch = in.dim(1), Ts = S / batch, tail = (W - 1) * Ch;
  for (int64_t b = 0; b < batch; ++b) {
    ops.ShortConvForward(act->data() + b * Ts * Ch,
                         tail_out ? tail_out->data() + b * tail : nullptr,
                         in.data() + b * Ts * Ch, w, tail_in.data() + b * tail, Ts, Ch, W);
  }
  ops.SiluForward(act->data(), act->data(), S * Ch);
}

// d_in (S, Ch) of the conv input and d(tail_in) (nullptr: skipped) from the
// gradient d_out of silu(conv(in)), or, when rnorm is given, of its L2 norm
// (heads of D channels, H of them per row) scaled by `scale`. Replays
// conv(in) from in and tail_in. dw (W, Ch) added to; dtail_out nullptr means
// zeros. d_in made in kWorkspace.
template <typename T>
Status ConvSiluBackward(TrackingAllocator& alloc, Ops<T>& ops, Tensor<T>* d_in,
                        Tensor<T>* dtail_in, const Tensor<T>& d_out,
                        const Tensor<StatOf<T>>* rnorm, ComputeOf<T> scale, int64_t H, int64_t D,
                        const Tensor<T>& in, int64_t batch, const T* w, GradOf<T>* dw, int64_t W,
                        const Tensor<T>& tail_in, const Tensor<T>* dtail_out) {
  constexpr BufferClass kWs = BufferClass::kWorkspace;
  const int64_t S = in.dim(0), Ch = in.dim(1);
  const int64_t Ts = S / batch, tail = (W - 1) * Ch;  // per sequence
  SF_ASSIGN_OR_RETURN(Tensor<T> c, Tensor<T>::Uninitialized(alloc, kWs, {S, Ch}));    // conv out
  SF_ASSIGN_OR_RETURN(Tensor<T> d_c, Tensor<T>::Uninitialized(alloc, kWs, {S, Ch}));  // its grad
  for (int64_t b = 0; b < batch; ++b) {
    ops.ShortConvForward(c.data() + b * Ts * Ch, nullptr, in.data() + b * Ts * Ch, w,
                         tail_in.data() + b * tail, Ts, Ch, W);
  }
  if (rnorm != nullptr) {
    SF_ASSIGN_OR_RETURN(Tensor<T> act, Tensor<T>::Uninitialized(alloc, kWs, {S, Ch}));  // silu(c)
    ops.SiluForward(act.data(), c.data(), S * Ch);
    ops.L2NormBackward(d_c.data(), d_out.data(), act.data(), rnorm->data(), S * H, D, scale);
    ops.SiluBackward(d_c.data(), d_c.data(), c.data(), S * Ch);
  } else {
    ops.SiluBackward(d_c.data(), d_out.data(), c.data(), S * Ch);
  }
  SF_ASSIGN_OR_RETURN(*d_in, Tensor<T>::Uninitialized(alloc, kWs, {S, Ch}));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t r = b * Ts * Ch, t = b * tail;
    ops.ShortConvBackward(d_in->data() + r, dtail_in ? dtail_in->data() + t : nullptr, dw,
                          d_c.data() + r, dtail_out ? dtail_out->data() + t : nullptr,
                          in.data() + r, w, tail_in.data() + t, Ts, Ch, W);
  }
  return Status::Ok();
}

}  // namespace stateflow::backend

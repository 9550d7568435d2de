// The second half of every block (GDN, Mamba-3 and attention layers):
//   y = h + SwiGLU(RMSNorm(h) * mlp_norm),
// forward and backward, on a layer's saved tensors and its four MLP weights.
// `Saved` is any struct with the tensors this half keeps, as the layers'
// *LayerSaved are:
//   x (R, C)                 the block's input (its rows: R)
//   h, hn (R, C)             the mixer's output (the residual) and its norm
//   rstd2 (R)                the norm's reciprocal RMS (StatOf<T>)
//   mlp_gate, mlp_up (R, F)  the SwiGLU gate and up projections
// hn, rstd2, mlp_gate and mlp_up are made in the class the caller asks for
// (kActivations, or kWorkspace when a recompute replays the forward); the
// rest in kWorkspace, freed on return.
//
//   SF_RETURN_IF_ERROR(ResidualMlpForward(*alloc_, y, s, MlpWeights(), d.C, d.F,
//                                         d.norm_eps, cls));
#pragma once

#include <cstdint>

#include "backend/device/ops.h"
#include "backend/device/precision.h"
#include "backend/tensor.h"

namespace stateflow::backend {

// The MLP half's weights (mlp_norm (C), gate and up (F, C), down (C, F)) and
// where their gradients are added.
template <typename T>
struct ResidualMlpParams {
  const T *norm, *gate, *up, *down;
  GradOf<T> *dnorm, *dgate, *dup, *ddown;
};

// y (R, C), made in kWorkspace; s->hn, rstd2, mlp_gate, mlp_up made in cls.
template <typename T, class Saved>
Status ResidualMlpForward(TrackingAllocator& alloc, Tensor<T>* y, Saved* s,
                          const ResidualMlpParams<T>& p, int64_t C, int64_t F,
                          double norm_eps, BufferClass cls) {
  constexpr BufferClass kWs = BufferClass::kWorkspace;
  Ops<T>& ops = alloc.device().template ops<T>();
  const int64_t R = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->hn, Tensor<T>::Uninitialized(alloc, cls, {R, C}));
  SF_ASSIGN_OR_RETURN(s->rstd2, Tensor<StatOf<T>>::Uninitialized(alloc, cls, {R}));
  ops.RmsNormForward(s->hn.data(), s->rstd2.data(), s->h.data(), p.norm, R, C,
                     static_cast<ComputeOf<T>>(norm_eps));
  SF_ASSIGN_OR_RETURN(s->mlp_gate, Tensor<T>::Uninitialized(alloc, cls, {R, F}));
  SF_ASSIGN_OR_RETURN(s->mlp_up, Tensor<T>::Uninitialized(alloc, cls, {R, F}));
  SF_ASSIGN_OR_RETURN(Tensor<T> prod, Tensor<T>::Uninitialized(alloc, kWs, {R, F}));
  SF_ASSIGN_OR_RETURN(*y, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
  ops.SwigluMlpForward(y->data(), s->mlp_gate.data(), s->mlp_up.data(), prod.data(),
                       s->hn.data(), p.gate, p.up, p.down, R, C, F);
  ops.Add(y->data(), s->h.data(), R * C);
  return Status::Ok();
}

// dh (R, C) = dy + RMSNorm-backward(SwiGLU-backward(dy)), made in kWorkspace;
// the four weights' gradients added.
template <typename T, class Saved>
Status ResidualMlpBackward(TrackingAllocator& alloc, Tensor<T>* dh, const Saved& s,
                           const ResidualMlpParams<T>& p, const Tensor<T>& dy,
                           int64_t C, int64_t F) {
  constexpr BufferClass kWs = BufferClass::kWorkspace;
  Ops<T>& ops = alloc.device().template ops<T>();
  const int64_t R = s.x.dim(0);
  SF_ASSIGN_OR_RETURN(Tensor<T> d_hn, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
  SF_ASSIGN_OR_RETURN(Tensor<T> ws, Tensor<T>::Uninitialized(alloc, kWs, {2, R, F}));
  ops.SwigluMlpBackward(d_hn.data(), p.dgate, p.dup, p.ddown, ws.data(), dy.data(),
                        s.mlp_gate.data(), s.mlp_up.data(), s.hn.data(), p.gate, p.up,
                        p.down, R, C, F);
  ws = Tensor<T>();
  SF_ASSIGN_OR_RETURN(*dh, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
  ops.RmsNormBackward(dh->data(), p.dnorm, d_hn.data(), s.h.data(), p.norm, s.rstd2.data(),
                      R, C);
  ops.Add(dh->data(), dy.data(), R * C);
  return Status::Ok();
}

}  // namespace stateflow::backend

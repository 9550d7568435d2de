// The second half of every block (GDN, Mamba-3, KDA and attention layers):
//   y = h + SwiGLU(RMSNorm(h) * mlp_norm)                      (the default), or
//   y = h + GELU(LayerNorm(h) Wu^T + bu) Wd^T + bd             (DeltaNet's),
// as the model's BlockShape says (models/model.h: the norm kind, the MLP kind,
// the biases), forward and backward, on a layer's saved tensors and its MLP
// weights. `Saved` is any struct with the tensors this half keeps, as the
// layers' *LayerSaved are:
//   x (R, C)                 the block's input (its rows: R)
//   h, hn (R, C)             the mixer's output (the residual) and its norm
//   rstd2                    the norm's statistics (block_norm.h: (R), or
//                            (2, R) for LayerNorm; StatOf<T>)
//   mlp_gate, mlp_up (R, F)  SwiGLU's gate and up projections; GELU's
//                            pre-activation up projection (mlp_gate empty)
// hn, rstd2, mlp_gate and mlp_up are made in the class the caller asks for
// (kActivations, or kWorkspace when a recompute replays the forward); the
// rest in kWorkspace, freed on return. The GELU backward recomputes GELU(up)
// from the saved up projection, as SwiGLU's recomputes its product.
//
//   SF_RETURN_IF_ERROR(ResidualMlpForward(*alloc_, y, s, MlpWeights(), d.C, d.F,
//                                         d.shape, cls));
#pragma once

#include <cstdint>

#include "backend/device/ops.h"
#include "backend/device/precision.h"
#include "backend/layers/block_norm.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/tensor.h"
#include "models/model.h"

namespace stateflow::backend {

// The MLP half's weights (mlp_norm (C), gate and up (F, C), down (C, F);
// LayerNorm's bias (C), the GELU MLP's up (F) and down (C) biases, nullptr
// where the model has none; SwiGLU's gate nullptr for GELU) and where their
// gradients are added.
template <typename T>
struct ResidualMlpParams {
  const T *norm, *gate, *up, *down;
  GradOf<T> *dnorm, *dgate, *dup, *ddown;
  const T *norm_b = nullptr, *up_b = nullptr, *down_b = nullptr;
  GradOf<T> *dnorm_b = nullptr, *dup_b = nullptr, *ddown_b = nullptr;
};

// The default block (RMSNorm with `norm_eps`, SwiGLU, no biases): the shape
// of the layers that build no other (Mamba-3, KDA, attention).
inline models::BlockShape RmsNormSwiglu(double norm_eps) {
  models::BlockShape shape;
  shape.norm_eps = norm_eps;
  return shape;
}

// y (R, C), made in kWorkspace; s->hn, rstd2, mlp_gate (SwiGLU), mlp_up made
// in cls. Under TP (tensor_parallel.h) F is this rank's columns: the down
// projection's partial sums are summed over the group (its bias added on
// rank 0 only), and the backward sums d(hn) likewise.
template <typename T, class Saved>
Status ResidualMlpForward(TrackingAllocator& alloc, Tensor<T>* y, Saved* s,
                          const ResidualMlpParams<T>& p, int64_t C, int64_t F,
                          const models::BlockShape& shape, BufferClass cls,
                          const TpShard& tp = {}) {
  constexpr BufferClass kWs = BufferClass::kWorkspace;
  Ops<T>& ops = alloc.device().template ops<T>();
  const int64_t R = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->hn, Tensor<T>::Uninitialized(alloc, cls, {R, C}));
  SF_ASSIGN_OR_RETURN(s->rstd2, NewNormStats<T>(alloc, cls, R, shape.layer_norm));
  NormForward(ops, shape, s->hn.data(), s->rstd2.data(), s->h.data(), p.norm, p.norm_b, R, C);
  if (shape.gelu) {
    SF_ASSIGN_OR_RETURN(s->mlp_up, Tensor<T>::Uninitialized(alloc, cls, {R, F}));
    ops.LinearForward(s->mlp_up.data(), s->hn.data(), p.up, p.up_b, R, C, F);
    SF_ASSIGN_OR_RETURN(Tensor<T> act, Tensor<T>::Uninitialized(alloc, kWs, {R, F}));
    ops.GeluForward(act.data(), s->mlp_up.data(), R * F);
    SF_ASSIGN_OR_RETURN(*y, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
    ops.LinearForward(y->data(), act.data(), p.down, tp.rank == 0 ? p.down_b : nullptr, R, F,
                      C);
  } else {
    SF_ASSIGN_OR_RETURN(s->mlp_gate, Tensor<T>::Uninitialized(alloc, cls, {R, F}));
    SF_ASSIGN_OR_RETURN(s->mlp_up, Tensor<T>::Uninitialized(alloc, cls, {R, F}));
    SF_ASSIGN_OR_RETURN(Tensor<T> prod, Tensor<T>::Uninitialized(alloc, kWs, {R, F}));
    SF_ASSIGN_OR_RETURN(*y, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
    ops.SwigluMlpForward(y->data(), s->mlp_gate.data(), s->mlp_up.data(), prod.data(),
                         s->hn.data(), p.gate, p.up, p.down, R, C, F);
  }
  SF_RETURN_IF_ERROR(TpAllReduceSum(tp, y->data(), R * C));
  ops.Add(y->data(), s->h.data(), R * C);
  return Status::Ok();
}

// dh (R, C) = dy + norm-backward(MLP-backward(dy)), made in kWorkspace; the
// weights' gradients added.
template <typename T, class Saved>
Status ResidualMlpBackward(TrackingAllocator& alloc, Tensor<T>* dh, const Saved& s,
                           const ResidualMlpParams<T>& p, const Tensor<T>& dy,
                           int64_t C, int64_t F, const models::BlockShape& shape,
                           const TpShard& tp = {}) {
  constexpr BufferClass kWs = BufferClass::kWorkspace;
  Ops<T>& ops = alloc.device().template ops<T>();
  const int64_t R = s.x.dim(0);
  Tensor<T> d_hn;
  if (shape.gelu) {
    // act = GELU(up) again; d(act) = dy Wd; d(up) = GELU'(up) d(act) in place.
    SF_ASSIGN_OR_RETURN(Tensor<T> act, Tensor<T>::Uninitialized(alloc, kWs, {R, F}));
    ops.GeluForward(act.data(), s.mlp_up.data(), R * F);
    SF_ASSIGN_OR_RETURN(Tensor<T> d_act, Tensor<T>::Uninitialized(alloc, kWs, {R, F}));
    ops.LinearBackward(d_act.data(), p.ddown, p.ddown_b, dy.data(), act.data(), p.down, R, F,
                       C);
    act = Tensor<T>();
    ops.GeluBackward(d_act.data(), d_act.data(), s.mlp_up.data(), R * F);
    SF_ASSIGN_OR_RETURN(d_hn, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
    ops.LinearBackward(d_hn.data(), p.dup, p.dup_b, d_act.data(), s.hn.data(), p.up, R, C, F);
  } else {
    SF_ASSIGN_OR_RETURN(d_hn, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
    SF_ASSIGN_OR_RETURN(Tensor<T> ws, Tensor<T>::Uninitialized(alloc, kWs, {2, R, F}));
    ops.SwigluMlpBackward(d_hn.data(), p.dgate, p.dup, p.ddown, ws.data(), dy.data(),
                          s.mlp_gate.data(), s.mlp_up.data(), s.hn.data(), p.gate, p.up,
                          p.down, R, C, F);
  }
  SF_RETURN_IF_ERROR(TpAllReduceSum(tp, d_hn.data(), R * C));
  SF_ASSIGN_OR_RETURN(*dh, Tensor<T>::Uninitialized(alloc, kWs, {R, C}));
  NormBackward(ops, shape, dh->data(), p.dnorm, p.dnorm_b, d_hn.data(), s.h.data(), p.norm,
               s.rstd2.data(), R, C);
  ops.Add(dh->data(), dy.data(), R * C);
  return Status::Ok();
}

}  // namespace stateflow::backend

// What every layer's formulas share (internal to models/): the FLOP
// conventions of elementwise work, the block's MLP half (its FLOPs and its
// memory events, the same for every family and for attention: backend/
// layers/residual_mlp.h), and Events, the builder of a layer's memory events
// from per-token tensor widths.
//
// Not a family (family.h) and not the public formulas (layer_formulas.h).
//
//   Events ev(bytes);
//   ev.Act(kAct, h);        // t * h activation elements saved
//   MlpForwardEvents(h, m / tp, kAct, &ev);
#pragma once

#include "models/layer_formulas.h"
#include "models/memory_segment.h"

namespace stateflow::models {

// Elementwise FLOP conventions: RMSNorm 4 per element (square, sum, scale,
// weight), LayerNorm 7 (sum, subtract, square, sum, scale, weight, bias),
// SiLU 5 (negate, exp, add, divide, multiply), GELU 8 (scale, erf counted
// as 4, add, two products), rotary 3, gates 10 per head (softplus / sigmoid
// / exp; a sigmoid alone 5).
inline constexpr double kNormFlops = 4;
inline constexpr double kLayerNormFlops = 7;
inline constexpr double kSiluFlops = 5;
inline constexpr double kGeluFlops = 8;
inline constexpr double kRotaryFlops = 3;
inline constexpr double kGateFlops = 10;

// The MLP half and the block's two pre-norms, per token: h hidden, m the
// MLP's size. SwiGLU (3 matmuls, SiLU, product) or GELU (2 matmuls, GELU),
// the biases, two norms of the model's kind, two residual adds.
inline double MlpAndNormsFlops(double h, double m, const BlockShape& shape = {}) {
  const double mlp = shape.gelu ? 4 * h * m + kGeluFlops * m : 6 * h * m + (kSiluFlops + 1) * m;
  const double bias = shape.mlp_bias ? m + h : 0;
  const double norm = shape.layer_norm ? kLayerNormFlops : kNormFlops;
  return mlp + bias + 2 * norm * h + 2 * h;
}

inline constexpr BufferClass kAct = BufferClass::kActivations;
inline constexpr BufferClass kWs = BufferClass::kWorkspace;

// Appends allocations and frees of tensors of `per_token` elements per token
// (activation or statistic precision), or of a fixed number of bytes.
class Events {
 public:
  explicit Events(const TensorBytes& b) : b_(b) {}
  // + t * per_token elements of activation precision.
  void Act(BufferClass cls, double per_token) { seg_.Add(cls, b_.tokens * per_token * b_.act); }
  void Stat(BufferClass cls, double per_token) { seg_.Add(cls, b_.tokens * per_token * b_.stat()); }
  void FreeAct(BufferClass cls, double per_token) { seg_.Add(cls, -b_.tokens * per_token * b_.act); }
  void FreeStat(BufferClass cls, double per_token) { seg_.Add(cls, -b_.tokens * per_token * b_.stat()); }
  void Bytes(BufferClass cls, double bytes) { seg_.Add(cls, bytes); }
  const MemorySegment& segment() const { return seg_; }
  const TensorBytes& sizes() const { return b_; }

 private:
  const TensorBytes b_;
  MemorySegment seg_;
};

// The MLP half of every block (backend/layers/residual_mlp.h), C hidden, F
// the MLP size on this TP rank, of the model's shape (the default: RMSNorm,
// SwiGLU). Forward: hn, the norm's statistics, mlp_gate (SwiGLU) and mlp_up
// in `saved`; ends holding y.
void MlpForwardEvents(double C, double F, const BlockShape& shape, BufferClass saved,
                      Events* ev);
inline void MlpForwardEvents(double C, double F, BufferClass saved, Events* ev) {
  MlpForwardEvents(C, F, BlockShape{}, saved, ev);
}
// Backward: ends holding dh (which becomes the layer's dx).
void MlpBackwardEvents(double C, double F, const BlockShape& shape, Events* ev);
inline void MlpBackwardEvents(double C, double F, Events* ev) {
  MlpBackwardEvents(C, F, BlockShape{}, ev);
}

// A recurrent layer's forward and backward events around its passes, as
// RecurrentEntry (backend/layers/recurrent_entry.h) makes them: the input x
// copied into kActivations; without recompute the pass saves in kAct, with
// it in kWorkspace and frees what it saved; the backward replays the forward
// first under recompute, then runs its pass, frees the saved tensors and x.
// `pass(saved, ev)` appends the forward pass's events (ending holding y),
// `backward(ev)` the backward pass's (from dy to dx), `free_saved(saved, ev)`
// frees what the forward pass saved.
template <class Pass, class FreeSaved>
MemorySegment RecurrentForwardEvents(const TensorBytes& b, double C, bool recompute_full,
                                     Pass pass, FreeSaved free_saved) {
  Events ev(b);
  ev.Act(kAct, C);  // x, the layer input, copied
  const BufferClass saved = recompute_full ? kWs : kAct;
  pass(saved, &ev);
  if (recompute_full) free_saved(saved, &ev);
  return ev.segment();
}
template <class Pass, class Backward, class FreeSaved>
MemorySegment RecurrentBackwardEvents(const TensorBytes& b, double C, bool recompute_full,
                                      Pass pass, Backward backward, FreeSaved free_saved) {
  Events ev(b);
  if (recompute_full) {
    pass(kWs, &ev);  // the replay, then its unused output
    ev.FreeAct(kWs, C);
  }
  backward(&ev);
  free_saved(recompute_full ? kWs : kAct, &ev);
  ev.FreeAct(kAct, C);  // x
  return ev.segment();
}

}  // namespace stateflow::models

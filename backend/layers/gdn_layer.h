// One Gated DeltaNet layer of the model (mixer and MLP) with an explicit forward
// and backward over one sequence chunk (llm.c style: outputs first, then
// inputs; shapes in comments). What it computes, per token of the chunk:
//
//   xn   = RMSNorm(x) * attn_norm                               (S, C)
//   q_in = xn Wq^T, k_in = xn Wk^T, v_in = xn Wv^T               (S, HK|HK|HV)
//   a    = xn Wa^T, b = xn Wb^T, z = xn Wg^T                     (S, H|H|HV)
//   q    = d_k^{-1/2} L2norm(silu(conv_q(q_in)))  per head       (S, H, K)
//   k    = L2norm(silu(conv_k(k_in)))             per head       (S, H, K)
//   v    = silu(conv_v(v_in))                                    (S, H, Dv)
//   g    = -exp(A_log) softplus(a + dt_bias),  beta = sigmoid(b) (S, H)
//   o    = GdnCore(q, k, v, g, beta; S_in -> S_out)              (S, H, Dv)
//   h    = x + (RMSNorm_head(o) * o_norm * silu(z)) Wo^T         (S, C)
//   y    = h + SwiGLU(RMSNorm(h) * mlp_norm)                     (S, C)
//
// conv_* is the causal depthwise short convolution of width W (no bias) whose
// tail (the last W-1 raw inputs) is carried between chunks. No projection has
// a bias: the kernels do not need one and GDN has none.
//
// DeltaNet (the model's decay "none", models/model.h's BlockShape for the
// rest; the form published DeltaNet pipeline runs train) changes, per token:
//   xn   = LayerNorm(x) * attn_norm + attn_norm.bias             (both pre-norms)
//   no a projection, A_log or dt_bias: g = 0 (the delta rule: the core runs
//        on a saved (S, H) tensor of zeros, its dg discarded)
//   h    = x + (RMSNorm_head(o) * o_norm * silu(z)) Wo^T + o_proj.bias
//   y    = h + GELU(LayerNorm(h) Wu^T + bu) Wd^T + bd            (residual_mlp.h)
// with every norm's eps 1e-5. The q, k, v and gate projections are the four
// blocks of DeltaNet's one bias-free h -> 4h projection (the same parameters
// and products, four GEMMs). Parameters absent from a configuration are not
// made (params() lists the present ones, in ParamId order).
//
// Boundary state (GdnState): everything a chunk hands to the next chunk of the
// same sequences: the recurrent state S (B, H, Dv, K) and the three conv
// tails, per sequence. Backward turns d(state out) into d(state in).
//
// Several sequences (a microbatch of B = microbatch_size): x has B S rows,
// sequence-major (row b S + t is token t of sequence b). Projections, norms
// and the MLP run over all rows at once; the short convolutions and the
// recurrence run sequence by sequence (the core's backward workspace is one
// sequence's, reused).
//
// Recompute modes: kNone saves what the backward needs (GdnLayerSaved, in
// BufferClass::kActivations); kFull saves only the chunk's input x, and the
// backward re-runs the forward (its tensors then in kWorkspace) before the
// backward proper; both give bit-identical results.
//
// Not the embedding or the head (embedding_layer.h, head_layer.h), not the
// pipeline stage (backend/model/model_stage_module.h).
//
//   SF_ASSIGN_OR_RETURN(auto gdn, GdnLayer<float>::Make(alloc, dims, /*layer=*/1, /*num_layers=*/4, seed));
//   SF_RETURN_IF_ERROR(gdn.Forward(&y, &state_out, &saved, x, /*batch=*/1, state_in, models::Recompute::kNone));
//
// Dimension legend: B sequences, S tokens of each in the chunk, C hidden size, H heads, K key
// (query) head dim d_k, Dv value head dim d_v, F SwiGLU size, W conv width,
// HK = H K, HV = H Dv.
#pragma once

#include <cstdint>
#include <utility>
#include <string>
#include <memory>
#include <vector>

#include "backend/device/device.h"
#include "backend/device/gdn_ops.h"
#include "backend/kernels/gdn_core.h"
#include "backend/layers/param.h"
#include "backend/layers/recurrent_entry.h"
#include "backend/layers/residual_mlp.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/tensor.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

struct GdnLayerDims {
  int64_t C = 0, H = 0, K = 0, Dv = 0, F = 0, W = 0;
  int64_t block_size = kGdnBlockSize;  // T_C of the recurrence kernel
  // The core's forward and backward through GdnOps::GdnCoreForwardOverlapped
  // and GdnCoreBackwardOverlapped (schedule.st_overlap): split-and-overlap
  // where the device has it.
  bool st_overlap = false;
  // B_V, the core's ST tile of value rows (schedule.st_tile; Ops' st_tile):
  // 0 is the device's default (untiled). The results do not depend on it
  // beyond rounding (ops.h).
  int64_t st_tile = 0;
  double norm_eps = 1e-6;              // the three norms (shape.norm_eps)
  double l2_eps = 1e-6;                // the q and k L2 norms
  // The pre-norms' kind, the MLP's kind and the biases (models/model.h).
  models::BlockShape shape;
  // GDN's decay gate; false: DeltaNet (g = 0).
  bool decay = true;
  // Tensor parallelism (tensor_parallel.h): H and F are this rank's heads and
  // MLP columns (Sharded); the rest is the whole layer's.
  TpShard tp{};

  int64_t HK() const { return H * K; }
  int64_t HV() const { return H * Dv; }

  // hidden_size, num_heads, head_dim_k, head_dim_v, mlp_size, conv_width;
  // norm, mlp, mlp_bias, out_proj_bias, decay.
  // REQUIRES: models::ValidateModel(model).ok().
  static GdnLayerDims FromModel(const pb::ModelSpec& model);
  // This layer's dims on TP rank tp.rank of tp.size: H / TP heads, F / TP MLP
  // columns. REQUIRES: tp.size divides H and F (models::ValidateModel at TP).
  GdnLayerDims Sharded(const TpShard& shard) const;
};

// The boundary state of one GDN layer for B sequences (or its gradient).
template <typename T>
struct GdnState {
  Tensor<StatOf<T>> S;  // (B, H, Dv, K) recurrent state (float in bf16)
  Tensor<T> tail_q;  // (B, W-1, HK) last W-1 conv inputs of q, oldest first
  Tensor<T> tail_k;  // (B, W-1, HK)
  Tensor<T> tail_v;  // (B, W-1, HV)

  // Zeros: the state at the sequences' start.
  static Result<GdnState> Zeros(TrackingAllocator& alloc,
                                const GdnLayerDims& dims, int64_t batch,
                                BufferClass cls);
  // Elements of one sequence's state: H Dv K + (W-1)(2 HK + HV).
  static int64_t Numel(const GdnLayerDims& dims);
  bool empty() const { return S.numel() == 0; }
  int64_t batch() const { return S.rank() == 4 ? S.dim(0) : 0; }
};

// What the forward keeps for the backward (one layer, one chunk). Under
// recompute kFull only x is held. Backward empties it.
template <typename T>
struct GdnLayerSaved {
  bool recompute_full = false;
  int64_t batch = 1;            // B sequences; every tensor has B S rows
  Tensor<T> x;                  // (S, C) layer input
  Tensor<T> xn;                 // (S, C) pre-norm output
  Tensor<StatOf<T>> rstd1;      // its statistics (block_norm.h: (S), or (2, S))
  Tensor<T> q_in, k_in, v_in;   // (S, HK), (S, HK), (S, HV) conv inputs
  Tensor<T> q, k, v;            // (S, HK), (S, HK), (S, HV) core inputs
  Tensor<StatOf<T>> q_rnorm, k_rnorm;  // (S, H) 1/|.| of the L2 norms
  Tensor<T> a, g, beta;         // (S, H) decay input (none without decay), log decay, beta
  Tensor<T> o;                  // (S, HV) core output
  Tensor<StatOf<T>> o_rstd;     // (S, H) its 1/rms
  Tensor<T> z, gated;           // (S, HV) output gate, o_proj input
  Tensor<T> h, hn;              // (S, C) after the mixer, (S, C)
  Tensor<StatOf<T>> rstd2;      // (S), or (2, S)
  Tensor<T> mlp_gate, mlp_up;   // (S, F) SwiGLU gate and up projections (GELU: up only)

  // Elements per token under kNone, the default shape with decay:
  // 4C + 2F + 2 + 4 HK + 5 HV + 6 H.
  static int64_t NumelPerToken(const GdnLayerDims& dims);
};

template <typename T>
class GdnLayer {
 public:
  using State = GdnState<T>;
  using Saved = GdnLayerSaved<T>;
  static constexpr const char* kKind = "gdn layer";  // in errors

  // The parameters, in params() order (those of the configuration: Has);
  // names as in ParamName(). The last five are DeltaNet's biases.
  enum ParamId {
    kAttnNorm, kQProj, kKProj, kVProj, kAProj, kBProj, kGProj,
    kQConv, kKConv, kVConv, kALog, kDtBias, kONorm, kOProj,
    kMlpNorm, kMlpGate, kMlpUp, kMlpDown,
    kAttnNormBias, kOProjBias, kMlpNormBias, kMlpUpBias, kMlpDownBias, kNumParams
  };
  // "attn_norm.weight", "q_proj.weight", ..., "mlp.down_proj.bias".
  static const char* ParamName(ParamId id);
  // Whether a layer of `dims` has parameter `id` (GDN: the first 18;
  // DeltaNet: no a_proj, A_log, dt_bias, gate_proj, and the biases of its
  // shape).
  static bool Has(const GdnLayerDims& dims, ParamId id);

  // Weights (kWeights) and zero gradients (kGradients) of the layer at
  // `layer` (its index in the model's layer list), initialised from
  // (seed, layer, name) only: norms 1; projections N(0, 0.02^2); o_proj and
  // mlp.down_proj N(0, (0.02 / sqrt(2 num_layers))^2); conv taps
  // U(-W^{-1/2}, W^{-1/2}); A_log = log U(0, 16); dt_bias = softplus^{-1}(dt)
  // with log dt ~ U(log 0.001, log 0.1). REQUIRES: dims from FromModel.
  static Result<GdnLayer> Make(TrackingAllocator& alloc,
                               const GdnLayerDims& dims, int layer,
                               int num_layers, std::uint64_t seed);

  GdnLayer(GdnLayer&&) = default;
  GdnLayer& operator=(GdnLayer&&) = default;

  // Forward of one chunk of `batch` sequences (rows of x and y as in the
  // header comment; the shapes below write S for B S rows).
  //   y (S, C) out, kWorkspace (the caller hands it on);
  //   state_out: filled (kBoundaryStates) unless nullptr (the last chunk);
  //   saved: filled for Backward (kActivations);
  //   x (S, C); state_in: as GdnState::Zeros(batch) at the sequence start.
  // Errors: batch < 1 or not dividing x's rows, shapes (naming the layer and
  // tensor), allocator capacity.
  Status Forward(Tensor<T>* y, GdnState<T>* state_out, GdnLayerSaved<T>* saved,
                 const Tensor<T>& x, int64_t batch, const GdnState<T>& state_in,
                 models::Recompute recompute);

  // Backward of the chunk whose forward filled `saved` with `state_in`, of
  // the forward's `batch`.
  //   dx (S, C) out (kWorkspace); dstate_in: filled (kBoundaryStates) unless
  //   nullptr (the first chunk); saved: emptied;
  //   dy (S, C); dstate_out: nullptr means zeros (the last chunk).
  // Parameter gradients are added to. Errors: an empty `saved` (no forward),
  // a batch other than the forward's, shapes, allocator capacity.
  Status Backward(Tensor<T>* dx, GdnState<T>* dstate_in,
                  GdnLayerSaved<T>* saved, const Tensor<T>& dy, int64_t batch,
                  const GdnState<T>* dstate_out, const GdnState<T>& state_in);

  std::vector<Param<T>>& params() { return params_; }
  // REQUIRES: Has(dims(), id).
  Param<T>& param(ParamId id) { return params_[slot_[id]]; }
  const GdnLayerDims& dims() const { return dims_; }
  int layer() const { return layer_; }

 private:
  friend struct RecurrentEntry<GdnLayer>;
  // Gradients of the mixer's per-token intermediates (one chunk).
  struct MixerGrads;

  GdnLayer(TrackingAllocator* alloc, const GdnLayerDims& dims, int layer)
      : alloc_(alloc), dims_(dims), layer_(layer) {}

  template <typename E = T>
  Result<Tensor<E>> New(BufferClass cls, Shape shape);
  // A parameter's value and gradient; nullptr where the configuration has
  // none (a bias it does not have).
  const T* w(ParamId id) const {
    return slot_[id] < 0 ? nullptr : params_[slot_[id]].value.data();
  }
  GradOf<T>* dw(ParamId id) { return slot_[id] < 0 ? nullptr : params_[slot_[id]].grad.data(); }
  ResidualMlpParams<T> MlpParams() {
    return {w(kMlpNorm),      w(kMlpGate),      w(kMlpUp),      w(kMlpDown),
            dw(kMlpNorm),     dw(kMlpGate),     dw(kMlpUp),     dw(kMlpDown),
            w(kMlpNormBias),  w(kMlpUpBias),    w(kMlpDownBias),
            dw(kMlpNormBias), dw(kMlpUpBias),   dw(kMlpDownBias)};
  }
  Status CheckState(const GdnState<T>& state, int64_t batch, const char* what) const;

  // The forward, reading saved->x and filling the rest of *saved with
  // tensors of class `cls`.
  Status ForwardPass(Tensor<T>* y, GdnState<T>* state_out,
                     GdnLayerSaved<T>* saved, const GdnState<T>& state_in,
                     BufferClass cls);
  Status MixerInputsForward(GdnLayerSaved<T>* saved, GdnState<T>* state_out,
                            const GdnState<T>& state_in, BufferClass cls);
  Status MixerOutputForward(GdnLayerSaved<T>* saved, BufferClass cls);
  Status MlpForward(Tensor<T>* y, GdnLayerSaved<T>* saved, BufferClass cls);

  Status BackwardPass(Tensor<T>* dx, GdnState<T>* dstate_in,
                      const GdnLayerSaved<T>& saved, const Tensor<T>& dy,
                      const GdnState<T>* dstate_out,
                      const GdnState<T>& state_in);
  Status MlpBackward(Tensor<T>* dh, const GdnLayerSaved<T>& saved,
                     const Tensor<T>& dy);
  Status MixerOutputBackward(Tensor<T>* d_o, Tensor<T>* dz,
                             const GdnLayerSaved<T>& saved,
                             const Tensor<T>& dh);
  Status CoreBackward(MixerGrads* grads, GdnState<T>* dstate_in,
                      const GdnLayerSaved<T>& saved, const Tensor<T>& d_o,
                      const GdnState<T>* dstate_out,
                      const GdnState<T>& state_in);
  Status MixerInputsBackward(Tensor<T>* dx, GdnState<T>* dstate_in,
                             const MixerGrads& grads,
                             const GdnLayerSaved<T>& saved,
                             const GdnState<T>* dstate_out,
                             const GdnState<T>& state_in);

  // The kernels of the device the allocator's memory lives on: those every
  // family shares, and this family's own (found once, at Make).
  Ops<T>& ops() const { return alloc_->device().template ops<T>(); }
  GdnOps<T>& fops() const { return *fops_; }
  TrackingAllocator* alloc_;  // not owned
  GdnOps<T>* fops_ = nullptr;  // the device's, not owned
  GdnLayerDims dims_;
  int layer_;
  std::vector<Param<T>> params_;  // the configuration's, in ParamId order
  int slot_[kNumParams];          // params_ index of each ParamId, -1 if absent
};

template <typename T>
class CorePhaseRunner;  // core_phases.h

// The GDN family on the backend (backend/model/layer_family.h):
// its layer, its dims from the model, and its core run phase by phase for
// the profiler (gdn_core_phases.cc).
struct GdnFamilyTraits {
  static constexpr const char* kName = "gdn";
  template <typename T>
  using Layer = GdnLayer<T>;
  using Dims = GdnLayerDims;
  static Dims DimsOf(const pb::ModelSpec& model) { return GdnLayerDims::FromModel(model); }
  // The constants the ModelSpec does not carry (--dump-weights' "constants").
  static std::vector<std::pair<std::string, double>> Constants(const Dims& d) {
    return {{"norm_eps", d.norm_eps}, {"l2_eps", d.l2_eps},
            {"block_size", static_cast<double>(d.block_size)}};
  }
  template <typename T>
  static Result<std::unique_ptr<CorePhaseRunner<T>>> MakePhaseRunner(
      const GdnLayerDims& dims, TrackingAllocator& alloc, std::int64_t batch, std::int64_t tokens);
};

}  // namespace stateflow::backend

// One Kimi Delta Attention (KDA) layer of the model (mixer and MLP), the
// mixer of Kimi Linear (flash-linear-attention's KimiDeltaAttention), with an
// explicit forward and backward over one sequence chunk (llm.c style:
// outputs first, then inputs; shapes in comments). Per token of the chunk:
//
//   xn   = RMSNorm(x) * attn_norm                               (S, C)
//   q_in = xn Wq^T, k_in = xn Wk^T, v_in = xn Wv^T               (S, HK|HK|HV)
//   a    = (xn Wf1^T) Wf2^T                   low rank Dv        (S, HK)
//   b    = xn Wb^T                                               (S, H)
//   z    = (xn Wg1^T) Wg2^T + bg               low rank Dv       (S, HV)
//   q    = d_k^{-1/2} L2norm(silu(conv_q(q_in)))  per head       (S, H, K)
//   k    = L2norm(silu(conv_k(k_in)))             per head       (S, H, K)
//   v    = silu(conv_v(v_in))                                    (S, H, Dv)
//   g    = -exp(A_log) softplus(a + dt_bias)   per channel       (S, H, K)
//   beta = sigmoid(b)                                            (S, H)
//   o    = KdaCore(q, k, v, g, beta; S_in -> S_out)              (S, H, Dv)
//   h    = x + (RMSNorm_head(o) * o_norm * sigmoid(z)) Wo^T      (S, C)
//   y    = h + SwiGLU(RMSNorm(h) * mlp_norm)                     (S, C)
//
// Against the Gated DeltaNet layer (gdn_layer.h) it differs in the decay
// (a gate per key channel, from a low-rank projection, and the core of
// kda_core.h) and in the output gate (low rank with a bias, sigmoid instead
// of SiLU); the convolutions (conv_silu.h), the boundary state (the
// recurrent state and the three conv tails), the entry checks and the
// recompute modes (recurrent_entry.h) and the MLP half (residual_mlp.h) are
// the same code.
//
// Recompute modes: kNone saves what the backward needs (KdaLayerSaved, in
// kActivations); kFull saves only x and the backward replays the forward
// (its tensors in kWorkspace) first; both give bit-identical results. The
// allocations, in order, are models/families/kda.cc's memory events.
//
// Not the embedding or the head, not the pipeline stage.
//
//   SF_ASSIGN_OR_RETURN(auto kda, KdaLayer<float>::Make(alloc, dims, /*layer=*/1, /*num_layers=*/4, seed));
//   SF_RETURN_IF_ERROR(kda.Forward(&y, &state_out, &saved, x, /*batch=*/1, state_in, models::Recompute::kNone));
//
// Dimension legend: B sequences, S tokens of each in the chunk (S rows in
// total in the shapes below), C hidden size, H heads, K key head dim d_k, Dv
// value head dim d_v (also the rank of the low-rank gates, Kimi Linear's
// head_v_dim), F SwiGLU size, W conv width, HK = H K, HV = H Dv.
#pragma once

#include <cstdint>
#include <utility>
#include <string>
#include <memory>
#include <vector>

#include "backend/device/device.h"
#include "backend/device/kda_ops.h"
#include "backend/kernels/kda_core.h"
#include "backend/layers/param.h"
#include "backend/layers/recurrent_entry.h"
#include "backend/layers/residual_mlp.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/tensor.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

struct KdaLayerDims {
  int64_t C = 0, H = 0, K = 0, Dv = 0, F = 0, W = 0;
  int64_t block_size = kKdaBlockSize;  // T_C of the recurrence kernel
  // The core split and overlapped (schedule.st_overlap) and its ST tile B_V
  // (schedule.st_tile; 0: the device's default), as GdnLayerDims'.
  bool st_overlap = false;
  int64_t st_tile = 0;
  double norm_eps = 1e-6;  // the three RMSNorms
  double l2_eps = 1e-6;    // the q and k L2 norms
  // Tensor parallelism (tensor_parallel.h): H and F are this rank's heads and
  // MLP columns (Sharded); the gates' low-rank down projections (R = Dv
  // rows) and o_norm are whole on every rank, their gradients partial.
  TpShard tp{};

  int64_t HK() const { return H * K; }
  int64_t HV() const { return H * Dv; }
  int64_t R() const { return Dv; }  // rank of the decay and output gates

  // hidden_size, num_heads, head_dim_k, head_dim_v, mlp_size, conv_width.
  // REQUIRES: models::ValidateModel(model).ok().
  static KdaLayerDims FromModel(const pb::ModelSpec& model);
  // H / TP heads, F / TP MLP columns on rank shard.rank.
  KdaLayerDims Sharded(const TpShard& shard) const;
};

// The boundary state of one KDA layer for B sequences (or its gradient): as
// GDN's, the recurrent state and the three conv tails.
template <typename T>
struct KdaState {
  Tensor<StatOf<T>> S;  // (B, H, Dv, K) recurrent state (float in bf16)
  Tensor<T> tail_q;     // (B, W-1, HK) last W-1 conv inputs of q, oldest first
  Tensor<T> tail_k;     // (B, W-1, HK)
  Tensor<T> tail_v;     // (B, W-1, HV)

  // Zeros: the state at the sequences' start (S, then the tails).
  static Result<KdaState> Zeros(TrackingAllocator& alloc, const KdaLayerDims& dims,
                                int64_t batch, BufferClass cls);
  // Elements of one sequence's state: H Dv K + (W-1)(2 HK + HV).
  static int64_t Numel(const KdaLayerDims& dims);
  bool empty() const { return S.numel() == 0; }
};

// What the forward keeps for the backward (one layer, one chunk). Under
// recompute kFull only x is held. Backward empties it.
template <typename T>
struct KdaLayerSaved {
  bool recompute_full = false;
  int64_t batch = 1;                   // B sequences; every tensor has B S rows
  Tensor<T> x;                         // (S, C) layer input
  Tensor<T> xn;                        // (S, C) pre-norm output
  Tensor<StatOf<T>> rstd1;             // (S) its 1/rms
  Tensor<T> q_in, k_in, v_in;          // (S, HK), (S, HK), (S, HV) conv inputs
  Tensor<T> f1, a;                     // (S, Dv), (S, HK) the decay's projections
  Tensor<T> z1, z;                     // (S, Dv), (S, HV) the output gate's
  Tensor<StatOf<T>> q_rnorm, k_rnorm;  // (S, H) 1/|.| of the L2 norms
  Tensor<T> q, k, v;                   // (S, HK), (S, HK), (S, HV) core inputs
  Tensor<T> g;                         // (S, HK) log decay per channel
  Tensor<T> beta;                      // (S, H)
  Tensor<T> o;                         // (S, HV) core output
  Tensor<StatOf<T>> o_rstd;            // (S, H) its 1/rms
  Tensor<T> gated;                     // (S, HV) o_proj input
  Tensor<T> h, hn;                     // (S, C) after the mixer, (S, C)
  Tensor<StatOf<T>> rstd2;             // (S)
  Tensor<T> mlp_gate, mlp_up;          // (S, F) SwiGLU gate and up projections
};

template <typename T>
class KdaLayer {
 public:
  using State = KdaState<T>;
  using Saved = KdaLayerSaved<T>;
  static constexpr const char* kKind = "kda layer";  // in errors

  // The parameters, in Parameters() order; names as in ParamName().
  enum ParamId {
    kAttnNorm, kQProj, kKProj, kVProj, kFProjDown, kFProjUp, kBProj,
    kGProjDown, kGProjUp, kGProjBias, kQConv, kKConv, kVConv, kALog, kDtBias,
    kONorm, kOProj, kMlpNorm, kMlpGate, kMlpUp, kMlpDown, kNumParams
  };
  // "attn_norm.weight", "q_proj.weight", ..., "f_proj.0.weight", ...
  static const char* ParamName(ParamId id);

  // Weights (kWeights) and zero gradients (kGradients) of the layer at
  // `layer`, initialised from (seed, layer, name) only: norms 1; projections
  // N(0, 0.02^2); o_proj and mlp.down_proj N(0, (0.02 / sqrt(2 num_layers))^2);
  // g_proj's bias 0; conv taps U(-W^{-1/2}, W^{-1/2}); A_log = log U(1, 16)
  // and dt_bias = 0 (Kimi Linear's). Errors: the device has no KDA kernels
  // in this dtype; allocator capacity.
  static Result<KdaLayer> Make(TrackingAllocator& alloc, const KdaLayerDims& dims, int layer,
                               int num_layers, std::uint64_t seed);

  KdaLayer(KdaLayer&&) = default;
  KdaLayer& operator=(KdaLayer&&) = default;

  // Forward and Backward of one chunk of `batch` sequences: the contracts of
  // GdnLayer's (gdn_layer.h), with KdaState and KdaLayerSaved.
  Status Forward(Tensor<T>* y, KdaState<T>* state_out, KdaLayerSaved<T>* saved,
                 const Tensor<T>& x, int64_t batch, const KdaState<T>& state_in,
                 models::Recompute recompute);
  Status Backward(Tensor<T>* dx, KdaState<T>* dstate_in, KdaLayerSaved<T>* saved,
                  const Tensor<T>& dy, int64_t batch, const KdaState<T>* dstate_out,
                  const KdaState<T>& state_in);

  std::vector<Param<T>>& params() { return params_; }
  Param<T>& param(ParamId id) { return params_[id]; }
  const KdaLayerDims& dims() const { return dims_; }
  int layer() const { return layer_; }

 private:
  friend struct RecurrentEntry<KdaLayer>;
  struct MixerGrads;

  KdaLayer(TrackingAllocator* alloc, const KdaLayerDims& dims, int layer)
      : alloc_(alloc), dims_(dims), layer_(layer) {}

  template <typename E = T>
  Result<Tensor<E>> New(BufferClass cls, Shape shape);
  const T* w(ParamId id) const { return params_[id].value.data(); }
  GradOf<T>* dw(ParamId id) { return params_[id].grad.data(); }
  ResidualMlpParams<T> MlpParams() {
    return {w(kMlpNorm), w(kMlpGate), w(kMlpUp), w(kMlpDown),
            dw(kMlpNorm), dw(kMlpGate), dw(kMlpUp), dw(kMlpDown)};
  }
  Status CheckState(const KdaState<T>& state, int64_t batch, const char* what) const;

  Status ForwardPass(Tensor<T>* y, KdaState<T>* state_out, KdaLayerSaved<T>* saved,
                     const KdaState<T>& state_in, BufferClass cls);
  Status MixerInputsForward(KdaLayerSaved<T>* saved, KdaState<T>* state_out,
                            const KdaState<T>& state_in, BufferClass cls);
  Status MixerOutputForward(KdaLayerSaved<T>* saved, BufferClass cls);

  Status BackwardPass(Tensor<T>* dx, KdaState<T>* dstate_in, const KdaLayerSaved<T>& saved,
                      const Tensor<T>& dy, const KdaState<T>* dstate_out,
                      const KdaState<T>& state_in);
  Status MixerOutputBackward(Tensor<T>* d_o, Tensor<T>* dz, const KdaLayerSaved<T>& saved,
                             const Tensor<T>& dh);
  Status CoreBackward(MixerGrads* grads, KdaState<T>* dstate_in, const KdaLayerSaved<T>& saved,
                      const Tensor<T>& d_o, const KdaState<T>* dstate_out,
                      const KdaState<T>& state_in);
  Status MixerInputsBackward(Tensor<T>* dx, KdaState<T>* dstate_in, const MixerGrads& grads,
                             const KdaLayerSaved<T>& saved, const KdaState<T>* dstate_out,
                             const KdaState<T>& state_in);

  Ops<T>& ops() const { return alloc_->device().template ops<T>(); }
  KdaOps<T>& fops() const { return *fops_; }
  TrackingAllocator* alloc_;  // not owned
  KdaOps<T>* fops_ = nullptr;  // the device's, not owned
  KdaLayerDims dims_;
  int layer_;
  std::vector<Param<T>> params_;  // (kNumParams)
};

template <typename T>
class CorePhaseRunner;  // core_phases.h

// The KDA family on the backend (backend/model/layer_family.h): its layer,
// its dims from the model, and its core run phase by phase for the profiler
// (kda_core_phases.cc).
struct KdaFamilyTraits {
  static constexpr const char* kName = "kda";
  template <typename T>
  using Layer = KdaLayer<T>;
  using Dims = KdaLayerDims;
  static Dims DimsOf(const pb::ModelSpec& model) { return KdaLayerDims::FromModel(model); }
  // The constants the ModelSpec does not carry (--dump-weights' "constants").
  static std::vector<std::pair<std::string, double>> Constants(const Dims& d) {
    return {{"norm_eps", d.norm_eps}, {"l2_eps", d.l2_eps},
            {"block_size", static_cast<double>(d.block_size)}};
  }
  template <typename T>
  static Result<std::unique_ptr<CorePhaseRunner<T>>> MakePhaseRunner(
      const KdaLayerDims& dims, TrackingAllocator& alloc, std::int64_t batch,
      std::int64_t tokens);
};

}  // namespace stateflow::backend

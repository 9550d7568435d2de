// One Mamba-3 (SISO) layer of the model (mixer and MLP) with an explicit
// forward and backward over one sequence chunk (llm.c style: outputs first,
// then inputs; shapes in comments). The mixer is the official module's
// (state-spaces/mamba, mamba_ssm/modules/mamba3.py, SISO, its defaults:
// rope_fraction 0.5, no output norm, one B/C group; docs/models.md lists the
// constants). Per token of the chunk:
//
//   xn    = RMSNorm(x) * mixer_norm                              (S, C)
//   z, xv = xn Wz^T, xn Wx^T                                     (S, HDp) each
//   Bp,Cp = xn WB^T, xn WC^T                                     (S, Ds) each
//   dt    = softplus(xn Wdt^T + dt_bias)                         (S, H)
//   A     = -max(f(xn WA^T), A_floor),  f(u) = 1+u (u>=0), 1/(1-u) (u<0)
//   lam   = sigmoid(xn Wtrap^T)                                  (S, H)
//   theta = pi tanh(xn Wang^T)                                   (S, Na)
//   phi_t = (phi_{t-1} + theta_t dt_t) mod 2 pi  per head       (S, H, Na)
//   k     = rot(RMSNorm(Bp) * B_norm + B_bias_h, phi)            (S, H, Ds)
//   q     = rot(RMSNorm(Cp) * C_norm + C_bias_h, phi)            (S, H, Ds)
//   a, gamma, beta = A dt, lam dt, (1 - lam) dt                  (S, H)
//   o     = Mamba3Core(q, k, xv, a, gamma, beta; S, k, v carry)  (S, H, Dp)
//   h     = x + ((o + D_h xv) * silu(z)) Wout^T                  (S, C)
//   y     = h + SwiGLU(RMSNorm(h) * mlp_norm)                    (S, C)
//
// rot turns the pairs (2j, 2j+1), j < Na, of a d_state vector by the angles
// phi_j and leaves the other channels as they are. No projection has a bias
// and there is no short convolution (Mamba-3 has none).
//
// Boundary state (Mamba3State, the official decode state): the running angle
// phi (B, H, Na), the SSM state S (B, H, Dp, Ds), the last token's k (B, H, Ds)
// (rotated, as the core uses it) and its v = xv (B, H, Dp). Backward turns
// d(state out) into d(state in) for all four.
//
// All of its arithmetic runs through the device seam (the allocator's
// Ops<T>, backend/device/ops.h: the projections and norms, the Mamba3* gates,
// angles, rotation, coefficients, D skip and core), so the layer runs on
// every device (cpu, host-grid, cuda).
//
// Several sequences, recompute modes, allocation classes: as GdnLayer
// (gdn_layer.h): x has B S rows, sequence-major; the projections run over all
// rows, the angle scan and the core sequence by sequence; kNone saves
// Mamba3LayerSaved (kActivations), kFull only x and replays the forward in the
// backward (bit-identical).
//
//   SF_ASSIGN_OR_RETURN(auto m3, Mamba3Layer<float>::Make(alloc, dims, /*layer=*/1, /*num_layers=*/4, seed));
//   SF_RETURN_IF_ERROR(m3.Forward(&y, &state_out, &saved, x, /*batch=*/1, state_in, models::Recompute::kNone));
//
// Dimension legend: B sequences, S tokens of each in the chunk (S rows in
// total in the shapes below), C hidden size, H heads, Dp = dp SSM head dim
// (head_dim_v; Mamba3LayerDims::Dp), Ds = ds state dim (d_state; ::Ds), Na
// rotary angles, F SwiGLU size, HDp = H Dp, HDs = H Ds (HDp(), HDs()). In code
// the pipeline's P and N never appear here: the dims are Dp and Ds
// (docs/models.md's glossary).
#pragma once

#include <cstdint>
#include <utility>
#include <string>
#include <memory>
#include <vector>

#include "backend/device/device.h"
#include "backend/device/mamba3_ops.h"
#include "backend/kernels/mamba3_core.h"
#include "backend/layers/param.h"
#include "backend/layers/recurrent_entry.h"
#include "backend/layers/residual_mlp.h"
#include "backend/tensor.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// The official module's constants that the ModelSpec does not carry
// (mamba_ssm/modules/mamba3.py defaults).
inline constexpr double kMamba3RopeFraction = 0.5;  // rope_fraction
inline constexpr double kMamba3AFloor = 1e-4;       // A_floor
inline constexpr double kMamba3BcNormEps = 1e-5;    // B_norm, C_norm eps

// Rotary angles per head for a state dim Ds: floor(Ds rope_fraction) rounded
// down to even, halved (the official num_rope_angles).
int64_t Mamba3RopeAngles(int64_t Ds);

struct Mamba3LayerDims {
  int64_t C = 0, H = 0, Dp = 0, Ds = 0, F = 0, Na = 0;
  int64_t block_size = kMamba3BlockSize;  // T_C of the core
  double norm_eps = 1e-6;                 // mixer_norm, mlp_norm (as GDN's)
  double bc_norm_eps = kMamba3BcNormEps;  // B_norm, C_norm
  double a_floor = kMamba3AFloor;
  // The core's forward and backward split and overlapped
  // (Mamba3Ops::Mamba3CoreForwardOverlapped / BackwardOverlapped; schedule.st_overlap):
  // the same results, on the CPU bit for bit with full blocks.
  bool st_overlap = false;
  // B_V, the core's ST tile of state rows (schedule.st_tile; Ops' st_tile):
  // 0 is the device's default (untiled). The results do not depend on it
  // beyond rounding (ops.h).
  int64_t st_tile = 0;
  // Tensor parallelism (tensor_parallel.h): H and F are this rank's heads and
  // MLP columns (Sharded). The one B/C group, its norms and the angle
  // projection are whole on every rank, their gradients partial.
  TpShard tp{};

  int64_t HDp() const { return H * Dp; }
  int64_t HDs() const { return H * Ds; }

  // hidden_size, num_heads, head_dim_v, state_dim, mlp_size; Na from Ds.
  // REQUIRES: models::ValidateModel(model).ok() and architecture "mamba3".
  static Mamba3LayerDims FromModel(const pb::ModelSpec& model);
  // H / TP heads, F / TP MLP columns on rank shard.rank.
  Mamba3LayerDims Sharded(const TpShard& shard) const;
};

// The boundary state of one Mamba-3 layer for B sequences (or its gradient).
template <typename T>
struct Mamba3State {
  Tensor<StatOf<T>> angle;  // (B, H, Na) running rotary angle, in [0, 2 pi)
  Tensor<StatOf<T>> S;      // (B, H, Dp, Ds) SSM state (both float in bf16)
  Tensor<T> k;      // (B, H, Ds) last token's rotated k
  Tensor<T> v;      // (B, H, Dp) last token's v (xv)

  // Zeros: the state at the sequences' start (angle, then S, k, v).
  static Result<Mamba3State> Zeros(TrackingAllocator& alloc,
                                   const Mamba3LayerDims& dims, int64_t batch,
                                   BufferClass cls);
  // Elements of one sequence's state: H (Na + Dp Ds + Ds + Dp).
  static int64_t Numel(const Mamba3LayerDims& dims);
  bool empty() const { return S.numel() == 0; }
  int64_t batch() const { return S.rank() == 4 ? S.dim(0) : 0; }
};

// What the forward keeps for the backward (one layer, one chunk). Under
// recompute kFull only x is held. Backward empties it.
template <typename T>
struct Mamba3LayerSaved {
  bool recompute_full = false;
  int64_t batch = 1;              // B sequences; every tensor has B S rows
  Tensor<T> x;                    // (S, C) layer input
  Tensor<T> xn;                   // (S, C) pre-norm output
  Tensor<StatOf<T>> rstd1;        // (S) its 1/rms
  Tensor<T> z, xv;                // (S, HDp) gate and x (the core's v)
  Tensor<T> Bp, Cp;               // (S, Ds) B and C projections
  Tensor<T> dt, ddA, lam;         // (S, H) dt, A's projection, trapezoid gate
  Tensor<T> theta;                // (S, Na) angle rates pi tanh(.)
  Tensor<StatOf<T>> B_rstd, C_rstd;  // (S) 1/rms of the B and C norms
  Tensor<StatOf<T>> phi;          // (S, H, Na) running angles
  Tensor<T> q, k;                 // (S, HDs) core inputs
  Tensor<T> a, gamma, beta;       // (S, H) core inputs
  Tensor<T> o, gated;             // (S, HDp) core output, out_proj input
  Tensor<T> h, hn;                // (S, C) after the mixer, (S, C)
  Tensor<StatOf<T>> rstd2;        // (S)
  Tensor<T> mlp_gate, mlp_up;     // (S, F) SwiGLU gate and up projections

  // Elements per token under kNone:
  // 4C + 2F + 4 + 4 HDp + 2 Ds + 6H + Na + H Na + 2 HDs.
  static int64_t NumelPerToken(const Mamba3LayerDims& dims);
};

template <typename T>
class Mamba3Layer {
 public:
  using State = Mamba3State<T>;
  using Saved = Mamba3LayerSaved<T>;
  static constexpr const char* kKind = "mamba3 layer";  // in errors

  // The parameters, in Parameters() order; names as in ParamName().
  enum ParamId {
    kMixerNorm, kZProj, kXProj, kBProj, kCProj, kDtProj, kAProj, kTrapProj,
    kAngleProj, kDtBias, kBNorm, kCNorm, kBBias, kCBias, kD, kOutProj,
    kMlpNorm, kMlpGate, kMlpUp, kMlpDown, kNumParams
  };
  // "mixer_norm.weight", "in_proj.z.weight", ..., "mlp.down_proj.weight".
  static const char* ParamName(ParamId id);

  // Weights (kWeights) and zero gradients (kGradients) of the layer at
  // `layer`, initialised from (seed, layer, name) only, with the official
  // init where it matters: norms 1, B_bias = C_bias = 1, D = 1, dt_bias =
  // softplus^{-1}(dt) with log dt ~ U(log 0.001, log 0.1) (floor 1e-4);
  // projections N(0, 0.02^2), out_proj and mlp.down_proj N(0, (0.02 /
  // sqrt(2 num_layers))^2). REQUIRES: dims from FromModel.
  static Result<Mamba3Layer> Make(TrackingAllocator& alloc,
                                  const Mamba3LayerDims& dims, int layer,
                                  int num_layers, std::uint64_t seed);

  Mamba3Layer(Mamba3Layer&&) = default;
  Mamba3Layer& operator=(Mamba3Layer&&) = default;

  // Forward of one chunk of `batch` sequences.
  //   y (S, C) out, kWorkspace; state_out: allocated first (kBoundaryStates)
  //   and filled, unless nullptr (the last chunk); saved: filled;
  //   x (S, C); state_in: as Mamba3State::Zeros(batch) at the start.
  // Errors: batch < 1 or not dividing x's rows, shapes (naming the layer and
  // tensor), allocator capacity.
  Status Forward(Tensor<T>* y, Mamba3State<T>* state_out,
                 Mamba3LayerSaved<T>* saved, const Tensor<T>& x, int64_t batch,
                 const Mamba3State<T>& state_in, models::Recompute recompute);

  // Backward of the chunk whose forward filled `saved` with `state_in`.
  //   dx (S, C) out (kWorkspace); dstate_in: allocated first
  //   (kBoundaryStates) and filled, unless nullptr (the first chunk); saved:
  //   emptied; dy (S, C); batch: the forward's; dstate_out: nullptr means
  //   zeros (the last chunk). Parameter gradients are added to.
  // Errors: an empty `saved`, a batch other than the forward's, shapes,
  // allocator capacity.
  Status Backward(Tensor<T>* dx, Mamba3State<T>* dstate_in,
                  Mamba3LayerSaved<T>* saved, const Tensor<T>& dy,
                  int64_t batch, const Mamba3State<T>* dstate_out,
                  const Mamba3State<T>& state_in);

  std::vector<Param<T>>& params() { return params_; }
  Param<T>& param(ParamId id) { return params_[id]; }
  const Mamba3LayerDims& dims() const { return dims_; }
  int layer() const { return layer_; }

 private:
  friend struct RecurrentEntry<Mamba3Layer>;
  struct MixerGrads;
  struct CoreGrads;

  Mamba3Layer(TrackingAllocator* alloc, const Mamba3LayerDims& dims, int layer)
      : alloc_(alloc), dims_(dims), layer_(layer) {}

  template <typename E = T>
  Result<Tensor<E>> New(BufferClass cls, Shape shape);
  const T* w(ParamId id) const { return params_[id].value.data(); }
  GradOf<T>* dw(ParamId id) { return params_[id].grad.data(); }
  ResidualMlpParams<T> MlpParams() {
    return {w(kMlpNorm), w(kMlpGate), w(kMlpUp), w(kMlpDown),
            dw(kMlpNorm), dw(kMlpGate), dw(kMlpUp), dw(kMlpDown)};
  }
  Status CheckState(const Mamba3State<T>& state, int64_t batch,
                    const char* what) const;

  Status ForwardPass(Tensor<T>* y, Mamba3State<T>* state_out,
                     Mamba3LayerSaved<T>* saved,
                     const Mamba3State<T>& state_in, BufferClass cls);
  Status MixerInputsForward(Mamba3LayerSaved<T>* saved,
                            Mamba3State<T>* state_out,
                            const Mamba3State<T>& state_in, BufferClass cls);
  Status MixerOutputForward(Mamba3LayerSaved<T>* saved, BufferClass cls);
  Status MlpForward(Tensor<T>* y, Mamba3LayerSaved<T>* saved, BufferClass cls);

  Status BackwardPass(Tensor<T>* dx, Mamba3State<T>* dstate_in,
                      const Mamba3LayerSaved<T>& saved, const Tensor<T>& dy,
                      const Mamba3State<T>* dstate_out,
                      const Mamba3State<T>& state_in);
  Status MlpBackward(Tensor<T>* dh, const Mamba3LayerSaved<T>& saved,
                     const Tensor<T>& dy);
  Status MixerOutputBackward(Tensor<T>* d_o, MixerGrads* grads,
                             const Mamba3LayerSaved<T>& saved,
                             const Tensor<T>& dh);
  Status CoreBackward(CoreGrads* core, MixerGrads* grads,
                      Mamba3State<T>* dstate_in,
                      const Mamba3LayerSaved<T>& saved, Tensor<T>* d_o,
                      const Mamba3State<T>* dstate_out,
                      const Mamba3State<T>& state_in);
  Status PrepBackward(MixerGrads* grads, CoreGrads* core,
                      Mamba3State<T>* dstate_in,
                      const Mamba3LayerSaved<T>& saved,
                      const Mamba3State<T>* dstate_out);
  Status MixerInputsBackward(Tensor<T>* dx, const MixerGrads& grads,
                             const Mamba3LayerSaved<T>& saved);

  // The kernels of the device the allocator's memory lives on: those every
  // family shares, and this family's own (found once, at Make).
  Ops<T>& ops() const { return alloc_->device().template ops<T>(); }
  Mamba3Ops<T>& fops() const { return *fops_; }
  TrackingAllocator* alloc_;  // not owned
  Mamba3Ops<T>* fops_ = nullptr;  // the device's, not owned
  Mamba3LayerDims dims_;
  int layer_;
  std::vector<Param<T>> params_;  // (kNumParams)
};

template <typename T>
class CorePhaseRunner;  // core_phases.h

// The Mamba-3 family on the backend (backend/model/layer_family.h):
// its layer, its dims from the model, and its core run phase by phase for
// the profiler (mamba3_core_phases.cc).
struct Mamba3FamilyTraits {
  static constexpr const char* kName = "mamba3";
  template <typename T>
  using Layer = Mamba3Layer<T>;
  using Dims = Mamba3LayerDims;
  static Dims DimsOf(const pb::ModelSpec& model) { return Mamba3LayerDims::FromModel(model); }
  // The constants the ModelSpec does not carry (--dump-weights' "constants").
  static std::vector<std::pair<std::string, double>> Constants(const Dims& d) {
    return {{"norm_eps", d.norm_eps}, {"bc_norm_eps", d.bc_norm_eps},
            {"block_size", static_cast<double>(d.block_size)}};
  }
  template <typename T>
  static Result<std::unique_ptr<CorePhaseRunner<T>>> MakePhaseRunner(
      const Mamba3LayerDims& dims, TrackingAllocator& alloc, std::int64_t batch, std::int64_t tokens);
};

}  // namespace stateflow::backend

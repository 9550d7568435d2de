// Gated DeltaNet on the analytic side (family.h): the layer of backend/
// layers/gdn_layer.h, its parameters (docs/models.md), FLOPs and memory
// events (docs/cost-model.md). DeltaNet is this family without the decay
// gate (model.decay "none"), with its block shape (models/model.h: LayerNorm,
// GELU MLP, biases).
//
// Dimension legend (one sequence, one token unless said otherwise):
//   h  hidden size            m  SwiGLU size
//   n  heads                  dk, dv  key / value head dims
//   w  short-conv width       C  kernel block T_C
#include <cmath>

#include "models/families/registry.h"
#include "models/layer_events.h"
#include "models/limits.h"

namespace stateflow::models {
namespace {

struct GdnDims {
  double h, m, n, dk, dv, w, C;
  bool decay;         // GDN's decay gate; false: DeltaNet
  BlockShape shape;   // norms, MLP, biases
  explicit GdnDims(const pb::ModelSpec& model)
      : h(model.hidden_size()), m(model.mlp_size()), n(model.num_heads()),
        dk(model.head_dim_k()), dv(model.head_dim_v()), w(model.conv_width()),
        C(kKernelBlockTokens), decay(model.decay() != "none"), shape(BlockShapeOf(model)) {}
};

// Per-token sizes of one GDN layer on one TP rank (the legend of
// backend/layers/gdn_layer.h): C hidden, F SwiGLU, H heads, HK = H d_k,
// HV = H d_v; everything but C is split by TP.
struct GdnSizes {
  double C, F, H, HK, HV;
  bool decay;
  BlockShape shape;
  GdnSizes(const GdnDims& x, int tp)
      : C(x.h), F(x.m / tp), H(x.n / tp), HK(x.n * x.dk / tp), HV(x.n * x.dv / tp),
        decay(x.decay), shape(x.shape) {}
};

// GdnLayer::MixerInputsForward: xn, the six projections, conv + SiLU (+ L2
// norm) of q, k, v, the gates. Tensors the backward needs are made in class
// `saved` (kActivations, or kWorkspace when a recompute replays them).
void GdnMixerInputsForward(const GdnSizes& d, BufferClass saved, Events* ev) {
  ev->Act(saved, d.C);      // xn
  ev->Stat(saved, d.shape.norm_stats());  // rstd1 (LayerNorm: mean too)
  ev->Act(kWs, d.H);        // b (allocated, then replaced by its projection)
  ev->Act(saved, d.HK);     // q_in
  ev->Act(saved, d.HK);     // k_in
  ev->Act(saved, d.HV);     // v_in
  if (d.decay) ev->Act(saved, d.H);  // a
  ev->Act(kWs, d.H);        // b = xn Wb^T
  ev->FreeAct(kWs, d.H);    //   (the first b)
  ev->Act(saved, d.HV);     // z
  ev->Act(kWs, d.HK);       // act: silu(conv(.)) before the L2 norm
  ev->Stat(saved, d.H);     // q_rnorm
  ev->Stat(saved, d.H);     // k_rnorm
  ev->Act(saved, d.HK);     // q
  ev->Act(saved, d.HK);     // k
  ev->Act(saved, d.HV);     // v
  ev->Act(saved, d.H);      // g (DeltaNet: zeros)
  ev->Act(saved, d.H);      // beta
  ev->FreeAct(kWs, d.HK);   // act
  ev->FreeAct(kWs, d.H);    // b
}

// The GDN core's scratch for one sequence of s tokens, in bytes (the
// device's GdnCore*WorkspaceSize elements): on the CPU no forward scratch and
// the backward's entering states H nb Dv Dk (gdn_core.h); on a grid device
// (GdnForwardWorkspace / GdnBackwardWorkspace, grid_kernels/gdn_common.h)
//   forward  = T H (1 + 2 Dk + Dv) + H nb bs^2 + H nb Dv Dk
//   backward = forward + 2 H nb bs^2 + T H (3 Dv + Dk + 1) + H (nb + 1) Dv Dk,
// nb = ceil(s / bs), bs = T_C. Neither depends on st_tile or st_overlap.
struct GdnCoreWorkspaceBytes {
  double forward = 0, backward = 0;
  GdnCoreWorkspaceBytes(const GdnDims& x, const GdnSizes& d, const TensorBytes& b) {
    const double T = b.seq_tokens, bs = x.C, nb = std::ceil(T / bs);
    const double states = d.H * nb * x.dk * x.dv;
    if (b.core_workspace == CoreWorkspace::kCpu) {
      backward = states * b.stat();
      return;
    }
    const double tiles = d.H * nb * bs * bs, tokens = T * d.H;
    const double fwd = tokens * (1 + 2 * x.dk + x.dv) + tiles + states;
    // bf16 (activations narrower than statistics): the float passes run on
    // float copies of the inputs and outputs after the float scratch
    // (GridGdnOps' kWide): q, k, v, g, beta, o; and dO, q, k, v, g, beta, dq,
    // dk, dv, dg, dbeta.
    const bool wide = b.act < b.stat();
    const double wide_fwd = wide ? tokens * (2 * x.dk + 2 * x.dv + 2) : 0;
    const double wide_bwd = wide ? tokens * (4 * x.dk + 3 * x.dv + 4) : 0;
    forward = (fwd + wide_fwd) * b.stat();
    backward = (fwd + 2 * tiles + tokens * (3 * x.dv + x.dk + 1) +
                d.H * (nb + 1) * x.dk * x.dv + wide_bwd) * b.stat();
  }
};

// GdnLayer::ForwardPass after the input copy; ends holding the output y.
void GdnForwardPass(const GdnSizes& d, double core_ws_bytes, BufferClass saved, Events* ev) {
  GdnMixerInputsForward(d, saved, ev);
  ev->Act(saved, d.HV);     // o = GdnCore(...)
  if (core_ws_bytes > 0) {  // the device's scratch for one sequence (none on the CPU)
    ev->Bytes(kWs, core_ws_bytes);
    ev->Bytes(kWs, -core_ws_bytes);
  }
  // MixerOutputForward.
  ev->Stat(saved, d.H);     // o_rstd
  ev->Act(saved, d.HV);     // gated
  ev->Act(kWs, d.HV);       // silu_z
  ev->Act(saved, d.C);      // h
  ev->FreeAct(kWs, d.HV);   // silu_z
  MlpForwardEvents(d.C, d.F, d.shape, saved, ev);
}

// Frees what GdnForwardPass made in class `saved` (everything but x and y).
void FreeGdnSaved(const GdnSizes& d, BufferClass saved, Events* ev) {
  // xn, h, hn; q_in, k_in, q, k; v_in, z, v, o, gated; (a,) g, beta; (gate,) up.
  ev->FreeAct(saved, 3 * d.C + 4 * d.HK + 5 * d.HV + (d.decay ? 3 : 2) * d.H +
                         (d.shape.gelu ? 1 : 2) * d.F);
  // rstd1, rstd2 (LayerNorm: and the means); q_rnorm, k_rnorm, o_rstd.
  ev->FreeStat(saved, 2 * d.shape.norm_stats() + 3 * d.H);
}

// GdnLayer::MlpBackward and MixerOutputBackward: dh (becomes dx), and the
// core output's and the gate's gradients d_o, dz, left allocated.
void GdnOutputBackward(const GdnSizes& d, Events* ev) {
  MlpBackwardEvents(d.C, d.F, d.shape, ev);
  ev->Act(kWs, d.HV);        // dgated
  ev->Act(kWs, d.HV);        // on
  ev->Act(kWs, d.HV);        // d_on
  ev->Act(kWs, d.HV);        // dz
  ev->Act(kWs, d.HV);        // d_o
  ev->FreeAct(kWs, 3 * d.HV);  // d_on, on, dgated
}

// GdnLayer::CoreBackward: dq, dk, dv, da, db left allocated; then d_o freed.
void GdnCoreBackward(const GdnSizes& d, double core_ws_bytes, Events* ev) {
  ev->Act(kWs, d.HK);        // dq
  ev->Act(kWs, d.HK);        // dk
  ev->Act(kWs, d.HV);        // dv
  ev->Act(kWs, d.H);         // dg
  ev->Act(kWs, d.H);         // dbeta
  ev->Bytes(kWs, core_ws_bytes);   // the core's scratch for one sequence
  ev->Bytes(kWs, -core_ws_bytes);
  if (d.decay) ev->Act(kWs, d.H);  // da
  ev->Act(kWs, d.H);         // db
  ev->FreeAct(kWs, 2 * d.H);   // dbeta, dg
  ev->FreeAct(kWs, d.HV);      // d_o
}

// GdnLayer::MixerInputsBackward: conv + SiLU (+ L2 norm) backward of q, k, v,
// the six projections' input gradient into dx; then the mixer gradients
// dq, dk, dv, da, db, dz go.
void GdnMixerInputsBackward(const GdnSizes& d, Events* ev) {
  for (double ch : {d.HK, d.HK}) {
    ev->Act(kWs, ch);        // c (conv output, replayed)
    ev->Act(kWs, ch);        // d_c
    ev->Act(kWs, ch);        // act = silu(c)
    ev->FreeAct(kWs, ch);
    ev->Act(kWs, ch);        // dq_in, dk_in
    ev->FreeAct(kWs, 2 * ch);  // d_c, c
  }
  ev->Act(kWs, d.HV);        // c
  ev->Act(kWs, d.HV);        // d_c
  ev->Act(kWs, d.HV);        // dv_in
  ev->FreeAct(kWs, 2 * d.HV);  // d_c, c
  ev->Act(kWs, d.C);         // dxn
  ev->Act(kWs, d.C);         // part
  ev->FreeAct(kWs, 2 * d.C + 2 * d.HK + d.HV);  // part, dxn, dv_in, dk_in, dq_in
  ev->FreeAct(kWs, 2 * d.HK + d.HV + (d.decay ? 2 : 1) * d.H + d.HV);  // dq dk dv (da) db dz
}

// GdnLayer::BackwardPass: from dy (the caller's) to dx (S, C), which it
// leaves allocated.
void GdnBackwardPass(const GdnSizes& d, double core_ws_bytes, Events* ev) {
  GdnOutputBackward(d, ev);
  GdnCoreBackward(d, core_ws_bytes, ev);
  GdnMixerInputsBackward(d, ev);
}

class GdnFamily final : public Family {
 public:
  std::string_view name() const override { return "gdn"; }
  std::string_view description() const override {
    return "Gated DeltaNet (the delta rule with a scalar decay gate per head; DeltaNet "
           "without it)";
  }
  std::string_view kernel_name() const override { return "gdn"; }
  double KernelHeadDim(const pb::ModelSpec& model) const override { return model.head_dim_v(); }

  Status Validate(const pb::ModelSpec& m, int /*tensor_size*/) const override {
    SF_RETURN_IF_ERROR(CheckRange("model.head_dim_k", m.head_dim_k(), kHeadDim));
    return CheckRange("model.head_dim_v", m.head_dim_v(), kHeadDim);
  }

  double MixerParams(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    return x.h * x.n * (2 * x.dk + 2 * x.dv)        // q, k, v, output gate
           + (x.decay ? 2 : 1) * x.h * x.n          // (a: decay,) b: beta
           + (x.decay ? 2 * x.n : 0)                // A_log, dt_bias
           + x.w * x.n * (2 * x.dk + x.dv)          // short conv on q, k, v
           + x.dv                                   // output norm
           + x.n * x.dv * x.h                       // o_proj
           + (x.shape.out_proj_bias ? x.h : 0);     // its bias
  }

  double MixerReplicatedParams(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    return x.dv + (x.shape.out_proj_bias ? x.h : 0);  // output norm, o_proj's bias
  }

  // GDN projections, short conv, q/k L2 norms, gates, gated output norm.
  double DenseFlops(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    const double gates = x.decay ? 2 : 1;  // a and b, or b
    const double proj = 2 * x.h * x.n * (2 * x.dk + 2 * x.dv + gates) +
                        2 * x.n * x.dv * x.h + (x.shape.out_proj_bias ? x.h : 0);
    const double conv_channels = x.n * (2 * x.dk + x.dv);
    const double conv = (2 * x.w + kSiluFlops) * conv_channels;
    const double qk_norm = kNormFlops * 2 * x.n * x.dk;
    const double out_norm = (kNormFlops + kSiluFlops + 1) * x.n * x.dv;
    const double gate = x.decay ? kGateFlops : kGateFlops / 2;  // DeltaNet: beta's sigmoid
    return proj + conv + qk_norm + gate * x.n + out_norm;
  }

  // Chunkwise gated delta rule (WY form), per token, all heads.
  double CoreFlops(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    const double intra = x.C * (6 * x.dk + 4 * x.dv) + 2 * x.C * x.C / 3;
    const double inter = 6 * x.dk * x.dv;
    return x.n * (intra + inter);
  }

  // What GDN's backward replays from S_in: W, U and the per-block states.
  double ReplayFlops(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    return x.n * (2 * x.C * (x.dk + x.dv) + 4 * x.dk * x.dv);
  }

  // CountGdnCoreFlops's block counts (backend/kernels/gdn_core.h) over L = C.
  StFlops PhaseFlops(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    const double C = x.C, dk = x.dk, dv = x.dv;
    StFlops f;
    f.pre = x.n * (2 * C * dk + (C - 1) * (dk + dv));
    f.st = x.n * 4 * dk * dv;
    f.out = x.n * (2 * dk * dv + 2 * C * dk + 2 * C * dv);
    f.out_bwd = x.n * (6 * C * dk + 4 * C * dv + 4 * dk * dv);
    f.st_bwd = x.n * 8 * dk * dv;
    f.pre_bwd = x.n * ((C - 1) * (dk + dv) + 2 * C * (dk + dv) + 4 * C * dk);
    return f;
  }

  std::vector<Gemm> MixerGemms(const pb::ModelSpec& model) const override {
    const GdnDims x(model);
    return {{x.n * (2 * x.dk + 2 * x.dv + (x.decay ? 2 : 1)), x.h, false},  // q k v z (a) beta
            {x.h, x.n * x.dv, true}};                                       // o_proj
  }

  MemorySegment ForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                              bool recompute_full) const override {
    const GdnDims x(model);
    const GdnSizes d(x, b.tensor_size);
    const GdnCoreWorkspaceBytes core_ws(x, d, b);
    return RecurrentForwardEvents(
        b, d.C, recompute_full,
        [&](BufferClass saved, Events* ev) { GdnForwardPass(d, core_ws.forward, saved, ev); },
        [&](BufferClass saved, Events* ev) { FreeGdnSaved(d, saved, ev); });
  }

  MemorySegment BackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                               bool recompute_full) const override {
    const GdnDims x(model);
    const GdnSizes d(x, b.tensor_size);
    // GdnCore*WorkspaceSize of the run's device, one sequence at a time.
    const GdnCoreWorkspaceBytes core_ws(x, d, b);
    return RecurrentBackwardEvents(
        b, d.C, recompute_full,
        [&](BufferClass saved, Events* ev) { GdnForwardPass(d, core_ws.forward, saved, ev); },
        [&](Events* ev) { GdnBackwardPass(d, core_ws.backward, ev); },
        [&](BufferClass saved, Events* ev) { FreeGdnSaved(d, saved, ev); });
  }

  // GdnState: the recurrent state (statistics precision) and the three
  // short-convolution tails.
  double BoundaryStateBytes(const pb::ModelSpec& model, double activation_bytes,
                            int tensor_size) const override {
    const GdnDims x(model);
    const double state = x.n * x.dk * x.dv * StatBytes(activation_bytes);
    const double conv_tail = (x.w - 1) * x.n * (2 * x.dk + x.dv) * activation_bytes;
    return (state + conv_tail) / tensor_size;
  }
};

}  // namespace

const Family& GdnFamilyInstance() {
  static const GdnFamily family;
  return family;
}

}  // namespace stateflow::models

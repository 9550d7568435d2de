// Kimi Delta Attention on the analytic side (family.h): the layer of
// backend/layers/kda_layer.h (Kimi Linear's KDA mixer: the gated delta rule
// with a decay per key channel from a low-rank projection, a low-rank
// sigmoid output gate with a bias), its parameters (docs/models.md), FLOPs
// and memory events (docs/cost-model.md).
//
// Dimension legend (one sequence, one token unless said otherwise):
//   h  hidden size            m  SwiGLU size
//   n  heads                  dk, dv  key / value head dims
//   r  rank of the decay and output gates (= dv, Kimi Linear's head_v_dim)
//   w  short-conv width       C  kernel block T_C
// Under TP the heads split; the low-rank gates' inner activations (r) are
// replicated on every rank, their up-projections split with the heads.
#include <cmath>

#include "models/families/registry.h"
#include "models/layer_events.h"
#include "models/limits.h"

namespace stateflow::models {
namespace {

struct KdaDims {
  double h, m, n, dk, dv, r, w, C;
  explicit KdaDims(const pb::ModelSpec& model)
      : h(model.hidden_size()), m(model.mlp_size()), n(model.num_heads()),
        dk(model.head_dim_k()), dv(model.head_dim_v()), r(model.head_dim_v()),
        w(model.conv_width()), C(kKernelBlockTokens) {}
};

// Per-token sizes of one KDA layer on one TP rank (kda_layer.h's legend):
// C hidden, F SwiGLU, H heads, HK = H d_k, HV = H d_v split by TP; C and
// the rank R replicated.
struct KdaSizes {
  double C, F, H, HK, HV, R;
  KdaSizes(const KdaDims& x, int tp)
      : C(x.h), F(x.m / tp), H(x.n / tp), HK(x.n * x.dk / tp), HV(x.n * x.dv / tp), R(x.r) {}
};

// KdaLayer::MixerInputsForward.
void KdaMixerInputsForward(const KdaSizes& d, BufferClass saved, Events* ev) {
  ev->Act(saved, d.C);      // xn
  ev->Stat(saved, 1);       // rstd1
  ev->Act(saved, d.HK);     // q_in
  ev->Act(saved, d.HK);     // k_in
  ev->Act(saved, d.HV);     // v_in
  ev->Act(saved, d.R);      // f1 = xn Wf1^T
  ev->Act(saved, d.HK);     // a = f1 Wf2^T
  ev->Act(kWs, d.H);        // b = xn Wb^T
  ev->Act(saved, d.R);      // z1 = xn Wg1^T
  ev->Act(saved, d.HV);     // z = z1 Wg2^T + bg
  ev->Act(kWs, d.HK);       // act: silu(conv(.)) before the L2 norm
  ev->Stat(saved, d.H);     // q_rnorm
  ev->Stat(saved, d.H);     // k_rnorm
  ev->Act(saved, d.HK);     // q
  ev->Act(saved, d.HK);     // k
  ev->Act(saved, d.HV);     // v
  ev->Act(saved, d.HK);     // g (per channel)
  ev->Act(saved, d.H);      // beta
  ev->FreeAct(kWs, d.HK);   // act
  ev->FreeAct(kWs, d.H);    // b
}

// The KDA core's scratch for one sequence of s tokens, in bytes (the
// device's KdaCore*WorkspaceSize elements): on the CPU no forward scratch and
// the backward's entering states H nb Dv Dk (kda_core.h); on a grid device
// (KdaForwardWorkspace / KdaBackwardWorkspace, grid_kernels/kda_common.h)
//   forward  = 3 T H Dk + T H Dv + H nb bs^2 + H nb Dv Dk
//   backward = forward + H nb bs^2 + 2 T H Dv + 2 T H Dk + H (nb + 1) Dv Dk,
// nb = ceil(s / bs), bs = T_C; in bf16 the float copies of the arguments
// after them (GridKdaOps). Neither depends on st_tile or st_overlap.
struct KdaCoreWorkspaceBytes {
  double forward = 0, backward = 0;
  KdaCoreWorkspaceBytes(const KdaDims& x, const KdaSizes& d, const TensorBytes& b) {
    const double T = b.seq_tokens, bs = x.C, nb = std::ceil(T / bs);
    const double states = d.H * nb * x.dk * x.dv;
    if (b.core_workspace == CoreWorkspace::kCpu) {
      backward = states * b.stat();
      return;
    }
    const double tiles = d.H * nb * bs * bs, tokens = T * d.H;
    const double fwd = tokens * (3 * x.dk + x.dv) + tiles + states;
    // bf16: q, k, v, g, beta, o; and dO, q, k, v, g, beta, dq, dk, dv, dg,
    // dbeta as float copies.
    const bool wide = b.act < b.stat();
    const double wide_fwd = wide ? tokens * (3 * x.dk + 2 * x.dv + 1) : 0;
    const double wide_bwd = wide ? tokens * (6 * x.dk + 3 * x.dv + 2) : 0;
    forward = (fwd + wide_fwd) * b.stat();
    backward = (fwd + tiles + tokens * (2 * x.dv + 2 * x.dk) + d.H * (nb + 1) * x.dk * x.dv +
                wide_bwd) * b.stat();
  }
};

// KdaLayer::ForwardPass after the input copy; ends holding the output y.
void KdaForwardPass(const KdaSizes& d, double core_ws_bytes, BufferClass saved, Events* ev) {
  KdaMixerInputsForward(d, saved, ev);
  ev->Act(saved, d.HV);     // o = KdaCore(...)
  if (core_ws_bytes > 0) {  // the device's scratch for one sequence (none on the CPU)
    ev->Bytes(kWs, core_ws_bytes);
    ev->Bytes(kWs, -core_ws_bytes);
  }
  // MixerOutputForward.
  ev->Stat(saved, d.H);     // o_rstd
  ev->Act(saved, d.HV);     // gated
  ev->Act(kWs, d.HV);       // sigmoid(z)
  ev->Act(saved, d.C);      // h
  ev->FreeAct(kWs, d.HV);   // sigmoid(z)
  MlpForwardEvents(d.C, d.F, saved, ev);
}

// Frees what KdaForwardPass made in class `saved` (everything but x and y).
void FreeKdaSaved(const KdaSizes& d, BufferClass saved, Events* ev) {
  // xn, h, hn; q_in, k_in, q, k, a, g; v_in, v, o, gated, z; f1, z1; beta;
  // mlp gate, up.
  ev->FreeAct(saved, 3 * d.C + 6 * d.HK + 5 * d.HV + 2 * d.R + d.H + 2 * d.F);
  // rstd1, rstd2; q_rnorm, k_rnorm, o_rstd.
  ev->FreeStat(saved, 2 + 3 * d.H);
}

// KdaLayer::BackwardPass: from dy (the caller's) to dx, left allocated.
void KdaBackwardPass(const KdaSizes& d, double core_ws_bytes, Events* ev) {
  MlpBackwardEvents(d.C, d.F, ev);
  // MixerOutputBackward.
  ev->Act(kWs, d.HV);          // dgated
  ev->Act(kWs, d.HV);          // on
  ev->Act(kWs, d.HV);          // d_on
  ev->Act(kWs, d.HV);          // dz
  ev->Act(kWs, d.HV);          // d_o
  ev->FreeAct(kWs, 3 * d.HV);  // d_on, on, dgated
  // CoreBackward.
  ev->Act(kWs, d.HK);          // dq
  ev->Act(kWs, d.HK);          // dk
  ev->Act(kWs, d.HV);          // dv
  ev->Act(kWs, d.HK);          // dg
  ev->Act(kWs, d.H);           // dbeta
  ev->Bytes(kWs, core_ws_bytes);   // the core's scratch for one sequence
  ev->Bytes(kWs, -core_ws_bytes);
  ev->Act(kWs, d.HK);          // da
  ev->Act(kWs, d.H);           // db
  ev->FreeAct(kWs, d.H + d.HK);  // dbeta, dg
  ev->FreeAct(kWs, d.HV);      // d_o
  // MixerInputsBackward: conv + SiLU (+ L2 norm) backward of q, k, v
  // (conv_silu.h), the projections' input gradients, the low-rank pairs'.
  for (double ch : {d.HK, d.HK}) {
    ev->Act(kWs, ch);          // c (conv output, replayed)
    ev->Act(kWs, ch);          // d_c
    ev->Act(kWs, ch);          // act = silu(c)
    ev->FreeAct(kWs, ch);
    ev->Act(kWs, ch);          // dq_in, dk_in
    ev->FreeAct(kWs, 2 * ch);  // d_c, c
  }
  ev->Act(kWs, d.HV);          // c
  ev->Act(kWs, d.HV);          // d_c
  ev->Act(kWs, d.HV);          // dv_in
  ev->FreeAct(kWs, 2 * d.HV);  // d_c, c
  ev->Act(kWs, d.C);           // dxn
  ev->Act(kWs, d.C);           // part
  for (int pair = 0; pair < 2; ++pair) {
    ev->Act(kWs, d.R);         // d(f1), then d(z1)
    ev->FreeAct(kWs, d.R);
  }
  ev->FreeAct(kWs, 2 * d.C + 2 * d.HK + d.HV);  // part, dxn, dv_in, dk_in, dq_in
  // The mixer gradients: dq, dk, dv, da, db, dz.
  ev->FreeAct(kWs, 3 * d.HK + 2 * d.HV + d.H);
}

class KdaFamily final : public Family {
 public:
  std::string_view name() const override { return "kda"; }
  std::string_view description() const override {
    return "Kimi Delta Attention (the delta rule with a decay per key channel)";
  }
  std::string_view kernel_name() const override { return "kda"; }
  double KernelHeadDim(const pb::ModelSpec& model) const override { return model.head_dim_v(); }

  Status Validate(const pb::ModelSpec& m, int /*tensor_size*/) const override {
    SF_RETURN_IF_ERROR(CheckRange("model.head_dim_k", m.head_dim_k(), kHeadDim));
    return CheckRange("model.head_dim_v", m.head_dim_v(), kHeadDim);
  }

  double MixerParams(const pb::ModelSpec& model) const override {
    const KdaDims x(model);
    return x.h * x.n * (2 * x.dk + x.dv)        // q, k, v
           + x.h * x.r + x.r * x.n * x.dk       // decay: low rank down, up
           + x.h * x.n                          // b (beta)
           + x.h * x.r + x.r * x.n * x.dv       // output gate: down, up
           + x.n * x.dv                         //   and its bias
           + x.n + x.n * x.dk                   // A_log, dt_bias
           + x.w * x.n * (2 * x.dk + x.dv)      // short conv on q, k, v
           + x.dv                               // output norm
           + x.n * x.dv * x.h;                  // o_proj
  }

  // The two gates' low-rank down projections and the output norm.
  double MixerReplicatedParams(const pb::ModelSpec& model) const override {
    const KdaDims x(model);
    return 2 * x.h * x.r + x.dv;
  }

  // The projections (the low-rank pairs as two products each), short conv,
  // q/k L2 norms, the gate per channel and beta, the gated output norm.
  double DenseFlops(const pb::ModelSpec& model) const override {
    const KdaDims x(model);
    const double proj = 2 * x.h * x.n * (2 * x.dk + x.dv + 1)       // q k v b
                        + 2 * x.h * x.r + 2 * x.r * x.n * x.dk      // a
                        + 2 * x.h * x.r + 2 * x.r * x.n * x.dv      // z
                        + 2 * x.n * x.dv * x.h;                     // o_proj
    const double conv_channels = x.n * (2 * x.dk + x.dv);
    const double conv = (2 * x.w + kSiluFlops) * conv_channels;
    const double qk_norm = kNormFlops * 2 * x.n * x.dk;
    const double gates = kGateFlops * x.n * (x.dk + 1);
    const double out_norm = (kNormFlops + kSiluFlops + 2) * x.n * x.dv;  // norm, sigmoid, *, + bg
    return proj + conv + qk_norm + gates + out_norm;
  }

  // CountKdaCoreFlops (backend/kernels/kda_core.h) per token with L = C:
  // Pre 2 C dk + (C - 1)(dk + dv), ST 4 dk dv, Out 2 dk dv + 2 C dv.
  double CoreFlops(const pb::ModelSpec& model) const override {
    const StFlops f = PhaseFlops(model);
    return f.pre + f.st + f.out;
  }

  // The backward's count beyond twice the forward (CountKdaCoreFlops: the
  // Pre recomputed and V_new, Out's, ST's and Pre's backward, and the replay
  // of Pre and ST before them), per token, all heads.
  double ReplayFlops(const pb::ModelSpec& model) const override {
    const KdaDims x(model);
    const StFlops f = PhaseFlops(model);
    const double recompute = f.pre + x.n * 2 * x.dk * x.dv;  // Pre, V_new
    const double replay = f.pre + f.st;
    return recompute + f.out_bwd + f.st_bwd + f.pre_bwd + replay - 2 * CoreFlops(model);
  }

  StFlops PhaseFlops(const pb::ModelSpec& model) const override {
    const KdaDims x(model);
    const double C = x.C, dk = x.dk, dv = x.dv;
    StFlops f;
    f.pre = x.n * (2 * C * dk + (C - 1) * (dk + dv));
    f.st = x.n * 4 * dk * dv;
    f.out = x.n * (2 * dk * dv + 2 * C * dv);
    f.out_bwd = x.n * (4 * C * dv + 4 * dk * dv + 2 * (C + 1) * dk);
    f.st_bwd = x.n * 8 * dk * dv;
    f.pre_bwd = x.n * ((C - 1) * (dk + dv) + 2 * C * (dk + dv) + 2 * (C - 1) * dk);
    return f;
  }

  // The input projections as one GEMM (q k v b split by heads, and the
  // low-rank pairs' down projections, whose 2 r columns every tensor rank
  // computes whole), the pairs' up projections, o_proj.
  std::vector<Gemm> MixerGemms(const pb::ModelSpec& model) const override {
    const KdaDims x(model);
    return {{x.n * (2 * x.dk + x.dv + 1) + 2 * x.r, x.h, false, 1, 2 * x.r},
            {x.n * (x.dk + x.dv), x.r, false, 2},  // a and z, each from its own rank
            {x.h, x.n * x.dv, true}};           // o_proj
  }

  MemorySegment ForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                              bool recompute_full) const override {
    const KdaDims x(model);
    const KdaSizes d(x, b.tensor_size);
    const KdaCoreWorkspaceBytes core_ws(x, d, b);
    return RecurrentForwardEvents(
        b, d.C, recompute_full,
        [&](BufferClass saved, Events* ev) { KdaForwardPass(d, core_ws.forward, saved, ev); },
        [&](BufferClass saved, Events* ev) { FreeKdaSaved(d, saved, ev); });
  }

  MemorySegment BackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                               bool recompute_full) const override {
    const KdaDims x(model);
    const KdaSizes d(x, b.tensor_size);
    const KdaCoreWorkspaceBytes core_ws(x, d, b);
    return RecurrentBackwardEvents(
        b, d.C, recompute_full,
        [&](BufferClass saved, Events* ev) { KdaForwardPass(d, core_ws.forward, saved, ev); },
        [&](Events* ev) { KdaBackwardPass(d, core_ws.backward, ev); },
        [&](BufferClass saved, Events* ev) { FreeKdaSaved(d, saved, ev); });
  }

  // KdaState: the recurrent state (statistics precision) and the three
  // short-convolution tails, as GDN's.
  double BoundaryStateBytes(const pb::ModelSpec& model, double activation_bytes,
                            int tensor_size) const override {
    const KdaDims x(model);
    const double state = x.n * x.dk * x.dv * StatBytes(activation_bytes);
    const double conv_tail = (x.w - 1) * x.n * (2 * x.dk + x.dv) * activation_bytes;
    return (state + conv_tail) / tensor_size;
  }
};

}  // namespace

const Family& KdaFamilyInstance() {
  static const KdaFamily family;
  return family;
}

}  // namespace stateflow::models

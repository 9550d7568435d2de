// Per-layer parameters, FLOPs and tensor sizes. Derivations: docs/models.md
// (parameters) and docs/cost-model.md (everything else).
//
// Dimension legend (one sequence, one token unless said otherwise):
//   h  hidden size            m  SwiGLU size           V  vocabulary
//   n  recurrence heads       dk, dv  GDN key/value head dims
//   dp Mamba-3 head dim       ds Mamba-3 state dim     G  Mamba-3 groups
//   d_in = n dp (Mamba-3)     w  short-conv width      C  kernel block T_C
// (P, M and N are pipeline size, microbatches and chunks everywhere, so the
// Mamba paper's P and N are dp and ds here.)
//   Hq, Hkv, d  attention query heads, K/V heads, head dim
#include "models/layer_formulas.h"

#include <algorithm>
#include <cmath>

namespace stateflow::models {
namespace {

// Elementwise FLOP conventions: RMSNorm 4 per element (square, sum, scale,
// weight), SiLU 5 (negate, exp, add, divide, multiply), rotary 3.
constexpr double kNormFlops = 4;
constexpr double kSiluFlops = 5;
constexpr double kRotaryFlops = 3;
constexpr double kGateFlops = 10;  // per head: softplus/sigmoid/exp of gates

struct Dims {
  double h, m, vocab, n, dk, dv, dp, ds, G, d_in, w, C, hq, hkv, d;
  double na;  // Mamba-3 rotary angles per head (MambaRopeAngles)
};

Dims DimsOf(const pb::ModelSpec& model) {
  Dims x{};
  x.h = model.hidden_size();
  x.m = model.mlp_size();
  x.vocab = model.vocab_size();
  x.n = model.num_heads();
  x.dk = model.head_dim_k();
  x.dv = model.head_dim_v();
  x.dp = model.head_dim_v();
  x.ds = model.state_dim();
  x.G = kMambaGroups;
  x.d_in = MambaInner(model);
  x.w = model.conv_width();
  x.C = kKernelBlockTokens;
  x.hq = model.attn_heads();
  x.hkv = KvHeads(model);
  x.d = model.attn_head_dim();
  x.na = MambaRopeAngles(model);
  return x;
}

bool IsMamba(const pb::ModelSpec& model) {
  return model.architecture() == "mamba3";
}

// ---- FLOPs per token, forward ----

// SwiGLU (3 matmuls, SiLU, product), two RMSNorms, two residual adds.
double MlpAndNormsFlops(const Dims& x) {
  return 6 * x.h * x.m + (kSiluFlops + 1) * x.m + 2 * kNormFlops * x.h +
         2 * x.h;
}

// GDN projections, short conv, q/k L2 norms, gates, gated output norm.
double GdnDenseFlops(const Dims& x) {
  const double proj = 2 * x.h * x.n * (2 * x.dk + 2 * x.dv + 2) +
                      2 * x.n * x.dv * x.h;
  const double conv_channels = x.n * (2 * x.dk + x.dv);
  const double conv = (2 * x.w + kSiluFlops) * conv_channels;
  const double qk_norm = kNormFlops * 2 * x.n * x.dk;
  const double out_norm = (kNormFlops + kSiluFlops + 1) * x.n * x.dv;
  return proj + conv + qk_norm + kGateFlops * x.n + out_norm;
}

// Chunkwise gated delta rule (WY form), per token, all heads.
double GdnCoreFlops(const Dims& x) {
  const double intra = x.C * (6 * x.dk + 4 * x.dv) + 2 * x.C * x.C / 3;
  const double inter = 6 * x.dk * x.dv;
  return x.n * (intra + inter);
}

// What GDN's backward replays from S_in: W, U and the per-block states.
double GdnReplayFlops(const Dims& x) {
  return x.n * (2 * x.C * (x.dk + x.dv) + 4 * x.dk * x.dv);
}

// Mamba-3 (backend/layers/mamba3_layer.h): the eight input projections
// (z, x, B, C, dt, A, trapezoid, angles) and out_proj; the gates; the B and C
// norms; per head the biases and rotary of q and k and the angle scan; the D
// skip and SiLU gate.
double MambaDenseFlops(const Dims& x) {
  const double proj = 2 * x.h * (2 * x.d_in + 2 * x.ds + 3 * x.n + x.na) +
                      2 * x.d_in * x.h;
  const double bc_norm = kNormFlops * 2 * x.ds;
  const double qk_prep = 2 * x.n * (x.ds + kRotaryFlops * 2 * x.na);  // bias, rotary
  const double angles = 2 * x.n * x.na;                                // theta dt, sum
  const double out_gate = (2 + kSiluFlops + 1) * x.d_in;               // + D x, silu, *
  return proj + kGateFlops * x.n + bc_norm + qk_prep + angles + out_gate;
}

// The chunkwise Mamba-3 core (CountMamba3CoreFlops in
// backend/kernels/mamba3_core.h) per token, all heads: per block of C tokens
// 2 C^2 (ds + dp) + 4 C ds dp + 4 ds dp.
double MambaCoreFlops(const Dims& x) {
  return x.n * (2 * x.C * (x.ds + x.dp) + 4 * x.ds * x.dp + 4 * x.ds * x.dp / x.C);
}

// What the core's backward does beyond twice the forward: the block states
// replayed from S_in (2 C ds dp + 4 ds dp per block) and Q K^T recomputed
// (2 C^2 ds per block), per token.
double MambaReplayFlops(const Dims& x) {
  return x.n * (2 * x.ds * x.dp + 4 * x.ds * x.dp / x.C + 2 * x.C * x.ds);
}

double AttentionDenseFlops(const Dims& x) {
  const double proj = 2 * x.h * (x.hq * x.d + 2 * x.hkv * x.d) +
                      2 * x.hq * x.d * x.h;
  return proj + kRotaryFlops * (x.hq + x.hkv) * x.d;
}

}  // namespace

StFlops RecurrenceStFlops(const pb::ModelSpec& model) {
  const Dims x = DimsOf(model);
  StFlops f;
  if (IsMamba(model)) {
    // Pre: the block's C K^T scores; ST: the state update X^T B and its
    // decays; Out: scores times X and C S_in. Backward: twice each.
    f.pre = x.n * 2 * x.C * x.ds;
    f.st = x.n * (2 * x.ds * x.dp + 4 * x.ds * x.dp / x.C);
    f.out = x.n * (2 * x.C * x.dp + 2 * x.ds * x.dp);
    f.out_bwd = 2 * f.out;
    f.st_bwd = 2 * f.st;
    f.pre_bwd = 2 * f.pre;
    return f;
  }
  // GdnCoreFlops's block counts (backend/kernels/gdn_core.h) over L = C.
  const double C = x.C, dk = x.dk, dv = x.dv;
  f.pre = x.n * (2 * C * dk + (C - 1) * (dk + dv));
  f.st = x.n * 4 * dk * dv;
  f.out = x.n * (2 * dk * dv + 2 * C * dk + 2 * C * dv);
  f.out_bwd = x.n * (6 * C * dk + 4 * C * dv + 4 * dk * dv);
  f.st_bwd = x.n * 8 * dk * dv;
  f.pre_bwd = x.n * ((C - 1) * (dk + dv) + 2 * C * (dk + dv) + 4 * C * dk);
  return f;
}

namespace {

FlopCoeffs RecurrenceFlops(const pb::ModelSpec& model, const Dims& x) {
  const bool mamba = IsMamba(model);
  const double dense =
      (mamba ? MambaDenseFlops(x) : GdnDenseFlops(x)) + MlpAndNormsFlops(x);
  const double core = mamba ? MambaCoreFlops(x) : GdnCoreFlops(x);
  const double replay = mamba ? MambaReplayFlops(x) : GdnReplayFlops(x);
  FlopCoeffs f;
  f.fwd_token = dense + core;
  f.bwd_token = 2 * dense + 2 * core + replay;
  return f;
}

// What AttentionLayer computes (backend/kernels/attention.h counts the
// kernel's share the same way): per token the projections, rotary of q and
// k and the MLP; per causal pair 4 d per query head forward (S, P V) and
// 10 d backward (S again, dP, dV, dQ, dK; FlashAttention-2 recomputes S
// from the saved log-sum-exp instead of storing P).
FlopCoeffs AttentionFlops(const Dims& x) {
  const double dense = AttentionDenseFlops(x) + MlpAndNormsFlops(x);
  FlopCoeffs f;
  f.fwd_token = dense;
  f.bwd_token = 2 * dense;
  f.fwd_pair = 4 * x.hq * x.d;   // Q K^T and P V
  f.bwd_pair = 10 * x.hq * x.d;  // S again, dV, dP, dQ, dK
  return f;
}

FlopCoeffs HeadFlops(const Dims& x) {
  FlopCoeffs f;
  f.fwd_token = kNormFlops * x.h + 2 * x.h * x.vocab + 4 * x.vocab;
  f.bwd_token = 2 * kNormFlops * x.h + 4 * x.h * x.vocab + 2 * x.vocab;
  return f;
}

// ---- stored tensors ----

// Block input, norm-1 output, mixer residual sum, norm-2 output; SwiGLU gate
// and up projections (their product is recomputed by the backward, as the
// backend's SwigluMlpBackward does); the two norms' 1/rms.
TokenElems BlockCommonElems(const Dims& x) {
  TokenElems e;
  e.replicated = 4 * x.h;
  e.replicated_stat = 2;
  e.sharded = 2 * x.m;
  return e;
}

void AddGdnElems(const Dims& x, TokenElems* e) {
  const double qkv = x.n * (2 * x.dk + x.dv);
  e->sharded += qkv          // conv inputs
                + qkv        // recurrence inputs q, k, v
                + 3 * x.n    // decay input a, log decay g, beta
                + x.n * x.dv   // recurrence output
                + x.n * x.dv   // output gate
                + x.n * x.dv;  // gated-norm output (o_proj input)
  e->sharded_stat += 3 * x.n;  // q, k L2 norms and output norm, per head
}

// Mamba3LayerSaved beyond BlockCommonElems (backend/layers/mamba3_layer.h).
void AddMambaElems(const Dims& x, TokenElems* e) {
  e->sharded += 4 * x.d_in    // z, x, core output, out_proj input
                + 6 * x.n     // dt, A's projection, lambda, a, gamma, beta
                + 2 * x.n * x.ds;  // rotated q, k per head
  e->replicated += 2 * x.ds   // B, C projections (one group, all heads)
                   + x.na;    // angle rates
  e->replicated_stat += 2;    // B, C norms' 1/rms
  e->sharded_stat += x.n * x.na;  // running angles per head
}

// AttentionLayerSaved (backend/layers/attention_layer.h) beyond the common
// ones; K and V live in the K/V buffer.
void AddAttentionElems(const Dims& x, TokenElems* e) {
  e->sharded += x.hq * x.d     // q after rotary
                + x.hq * x.d;  // attention output (o_proj input)
  e->sharded_stat += x.hq;     // log-sum-exp per head
}

// ---- memory events ----

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

 private:
  const TensorBytes b_;
  MemorySegment seg_;
};

constexpr BufferClass kAct = BufferClass::kActivations;
constexpr BufferClass kWs = BufferClass::kWorkspace;

// The MLP half of every block (backend/layers/residual_mlp.h), shared by the
// GDN, Mamba-3 and attention layers. Forward: hn, rstd2, mlp_gate, mlp_up
// in `saved`; ends holding y.
void MlpForwardEvents(double C, double F, BufferClass saved, Events* ev) {
  ev->Act(saved, C);      // hn
  ev->Stat(saved, 1);     // rstd2
  ev->Act(saved, F);      // mlp_gate
  ev->Act(saved, F);      // mlp_up
  ev->Act(kWs, F);        // prod
  ev->Act(kWs, C);        // y
  ev->FreeAct(kWs, F);    // prod
}
// Backward: ends holding dh (which becomes the layer's dx).
void MlpBackwardEvents(double C, double F, Events* ev) {
  ev->Act(kWs, C);        // d_hn
  ev->Act(kWs, 2 * F);    // SwiGLU backward workspace (2, rows, F)
  ev->FreeAct(kWs, 2 * F);
  ev->Act(kWs, C);        // dh (becomes dx)
  ev->FreeAct(kWs, C);    // d_hn
}

// Per-token sizes of one GDN layer on one TP rank (the legend of
// backend/layers/gdn_layer.h): C hidden, F SwiGLU, H heads, HK = H d_k,
// HV = H d_v; everything but C is split by TP.
struct GdnSizes {
  double C, F, H, HK, HV;
  GdnSizes(const Dims& x, int tp)
      : C(x.h), F(x.m / tp), H(x.n / tp), HK(x.n * x.dk / tp), HV(x.n * x.dv / tp) {}
};

// GdnLayer::MixerInputsForward: xn, the six projections, conv + SiLU (+ L2
// norm) of q, k, v, the gates. Tensors the backward needs are made in class
// `saved` (kActivations, or kWorkspace when a recompute replays them).
void GdnMixerInputsForward(const GdnSizes& d, BufferClass saved, Events* ev) {
  ev->Act(saved, d.C);      // xn
  ev->Stat(saved, 1);       // rstd1
  ev->Act(kWs, d.H);        // b (allocated, then replaced by its projection)
  ev->Act(saved, d.HK);     // q_in
  ev->Act(saved, d.HK);     // k_in
  ev->Act(saved, d.HV);     // v_in
  ev->Act(saved, d.H);      // a
  ev->Act(kWs, d.H);        // b = xn Wb^T
  ev->FreeAct(kWs, d.H);    //   (the first b)
  ev->Act(saved, d.HV);     // z
  ev->Act(kWs, d.HK);       // act: silu(conv(.)) before the L2 norm
  ev->Stat(saved, d.H);     // q_rnorm
  ev->Stat(saved, d.H);     // k_rnorm
  ev->Act(saved, d.HK);     // q
  ev->Act(saved, d.HK);     // k
  ev->Act(saved, d.HV);     // v
  ev->Act(saved, d.H);      // g
  ev->Act(saved, d.H);      // beta
  ev->FreeAct(kWs, d.HK);   // act
  ev->FreeAct(kWs, d.H);    // b
}

// The GDN core's scratch for one sequence of s tokens, in bytes (the
// device's GdnCore*WorkspaceSize elements): on the CPU no forward scratch and
// the backward's entering states H nb Dv Dk (gdn_core.h); on a grid device
// (GdnForwardWorkspace / GdnBackwardWorkspace, grid_kernels/gdn_common.h)
//   forward  = T H (1 + Dk + Dv) + H nb bs^2 + H nb Dv Dk
//   backward = forward + 2 H nb bs^2 + T H (3 Dv + Dk + 1) + H (nb + 1) Dv Dk,
// nb = ceil(s / bs), bs = T_C. Neither depends on st_tile or st_overlap.
struct GdnCoreWorkspaceBytes {
  double forward = 0, backward = 0;
  GdnCoreWorkspaceBytes(const Dims& x, const GdnSizes& d, const TensorBytes& b) {
    const double T = b.seq_tokens, bs = x.C, nb = std::ceil(T / bs);
    const double states = d.H * nb * x.dk * x.dv;
    if (b.core_workspace == CoreWorkspace::kCpu) {
      backward = states * b.stat();
      return;
    }
    const double tiles = d.H * nb * bs * bs, tokens = T * d.H;
    const double fwd = tokens * (1 + x.dk + x.dv) + tiles + states;
    // bf16 (activations narrower than statistics): the float passes run on
    // float copies of the inputs and outputs after the float scratch
    // (GridOps' kWide): q, k, v, g, beta, o; and dO, q, k, v, g, beta, dq,
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
  MlpForwardEvents(d.C, d.F, saved, ev);
}

// Frees what GdnForwardPass made in class `saved` (everything but x and y).
void FreeGdnSaved(const GdnSizes& d, BufferClass saved, Events* ev) {
  // xn, h, hn; q_in, k_in, q, k; v_in, z, v, o, gated; a, g, beta; gate, up.
  ev->FreeAct(saved, 3 * d.C + 4 * d.HK + 5 * d.HV + 3 * d.H + 2 * d.F);
  // rstd1, rstd2; q_rnorm, k_rnorm, o_rstd.
  ev->FreeStat(saved, 2 + 3 * d.H);
}

// GdnLayer::MlpBackward and MixerOutputBackward: dh (becomes dx), and the
// core output's and the gate's gradients d_o, dz, left allocated.
void GdnOutputBackward(const GdnSizes& d, Events* ev) {
  MlpBackwardEvents(d.C, d.F, ev);
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
  ev->Act(kWs, d.H);         // da
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
  ev->FreeAct(kWs, 2 * d.HK + d.HV + 2 * d.H + d.HV);
}

// GdnLayer::BackwardPass: from dy (the caller's) to dx (S, C), which it
// leaves allocated.
void GdnBackwardPass(const GdnSizes& d, double core_ws_bytes, Events* ev) {
  GdnOutputBackward(d, ev);
  GdnCoreBackward(d, core_ws_bytes, ev);
  GdnMixerInputsBackward(d, ev);
}

// Per-token sizes of one attention layer on one TP rank (the legend of
// backend/layers/attention_layer.h): C hidden, F SwiGLU, Hq query heads,
// HqD = Hq d; everything but C is split by TP. K and V live in the stage's
// K/V buffer (memory_model.h), never in the layer's events.
struct AttnSizes {
  double C, F, Hq, HqD, KV;
  AttnSizes(const Dims& x, int tp, double kv_heads)
      : C(x.h), F(x.m / tp), Hq(x.hq / tp), HqD(x.hq * x.d / tp), KV(kv_heads * x.d / tp) {}
};

// AttentionLayer::ForwardPass after the input copy: MixerForward (the K/V
// rows go into the stage's buffer: no event), then the MLP.
void AttnForwardPass(const AttnSizes& d, BufferClass saved, Events* ev) {
  ev->Act(saved, d.C);      // xn
  ev->Stat(saved, 1);       // rstd1
  ev->Act(saved, d.HqD);    // q (RoPE in place)
  ev->Act(saved, d.HqD);    // o
  ev->Stat(saved, d.Hq);    // lse
  ev->Act(saved, d.C);      // h
  MlpForwardEvents(d.C, d.F, saved, ev);
}

// Frees what AttnForwardPass made in class `saved` (everything but x and y).
void FreeAttnSaved(const AttnSizes& d, BufferClass saved, Events* ev) {
  ev->FreeAct(saved, 3 * d.C + 2 * d.HqD + 2 * d.F);  // xn, h, hn; q, o; gate, up
  ev->FreeStat(saved, 2 + d.Hq);                      // rstd1, rstd2; lse
}

// AttentionLayer::BackwardPass: from dy (the caller's) to dx (t, C), which
// it leaves allocated. The kernel's D (s, Hq) is one sequence's, reused
// across the microbatch's sequences.
void AttnBackwardPass(const AttnSizes& d, const TensorBytes& b, Events* ev) {
  MlpBackwardEvents(d.C, d.F, ev);
  // AttentionBackwardPass.
  ev->Act(kWs, d.HqD);       // d_o
  ev->Act(kWs, d.HqD);       // dq
  const double D_bytes = b.seq_tokens * d.Hq * b.stat();
  ev->Bytes(kWs, D_bytes);   // D = rowsum(dO o O), one sequence
  ev->Bytes(kWs, -D_bytes);
  ev->FreeAct(kWs, d.HqD);   // d_o
  // MixerInputsBackward.
  ev->Act(kWs, d.C);         // dxn
  ev->Act(kWs, d.C);         // part
  if (b.act < b.stat()) {    // bf16: one sequence's rows of the fp32 K/V
    const double rows = b.seq_tokens * d.KV * b.act;  // gradient, rounded
    ev->Bytes(kWs, rows);
    ev->Bytes(kWs, -rows);
  }
  ev->FreeAct(kWs, 2 * d.C + d.HqD);  // part, dxn, dq
}

}  // namespace

MemorySegment AttentionLayerForwardMemory(const pb::ModelSpec& model,
                                          const TensorBytes& b,
                                          bool recompute_full) {
  const AttnSizes d(DimsOf(model), b.tensor_size, KvHeads(model));
  Events ev(b);
  ev.Act(kAct, d.C);  // x, the layer input, copied
  const BufferClass saved = recompute_full ? kWs : kAct;
  AttnForwardPass(d, saved, &ev);
  if (recompute_full) FreeAttnSaved(d, saved, &ev);
  return ev.segment();
}

MemorySegment AttentionLayerBackwardMemory(const pb::ModelSpec& model,
                                           const TensorBytes& b,
                                           bool recompute_full) {
  const AttnSizes d(DimsOf(model), b.tensor_size, KvHeads(model));
  Events ev(b);
  if (recompute_full) {
    AttnForwardPass(d, kWs, &ev);  // the replay (K/V read from the buffer), then its unused output
    ev.FreeAct(kWs, d.C);
  }
  AttnBackwardPass(d, b, &ev);
  FreeAttnSaved(d, recompute_full ? kWs : kAct, &ev);
  ev.FreeAct(kAct, d.C);  // x
  return ev.segment();
}

MemorySegment GdnLayerForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                    bool recompute_full) {
  const Dims x = DimsOf(model);
  const GdnSizes d(x, b.tensor_size);
  const GdnCoreWorkspaceBytes core_ws(x, d, b);
  Events ev(b);
  ev.Act(kAct, d.C);  // x, the block input, copied
  const BufferClass saved = recompute_full ? kWs : kAct;
  GdnForwardPass(d, core_ws.forward, saved, &ev);
  if (recompute_full) FreeGdnSaved(d, saved, &ev);
  return ev.segment();
}

MemorySegment GdnLayerBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                     bool recompute_full) {
  const Dims x = DimsOf(model);
  const GdnSizes d(x, b.tensor_size);
  // GdnCore*WorkspaceSize of the run's device, one sequence at a time.
  const GdnCoreWorkspaceBytes core_ws(x, d, b);
  Events ev(b);
  if (recompute_full) {
    GdnForwardPass(d, core_ws.forward, kWs, &ev);  // the replay, then its unused output
    ev.FreeAct(kWs, d.C);
  }
  GdnBackwardPass(d, core_ws.backward, &ev);
  const BufferClass saved = recompute_full ? kWs : kAct;
  FreeGdnSaved(d, saved, &ev);
  ev.FreeAct(kAct, d.C);  // x
  return ev.segment();
}

// ---- Mamba-3 memory events (backend/layers/mamba3_layer.cc) ----

namespace {

// Per-token sizes of one Mamba-3 layer on one TP rank (the legend of
// backend/layers/mamba3_layer.h): C hidden, N state dim and Na angles (one
// B/C group: replicated), the rest split by TP.
struct MambaSizes {
  double C, F, H, HP, HN, HNa, N, Na;
  MambaSizes(const Dims& x, int tp)
      : C(x.h), F(x.m / tp), H(x.n / tp), HP(x.n * x.dp / tp),
        HN(x.n * x.ds / tp), HNa(x.n * x.na / tp), N(x.ds), Na(x.na) {}
};

// Mamba3Layer::MixerInputsForward.
void MambaMixerInputsForward(const MambaSizes& d, BufferClass saved, Events* ev) {
  ev->Act(saved, d.C);      // xn
  ev->Stat(saved, 1);       // rstd1
  ev->Act(saved, d.HP);     // z
  ev->Act(saved, d.HP);     // xv
  ev->Act(saved, d.N);      // Bp
  ev->Act(saved, d.N);      // Cp
  ev->Act(saved, d.H);      // dt
  ev->Act(saved, d.H);      // ddA
  ev->Act(saved, d.H);      // lam
  ev->Act(saved, d.Na);     // theta
  ev->Stat(saved, 1);       // B_rstd
  ev->Stat(saved, 1);       // C_rstd
  ev->Act(kWs, d.N);        // Bn
  ev->Act(kWs, d.N);        // Cn
  ev->Stat(saved, d.HNa);   // phi
  ev->Act(saved, d.HN);     // q
  ev->Act(saved, d.HN);     // k
  ev->Act(saved, d.H);      // a
  ev->Act(saved, d.H);      // gamma
  ev->Act(saved, d.H);      // beta
  ev->FreeAct(kWs, 2 * d.N);  // Cn, Bn
}

// Mamba3Layer::ForwardPass after the input copy; ends holding the output y.
// The Mamba-3 core's scratch for one sequence of s tokens, in bytes (the
// device's Mamba3Core*WorkspaceSize elements; Dk = d_state, Dv = head dim):
// on the CPU no forward scratch and the backward's entering states
// H nb Dv Dk (mamba3_core.h); on a grid device (Mamba3ForwardWorkspace /
// Mamba3BackwardWorkspace, grid_kernels/mamba3_core.h)
//   forward  = T H + H nb bs^2 + 2 H nb Dv Dk
//   backward = forward + 2 H nb bs^2 + H (nb + 1) Dv Dk + T H.
struct MambaCoreWorkspaceBytes {
  double forward = 0, backward = 0;
  MambaCoreWorkspaceBytes(const Dims& x, const MambaSizes& d, const TensorBytes& b) {
    const double T = b.seq_tokens, bs = x.C, nb = std::ceil(T / bs);
    const double states = d.H * nb * x.dp * x.ds;
    if (b.core_workspace == CoreWorkspace::kCpu) {
      backward = states * b.stat();
      return;
    }
    const double tiles = d.H * nb * bs * bs, tokens = T * d.H;
    const double fwd = tokens + tiles + 2 * states;
    // bf16: float copies of the inputs and outputs (as GdnCoreWorkspaceBytes;
    // Dk = ds, Dv = dp): q, k, v, a, gamma, beta, k_in, v_in, o, k_out,
    // v_out; and dO, q, k, v, a, gamma, beta, dk_out, dv_out, k_in, v_in,
    // dq, dk, dv, da, dgamma, dbeta, dk_in, dv_in.
    const bool wide = b.act < b.stat();
    const double carry = d.H * (x.ds + x.dp);
    const double wide_fwd = wide ? tokens * (2 * x.ds + 2 * x.dp + 3) + 2 * carry : 0;
    const double wide_bwd =
        wide ? tokens * (3 * x.dp + 2 * x.ds + 3) + 2 * carry + tokens * (2 * x.ds + x.dp + 3) +
                   carry
             : 0;
    forward = (fwd + wide_fwd) * b.stat();
    backward =
        (fwd + 2 * tiles + d.H * (nb + 1) * x.dp * x.ds + tokens + wide_bwd) * b.stat();
  }
};

void MambaForwardPass(const MambaSizes& d, double core_ws_bytes, BufferClass saved, Events* ev) {
  MambaMixerInputsForward(d, saved, ev);
  ev->Act(saved, d.HP);     // o = Mamba3Core(...)
  if (core_ws_bytes > 0) {  // the device's scratch for one sequence (none on the CPU)
    ev->Bytes(kWs, core_ws_bytes);
    ev->Bytes(kWs, -core_ws_bytes);
  }
  // MixerOutputForward.
  ev->Act(saved, d.HP);     // gated
  ev->Act(kWs, d.HP);       // silu_z
  ev->Act(saved, d.C);      // h
  ev->FreeAct(kWs, d.HP);   // silu_z
  MlpForwardEvents(d.C, d.F, saved, ev);
}

// Frees what MambaForwardPass made in class `saved` (everything but x and y).
void FreeMambaSaved(const MambaSizes& d, BufferClass saved, Events* ev) {
  // xn, h, hn; z, xv, o, gated; Bp, Cp; dt, ddA, lam, a, gamma, beta; theta;
  // q, k; mlp gate, up.
  ev->FreeAct(saved, 3 * d.C + 4 * d.HP + 2 * d.N + 6 * d.H + d.Na + 2 * d.HN + 2 * d.F);
  // rstd1, rstd2, B_rstd, C_rstd; phi.
  ev->FreeStat(saved, 4 + d.HNa);
}

// Mamba3Layer::BackwardPass: from dy (the caller's) to dx, left allocated.
void MambaBackwardPass(const MambaSizes& d, double core_ws_bytes, Events* ev) {
  MlpBackwardEvents(d.C, d.F, ev);
  // MixerOutputBackward.
  ev->Act(kWs, d.HP);          // dgated
  ev->Act(kWs, d.HP);          // silu_z
  ev->Act(kWs, d.HP);          // dz
  ev->Act(kWs, d.HP);          // d_o
  ev->Act(kWs, d.HP);          // dxv
  ev->FreeAct(kWs, 2 * d.HP);  // silu_z, dgated
  // CoreBackward.
  ev->Act(kWs, d.HN);          // dq
  ev->Act(kWs, d.HN);          // dk
  ev->Act(kWs, d.HP);          // dv
  ev->Act(kWs, d.H);           // da
  ev->Act(kWs, d.H);           // dgamma
  ev->Act(kWs, d.H);           // dbeta
  ev->Bytes(kWs, core_ws_bytes);   // the replayed block states of one sequence
  ev->Bytes(kWs, -core_ws_bytes);
  ev->FreeAct(kWs, 2 * d.HP);  // dv, d_o
  // PrepBackward.
  ev->Act(kWs, d.H);           // ddt
  ev->Stat(kWs, d.HNa);        // dphi
  ev->Act(kWs, d.N);           // dBn
  ev->Act(kWs, d.N);           // dCn
  ev->FreeAct(kWs, 2 * d.HN);  // dk, dq
  ev->Act(kWs, d.Na);          // dtheta
  ev->FreeStat(kWs, d.HNa);    // dphi
  ev->Act(kWs, d.H);           // ddA
  ev->Act(kWs, d.H);           // dtrap
  ev->FreeAct(kWs, 3 * d.H);   // dbeta, dgamma, da
  ev->Act(kWs, d.N);           // dBp
  ev->Act(kWs, d.N);           // dCp
  ev->FreeAct(kWs, 2 * d.N);   // dCn, dBn
  // MixerInputsBackward.
  ev->Act(kWs, d.C);           // dxn
  ev->Act(kWs, d.C);           // part
  ev->FreeAct(kWs, 2 * d.C);   // part, dxn
  // The projections' gradients: dz, dxv, ddt, dBp, dCp, ddA, dtrap, dtheta.
  ev->FreeAct(kWs, 2 * d.HP + 3 * d.H + 2 * d.N + d.Na);
}

}  // namespace

MemorySegment Mamba3LayerForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                       bool recompute_full) {
  const Dims x = DimsOf(model);
  const MambaSizes d(x, b.tensor_size);
  const MambaCoreWorkspaceBytes core_ws(x, d, b);
  Events ev(b);
  ev.Act(kAct, d.C);  // x, the layer input, copied
  const BufferClass saved = recompute_full ? kWs : kAct;
  MambaForwardPass(d, core_ws.forward, saved, &ev);
  if (recompute_full) FreeMambaSaved(d, saved, &ev);
  return ev.segment();
}

MemorySegment Mamba3LayerBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                        bool recompute_full) {
  const Dims x = DimsOf(model);
  const MambaSizes d(x, b.tensor_size);
  // Mamba3Core*WorkspaceSize of the run's device, one sequence at a time.
  const MambaCoreWorkspaceBytes core_ws(x, d, b);
  Events ev(b);
  if (recompute_full) {
    MambaForwardPass(d, core_ws.forward, kWs, &ev);  // the replay, then its unused output
    ev.FreeAct(kWs, d.C);
  }
  MambaBackwardPass(d, core_ws.backward, &ev);
  const BufferClass saved = recompute_full ? kWs : kAct;
  FreeMambaSaved(d, saved, &ev);
  ev.FreeAct(kAct, d.C);  // x
  return ev.segment();
}

MemorySegment HeadForwardMemory(const pb::ModelSpec& model, const TensorBytes& b) {
  const Dims x = DimsOf(model);
  const double slice = std::min<double>(kLossVocabSlice, x.vocab / b.tensor_size);
  Events ev(b);
  ev.Act(kAct, x.h);   // x, copied
  ev.Act(kAct, x.h);   // xn
  ev.Stat(kAct, 1);    // rstd
  ev.Stat(kAct, 1);    // lse
  ev.Stat(BufferClass::kLogits, slice);  // one vocabulary slice of logits
  ev.Stat(kWs, 1);     // per-token losses
  ev.FreeStat(kWs, 1);
  ev.FreeStat(BufferClass::kLogits, slice);
  return ev.segment();
}

MemorySegment HeadBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b) {
  const Dims x = DimsOf(model);
  const double slice = std::min<double>(kLossVocabSlice, x.vocab / b.tensor_size);
  Events ev(b);
  ev.Stat(kWs, 1);     // d(losses)
  ev.Act(kWs, x.h);    // dxn
  ev.Stat(BufferClass::kLogits, slice);  // the slice being differentiated
  if (b.act < b.stat()) {  // bf16: its d(logits) rounded for the two GEMMs
    ev.Act(BufferClass::kLogits, slice);
    ev.FreeAct(BufferClass::kLogits, slice);
  }
  ev.FreeStat(BufferClass::kLogits, slice);
  ev.Act(kWs, x.h);    // dx
  ev.FreeAct(kAct, 2 * x.h);  // x, xn
  ev.FreeStat(kAct, 2);       // rstd, lse
  ev.FreeAct(kWs, x.h);       // dxn
  ev.FreeStat(kWs, 1);        // d(losses)
  return ev.segment();
}

MemorySegment HeadFullLogitsForwardMemory(const pb::ModelSpec& model, const TensorBytes& b) {
  const Dims x = DimsOf(model);
  const double vocab = x.vocab / b.tensor_size;  // V / TP columns on this rank
  Events ev(b);
  ev.Act(kAct, x.h);   // x, the final norm's input
  ev.Act(kAct, x.h);   // xn, the output layer's saved input
  ev.Stat(kAct, 1);    // rstd
  ev.Act(BufferClass::kLogits, vocab);   // logits (t, V/TP), activation dtype
  ev.Stat(BufferClass::kLogits, vocab);  // logits.float(): max-subtracted, exp'd,
                                         // divided in place: the saved softmax
  ev.Stat(kWs, 1);     // per-token losses
  ev.FreeStat(kWs, 1);
  ev.FreeAct(BufferClass::kLogits, vocab);  // the activation-dtype logits
  return ev.segment();
}

MemorySegment HeadFullLogitsBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b) {
  const Dims x = DimsOf(model);
  const double vocab = x.vocab / b.tensor_size;
  Events ev(b);
  ev.Stat(kWs, 1);     // d(losses)
  // The saved softmax turns into d(logits) in place (float32); autograd
  // casts it to the logits' dtype, then the float32 tensor is released.
  ev.Act(kWs, vocab);  // d(logits) (t, V/TP), activation dtype
  ev.FreeStat(BufferClass::kLogits, vocab);
  ev.Act(kWs, x.h);    // dxn = d(logits) W
  ev.FreeAct(kWs, vocab);
  ev.Act(kWs, x.h);    // dx
  ev.FreeAct(kAct, 2 * x.h);  // x, xn
  ev.FreeStat(kAct, 1);       // rstd
  ev.FreeAct(kWs, x.h);       // dxn
  ev.FreeStat(kWs, 1);        // d(losses)
  return ev.segment();
}


double MambaInner(const pb::ModelSpec& model) {
  return static_cast<double>(model.num_heads()) * model.head_dim_v();
}

double MambaRopeAngles(const pb::ModelSpec& model) {
  int split = static_cast<int>(model.state_dim() * kMambaRopeFraction);
  if (split % 2 != 0) --split;
  return split / 2;
}

double MlpAndNormsParamCount(const pb::ModelSpec& model) {
  const Dims x = DimsOf(model);
  return 3 * x.h * x.m + 2 * x.h;
}

double MixerParamCount(const pb::ModelSpec& model, LayerKind kind) {
  const Dims x = DimsOf(model);
  if (kind == LayerKind::kAttention) {
    return x.h * (x.hq * x.d + 2 * x.hkv * x.d) + x.hq * x.d * x.h;
  }
  if (IsMamba(model)) {  // backend/layers/mamba3_layer.h, no conv
    return x.h * (2 * x.d_in + 2 * x.ds + 3 * x.n + x.na)  // in_proj
           + 2 * x.n                                       // dt_bias, D
           + 2 * x.ds                                      // B, C norms
           + 2 * x.n * x.ds                                // B, C biases per head
           + x.d_in * x.h;                                 // out_proj
  }
  return x.h * x.n * (2 * x.dk + 2 * x.dv)  // q, k, v, output gate
         + 2 * x.h * x.n                    // a (decay), b (beta)
         + 2 * x.n                          // A_log, dt_bias
         + x.w * x.n * (2 * x.dk + x.dv)    // short conv on q, k, v
         + x.dv                             // output norm
         + x.n * x.dv * x.h;                // o_proj
}

FlopCoeffs LayerFlopCoeffs(const pb::ModelSpec& model, LayerKind kind) {
  const Dims x = DimsOf(model);
  switch (kind) {
    case LayerKind::kEmbedding: {
      FlopCoeffs f;
      f.bwd_token = x.h;  // scatter-add of the output gradient
      return f;
    }
    case LayerKind::kRecurrence: return RecurrenceFlops(model, x);
    case LayerKind::kAttention: return AttentionFlops(x);
    case LayerKind::kHead: return HeadFlops(x);
  }
  return {};
}

std::vector<Gemm> LayerGemms(const pb::ModelSpec& model, LayerKind kind) {
  const Dims x = DimsOf(model);
  std::vector<Gemm> out;
  const auto mlp = [&] {
    out.push_back({2 * x.m, x.h, false});  // gate and up (one linear_fc1)
    out.push_back({x.h, x.m, true});       // down
  };
  switch (kind) {
    case LayerKind::kEmbedding: return out;
    case LayerKind::kHead: out.push_back({x.vocab, x.h, false}); return out;
    case LayerKind::kRecurrence:
      if (IsMamba(model)) {
        out.push_back({2 * x.d_in + 2 * x.ds + 3 * x.n + x.na, x.h, false});
        out.push_back({x.h, x.d_in, true});
      } else {
        out.push_back({x.n * (2 * x.dk + 2 * x.dv + 2), x.h, false});  // q k v z a beta
        out.push_back({x.h, x.n * x.dv, true});                          // o_proj
      }
      mlp();
      return out;
    case LayerKind::kAttention:
      out.push_back({(x.hq + 2 * x.hkv) * x.d, x.h, false});
      out.push_back({x.h, x.hq * x.d, true});
      mlp();
      return out;
  }
  return out;
}

CoreFlops RecurrenceCoreFlops(const pb::ModelSpec& model, LayerKind kind) {
  if (kind != LayerKind::kRecurrence) return {};
  const Dims x = DimsOf(model);
  const bool mamba = IsMamba(model);
  const double core = mamba ? MambaCoreFlops(x) : GdnCoreFlops(x);
  const double replay = mamba ? MambaReplayFlops(x) : GdnReplayFlops(x);
  return {core, 2 * core + replay};
}

TokenElems StoredElemsNoRecompute(const pb::ModelSpec& model, LayerKind kind) {
  const Dims x = DimsOf(model);
  TokenElems e;
  switch (kind) {
    case LayerKind::kEmbedding:
      return e;
    case LayerKind::kHead:  // norm input and output (output-layer input)
      e.replicated = 2 * x.h;
      e.replicated_stat = 2;  // the norm's 1/rms and the log-sum-exp
      return e;
    case LayerKind::kRecurrence:
      e = BlockCommonElems(x);
      if (IsMamba(model)) {
        AddMambaElems(x, &e);
      } else {
        AddGdnElems(x, &e);
      }
      return e;
    case LayerKind::kAttention:
      e = BlockCommonElems(x);
      AddAttentionElems(x, &e);
      return e;
  }
  return e;
}

double BoundaryStateBytesPerSequence(const pb::ModelSpec& model, LayerKind kind,
                                     double activation_bytes,
                                     int tensor_size) {
  if (kind != LayerKind::kRecurrence) return 0;
  const Dims x = DimsOf(model);
  const double tp = tensor_size;
  if (IsMamba(model)) {  // Mamba3State: angle, S (statistics); k, v
    const double stat = StatBytes(activation_bytes);
    const double angle_and_state = x.n * (x.na + x.dp * x.ds) * stat;
    const double carry = x.n * (x.ds + x.dp) * activation_bytes;  // last k, v
    return (angle_and_state + carry) / tp;
  }
  const double state = x.n * x.dk * x.dv * StatBytes(activation_bytes);
  const double conv_tail =
      (x.w - 1) * x.n * (2 * x.dk + x.dv) * activation_bytes;
  return (state + conv_tail) / tp;
}

}  // namespace stateflow::models

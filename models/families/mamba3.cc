// Mamba-3 on the analytic side (family.h): the layer of backend/layers/
// mamba3_layer.h (SISO, one B/C group, complex rotary dynamics as the
// official module's defaults), its parameters (docs/models.md), FLOPs and
// memory events (docs/cost-model.md).
//
// Dimension legend (one sequence, one token unless said otherwise):
//   h  hidden size            m  SwiGLU size
//   n  SSM heads              dp head dim (model.head_dim_v)
//   ds state dim              G  B/C groups
//   d_in = n dp               na rotary angles per head
//   C  kernel block T_C
// (P, M and N are pipeline size, microbatches and chunks everywhere, so the
// Mamba paper's P and N are dp and ds here.)
#include <cmath>

#include "models/families/registry.h"
#include "models/layer_events.h"
#include "models/limits.h"

namespace stateflow::models {
namespace {

// Mamba-3 B/C groups (the Mamba-2 default of one group shared by all heads).
constexpr double kMambaGroups = 1;
// Mamba-3's rope_fraction (the official module's default, mamba_ssm/modules/
// mamba3.py).
constexpr double kMambaRopeFraction = 0.5;

// Its rotary angles per head: floor(state_dim * fraction) rounded down to
// even, halved (backend Mamba3RopeAngles).
double MambaRopeAngles(const pb::ModelSpec& model) {
  int split = static_cast<int>(model.state_dim() * kMambaRopeFraction);
  if (split % 2 != 0) --split;
  return split / 2;
}

struct MambaDims {
  double h, m, n, dp, ds, G, d_in, C, na;
  explicit MambaDims(const pb::ModelSpec& model)
      : h(model.hidden_size()), m(model.mlp_size()), n(model.num_heads()),
        dp(model.head_dim_v()), ds(model.state_dim()), G(kMambaGroups),
        // d_in = heads * head_dim (= 2 * hidden in the presets).
        d_in(static_cast<double>(model.num_heads()) * model.head_dim_v()),
        C(kKernelBlockTokens), na(MambaRopeAngles(model)) {}
};

// Per-token sizes of one Mamba-3 layer on one TP rank (the legend of
// backend/layers/mamba3_layer.h): C hidden, Ds state dim and Na angles (one
// B/C group: replicated), the rest split by TP.
struct MambaSizes {
  double C, F, H, HDp, HDs, HNa, Ds, Na;
  MambaSizes(const MambaDims& x, int tp)
      : C(x.h), F(x.m / tp), H(x.n / tp), HDp(x.n * x.dp / tp),
        HDs(x.n * x.ds / tp), HNa(x.n * x.na / tp), Ds(x.ds), Na(x.na) {}
};

// Mamba3Layer::MixerInputsForward.
void MambaMixerInputsForward(const MambaSizes& d, BufferClass saved, Events* ev) {
  ev->Act(saved, d.C);      // xn
  ev->Stat(saved, 1);       // rstd1
  ev->Act(saved, d.HDp);     // z
  ev->Act(saved, d.HDp);     // xv
  ev->Act(saved, d.Ds);      // Bp
  ev->Act(saved, d.Ds);      // Cp
  ev->Act(saved, d.H);      // dt
  ev->Act(saved, d.H);      // ddA
  ev->Act(saved, d.H);      // lam
  ev->Act(saved, d.Na);     // theta
  ev->Stat(saved, 1);       // B_rstd
  ev->Stat(saved, 1);       // C_rstd
  ev->Act(kWs, d.Ds);        // Bn
  ev->Act(kWs, d.Ds);        // Cn
  ev->Stat(saved, d.HNa);   // phi
  ev->Act(saved, d.HDs);     // q
  ev->Act(saved, d.HDs);     // k
  ev->Act(saved, d.H);      // a
  ev->Act(saved, d.H);      // gamma
  ev->Act(saved, d.H);      // beta
  ev->FreeAct(kWs, 2 * d.Ds);  // Cn, Bn
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
  MambaCoreWorkspaceBytes(const MambaDims& x, const MambaSizes& d, const TensorBytes& b) {
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
  ev->Act(saved, d.HDp);     // o = Mamba3Core(...)
  if (core_ws_bytes > 0) {  // the device's scratch for one sequence (none on the CPU)
    ev->Bytes(kWs, core_ws_bytes);
    ev->Bytes(kWs, -core_ws_bytes);
  }
  // MixerOutputForward.
  ev->Act(saved, d.HDp);     // gated
  ev->Act(kWs, d.HDp);       // silu_z
  ev->Act(saved, d.C);      // h
  ev->FreeAct(kWs, d.HDp);   // silu_z
  MlpForwardEvents(d.C, d.F, saved, ev);
}

// Frees what MambaForwardPass made in class `saved` (everything but x and y).
void FreeMambaSaved(const MambaSizes& d, BufferClass saved, Events* ev) {
  // xn, h, hn; z, xv, o, gated; Bp, Cp; dt, ddA, lam, a, gamma, beta; theta;
  // q, k; mlp gate, up.
  ev->FreeAct(saved, 3 * d.C + 4 * d.HDp + 2 * d.Ds + 6 * d.H + d.Na + 2 * d.HDs + 2 * d.F);
  // rstd1, rstd2, B_rstd, C_rstd; phi.
  ev->FreeStat(saved, 4 + d.HNa);
}

// Mamba3Layer::BackwardPass: from dy (the caller's) to dx, left allocated.
void MambaBackwardPass(const MambaSizes& d, double core_ws_bytes, Events* ev) {
  MlpBackwardEvents(d.C, d.F, ev);
  // MixerOutputBackward.
  ev->Act(kWs, d.HDp);          // dgated
  ev->Act(kWs, d.HDp);          // silu_z
  ev->Act(kWs, d.HDp);          // dz
  ev->Act(kWs, d.HDp);          // d_o
  ev->Act(kWs, d.HDp);          // dxv
  ev->FreeAct(kWs, 2 * d.HDp);  // silu_z, dgated
  // CoreBackward.
  ev->Act(kWs, d.HDs);          // dq
  ev->Act(kWs, d.HDs);          // dk
  ev->Act(kWs, d.HDp);          // dv
  ev->Act(kWs, d.H);           // da
  ev->Act(kWs, d.H);           // dgamma
  ev->Act(kWs, d.H);           // dbeta
  ev->Bytes(kWs, core_ws_bytes);   // the replayed block states of one sequence
  ev->Bytes(kWs, -core_ws_bytes);
  ev->FreeAct(kWs, 2 * d.HDp);  // dv, d_o
  // PrepBackward.
  ev->Act(kWs, d.H);           // ddt
  ev->Stat(kWs, d.HNa);        // dphi
  ev->Act(kWs, d.Ds);           // dBn
  ev->Act(kWs, d.Ds);           // dCn
  ev->FreeAct(kWs, 2 * d.HDs);  // dk, dq
  ev->Act(kWs, d.Na);          // dtheta
  ev->FreeStat(kWs, d.HNa);    // dphi
  ev->Act(kWs, d.H);           // ddA
  ev->Act(kWs, d.H);           // dtrap
  ev->FreeAct(kWs, 3 * d.H);   // dbeta, dgamma, da
  ev->Act(kWs, d.Ds);           // dBp
  ev->Act(kWs, d.Ds);           // dCp
  ev->FreeAct(kWs, 2 * d.Ds);   // dCn, dBn
  // MixerInputsBackward.
  ev->Act(kWs, d.C);           // dxn
  ev->Act(kWs, d.C);           // part
  ev->FreeAct(kWs, 2 * d.C);   // part, dxn
  // The projections' gradients: dz, dxv, ddt, dBp, dCp, ddA, dtrap, dtheta.
  ev->FreeAct(kWs, 2 * d.HDp + 3 * d.H + 2 * d.Ds + d.Na);
}

class Mamba3Family final : public Family {
 public:
  std::string_view name() const override { return "mamba3"; }
  std::string_view description() const override {
    return "Mamba-3 (SISO, complex rotary dynamics, trapezoidal discretisation)";
  }
  std::string_view kernel_name() const override { return "mamba3"; }
  double KernelHeadDim(const pb::ModelSpec& model) const override { return model.head_dim_v(); }

  Status Validate(const pb::ModelSpec& m, int /*tensor_size*/) const override {
    SF_RETURN_IF_ERROR(CheckRange("model.head_dim_v", m.head_dim_v(), kHeadDim));
    return CheckRange("model.state_dim", m.state_dim(), kHeadDim);
  }

  // backend/layers/mamba3_layer.h, no conv.
  double MixerParams(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    return x.h * (2 * x.d_in + 2 * x.ds + 3 * x.n + x.na)  // in_proj
           + 2 * x.n                                       // dt_bias, D
           + 2 * x.ds                                      // B, C norms
           + 2 * x.n * x.ds                                // B, C biases per head
           + x.d_in * x.h;                                 // out_proj
  }

  // The one B/C group's projections and norms and the angle projection.
  double MixerReplicatedParams(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    return x.h * (2 * x.G * x.ds + x.na) + 2 * x.ds;
  }

  // The eight input projections (z, x, B, C, dt, A, trapezoid, angles) and
  // out_proj; the gates; the B and C norms; per head the biases and rotary
  // of q and k and the angle scan; the D skip and SiLU gate.
  double DenseFlops(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    const double proj = 2 * x.h * (2 * x.d_in + 2 * x.ds + 3 * x.n + x.na) +
                        2 * x.d_in * x.h;
    const double bc_norm = kNormFlops * 2 * x.ds;
    const double qk_prep = 2 * x.n * (x.ds + kRotaryFlops * 2 * x.na);  // bias, rotary
    const double angles = 2 * x.n * x.na;                                // theta dt, sum
    const double out_gate = (2 + kSiluFlops + 1) * x.d_in;               // + D x, silu, *
    return proj + kGateFlops * x.n + bc_norm + qk_prep + angles + out_gate;
  }

  // The chunkwise core (CountMamba3CoreFlops in backend/kernels/
  // mamba3_core.h) per token, all heads: per block of C tokens
  // 2 C^2 (ds + dp) + 4 C ds dp + 4 ds dp.
  double CoreFlops(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    return x.n * (2 * x.C * (x.ds + x.dp) + 4 * x.ds * x.dp + 4 * x.ds * x.dp / x.C);
  }

  // What the core's backward does beyond twice the forward: the block states
  // replayed from S_in (2 C ds dp + 4 ds dp per block) and Q K^T recomputed
  // (2 C^2 ds per block), per token.
  double ReplayFlops(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    return x.n * (2 * x.ds * x.dp + 4 * x.ds * x.dp / x.C + 2 * x.C * x.ds);
  }

  // Pre: the block's C K^T scores; ST: the state update X^T B and its
  // decays; Out: scores times X and C S_in. Backward: twice each.
  StFlops PhaseFlops(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    StFlops f;
    f.pre = x.n * 2 * x.C * x.ds;
    f.st = x.n * (2 * x.ds * x.dp + 4 * x.ds * x.dp / x.C);
    f.out = x.n * (2 * x.C * x.dp + 2 * x.ds * x.dp);
    f.out_bwd = 2 * f.out;
    f.st_bwd = 2 * f.st;
    f.pre_bwd = 2 * f.pre;
    return f;
  }

  std::vector<Gemm> MixerGemms(const pb::ModelSpec& model) const override {
    const MambaDims x(model);
    // in_proj: z and x, dt, A and the trapezoid split by heads; B, C (one
    // group) and the angles replicated on every tensor rank.
    return {{2 * x.d_in + 2 * x.ds + 3 * x.n + x.na, x.h, false, 1, 2 * x.ds + x.na},
            {x.h, x.d_in, true}};
  }

  MemorySegment ForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                              bool recompute_full) const override {
    const MambaDims x(model);
    const MambaSizes d(x, b.tensor_size);
    const MambaCoreWorkspaceBytes core_ws(x, d, b);
    return RecurrentForwardEvents(
        b, d.C, recompute_full,
        [&](BufferClass saved, Events* ev) { MambaForwardPass(d, core_ws.forward, saved, ev); },
        [&](BufferClass saved, Events* ev) { FreeMambaSaved(d, saved, ev); });
  }

  MemorySegment BackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                               bool recompute_full) const override {
    const MambaDims x(model);
    const MambaSizes d(x, b.tensor_size);
    // Mamba3Core*WorkspaceSize of the run's device, one sequence at a time.
    const MambaCoreWorkspaceBytes core_ws(x, d, b);
    return RecurrentBackwardEvents(
        b, d.C, recompute_full,
        [&](BufferClass saved, Events* ev) { MambaForwardPass(d, core_ws.forward, saved, ev); },
        [&](Events* ev) { MambaBackwardPass(d, core_ws.backward, ev); },
        [&](BufferClass saved, Events* ev) { FreeMambaSaved(d, saved, ev); });
  }

  // Mamba3State: the running angle and the SSM state (statistics
  // precision); the last token's k and v.
  double BoundaryStateBytes(const pb::ModelSpec& model, double activation_bytes,
                            int tensor_size) const override {
    const MambaDims x(model);
    const double tp = tensor_size;
    const double stat = StatBytes(activation_bytes);
    const double angle_and_state = x.n * (x.na + x.dp * x.ds) * stat;
    const double carry = x.n * (x.ds + x.dp) * activation_bytes;  // last k, v
    return (angle_and_state + carry) / tp;
  }
};

}  // namespace

const Family& Mamba3FamilyInstance() {
  static const Mamba3Family family;
  return family;
}

}  // namespace stateflow::models

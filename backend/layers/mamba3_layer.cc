// The Mamba-3 layer's forward and backward, in the order of the formulas in
// mamba3_layer.h (dimension legend there). Every buffer is a Tensor from the
// layer's allocator: saved tensors in the class the caller asks for
// (kActivations, or kWorkspace when a recompute replays the forward), the
// rest in kWorkspace. models/families/mamba3.cc (Mamba3Family::ForwardMemory /
// Mamba3LayerBackwardMemory) lists these allocations line by line, in order:
// change one, change the other.
#include "backend/layers/mamba3_layer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "backend/layers/copy.h"
#include "backend/layers/recurrent_entry.h"

namespace stateflow::backend {

namespace {
constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr double kInitStd = 0.02;

Status CheckShape(int layer, const std::string& what, const Shape& actual,
                  const Shape& expected) {
  if (actual == expected) return Status::Ok();
  return Status::Invalid("layer " + std::to_string(layer) + " (mamba3 layer): " +
                         what + " has shape " + ShapeString(actual) +
                         ", expected " + ShapeString(expected));
}

}  // namespace

int64_t Mamba3RopeAngles(int64_t Ds) {
  int64_t split = static_cast<int64_t>(static_cast<double>(Ds) * kMamba3RopeFraction);
  if (split % 2 != 0) --split;
  return split / 2;
}

Mamba3LayerDims Mamba3LayerDims::FromModel(const pb::ModelSpec& model) {
  Mamba3LayerDims d;
  d.C = model.hidden_size();
  d.H = model.num_heads();
  d.Dp = model.head_dim_v();
  d.Ds = model.state_dim();
  d.F = model.mlp_size();
  d.Na = Mamba3RopeAngles(d.Ds);
  return d;
}

Mamba3LayerDims Mamba3LayerDims::Sharded(const TpShard& shard) const {
  Mamba3LayerDims d = *this;
  d.H = shard.Part(H);
  d.F = shard.Part(F);
  d.tp = shard;
  return d;
}

// ---- Mamba3State, Mamba3LayerSaved --------------------------------------------

template <typename T>
Result<Mamba3State<T>> Mamba3State<T>::Zeros(TrackingAllocator& alloc,
                                             const Mamba3LayerDims& d,
                                             int64_t batch, BufferClass cls) {
  Mamba3State s;
  SF_ASSIGN_OR_RETURN(s.angle, Tensor<StatOf<T>>::Zeros(alloc, cls, {batch, d.H, d.Na}));
  SF_ASSIGN_OR_RETURN(s.S, Tensor<StatOf<T>>::Zeros(alloc, cls, {batch, d.H, d.Dp, d.Ds}));
  SF_ASSIGN_OR_RETURN(s.k, Tensor<T>::Zeros(alloc, cls, {batch, d.H, d.Ds}));
  SF_ASSIGN_OR_RETURN(s.v, Tensor<T>::Zeros(alloc, cls, {batch, d.H, d.Dp}));
  return s;
}

template <typename T>
int64_t Mamba3State<T>::Numel(const Mamba3LayerDims& d) {
  return d.H * (d.Na + d.Dp * d.Ds + d.Ds + d.Dp);
}

template <typename T>
int64_t Mamba3LayerSaved<T>::NumelPerToken(const Mamba3LayerDims& d) {
  return 4 * d.C + 2 * d.F + 4 + 4 * d.HDp() + 2 * d.Ds + 6 * d.H + d.Na +
         d.H * d.Na + 2 * d.HDs();
}

// ---- construction -------------------------------------------------------------

template <typename T>
const char* Mamba3Layer<T>::ParamName(ParamId id) {
  static constexpr const char* kNames[kNumParams] = {
      "mixer_norm.weight",    "in_proj.z.weight",     "in_proj.x.weight",
      "in_proj.B.weight",     "in_proj.C.weight",     "in_proj.dt.weight",
      "in_proj.A.weight",     "in_proj.trap.weight",  "in_proj.angle.weight",
      "dt_bias",              "B_norm.weight",        "C_norm.weight",
      "B_bias",               "C_bias",               "D",
      "out_proj.weight",      "mlp_norm.weight",      "mlp.gate_proj.weight",
      "mlp.up_proj.weight",   "mlp.down_proj.weight"};
  return kNames[id];
}

template <typename T>
Result<Mamba3Layer<T>> Mamba3Layer<T>::Make(TrackingAllocator& alloc,
                                            const Mamba3LayerDims& d, int layer,
                                            int num_layers, std::uint64_t seed) {
  const InitSpec proj = InitSpec::Normal(kInitStd);
  const InitSpec out = InitSpec::Normal(
      kInitStd / std::sqrt(2.0 * std::max(num_layers, 1)));
  const InitSpec one = InitSpec::Constant(1.0);
  const struct {
    Shape shape;
    InitSpec init;
  } specs[kNumParams] = {
      {{d.C}, one},          {{d.HDp(), d.C}, proj}, {{d.HDp(), d.C}, proj},
      {{d.Ds, d.C}, proj},    {{d.Ds, d.C}, proj},    {{d.H, d.C}, proj},
      {{d.H, d.C}, proj},    {{d.H, d.C}, proj},    {{d.Na, d.C}, proj},
      {{d.H}, InitSpec::GdnDtBias()},               {{d.Ds}, one},
      {{d.Ds}, one},          {{d.H, d.Ds}, one},     {{d.H, d.Ds}, one},
      {{d.H}, one},          {{d.C, d.HDp()}, out},  {{d.C}, one},
      {{d.F, d.C}, proj},    {{d.F, d.C}, proj},    {{d.C, d.F}, out}};
  // Under TP, the dimension each parameter is split along (-1: whole), in
  // ParamId order; kPartial: whole with a partial gradient (shared by heads).
  constexpr int kWhole = -1, kPartial = -2;
  constexpr int kSplitDim[kNumParams] = {kWhole, 0, 0, kPartial, kPartial, 0, 0, 0, kPartial, 0,
                                         kPartial, kPartial, 0, 0, 0, 1, kWhole, 0, 0, 1};
  Mamba3Layer m(&alloc, d, layer);
  m.fops_ = Mamba3OpsOf<T>(alloc.device());
  if (m.fops_ == nullptr) {
    return Status::Invalid("layer " + std::to_string(layer) + " (" + kKind + "): device " +
                           alloc.device().name() + " has no Mamba-3 kernels in this dtype");
  }
  m.params_.reserve(kNumParams);
  for (int i = 0; i < kNumParams; ++i) {
    const ParamSplit split = d.tp.on() && kSplitDim[i] >= 0
                                 ? ParamSplit::Along(kSplitDim[i], d.tp.size, d.tp.rank)
                                 : ParamSplit::Whole();
    SF_ASSIGN_OR_RETURN(Param<T> p,
                        MakeParam<T>(alloc, ParamName(static_cast<ParamId>(i)),
                                     specs[i].shape, specs[i].init, seed, layer, split));
    p.tp_partial_grad = d.tp.on() && kSplitDim[i] == kPartial;
    m.params_.push_back(std::move(p));
  }
  return m;
}

template <typename T>
template <typename E>
Result<Tensor<E>> Mamba3Layer<T>::New(BufferClass cls, Shape shape) {
  return Tensor<E>::Uninitialized(*alloc_, cls, std::move(shape));
}

template <typename T>
Status Mamba3Layer<T>::CheckState(const Mamba3State<T>& s, int64_t B,
                                  const char* what) const {
  const Mamba3LayerDims& d = dims_;
  const std::string w(what);
  SF_RETURN_IF_ERROR(CheckShape(layer_, w + ".angle", s.angle.shape(), {B, d.H, d.Na}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, w + ".S", s.S.shape(), {B, d.H, d.Dp, d.Ds}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, w + ".k", s.k.shape(), {B, d.H, d.Ds}));
  return CheckShape(layer_, w + ".v", s.v.shape(), {B, d.H, d.Dp});
}

// ---- forward ------------------------------------------------------------------

template <typename T>
Status Mamba3Layer<T>::Forward(Tensor<T>* y, Mamba3State<T>* state_out,
                               Mamba3LayerSaved<T>* saved, const Tensor<T>& x,
                               int64_t batch, const Mamba3State<T>& state_in,
                               models::Recompute recompute) {
  return RecurrentEntry<Mamba3Layer>::Forward(*this, y, state_out, saved, x, batch, state_in,
                                              recompute);
}

template <typename T>
Status Mamba3Layer<T>::ForwardPass(Tensor<T>* y, Mamba3State<T>* state_out,
                                   Mamba3LayerSaved<T>* s,
                                   const Mamba3State<T>& state_in,
                                   BufferClass cls) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s->x.dim(0), B = s->batch, Ts = S / B;  // Ts tokens per sequence
  SF_RETURN_IF_ERROR(MixerInputsForward(s, state_out, state_in, cls));
  SF_ASSIGN_OR_RETURN(s->o, New(cls, {S, d.HDp()}));
  const int64_t nS = d.H * d.Dp * d.Ds, nk = d.HDs(), nv = d.HDp();  // per sequence
  // The device's scratch for one sequence (none on the CPU), reused by each.
  SF_ASSIGN_OR_RETURN(
      Tensor<StatOf<T>> ws,
      New<StatOf<T>>(kWs, {fops().Mamba3CoreForwardWorkspaceSize(Ts, d.H, d.Ds, d.Dp, d.block_size)}));
  auto core = d.st_overlap ? &Mamba3Ops<T>::Mamba3CoreForwardOverlapped : &Mamba3Ops<T>::Mamba3CoreForward;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t rk = b * Ts * d.HDs(), rv = b * Ts * d.HDp(), rh = b * Ts * d.H;
    (fops().*core)(
        s->o.data() + rv, state_out ? state_out->S.data() + b * nS : nullptr,
        state_out ? state_out->k.data() + b * nk : nullptr,
        state_out ? state_out->v.data() + b * nv : nullptr, ws.data(), s->q.data() + rk,
        s->k.data() + rk, s->xv.data() + rv, s->a.data() + rh,
        s->gamma.data() + rh, s->beta.data() + rh, state_in.S.data() + b * nS,
        state_in.k.data() + b * nk, state_in.v.data() + b * nv, Ts, d.H, d.Ds,
        d.Dp, d.block_size, d.st_tile);
  }
  ws = Tensor<StatOf<T>>();
  SF_RETURN_IF_ERROR(MixerOutputForward(s, cls));
  return MlpForward(y, s, cls);
}

// xn, the eight projections, the gates, the B and C norms, the angles, and
// the rotated q, k with their biases; the core's a, gamma, beta.
template <typename T>
Status Mamba3Layer<T>::MixerInputsForward(Mamba3LayerSaved<T>* s,
                                          Mamba3State<T>* state_out,
                                          const Mamba3State<T>& state_in,
                                          BufferClass cls) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->xn, New(cls, {S, d.C}));
  SF_ASSIGN_OR_RETURN(s->rstd1, New<StatOf<T>>(cls, {S}));
  ops().RmsNormForward(s->xn.data(), s->rstd1.data(), s->x.data(), w(kMixerNorm),
                    S, d.C, static_cast<ComputeOf<T>>(d.norm_eps));
  const struct {
    Tensor<T>* out;
    ParamId w;
    int64_t D;
  } projs[] = {{&s->z, kZProj, d.HDp()},  {&s->xv, kXProj, d.HDp()},
               {&s->Bp, kBProj, d.Ds},    {&s->Cp, kCProj, d.Ds},
               {&s->dt, kDtProj, d.H},   {&s->ddA, kAProj, d.H},
               {&s->lam, kTrapProj, d.H}, {&s->theta, kAngleProj, d.Na}};
  for (const auto& p : projs) {
    SF_ASSIGN_OR_RETURN(*p.out, New(cls, {S, p.D}));
    ops().LinearForward(p.out->data(), s->xn.data(), w(p.w), nullptr, S, d.C, p.D);
  }
  // In place: dt = softplus(. + dt_bias), lam = sigmoid(.), theta = pi tanh(.).
  fops().Mamba3GatesForward(s->dt.data(), s->lam.data(), s->theta.data(), w(kDtBias), S,
                           d.H, d.Na);
  SF_ASSIGN_OR_RETURN(s->B_rstd, New<StatOf<T>>(cls, {S}));
  SF_ASSIGN_OR_RETURN(s->C_rstd, New<StatOf<T>>(cls, {S}));
  SF_ASSIGN_OR_RETURN(Tensor<T> Bn, New(kWs, {S, d.Ds}));  // (S, Ds)
  SF_ASSIGN_OR_RETURN(Tensor<T> Cn, New(kWs, {S, d.Ds}));  // (S, Ds)
  const ComputeOf<T> bc_eps = static_cast<ComputeOf<T>>(d.bc_norm_eps);
  ops().RmsNormForward(Bn.data(), s->B_rstd.data(), s->Bp.data(), w(kBNorm), S, d.Ds, bc_eps);
  ops().RmsNormForward(Cn.data(), s->C_rstd.data(), s->Cp.data(), w(kCNorm), S, d.Ds, bc_eps);
  SF_ASSIGN_OR_RETURN(s->phi, New<StatOf<T>>(cls, {S, d.H, d.Na}));
  // phi_t = (phi_{t-1} + theta_t dt_t) mod 2 pi, per sequence from
  // state_in.angle; the last into state_out->angle (unless nullptr).
  fops().Mamba3AnglesForward(s->phi.data(), state_out ? state_out->angle.data() : nullptr,
                            s->theta.data(), s->dt.data(), state_in.angle.data(), s->batch,
                            S / s->batch, d.H, d.Na);
  SF_ASSIGN_OR_RETURN(s->q, New(cls, {S, d.HDs()}));
  SF_ASSIGN_OR_RETURN(s->k, New(cls, {S, d.HDs()}));
  // k = rot(Bn + B_bias_h, phi), q likewise.
  fops().Mamba3RotaryForward(s->q.data(), s->k.data(), Cn.data(), Bn.data(), w(kCBias),
                            w(kBBias), s->phi.data(), S, d.H, d.Ds, d.Na);
  SF_ASSIGN_OR_RETURN(s->a, New(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->gamma, New(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->beta, New(cls, {S, d.H}));
  fops().Mamba3CoefficientsForward(s->a.data(), s->gamma.data(), s->beta.data(),
                                  s->ddA.data(), s->dt.data(), s->lam.data(), S * d.H,
                                  static_cast<ComputeOf<T>>(d.a_floor));
  Cn = Tensor<T>();
  Bn = Tensor<T>();
  return Status::Ok();
}

// gated = (o + D xv) silu(z); h = x + gated Wout^T.
template <typename T>
Status Mamba3Layer<T>::MixerOutputForward(Mamba3LayerSaved<T>* s, BufferClass cls) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->gated, New(cls, {S, d.HDp()}));
  SF_ASSIGN_OR_RETURN(Tensor<T> silu_z, New(kWs, {S, d.HDp()}));  // (S, HDp)
  ops().SiluForward(silu_z.data(), s->z.data(), S * d.HDp());
  fops().Mamba3GateOutputForward(s->gated.data(), s->o.data(), s->xv.data(), silu_z.data(),
                                w(kD), S, d.H, d.Dp);
  SF_ASSIGN_OR_RETURN(s->h, New(cls, {S, d.C}));
  ops().LinearForward(s->h.data(), s->gated.data(), w(kOutProj), nullptr, S, d.HDp(), d.C);
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, s->h.data(), S * d.C));  // row-parallel
  ops().Add(s->h.data(), s->x.data(), S * d.C);
  return Status::Ok();
}

// y = h + SwiGLU(RMSNorm(h) * mlp_norm).
template <typename T>
Status Mamba3Layer<T>::MlpForward(Tensor<T>* y, Mamba3LayerSaved<T>* s,
                                  BufferClass cls) {
  return ResidualMlpForward(*alloc_, y, s, MlpParams(), dims_.C, dims_.F,
                            RmsNormSwiglu(dims_.norm_eps), cls, dims_.tp);
}

// ---- backward -----------------------------------------------------------------

// Gradients of the eight projections' outputs (before their activations).
template <typename T>
struct Mamba3Layer<T>::MixerGrads {
  Tensor<T> dz, dxv;             // (S, HDp)
  Tensor<T> ddt, dBp, dCp;       // (S, H), (S, Ds), (S, Ds)
  Tensor<T> ddA, dtrap, dtheta;  // (S, H), (S, H), (S, Na)
};

// Gradients of the core's inputs q, k, a, gamma, beta.
template <typename T>
struct Mamba3Layer<T>::CoreGrads {
  Tensor<T> dq, dk;              // (S, HDs)
  Tensor<T> da, dgamma, dbeta;   // (S, H)
};

template <typename T>
Status Mamba3Layer<T>::Backward(Tensor<T>* dx, Mamba3State<T>* dstate_in,
                                Mamba3LayerSaved<T>* saved, const Tensor<T>& dy,
                                int64_t batch, const Mamba3State<T>* dstate_out,
                                const Mamba3State<T>& state_in) {
  return RecurrentEntry<Mamba3Layer>::Backward(*this, dx, dstate_in, saved, dy, batch, dstate_out,
                                               state_in);
}

template <typename T>
Status Mamba3Layer<T>::BackwardPass(Tensor<T>* dx, Mamba3State<T>* dstate_in,
                                    const Mamba3LayerSaved<T>& s,
                                    const Tensor<T>& dy,
                                    const Mamba3State<T>* dstate_out,
                                    const Mamba3State<T>& state_in) {
  Tensor<T> dh;  // (S, C) d(h): the residual's dy plus the MLP branch's
  SF_RETURN_IF_ERROR(MlpBackward(&dh, s, dy));
  MixerGrads grads;
  Tensor<T> d_o;  // (S, HDp) d(core output)
  SF_RETURN_IF_ERROR(MixerOutputBackward(&d_o, &grads, s, dh));
  CoreGrads core;
  SF_RETURN_IF_ERROR(CoreBackward(&core, &grads, dstate_in, s, &d_o, dstate_out, state_in));
  SF_RETURN_IF_ERROR(PrepBackward(&grads, &core, dstate_in, s, dstate_out));
  *dx = std::move(dh);  // the mixer's residual; the norm branch is added
  return MixerInputsBackward(dx, grads, s);
}

// dh (S, C) = dy + RMSNorm-backward(SwiGLU-backward(dy)).
template <typename T>
Status Mamba3Layer<T>::MlpBackward(Tensor<T>* dh, const Mamba3LayerSaved<T>& s,
                                   const Tensor<T>& dy) {
  return ResidualMlpBackward(*alloc_, dh, s, MlpParams(), dy, dims_.C, dims_.F,
                             RmsNormSwiglu(dims_.norm_eps), dims_.tp);
}

// From dh: d_o (S, HDp) of the core output, grads->dz, grads->dxv (the D
// skip's share), dD.
template <typename T>
Status Mamba3Layer<T>::MixerOutputBackward(Tensor<T>* d_o, MixerGrads* g,
                                           const Mamba3LayerSaved<T>& s,
                                           const Tensor<T>& dh) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s.x.dim(0);
  SF_ASSIGN_OR_RETURN(Tensor<T> dgated, New(kWs, {S, d.HDp()}));  // (S, HDp)
  ops().LinearBackward(dgated.data(), dw(kOutProj), nullptr, dh.data(),
                    s.gated.data(), w(kOutProj), S, d.HDp(), d.C);
  SF_ASSIGN_OR_RETURN(Tensor<T> silu_z, New(kWs, {S, d.HDp()}));  // (S, HDp)
  ops().SiluForward(silu_z.data(), s.z.data(), S * d.HDp());
  SF_ASSIGN_OR_RETURN(g->dz, New(kWs, {S, d.HDp()}));
  SF_ASSIGN_OR_RETURN(*d_o, New(kWs, {S, d.HDp()}));
  SF_ASSIGN_OR_RETURN(g->dxv, New(kWs, {S, d.HDp()}));
  fops().Mamba3GateOutputBackward(g->dz.data(), d_o->data(), g->dxv.data(), dw(kD),
                                 dgated.data(), s.o.data(), s.xv.data(), silu_z.data(),
                                 w(kD), S, d.H, d.Dp);
  ops().SiluBackward(g->dz.data(), g->dz.data(), s.z.data(), S * d.HDp());
  silu_z = Tensor<T>();
  dgated = Tensor<T>();
  return Status::Ok();
}

// The core's backward, sequence by sequence: core->dq, dk, da, dgamma,
// dbeta; dv added into grads->dxv; dS, dk, dv of dstate_in. Frees d_o.
template <typename T>
Status Mamba3Layer<T>::CoreBackward(CoreGrads* c, MixerGrads* g,
                                    Mamba3State<T>* dstate_in,
                                    const Mamba3LayerSaved<T>& s, Tensor<T>* d_o,
                                    const Mamba3State<T>* dstate_out,
                                    const Mamba3State<T>& state_in) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s.x.dim(0), B = s.batch, Ts = S / B;
  SF_ASSIGN_OR_RETURN(c->dq, New(kWs, {S, d.HDs()}));
  SF_ASSIGN_OR_RETURN(c->dk, New(kWs, {S, d.HDs()}));
  SF_ASSIGN_OR_RETURN(Tensor<T> dv, New(kWs, {S, d.HDp()}));  // (S, HDp)
  SF_ASSIGN_OR_RETURN(c->da, New(kWs, {S, d.H}));
  SF_ASSIGN_OR_RETURN(c->dgamma, New(kWs, {S, d.H}));
  SF_ASSIGN_OR_RETURN(c->dbeta, New(kWs, {S, d.H}));
  // One sequence's workspace, reused by each in turn.
  SF_ASSIGN_OR_RETURN(
      Tensor<StatOf<T>> ws,
      New<StatOf<T>>(kWs, {fops().Mamba3CoreBackwardWorkspaceSize(Ts, d.H, d.Ds, d.Dp, d.block_size)}));
  const int64_t nS = d.H * d.Dp * d.Ds, nk = d.HDs(), nv = d.HDp();
  // (S and the angle are StatOf<T>, k and v T: one lambda for both.)
  auto in = [&](auto m, int64_t off) {
    return dstate_in != nullptr ? (dstate_in->*m).data() + off : nullptr;
  };
  auto out = [&](auto m, int64_t off) {
    return dstate_out != nullptr ? (dstate_out->*m).data() + off : nullptr;
  };
  auto core = d.st_overlap ? &Mamba3Ops<T>::Mamba3CoreBackwardOverlapped : &Mamba3Ops<T>::Mamba3CoreBackward;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t rk = b * Ts * d.HDs(), rv = b * Ts * d.HDp(), rh = b * Ts * d.H;
    (fops().*core)(
        c->dq.data() + rk, c->dk.data() + rk, dv.data() + rv, c->da.data() + rh,
        c->dgamma.data() + rh, c->dbeta.data() + rh,
        in(&Mamba3State<T>::S, b * nS), in(&Mamba3State<T>::k, b * nk),
        in(&Mamba3State<T>::v, b * nv), ws.data(), d_o->data() + rv,
        out(&Mamba3State<T>::S, b * nS), out(&Mamba3State<T>::k, b * nk),
        out(&Mamba3State<T>::v, b * nv), s.q.data() + rk, s.k.data() + rk,
        s.xv.data() + rv, s.a.data() + rh, s.gamma.data() + rh,
        s.beta.data() + rh, state_in.S.data() + b * nS,
        state_in.k.data() + b * nk, state_in.v.data() + b * nv, Ts, d.H, d.Ds,
        d.Dp, d.block_size, d.st_tile);
  }
  ws = Tensor<StatOf<T>>();
  ops().Add(g->dxv.data(), dv.data(), S * d.HDp());
  dv = Tensor<T>();
  *d_o = Tensor<T>();
  return Status::Ok();
}

// From the core's gradients back to the projections' outputs: grads->ddt,
// dBp, dCp, ddA, dtrap, dtheta; dt_bias, B/C norm and bias gradients; the
// angle of dstate_in. Frees *core.
template <typename T>
Status Mamba3Layer<T>::PrepBackward(MixerGrads* g, CoreGrads* c,
                                    Mamba3State<T>* dstate_in,
                                    const Mamba3LayerSaved<T>& s,
                                    const Mamba3State<T>* dstate_out) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s.x.dim(0), n = S * d.H;
  // a = A dt, gamma = lam dt, beta = (1 - lam) dt.
  SF_ASSIGN_OR_RETURN(g->ddt, New(kWs, {S, d.H}));
  const ComputeOf<T> a_floor = static_cast<ComputeOf<T>>(d.a_floor);
  fops().Mamba3CoefficientsBackward(g->ddt.data(), c->da.data(), c->dgamma.data(),
                                   c->dbeta.data(), s.ddA.data(), s.lam.data(), n, a_floor);
  SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> dphi, New<StatOf<T>>(kWs, {S, d.H, d.Na}));  // (S, H, Na)
  SF_ASSIGN_OR_RETURN(Tensor<T> dBn, New(kWs, {S, d.Ds}));         // (S, Ds)
  SF_ASSIGN_OR_RETURN(Tensor<T> dCn, New(kWs, {S, d.Ds}));         // (S, Ds)
  // q = rot(u, phi), u = Cn + C_bias_h (k likewise): dq, dk turned into du.
  fops().Mamba3RotaryBackward(dphi.data(), dCn.data(), dBn.data(), dw(kCBias), dw(kBBias),
                             c->dq.data(), c->dk.data(), s.q.data(), s.k.data(),
                             s.phi.data(), S, d.H, d.Ds, d.Na);
  c->dk = Tensor<T>();
  c->dq = Tensor<T>();
  SF_ASSIGN_OR_RETURN(g->dtheta, New(kWs, {S, d.Na}));
  fops().Mamba3AnglesBackward(g->dtheta.data(), g->ddt.data(),
                             dstate_in ? dstate_in->angle.data() : nullptr, dphi.data(),
                             s.theta.data(), s.dt.data(),
                             dstate_out ? dstate_out->angle.data() : nullptr, s.batch,
                             S / s.batch, d.H, d.Na);
  dphi = Tensor<StatOf<T>>();
  SF_ASSIGN_OR_RETURN(g->ddA, New(kWs, {S, d.H}));
  SF_ASSIGN_OR_RETURN(g->dtrap, New(kWs, {S, d.H}));
  fops().Mamba3GatesBackward(g->ddA.data(), g->dtrap.data(), g->ddt.data(), dw(kDtBias),
                            c->da.data(), c->dgamma.data(), c->dbeta.data(), s.ddA.data(),
                            s.dt.data(), s.lam.data(), S, d.H, a_floor);
  c->dbeta = Tensor<T>();
  c->dgamma = Tensor<T>();
  c->da = Tensor<T>();
  SF_ASSIGN_OR_RETURN(g->dBp, New(kWs, {S, d.Ds}));
  SF_ASSIGN_OR_RETURN(g->dCp, New(kWs, {S, d.Ds}));
  ops().RmsNormBackward(g->dBp.data(), dw(kBNorm), dBn.data(), s.Bp.data(),
                     w(kBNorm), s.B_rstd.data(), S, d.Ds);
  ops().RmsNormBackward(g->dCp.data(), dw(kCNorm), dCn.data(), s.Cp.data(),
                     w(kCNorm), s.C_rstd.data(), S, d.Ds);
  return Status::Ok();
}

// dx += RMSNorm-backward(sum over the eight projections of d(proj) W).
template <typename T>
Status Mamba3Layer<T>::MixerInputsBackward(Tensor<T>* dx, const MixerGrads& g,
                                           const Mamba3LayerSaved<T>& s) {
  const Mamba3LayerDims& d = dims_;
  const int64_t S = s.x.dim(0);
  const struct {
    const Tensor<T>* dproj;
    ParamId w;
    int64_t D;
  } projs[] = {{&g.dz, kZProj, d.HDp()},      {&g.dxv, kXProj, d.HDp()},
               {&g.dBp, kBProj, d.Ds},        {&g.dCp, kCProj, d.Ds},
               {&g.ddt, kDtProj, d.H},       {&g.ddA, kAProj, d.H},
               {&g.dtrap, kTrapProj, d.H},   {&g.dtheta, kAngleProj, d.Na}};
  SF_ASSIGN_OR_RETURN(Tensor<T> dxn, Tensor<T>::Zeros(*alloc_, kWs, {S, d.C}));
  SF_ASSIGN_OR_RETURN(Tensor<T> part, New(kWs, {S, d.C}));  // (S, C)
  for (const auto& p : projs) {
    ops().LinearBackward(part.data(), dw(p.w), nullptr, p.dproj->data(),
                      s.xn.data(), w(p.w), S, d.C, p.D);
    ops().Add(dxn.data(), part.data(), S * d.C);
  }
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, dxn.data(), S * d.C));  // column-parallel inputs
  ops().RmsNormBackward(part.data(), dw(kMixerNorm), dxn.data(), s.x.data(),
                     w(kMixerNorm), s.rstd1.data(), S, d.C);
  ops().Add(dx->data(), part.data(), S * d.C);
  return Status::Ok();
}

#define SF_INSTANTIATE(T)         \
  template struct Mamba3State<T>; \
  template struct Mamba3LayerSaved<T>; \
  template class Mamba3Layer<T>;
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

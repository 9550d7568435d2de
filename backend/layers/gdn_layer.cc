// The GDN layer's forward and backward, in the order of the formulas in
// gdn_layer.h. Dimension legend there. Every buffer below is a Tensor from the
// layer's allocator: saved tensors in the class the caller asks for
// (kActivations, or kWorkspace when a recompute replays the forward), the
// rest in kWorkspace, freed when the function that made it returns.
#include "backend/layers/gdn_layer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "backend/kernels/eigen_types.h"
#include "backend/kernels/gdn_prep.h"
#include "backend/kernels/linear.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/kernels/short_conv.h"
#include "backend/kernels/silu.h"
#include "backend/kernels/swiglu_mlp.h"
#include "backend/layers/block_norm.h"
#include "backend/layers/conv_silu.h"
#include "backend/layers/copy.h"
#include "backend/layers/recurrent_entry.h"

namespace stateflow::backend {

namespace {
constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr double kInitStd = 0.02;

// Ok if `t` has exactly `shape`; else names the layer and tensor.
Status CheckShape(int layer, const char* what, const Shape& actual,
                  const Shape& expected) {
  if (actual == expected) return Status::Ok();
  return Status::Invalid("layer " + std::to_string(layer) + " (gdn layer): " +
                         what + " has shape " + ShapeString(actual) +
                         ", expected " + ShapeString(expected));
}
}  // namespace

GdnLayerDims GdnLayerDims::FromModel(const pb::ModelSpec& model) {
  GdnLayerDims d;
  d.C = model.hidden_size();
  d.H = model.num_heads();
  d.K = model.head_dim_k();
  d.Dv = model.head_dim_v();
  d.F = model.mlp_size();
  d.W = model.conv_width();
  d.shape = models::BlockShapeOf(model);
  d.norm_eps = d.shape.norm_eps;
  d.decay = model.decay() != "none";
  return d;
}

GdnLayerDims GdnLayerDims::Sharded(const TpShard& shard) const {
  GdnLayerDims d = *this;
  d.H = shard.Part(H);
  d.F = shard.Part(F);
  d.tp = shard;
  return d;
}

// ---- GdnState, GdnLayerSaved ------------------------------------------------

template <typename T>
Result<GdnState<T>> GdnState<T>::Zeros(TrackingAllocator& alloc,
                                       const GdnLayerDims& d,
                                       int64_t batch, BufferClass cls) {
  GdnState s;
  SF_ASSIGN_OR_RETURN(s.S, Tensor<StatOf<T>>::Zeros(alloc, cls, {batch, d.H, d.Dv, d.K}));
  SF_ASSIGN_OR_RETURN(s.tail_q, Tensor<T>::Zeros(alloc, cls, {batch, d.W - 1, d.HK()}));
  SF_ASSIGN_OR_RETURN(s.tail_k, Tensor<T>::Zeros(alloc, cls, {batch, d.W - 1, d.HK()}));
  SF_ASSIGN_OR_RETURN(s.tail_v, Tensor<T>::Zeros(alloc, cls, {batch, d.W - 1, d.HV()}));
  return s;
}

template <typename T>
int64_t GdnState<T>::Numel(const GdnLayerDims& d) {
  return d.H * d.Dv * d.K + (d.W - 1) * (2 * d.HK() + d.HV());
}

template <typename T>
int64_t GdnLayerSaved<T>::NumelPerToken(const GdnLayerDims& d) {
  return 4 * d.C + 2 * d.F + 2 + 4 * d.HK() + 5 * d.HV() + 6 * d.H;
}

// ---- construction -----------------------------------------------------------

template <typename T>
const char* GdnLayer<T>::ParamName(ParamId id) {
  static constexpr const char* kNames[kNumParams] = {
      "attn_norm.weight", "q_proj.weight",        "k_proj.weight",
      "v_proj.weight",    "a_proj.weight",        "b_proj.weight",
      "g_proj.weight",    "q_conv.weight",        "k_conv.weight",
      "v_conv.weight",    "A_log",                "dt_bias",
      "o_norm.weight",    "o_proj.weight",        "mlp_norm.weight",
      "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
      "attn_norm.bias",   "o_proj.bias",          "mlp_norm.bias",
      "mlp.up_proj.bias", "mlp.down_proj.bias"};
  return kNames[id];
}

template <typename T>
bool GdnLayer<T>::Has(const GdnLayerDims& d, ParamId id) {
  switch (id) {
    case kAProj: case kALog: case kDtBias: return d.decay;
    case kMlpGate: return !d.shape.gelu;
    case kAttnNormBias: case kMlpNormBias: return d.shape.layer_norm;
    case kOProjBias: return d.shape.out_proj_bias;
    case kMlpUpBias: case kMlpDownBias: return d.shape.mlp_bias;
    default: return true;
  }
}

template <typename T>
Result<GdnLayer<T>> GdnLayer<T>::Make(TrackingAllocator& alloc,
                                      const GdnLayerDims& d, int layer,
                                      int num_layers, std::uint64_t seed) {
  const InitSpec proj = InitSpec::Normal(kInitStd);
  const InitSpec out = InitSpec::Normal(
      kInitStd / std::sqrt(2.0 * std::max(num_layers, 1)));
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(d.W));
  const InitSpec conv = InitSpec::Uniform(-conv_bound, conv_bound);
  const InitSpec one = InitSpec::Constant(1.0);
  const InitSpec zero = InitSpec::Constant(0.0);
  const struct {
    Shape shape;
    InitSpec init;
  } specs[kNumParams] = {
      {{d.C}, one},           {{d.HK(), d.C}, proj},  {{d.HK(), d.C}, proj},
      {{d.HV(), d.C}, proj},  {{d.H, d.C}, proj},     {{d.H, d.C}, proj},
      {{d.HV(), d.C}, proj},  {{d.W, d.HK()}, conv},  {{d.W, d.HK()}, conv},
      {{d.W, d.HV()}, conv},  {{d.H}, InitSpec::GdnALog()},
      {{d.H}, InitSpec::GdnDtBias()},                 {{d.Dv}, one},
      {{d.C, d.HV()}, out},   {{d.C}, one},           {{d.F, d.C}, proj},
      {{d.F, d.C}, proj},     {{d.C, d.F}, out},      {{d.C}, zero},
      {{d.C}, zero},          {{d.C}, zero},          {{d.F}, zero},
      {{d.C}, zero}};
  // Under TP, the dimension each parameter is split along (-1: whole on
  // every rank; tensor_parallel.h), in ParamId order; o_norm (one Dv vector
  // shared by the heads) is whole with a partial gradient.
  constexpr int kSplitDim[kNumParams] = {-1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, -1,
                                         1,  -1, 0, 0, 1, -1, -1, -1, 0, -1};
  GdnLayer gdn(&alloc, d, layer);
  gdn.fops_ = GdnOpsOf<T>(alloc.device());
  if (gdn.fops_ == nullptr) {
    return Status::Invalid("layer " + std::to_string(layer) + " (" + kKind + "): device " +
                           alloc.device().name() + " has no GDN kernels in this dtype");
  }
  gdn.params_.reserve(kNumParams);
  for (int id = 0; id < kNumParams; ++id) {
    gdn.slot_[id] = -1;
    if (!Has(d, static_cast<ParamId>(id))) continue;
    const ParamSplit split = d.tp.on() && kSplitDim[id] >= 0
                                 ? ParamSplit::Along(kSplitDim[id], d.tp.size, d.tp.rank)
                                 : ParamSplit::Whole();
    SF_ASSIGN_OR_RETURN(
        Param<T> p, MakeParam<T>(alloc, ParamName(static_cast<ParamId>(id)),
                                 specs[id].shape, specs[id].init, seed, layer, split));
    p.tp_partial_grad = d.tp.on() && id == kONorm;
    gdn.slot_[id] = static_cast<int>(gdn.params_.size());
    gdn.params_.push_back(std::move(p));
  }
  return gdn;
}

template <typename T>
template <typename E>
Result<Tensor<E>> GdnLayer<T>::New(BufferClass cls, Shape shape) {
  return Tensor<E>::Uninitialized(*alloc_, cls, std::move(shape));
}

template <typename T>
Status GdnLayer<T>::CheckState(const GdnState<T>& s, int64_t B, const char* what) const {
  const GdnLayerDims& d = dims_;
  const std::string w(what);
  SF_RETURN_IF_ERROR(CheckShape(layer_, (w + ".S").c_str(), s.S.shape(), {B, d.H, d.Dv, d.K}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, (w + ".tail_q").c_str(), s.tail_q.shape(), {B, d.W - 1, d.HK()}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, (w + ".tail_k").c_str(), s.tail_k.shape(), {B, d.W - 1, d.HK()}));
  return CheckShape(layer_, (w + ".tail_v").c_str(), s.tail_v.shape(), {B, d.W - 1, d.HV()});
}

// ---- forward ----------------------------------------------------------------

template <typename T>
Status GdnLayer<T>::Forward(Tensor<T>* y, GdnState<T>* state_out,
                            GdnLayerSaved<T>* saved, const Tensor<T>& x,
                            int64_t batch, const GdnState<T>& state_in,
                            models::Recompute recompute) {
  return RecurrentEntry<GdnLayer>::Forward(*this, y, state_out, saved, x, batch, state_in,
                                           recompute);
}

template <typename T>
Status GdnLayer<T>::ForwardPass(Tensor<T>* y, GdnState<T>* state_out,
                                GdnLayerSaved<T>* s,
                                const GdnState<T>& state_in, BufferClass cls) {
  const GdnLayerDims& d = dims_;
  const int64_t S = s->x.dim(0), B = s->batch, Ts = S / B;  // Ts tokens per sequence
  SF_RETURN_IF_ERROR(MixerInputsForward(s, state_out, state_in, cls));
  SF_ASSIGN_OR_RETURN(s->o, New(cls, {S, d.HV()}));
  const int64_t state = d.H * d.Dv * d.K;
  // The device's scratch for one sequence (none on the CPU), reused by each.
  SF_ASSIGN_OR_RETURN(
      Tensor<StatOf<T>> ws,
      New<StatOf<T>>(kWs, {fops().GdnCoreForwardWorkspaceSize(Ts, d.H, d.K, d.Dv, d.block_size)}));
  auto core = d.st_overlap ? &GdnOps<T>::GdnCoreForwardOverlapped : &GdnOps<T>::GdnCoreForward;
  for (int64_t b = 0; b < B; ++b) {
    (fops().*core)(s->o.data() + b * Ts * d.HV(),
                      state_out != nullptr ? state_out->S.data() + b * state : nullptr,
                      ws.data(), s->q.data() + b * Ts * d.HK(), s->k.data() + b * Ts * d.HK(),
                      s->v.data() + b * Ts * d.HV(), s->g.data() + b * Ts * d.H,
                      s->beta.data() + b * Ts * d.H, state_in.S.data() + b * state, Ts,
                      d.H, d.K, d.Dv, d.block_size, d.st_tile);
  }
  ws = Tensor<StatOf<T>>();
  SF_RETURN_IF_ERROR(MixerOutputForward(s, cls));
  return MlpForward(y, s, cls);
}

// xn, the six projections, conv + SiLU (+ L2 norm) of q, k, v, the gates.
template <typename T>
Status GdnLayer<T>::MixerInputsForward(GdnLayerSaved<T>* s,
                                       GdnState<T>* state_out,
                                       const GdnState<T>& state_in,
                                       BufferClass cls) {
  const GdnLayerDims& d = dims_;
  const int64_t S = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->xn, New(cls, {S, d.C}));
  SF_ASSIGN_OR_RETURN(s->rstd1, NewNormStats<T>(*alloc_, cls, S, d.shape.layer_norm));
  NormForward(ops(), d.shape, s->xn.data(), s->rstd1.data(), s->x.data(), w(kAttnNorm),
              w(kAttnNormBias), S, d.C);
  SF_ASSIGN_OR_RETURN(Tensor<T> b, New(kWs, {S, d.H}));  // (S, H)
  const struct {
    Tensor<T>* out;
    BufferClass cls;
    ParamId w;
    int64_t D;
  } projs[] = {{&s->q_in, cls, kQProj, d.HK()}, {&s->k_in, cls, kKProj, d.HK()},
               {&s->v_in, cls, kVProj, d.HV()}, {&s->a, cls, kAProj, d.H},
               {&b, kWs, kBProj, d.H},          {&s->z, cls, kGProj, d.HV()}};
  for (const auto& p : projs) {
    if (!Has(d, p.w)) continue;  // DeltaNet: no a
    SF_ASSIGN_OR_RETURN(*p.out, New(p.cls, {S, p.D}));
    ops().LinearForward(p.out->data(), s->xn.data(), w(p.w), nullptr, S, d.C, p.D);
  }
  // q, k: L2-normalised SiLU(conv); v: SiLU(conv), the core's input as is.
  SF_ASSIGN_OR_RETURN(Tensor<T> act, New(kWs, {S, d.HK()}));  // (S, HK)
  const ComputeOf<T> q_scale = static_cast<ComputeOf<T>>(1.0 / std::sqrt(static_cast<double>(d.K)));
  const ComputeOf<T> eps = static_cast<ComputeOf<T>>(d.l2_eps);
  SF_ASSIGN_OR_RETURN(s->q_rnorm, New<StatOf<T>>(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->k_rnorm, New<StatOf<T>>(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->q, New(cls, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(s->k, New(cls, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(s->v, New(cls, {S, d.HV()}));
  const int64_t B = s->batch;
  ConvSiluForward(ops(), &act, state_out ? &state_out->tail_q : nullptr, s->q_in, B, w(kQConv),
                  d.W, state_in.tail_q);
  ops().L2NormForward(s->q.data(), s->q_rnorm.data(), act.data(), S * d.H, d.K, q_scale, eps);
  ConvSiluForward(ops(), &act, state_out ? &state_out->tail_k : nullptr, s->k_in, B, w(kKConv),
                  d.W, state_in.tail_k);
  ops().L2NormForward(s->k.data(), s->k_rnorm.data(), act.data(), S * d.H, d.K, ComputeOf<T>(1), eps);
  ConvSiluForward(ops(), &s->v, state_out ? &state_out->tail_v : nullptr, s->v_in, B,
                  w(kVConv), d.W, state_in.tail_v);
  if (d.decay) {
    SF_ASSIGN_OR_RETURN(s->g, New(cls, {S, d.H}));
  } else {
    SF_ASSIGN_OR_RETURN(s->g, Tensor<T>::Zeros(*alloc_, cls, {S, d.H}));  // DeltaNet: g = 0
  }
  SF_ASSIGN_OR_RETURN(s->beta, New(cls, {S, d.H}));
  if (d.decay) fops().GdnGateForward(s->g.data(), s->a.data(), w(kALog), w(kDtBias), S, d.H);
  ops().SigmoidForward(s->beta.data(), b.data(), S * d.H);
  return Status::Ok();
}

// gated = RMSNorm_head(o) * o_norm * silu(z); h = x + gated Wo^T.
template <typename T>
Status GdnLayer<T>::MixerOutputForward(GdnLayerSaved<T>* s, BufferClass cls) {
  const GdnLayerDims& d = dims_;
  const int64_t S = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->o_rstd, New<StatOf<T>>(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->gated, New(cls, {S, d.HV()}));
  SF_ASSIGN_OR_RETURN(Tensor<T> silu_z, New(kWs, {S, d.HV()}));  // (S, HV)
  ops().RmsNormForward(s->gated.data(), s->o_rstd.data(), s->o.data(), w(kONorm),
                    S * d.H, d.Dv, static_cast<ComputeOf<T>>(d.norm_eps));
  ops().SiluForward(silu_z.data(), s->z.data(), S * d.HV());
  ops().Mul(s->gated.data(), s->gated.data(), silu_z.data(), S * d.HV());
  SF_ASSIGN_OR_RETURN(s->h, New(cls, {S, d.C}));
  // Row-parallel under TP: partial sums, the bias on rank 0 only.
  ops().LinearForward(s->h.data(), s->gated.data(), w(kOProj),
                      d.tp.rank == 0 ? w(kOProjBias) : nullptr, S, d.HV(), d.C);
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, s->h.data(), S * d.C));
  ops().Add(s->h.data(), s->x.data(), S * d.C);
  return Status::Ok();
}

// y = h + SwiGLU(RMSNorm(h) * mlp_norm).
template <typename T>
Status GdnLayer<T>::MlpForward(Tensor<T>* y, GdnLayerSaved<T>* s,
                               BufferClass cls) {
  return ResidualMlpForward(*alloc_, y, s, MlpParams(), dims_.C, dims_.F, dims_.shape, cls,
                            dims_.tp);
}

// ---- backward ---------------------------------------------------------------

template <typename T>
struct GdnLayer<T>::MixerGrads {
  Tensor<T> dq, dk, dv;  // (S, HK), (S, HK), (S, HV) of the core inputs
  Tensor<T> da, db;      // (S, H) of the a (none without decay) and b projections
  Tensor<T> dz;          // (S, HV) of the output-gate projection
};

template <typename T>
Status GdnLayer<T>::Backward(Tensor<T>* dx, GdnState<T>* dstate_in,
                             GdnLayerSaved<T>* saved, const Tensor<T>& dy,
                             int64_t batch, const GdnState<T>* dstate_out,
                             const GdnState<T>& state_in) {
  return RecurrentEntry<GdnLayer>::Backward(*this, dx, dstate_in, saved, dy, batch, dstate_out,
                                            state_in);
}

template <typename T>
Status GdnLayer<T>::BackwardPass(Tensor<T>* dx, GdnState<T>* dstate_in,
                                 const GdnLayerSaved<T>& s,
                                 const Tensor<T>& dy,
                                 const GdnState<T>* dstate_out,
                                 const GdnState<T>& state_in) {
  Tensor<T> dh;  // (S, C) d(h): the residual's dy plus the MLP branch's
  SF_RETURN_IF_ERROR(MlpBackward(&dh, s, dy));
  MixerGrads grads;
  Tensor<T> d_o;  // (S, HV) d(core output)
  SF_RETURN_IF_ERROR(MixerOutputBackward(&d_o, &grads.dz, s, dh));
  SF_RETURN_IF_ERROR(CoreBackward(&grads, dstate_in, s, d_o, dstate_out, state_in));
  d_o = Tensor<T>();
  *dx = std::move(dh);  // the mixer's residual; the norm-1 branch is added
  return MixerInputsBackward(dx, dstate_in, grads, s, dstate_out, state_in);
}

// dh (S, C) = dy + RMSNorm-backward(SwiGLU-backward(dy)).
template <typename T>
Status GdnLayer<T>::MlpBackward(Tensor<T>* dh, const GdnLayerSaved<T>& s,
                                const Tensor<T>& dy) {
  return ResidualMlpBackward(*alloc_, dh, s, MlpParams(), dy, dims_.C, dims_.F, dims_.shape,
                             dims_.tp);
}

// From dh: d_o (S, HV) of the core output and dz (S, HV) of the gate.
template <typename T>
Status GdnLayer<T>::MixerOutputBackward(Tensor<T>* d_o, Tensor<T>* dz,
                                        const GdnLayerSaved<T>& s,
                                        const Tensor<T>& dh) {
  const GdnLayerDims& d = dims_;
  const int64_t S = s.x.dim(0), R = S * d.H;  // R rows of Dv per head
  SF_ASSIGN_OR_RETURN(Tensor<T> dgated, New(kWs, {S, d.HV()}));  // (S, HV)
  ops().LinearBackward(dgated.data(), dw(kOProj), dw(kOProjBias), dh.data(),
                    s.gated.data(), w(kOProj), S, d.HV(), d.C);
  // on (R, Dv) = o * o_rstd * o_norm, recomputed; silu_z (S, HV).
  SF_ASSIGN_OR_RETURN(Tensor<T> on, New(kWs, {R, d.Dv}));
  ops().RmsNormApply(on.data(), s.o.data(), s.o_rstd.data(), w(kONorm), R, d.Dv);
  SF_ASSIGN_OR_RETURN(Tensor<T> d_on, New(kWs, {R, d.Dv}));
  ops().SiluForward(d_on.data(), s.z.data(), S * d.HV());
  ops().Mul(d_on.data(), d_on.data(), dgated.data(), S * d.HV());  // silu(z) dgated
  SF_ASSIGN_OR_RETURN(*dz, New(kWs, {S, d.HV()}));
  ops().Mul(dz->data(), dgated.data(), on.data(), S * d.HV());
  ops().SiluBackward(dz->data(), dz->data(), s.z.data(), S * d.HV());
  SF_ASSIGN_OR_RETURN(*d_o, New(kWs, {S, d.HV()}));
  ops().RmsNormBackward(d_o->data(), dw(kONorm), d_on.data(), s.o.data(),
                     w(kONorm), s.o_rstd.data(), R, d.Dv);
  return Status::Ok();
}

// The recurrence core, then the gates: grads->dq, dk, dv, da, db; dS_in.
template <typename T>
Status GdnLayer<T>::CoreBackward(MixerGrads* grads, GdnState<T>* dstate_in,
                                 const GdnLayerSaved<T>& s,
                                 const Tensor<T>& d_o,
                                 const GdnState<T>* dstate_out,
                                 const GdnState<T>& state_in) {
  const GdnLayerDims& d = dims_;
  const int64_t S = s.x.dim(0), B = s.batch, Ts = S / B;  // Ts tokens per sequence
  SF_ASSIGN_OR_RETURN(grads->dq, New(kWs, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(grads->dk, New(kWs, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(grads->dv, New(kWs, {S, d.HV()}));
  SF_ASSIGN_OR_RETURN(Tensor<T> dg, New(kWs, {S, d.H}));     // (S, H)
  SF_ASSIGN_OR_RETURN(Tensor<T> dbeta, New(kWs, {S, d.H}));  // (S, H)
  // One sequence's workspace, reused by each in turn.
  SF_ASSIGN_OR_RETURN(
      Tensor<StatOf<T>> ws,
      New<StatOf<T>>(kWs, {fops().GdnCoreBackwardWorkspaceSize(Ts, d.H, d.K, d.Dv, d.block_size)}));
  const int64_t state = d.H * d.Dv * d.K;
  auto core = d.st_overlap ? &GdnOps<T>::GdnCoreBackwardOverlapped : &GdnOps<T>::GdnCoreBackward;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = b * Ts * d.HK(), v = b * Ts * d.HV(), h = b * Ts * d.H;
    (fops().*core)(grads->dq.data() + k, grads->dk.data() + k, grads->dv.data() + v,
                       dg.data() + h, dbeta.data() + h,
                       dstate_in != nullptr ? dstate_in->S.data() + b * state : nullptr,
                       ws.data(), d_o.data() + v,
                       dstate_out != nullptr ? dstate_out->S.data() + b * state : nullptr,
                       s.q.data() + k, s.k.data() + k, s.v.data() + v, s.g.data() + h,
                       s.beta.data() + h, state_in.S.data() + b * state, Ts, d.H, d.K,
                       d.Dv, d.block_size, d.st_tile);
  }
  ws = Tensor<StatOf<T>>();
  if (d.decay) {
    SF_ASSIGN_OR_RETURN(grads->da, New(kWs, {S, d.H}));
  }
  SF_ASSIGN_OR_RETURN(grads->db, New(kWs, {S, d.H}));
  if (d.decay) {  // DeltaNet: g is the constant 0, dg has nowhere to go
    fops().GdnGateBackward(grads->da.data(), dw(kALog), dw(kDtBias), dg.data(), s.a.data(),
                           w(kALog), w(kDtBias), S, d.H);
  }
  ops().SigmoidBackward(grads->db.data(), dbeta.data(), s.beta.data(), S * d.H);
  return Status::Ok();
}

// dx += RMSNorm-backward(sum over the six projections of d(proj) W).
template <typename T>
Status GdnLayer<T>::MixerInputsBackward(Tensor<T>* dx, GdnState<T>* dstate_in,
                                        const MixerGrads& g,
                                        const GdnLayerSaved<T>& s,
                                        const GdnState<T>* dstate_out,
                                        const GdnState<T>& state_in) {
  const GdnLayerDims& d = dims_;
  const int64_t S = s.x.dim(0);
  const ComputeOf<T> q_scale = static_cast<ComputeOf<T>>(1.0 / std::sqrt(static_cast<double>(d.K)));
  Tensor<T> dq_in, dk_in, dv_in;  // (S, HK), (S, HK), (S, HV)
  auto dtail = [&](Tensor<T> GdnState<T>::*m) {
    return dstate_in != nullptr ? &(dstate_in->*m) : nullptr;
  };
  auto dtail_out = [&](Tensor<T> GdnState<T>::*m) -> const Tensor<T>* {
    return dstate_out != nullptr ? &(dstate_out->*m) : nullptr;
  };
  SF_RETURN_IF_ERROR(ConvSiluBackward(*alloc_, ops(), &dq_in, dtail(&GdnState<T>::tail_q), g.dq,
                                      &s.q_rnorm, q_scale, d.H, d.K, s.q_in, s.batch, w(kQConv),
                                      dw(kQConv), d.W, state_in.tail_q,
                                      dtail_out(&GdnState<T>::tail_q)));
  SF_RETURN_IF_ERROR(ConvSiluBackward(*alloc_, ops(), &dk_in, dtail(&GdnState<T>::tail_k), g.dk,
                                      &s.k_rnorm, ComputeOf<T>(1), d.H, d.K, s.k_in, s.batch, w(kKConv),
                                      dw(kKConv), d.W, state_in.tail_k,
                                      dtail_out(&GdnState<T>::tail_k)));
  SF_RETURN_IF_ERROR(ConvSiluBackward(*alloc_, ops(), &dv_in, dtail(&GdnState<T>::tail_v), g.dv,
                                      nullptr, ComputeOf<T>(1), d.H, d.K, s.v_in, s.batch, w(kVConv),
                                      dw(kVConv), d.W, state_in.tail_v,
                                      dtail_out(&GdnState<T>::tail_v)));
  const struct {
    const Tensor<T>* dproj;
    ParamId w;
    int64_t D;
  } projs[] = {{&dq_in, kQProj, d.HK()}, {&dk_in, kKProj, d.HK()},
               {&dv_in, kVProj, d.HV()}, {&g.da, kAProj, d.H},
               {&g.db, kBProj, d.H},     {&g.dz, kGProj, d.HV()}};
  SF_ASSIGN_OR_RETURN(Tensor<T> dxn, Tensor<T>::Zeros(*alloc_, kWs, {S, d.C}));
  SF_ASSIGN_OR_RETURN(Tensor<T> part, New(kWs, {S, d.C}));  // (S, C)
  for (const auto& p : projs) {
    if (!Has(d, p.w)) continue;  // DeltaNet: no a
    ops().LinearBackward(part.data(), dw(p.w), nullptr, p.dproj->data(),
                      s.xn.data(), w(p.w), S, d.C, p.D);
    ops().Add(dxn.data(), part.data(), S * d.C);
  }
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, dxn.data(), S * d.C));  // column-parallel inputs
  NormBackward(ops(), d.shape, part.data(), dw(kAttnNorm), dw(kAttnNormBias), dxn.data(),
               s.x.data(), w(kAttnNorm), s.rstd1.data(), S, d.C);
  ops().Add(dx->data(), part.data(), S * d.C);
  return Status::Ok();
}

#define SF_INSTANTIATE(T)      \
  template struct GdnState<T>; \
  template struct GdnLayerSaved<T>; \
  template class GdnLayer<T>;
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

// The KDA layer's forward and backward, in the order of the formulas in
// kda_layer.h. Dimension legend there. Every buffer is a Tensor from the
// layer's allocator: saved tensors in the class the caller asks for
// (kActivations, or kWorkspace when a recompute replays the forward), the
// rest in kWorkspace, freed when the function that made it returns --
// models/families/kda.cc lists these allocations line by line, in order.
#include "backend/layers/kda_layer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "backend/layers/conv_silu.h"
#include "backend/layers/recurrent_entry.h"

namespace stateflow::backend {

namespace {
constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr double kInitStd = 0.02;

Status CheckShape(int layer, const std::string& what, const Shape& actual,
                  const Shape& expected) {
  if (actual == expected) return Status::Ok();
  return Status::Invalid("layer " + std::to_string(layer) + " (kda layer): " + what +
                         " has shape " + ShapeString(actual) + ", expected " +
                         ShapeString(expected));
}
}  // namespace

KdaLayerDims KdaLayerDims::FromModel(const pb::ModelSpec& model) {
  KdaLayerDims d;
  d.C = model.hidden_size();
  d.H = model.num_heads();
  d.K = model.head_dim_k();
  d.Dv = model.head_dim_v();
  d.F = model.mlp_size();
  d.W = model.conv_width();
  return d;
}

KdaLayerDims KdaLayerDims::Sharded(const TpShard& shard) const {
  KdaLayerDims d = *this;
  d.H = shard.Part(H);
  d.F = shard.Part(F);
  d.tp = shard;
  return d;
}

// ---- KdaState ----------------------------------------------------------------

template <typename T>
Result<KdaState<T>> KdaState<T>::Zeros(TrackingAllocator& alloc, const KdaLayerDims& d,
                                       int64_t batch, BufferClass cls) {
  KdaState s;
  SF_ASSIGN_OR_RETURN(s.S, Tensor<StatOf<T>>::Zeros(alloc, cls, {batch, d.H, d.Dv, d.K}));
  SF_ASSIGN_OR_RETURN(s.tail_q, Tensor<T>::Zeros(alloc, cls, {batch, d.W - 1, d.HK()}));
  SF_ASSIGN_OR_RETURN(s.tail_k, Tensor<T>::Zeros(alloc, cls, {batch, d.W - 1, d.HK()}));
  SF_ASSIGN_OR_RETURN(s.tail_v, Tensor<T>::Zeros(alloc, cls, {batch, d.W - 1, d.HV()}));
  return s;
}

template <typename T>
int64_t KdaState<T>::Numel(const KdaLayerDims& d) {
  return d.H * d.Dv * d.K + (d.W - 1) * (2 * d.HK() + d.HV());
}

// ---- construction -----------------------------------------------------------

template <typename T>
const char* KdaLayer<T>::ParamName(ParamId id) {
  static constexpr const char* kNames[kNumParams] = {
      "attn_norm.weight", "q_proj.weight",    "k_proj.weight",        "v_proj.weight",
      "f_proj.0.weight",  "f_proj.1.weight",  "b_proj.weight",        "g_proj.0.weight",
      "g_proj.1.weight",  "g_proj.1.bias",    "q_conv.weight",        "k_conv.weight",
      "v_conv.weight",    "A_log",            "dt_bias",              "o_norm.weight",
      "o_proj.weight",    "mlp_norm.weight",  "mlp.gate_proj.weight", "mlp.up_proj.weight",
      "mlp.down_proj.weight"};
  return kNames[id];
}

template <typename T>
Result<KdaLayer<T>> KdaLayer<T>::Make(TrackingAllocator& alloc, const KdaLayerDims& d,
                                      int layer, int num_layers, std::uint64_t seed) {
  const InitSpec proj = InitSpec::Normal(kInitStd);
  const InitSpec out = InitSpec::Normal(kInitStd / std::sqrt(2.0 * std::max(num_layers, 1)));
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(d.W));
  const InitSpec conv = InitSpec::Uniform(-conv_bound, conv_bound);
  const InitSpec one = InitSpec::Constant(1.0);
  const InitSpec zero = InitSpec::Constant(0.0);
  const InitSpec a_log{InitSpec::Kind::kGdnALog, 1.0, 16.0};  // log U(1, 16)
  const struct {
    Shape shape;
    InitSpec init;
  } specs[kNumParams] = {
      {{d.C}, one},           {{d.HK(), d.C}, proj},   {{d.HK(), d.C}, proj},
      {{d.HV(), d.C}, proj},  {{d.R(), d.C}, proj},    {{d.HK(), d.R()}, proj},
      {{d.H, d.C}, proj},     {{d.R(), d.C}, proj},    {{d.HV(), d.R()}, proj},
      {{d.HV()}, zero},       {{d.W, d.HK()}, conv},   {{d.W, d.HK()}, conv},
      {{d.W, d.HV()}, conv},  {{d.H}, a_log},          {{d.HK()}, zero},
      {{d.Dv}, one},          {{d.C, d.HV()}, out},    {{d.C}, one},
      {{d.F, d.C}, proj},     {{d.F, d.C}, proj},      {{d.C, d.F}, out}};
  // Under TP, the dimension each parameter is split along (-1: whole), in
  // ParamId order; kPartial: whole with a partial gradient (shared by heads).
  constexpr int kWhole = -1, kPartial = -2;
  constexpr int kSplitDim[kNumParams] = {kWhole, 0, 0, 0, kPartial, 0, 0, kPartial, 0, 0, 1,
                                         1,      1, 0, 0, kPartial, 1, kWhole, 0, 0, 1};
  KdaLayer kda(&alloc, d, layer);
  kda.fops_ = KdaOpsOf<T>(alloc.device());
  if (kda.fops_ == nullptr) {
    return Status::Invalid("layer " + std::to_string(layer) + " (" + kKind + "): device " +
                           alloc.device().name() + " has no KDA kernels in this dtype");
  }
  kda.params_.reserve(kNumParams);
  for (int id = 0; id < kNumParams; ++id) {
    const ParamSplit split = d.tp.on() && kSplitDim[id] >= 0
                                 ? ParamSplit::Along(kSplitDim[id], d.tp.size, d.tp.rank)
                                 : ParamSplit::Whole();
    SF_ASSIGN_OR_RETURN(Param<T> p,
                        MakeParam<T>(alloc, ParamName(static_cast<ParamId>(id)), specs[id].shape,
                                     specs[id].init, seed, layer, split));
    p.tp_partial_grad = d.tp.on() && kSplitDim[id] == kPartial;
    kda.params_.push_back(std::move(p));
  }
  return kda;
}

template <typename T>
template <typename E>
Result<Tensor<E>> KdaLayer<T>::New(BufferClass cls, Shape shape) {
  return Tensor<E>::Uninitialized(*alloc_, cls, std::move(shape));
}

template <typename T>
Status KdaLayer<T>::CheckState(const KdaState<T>& s, int64_t B, const char* what) const {
  const KdaLayerDims& d = dims_;
  const std::string w(what);
  SF_RETURN_IF_ERROR(CheckShape(layer_, w + ".S", s.S.shape(), {B, d.H, d.Dv, d.K}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, w + ".tail_q", s.tail_q.shape(), {B, d.W - 1, d.HK()}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, w + ".tail_k", s.tail_k.shape(), {B, d.W - 1, d.HK()}));
  return CheckShape(layer_, w + ".tail_v", s.tail_v.shape(), {B, d.W - 1, d.HV()});
}

// ---- forward ----------------------------------------------------------------

template <typename T>
Status KdaLayer<T>::Forward(Tensor<T>* y, KdaState<T>* state_out, KdaLayerSaved<T>* saved,
                            const Tensor<T>& x, int64_t batch, const KdaState<T>& state_in,
                            models::Recompute recompute) {
  return RecurrentEntry<KdaLayer>::Forward(*this, y, state_out, saved, x, batch, state_in,
                                           recompute);
}

template <typename T>
Status KdaLayer<T>::ForwardPass(Tensor<T>* y, KdaState<T>* state_out, KdaLayerSaved<T>* s,
                                const KdaState<T>& state_in, BufferClass cls) {
  const KdaLayerDims& d = dims_;
  const int64_t S = s->x.dim(0), B = s->batch, Ts = S / B;  // Ts tokens per sequence
  SF_RETURN_IF_ERROR(MixerInputsForward(s, state_out, state_in, cls));
  SF_ASSIGN_OR_RETURN(s->o, New(cls, {S, d.HV()}));
  const int64_t state = d.H * d.Dv * d.K;
  // The device's scratch for one sequence (none on the CPU), reused by each.
  SF_ASSIGN_OR_RETURN(
      Tensor<StatOf<T>> ws,
      New<StatOf<T>>(kWs, {fops().KdaCoreForwardWorkspaceSize(Ts, d.H, d.K, d.Dv, d.block_size)}));
  auto core = d.st_overlap ? &KdaOps<T>::KdaCoreForwardOverlapped : &KdaOps<T>::KdaCoreForward;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = b * Ts * d.HK(), v = b * Ts * d.HV();
    (fops().*core)(s->o.data() + v,
                   state_out != nullptr ? state_out->S.data() + b * state : nullptr, ws.data(),
                   s->q.data() + k, s->k.data() + k, s->v.data() + v, s->g.data() + k,
                   s->beta.data() + b * Ts * d.H, state_in.S.data() + b * state, Ts, d.H, d.K,
                   d.Dv, d.block_size, d.st_tile);
  }
  ws = Tensor<StatOf<T>>();
  SF_RETURN_IF_ERROR(MixerOutputForward(s, cls));
  return ResidualMlpForward(*alloc_, y, s, MlpParams(), d.C, d.F,
                            RmsNormSwiglu(d.norm_eps), cls, d.tp);
}

// xn, the projections (the decay's and the output gate's low rank), conv +
// SiLU (+ L2 norm) of q, k, v, the gate and beta.
template <typename T>
Status KdaLayer<T>::MixerInputsForward(KdaLayerSaved<T>* s, KdaState<T>* state_out,
                                       const KdaState<T>& state_in, BufferClass cls) {
  const KdaLayerDims& d = dims_;
  const int64_t S = s->x.dim(0), B = s->batch;
  SF_ASSIGN_OR_RETURN(s->xn, New(cls, {S, d.C}));
  SF_ASSIGN_OR_RETURN(s->rstd1, New<StatOf<T>>(cls, {S}));
  ops().RmsNormForward(s->xn.data(), s->rstd1.data(), s->x.data(), w(kAttnNorm), S, d.C,
                       static_cast<ComputeOf<T>>(d.norm_eps));
  const struct {
    Tensor<T>* out;
    ParamId w;
    int64_t D;
  } projs[] = {{&s->q_in, kQProj, d.HK()}, {&s->k_in, kKProj, d.HK()}, {&s->v_in, kVProj, d.HV()}};
  for (const auto& p : projs) {
    SF_ASSIGN_OR_RETURN(*p.out, New(cls, {S, p.D}));
    ops().LinearForward(p.out->data(), s->xn.data(), w(p.w), nullptr, S, d.C, p.D);
  }
  // a = (xn Wf1^T) Wf2^T; z = (xn Wg1^T) Wg2^T + bg.
  SF_ASSIGN_OR_RETURN(s->f1, New(cls, {S, d.R()}));
  ops().LinearForward(s->f1.data(), s->xn.data(), w(kFProjDown), nullptr, S, d.C, d.R());
  SF_ASSIGN_OR_RETURN(s->a, New(cls, {S, d.HK()}));
  ops().LinearForward(s->a.data(), s->f1.data(), w(kFProjUp), nullptr, S, d.R(), d.HK());
  SF_ASSIGN_OR_RETURN(Tensor<T> b, New(kWs, {S, d.H}));  // (S, H) beta's input
  ops().LinearForward(b.data(), s->xn.data(), w(kBProj), nullptr, S, d.C, d.H);
  SF_ASSIGN_OR_RETURN(s->z1, New(cls, {S, d.R()}));
  ops().LinearForward(s->z1.data(), s->xn.data(), w(kGProjDown), nullptr, S, d.C, d.R());
  SF_ASSIGN_OR_RETURN(s->z, New(cls, {S, d.HV()}));
  ops().LinearForward(s->z.data(), s->z1.data(), w(kGProjUp), w(kGProjBias), S, d.R(), d.HV());
  // q, k: L2-normalised SiLU(conv); v: SiLU(conv), the core's input as is.
  SF_ASSIGN_OR_RETURN(Tensor<T> act, New(kWs, {S, d.HK()}));  // (S, HK)
  const ComputeOf<T> q_scale =
      static_cast<ComputeOf<T>>(1.0 / std::sqrt(static_cast<double>(d.K)));
  const ComputeOf<T> eps = static_cast<ComputeOf<T>>(d.l2_eps);
  SF_ASSIGN_OR_RETURN(s->q_rnorm, New<StatOf<T>>(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->k_rnorm, New<StatOf<T>>(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->q, New(cls, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(s->k, New(cls, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(s->v, New(cls, {S, d.HV()}));
  ConvSiluForward(ops(), &act, state_out ? &state_out->tail_q : nullptr, s->q_in, B, w(kQConv),
                  d.W, state_in.tail_q);
  ops().L2NormForward(s->q.data(), s->q_rnorm.data(), act.data(), S * d.H, d.K, q_scale, eps);
  ConvSiluForward(ops(), &act, state_out ? &state_out->tail_k : nullptr, s->k_in, B, w(kKConv),
                  d.W, state_in.tail_k);
  ops().L2NormForward(s->k.data(), s->k_rnorm.data(), act.data(), S * d.H, d.K,
                      ComputeOf<T>(1), eps);
  ConvSiluForward(ops(), &s->v, state_out ? &state_out->tail_v : nullptr, s->v_in, B,
                  w(kVConv), d.W, state_in.tail_v);
  SF_ASSIGN_OR_RETURN(s->g, New(cls, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(s->beta, New(cls, {S, d.H}));
  fops().KdaGateForward(s->g.data(), s->a.data(), w(kALog), w(kDtBias), S, d.H, d.K);
  ops().SigmoidForward(s->beta.data(), b.data(), S * d.H);
  return Status::Ok();
}

// gated = RMSNorm_head(o) * o_norm * sigmoid(z); h = x + gated Wo^T.
template <typename T>
Status KdaLayer<T>::MixerOutputForward(KdaLayerSaved<T>* s, BufferClass cls) {
  const KdaLayerDims& d = dims_;
  const int64_t S = s->x.dim(0);
  SF_ASSIGN_OR_RETURN(s->o_rstd, New<StatOf<T>>(cls, {S, d.H}));
  SF_ASSIGN_OR_RETURN(s->gated, New(cls, {S, d.HV()}));
  SF_ASSIGN_OR_RETURN(Tensor<T> sig_z, New(kWs, {S, d.HV()}));  // (S, HV)
  ops().RmsNormForward(s->gated.data(), s->o_rstd.data(), s->o.data(), w(kONorm), S * d.H, d.Dv,
                       static_cast<ComputeOf<T>>(d.norm_eps));
  ops().SigmoidForward(sig_z.data(), s->z.data(), S * d.HV());
  ops().Mul(s->gated.data(), s->gated.data(), sig_z.data(), S * d.HV());
  SF_ASSIGN_OR_RETURN(s->h, New(cls, {S, d.C}));
  ops().LinearForward(s->h.data(), s->gated.data(), w(kOProj), nullptr, S, d.HV(), d.C);
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, s->h.data(), S * d.C));  // row-parallel
  ops().Add(s->h.data(), s->x.data(), S * d.C);
  return Status::Ok();
}

// ---- backward ---------------------------------------------------------------

template <typename T>
struct KdaLayer<T>::MixerGrads {
  Tensor<T> dq, dk, dv;  // (S, HK), (S, HK), (S, HV) of the core inputs
  Tensor<T> da;          // (S, HK) of the decay's projection a
  Tensor<T> db;          // (S, H) of beta's projection b
  Tensor<T> dz;          // (S, HV) of the output gate's projection z
};

template <typename T>
Status KdaLayer<T>::Backward(Tensor<T>* dx, KdaState<T>* dstate_in, KdaLayerSaved<T>* saved,
                             const Tensor<T>& dy, int64_t batch, const KdaState<T>* dstate_out,
                             const KdaState<T>& state_in) {
  return RecurrentEntry<KdaLayer>::Backward(*this, dx, dstate_in, saved, dy, batch, dstate_out,
                                            state_in);
}

template <typename T>
Status KdaLayer<T>::BackwardPass(Tensor<T>* dx, KdaState<T>* dstate_in,
                                 const KdaLayerSaved<T>& s, const Tensor<T>& dy,
                                 const KdaState<T>* dstate_out, const KdaState<T>& state_in) {
  Tensor<T> dh;  // (S, C) d(h): the residual's dy plus the MLP branch's
  SF_RETURN_IF_ERROR(ResidualMlpBackward(*alloc_, &dh, s, MlpParams(), dy, dims_.C, dims_.F,
                                         RmsNormSwiglu(dims_.norm_eps), dims_.tp));
  MixerGrads grads;
  Tensor<T> d_o;  // (S, HV) d(core output)
  SF_RETURN_IF_ERROR(MixerOutputBackward(&d_o, &grads.dz, s, dh));
  SF_RETURN_IF_ERROR(CoreBackward(&grads, dstate_in, s, d_o, dstate_out, state_in));
  d_o = Tensor<T>();
  *dx = std::move(dh);  // the mixer's residual; the norm-1 branch is added
  return MixerInputsBackward(dx, dstate_in, grads, s, dstate_out, state_in);
}

// From dh: d_o (S, HV) of the core output and dz (S, HV) of the gate's
// projection z (through the sigmoid).
template <typename T>
Status KdaLayer<T>::MixerOutputBackward(Tensor<T>* d_o, Tensor<T>* dz,
                                        const KdaLayerSaved<T>& s, const Tensor<T>& dh) {
  const KdaLayerDims& d = dims_;
  const int64_t S = s.x.dim(0), R = S * d.H;  // R rows of Dv per head
  SF_ASSIGN_OR_RETURN(Tensor<T> dgated, New(kWs, {S, d.HV()}));  // (S, HV)
  ops().LinearBackward(dgated.data(), dw(kOProj), nullptr, dh.data(), s.gated.data(),
                       w(kOProj), S, d.HV(), d.C);
  // on (R, Dv) = o * o_rstd * o_norm, recomputed; sig (R, Dv) = sigmoid(z).
  SF_ASSIGN_OR_RETURN(Tensor<T> on, New(kWs, {R, d.Dv}));
  ops().RmsNormApply(on.data(), s.o.data(), s.o_rstd.data(), w(kONorm), R, d.Dv);
  SF_ASSIGN_OR_RETURN(Tensor<T> d_on, New(kWs, {R, d.Dv}));
  ops().SigmoidForward(d_on.data(), s.z.data(), S * d.HV());  // sigmoid(z), for now
  SF_ASSIGN_OR_RETURN(*dz, New(kWs, {S, d.HV()}));
  ops().Mul(dz->data(), dgated.data(), on.data(), S * d.HV());
  ops().SigmoidBackward(dz->data(), dz->data(), d_on.data(), S * d.HV());
  ops().Mul(d_on.data(), d_on.data(), dgated.data(), S * d.HV());  // sigmoid(z) dgated
  SF_ASSIGN_OR_RETURN(*d_o, New(kWs, {S, d.HV()}));
  ops().RmsNormBackward(d_o->data(), dw(kONorm), d_on.data(), s.o.data(), w(kONorm),
                        s.o_rstd.data(), R, d.Dv);
  return Status::Ok();
}

// The recurrence core, then the gate and beta: grads->dq, dk, dv, da, db; dS_in.
template <typename T>
Status KdaLayer<T>::CoreBackward(MixerGrads* grads, KdaState<T>* dstate_in,
                                 const KdaLayerSaved<T>& s, const Tensor<T>& d_o,
                                 const KdaState<T>* dstate_out, const KdaState<T>& state_in) {
  const KdaLayerDims& d = dims_;
  const int64_t S = s.x.dim(0), B = s.batch, Ts = S / B;  // Ts tokens per sequence
  SF_ASSIGN_OR_RETURN(grads->dq, New(kWs, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(grads->dk, New(kWs, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(grads->dv, New(kWs, {S, d.HV()}));
  SF_ASSIGN_OR_RETURN(Tensor<T> dg, New(kWs, {S, d.HK()}));   // (S, HK)
  SF_ASSIGN_OR_RETURN(Tensor<T> dbeta, New(kWs, {S, d.H}));   // (S, H)
  // One sequence's workspace, reused by each in turn.
  SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> ws,
                      New<StatOf<T>>(kWs, {fops().KdaCoreBackwardWorkspaceSize(
                                              Ts, d.H, d.K, d.Dv, d.block_size)}));
  const int64_t state = d.H * d.Dv * d.K;
  auto core = d.st_overlap ? &KdaOps<T>::KdaCoreBackwardOverlapped : &KdaOps<T>::KdaCoreBackward;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t k = b * Ts * d.HK(), v = b * Ts * d.HV(), h = b * Ts * d.H;
    (fops().*core)(grads->dq.data() + k, grads->dk.data() + k, grads->dv.data() + v,
                   dg.data() + k, dbeta.data() + h,
                   dstate_in != nullptr ? dstate_in->S.data() + b * state : nullptr, ws.data(),
                   d_o.data() + v,
                   dstate_out != nullptr ? dstate_out->S.data() + b * state : nullptr,
                   s.q.data() + k, s.k.data() + k, s.v.data() + v, s.g.data() + k,
                   s.beta.data() + h, state_in.S.data() + b * state, Ts, d.H, d.K, d.Dv,
                   d.block_size, d.st_tile);
  }
  ws = Tensor<StatOf<T>>();
  SF_ASSIGN_OR_RETURN(grads->da, New(kWs, {S, d.HK()}));
  SF_ASSIGN_OR_RETURN(grads->db, New(kWs, {S, d.H}));
  fops().KdaGateBackward(grads->da.data(), dw(kALog), dw(kDtBias), dg.data(), s.a.data(),
                         w(kALog), w(kDtBias), S, d.H, d.K);
  ops().SigmoidBackward(grads->db.data(), dbeta.data(), s.beta.data(), S * d.H);
  return Status::Ok();
}

// dx += RMSNorm-backward(sum over the projections of d(proj) W), the
// low-rank ones through their inner projection.
template <typename T>
Status KdaLayer<T>::MixerInputsBackward(Tensor<T>* dx, KdaState<T>* dstate_in,
                                        const MixerGrads& g, const KdaLayerSaved<T>& s,
                                        const KdaState<T>* dstate_out,
                                        const KdaState<T>& state_in) {
  const KdaLayerDims& d = dims_;
  const int64_t S = s.x.dim(0);
  const ComputeOf<T> q_scale =
      static_cast<ComputeOf<T>>(1.0 / std::sqrt(static_cast<double>(d.K)));
  Tensor<T> dq_in, dk_in, dv_in;  // (S, HK), (S, HK), (S, HV)
  auto dtail = [&](Tensor<T> KdaState<T>::*m) {
    return dstate_in != nullptr ? &(dstate_in->*m) : nullptr;
  };
  auto dtail_out = [&](Tensor<T> KdaState<T>::*m) -> const Tensor<T>* {
    return dstate_out != nullptr ? &(dstate_out->*m) : nullptr;
  };
  SF_RETURN_IF_ERROR(ConvSiluBackward(*alloc_, ops(), &dq_in, dtail(&KdaState<T>::tail_q), g.dq,
                                      &s.q_rnorm, q_scale, d.H, d.K, s.q_in, s.batch, w(kQConv),
                                      dw(kQConv), d.W, state_in.tail_q,
                                      dtail_out(&KdaState<T>::tail_q)));
  SF_RETURN_IF_ERROR(ConvSiluBackward(*alloc_, ops(), &dk_in, dtail(&KdaState<T>::tail_k), g.dk,
                                      &s.k_rnorm, ComputeOf<T>(1), d.H, d.K, s.k_in, s.batch,
                                      w(kKConv), dw(kKConv), d.W, state_in.tail_k,
                                      dtail_out(&KdaState<T>::tail_k)));
  SF_RETURN_IF_ERROR(ConvSiluBackward(*alloc_, ops(), &dv_in, dtail(&KdaState<T>::tail_v), g.dv,
                                      nullptr, ComputeOf<T>(1), d.H, d.K, s.v_in, s.batch,
                                      w(kVConv), dw(kVConv), d.W, state_in.tail_v,
                                      dtail_out(&KdaState<T>::tail_v)));
  SF_ASSIGN_OR_RETURN(Tensor<T> dxn, Tensor<T>::Zeros(*alloc_, kWs, {S, d.C}));
  SF_ASSIGN_OR_RETURN(Tensor<T> part, New(kWs, {S, d.C}));  // (S, C)
  const struct {
    const Tensor<T>* dproj;
    ParamId w;
    int64_t D;
  } projs[] = {{&dq_in, kQProj, d.HK()}, {&dk_in, kKProj, d.HK()},
               {&dv_in, kVProj, d.HV()}, {&g.db, kBProj, d.H}};
  for (const auto& p : projs) {
    ops().LinearBackward(part.data(), dw(p.w), nullptr, p.dproj->data(), s.xn.data(), w(p.w), S,
                         d.C, p.D);
    ops().Add(dxn.data(), part.data(), S * d.C);
  }
  // The low-rank pairs: a = f1 Wf2^T, f1 = xn Wf1^T; z = z1 Wg2^T + bg,
  // z1 = xn Wg1^T. Each inner gradient (S, Dv) lives only here.
  const struct {
    const Tensor<T>* dout;  // d(a) or d(z)
    const Tensor<T>* inner; // f1 or z1
    ParamId up, down, bias;
    int64_t D;
  } low_rank[] = {{&g.da, &s.f1, kFProjUp, kFProjDown, kNumParams, d.HK()},
                  {&g.dz, &s.z1, kGProjUp, kGProjDown, kGProjBias, d.HV()}};
  for (const auto& p : low_rank) {
    SF_ASSIGN_OR_RETURN(Tensor<T> dinner, New(kWs, {S, d.R()}));  // (S, Dv)
    ops().LinearBackward(dinner.data(), dw(p.up), p.bias == kNumParams ? nullptr : dw(p.bias),
                         p.dout->data(), p.inner->data(), w(p.up), S, d.R(), p.D);
    ops().LinearBackward(part.data(), dw(p.down), nullptr, dinner.data(), s.xn.data(), w(p.down),
                         S, d.C, d.R());
    ops().Add(dxn.data(), part.data(), S * d.C);
  }
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, dxn.data(), S * d.C));  // column-parallel inputs
  ops().RmsNormBackward(part.data(), dw(kAttnNorm), dxn.data(), s.x.data(), w(kAttnNorm),
                        s.rstd1.data(), S, d.C);
  ops().Add(dx->data(), part.data(), S * d.C);
  return Status::Ok();
}

#define SF_INSTANTIATE(T)      \
  template struct KdaState<T>; \
  template class KdaLayer<T>;
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

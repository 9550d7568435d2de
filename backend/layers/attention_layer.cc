// The attention layer's forward and backward, in the order of the formulas
// in attention_layer.h (dimension legend there). Every buffer below is a
// Tensor from the layer's allocator: saved tensors in the class the caller
// asks for (kActivations, or kWorkspace when a recompute replays the
// forward), the rest in kWorkspace, freed when the function that made it
// returns; the K/V buffer is the caller's. models/layer_formulas.cc
// (AttentionLayerForwardMemory / AttentionLayerBackwardMemory) lists these
// allocations in this order: change both together.
#include "backend/layers/attention_layer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "backend/kernels/linear.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/kernels/swiglu_mlp.h"
#include "backend/layers/copy.h"
#include "models/model.h"

namespace stateflow::backend {

namespace {
constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr double kInitStd = 0.02;

Status LayerError(int layer, const std::string& what) {
  return Status::Invalid("layer " + std::to_string(layer) +
                         " (attention layer): " + what);
}

// Ok if `actual` is exactly `expected`; else names the layer and tensor.
Status CheckShape(int layer, const std::string& what, const Shape& actual,
                  const Shape& expected) {
  if (actual == expected) return Status::Ok();
  return LayerError(layer, what + " has shape " + ShapeString(actual) +
                               ", expected " + ShapeString(expected));
}
}  // namespace

AttentionLayerDims AttentionLayerDims::FromModel(const pb::ModelSpec& model) {
  AttentionLayerDims d;
  d.C = model.hidden_size();
  d.Hq = model.attn_heads();
  d.Hkv = models::KvHeads(model);
  d.D = model.attn_head_dim();
  d.F = model.mlp_size();
  return d;
}

AttentionLayerDims AttentionLayerDims::Sharded(const TpShard& shard) const {
  AttentionLayerDims d = *this;
  d.Hq = shard.Part(Hq);
  d.Hkv = shard.Part(Hkv);
  d.F = shard.Part(F);
  d.tp = shard;
  return d;
}

// ---- KvBuffer, AttentionLayerSaved -------------------------------------------

template <typename T>
Result<KvBuffer<T>> KvBuffer<T>::Make(TrackingAllocator& alloc,
                                      const AttentionLayerDims& d,
                                      int64_t batch, int64_t seq_len) {
  if (batch < 1 || seq_len < 1) {
    return Status::Invalid("K/V buffer: batch " + std::to_string(batch) +
                           " and seq_len " + std::to_string(seq_len) +
                           " must be >= 1");
  }
  KvBuffer kv;
  const BufferClass cls = BufferClass::kKvBuffers;
  SF_ASSIGN_OR_RETURN(kv.k, Tensor<T>::Zeros(alloc, cls, {batch, seq_len, d.KV()}));
  SF_ASSIGN_OR_RETURN(kv.v, Tensor<T>::Zeros(alloc, cls, {batch, seq_len, d.KV()}));
  return kv;
}

template <typename T>
Status KvBuffer<T>::MakeGrads(TrackingAllocator& alloc) {
  if (k.rank() != 3) {
    return Status::Invalid("K/V buffer: gradients before the buffer (KvBuffer::Make first)");
  }
  const BufferClass cls = BufferClass::kKvBuffers;
  SF_ASSIGN_OR_RETURN(dk, Tensor<StatOf<T>>::Zeros(alloc, cls, k.shape()));
  SF_ASSIGN_OR_RETURN(dv, Tensor<StatOf<T>>::Zeros(alloc, cls, k.shape()));
  return Status::Ok();
}

template <typename T>
int64_t KvBuffer<T>::Bytes(const AttentionLayerDims& d, int64_t batch,
                           int64_t seq_len) {
  return 2 * batch * seq_len * d.KV() * static_cast<int64_t>(sizeof(T));  // k, v
}

template <typename T>
int64_t AttentionLayerSaved<T>::NumelPerToken(const AttentionLayerDims& d) {
  return 4 * d.C + 2 * d.F + 2 + 2 * d.HqD() + d.Hq;
}

// ---- construction ----------------------------------------------------------

template <typename T>
const char* AttentionLayer<T>::ParamName(ParamId id) {
  static constexpr const char* kNames[kNumParams] = {
      "attn_norm.weight", "q_proj.weight",        "k_proj.weight",
      "v_proj.weight",    "o_proj.weight",        "mlp_norm.weight",
      "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
  return kNames[id];
}

template <typename T>
Result<AttentionLayer<T>> AttentionLayer<T>::Make(TrackingAllocator& alloc,
                                                  const AttentionLayerDims& d,
                                                  int layer, int num_layers,
                                                  std::uint64_t seed) {
  if (d.C < 1 || d.Hq < 1 || d.Hkv < 1 || d.D < 1 || d.F < 1) {
    return LayerError(layer, "hidden, heads, K/V heads, head dim and MLP size must be >= 1");
  }
  if (alloc.device().template attention_ops<T>() == nullptr) {
    return LayerError(layer, "device " + alloc.device().name() +
                                 " has no attention kernels yet (run it with --device cpu)");
  }
  if (std::is_same_v<T, bf16> && d.D > kMaxBf16AttentionHeadDim) {
    return LayerError(layer, "bf16 attention keeps a head's row of sums in float locals: head dim " +
                                 std::to_string(d.D) + " is over " +
                                 std::to_string(kMaxBf16AttentionHeadDim));
  }
  if (d.Hq % d.Hkv != 0) {
    return LayerError(layer, "attn_heads " + std::to_string(d.Hq) +
                                 " is not a multiple of the K/V heads " +
                                 std::to_string(d.Hkv));
  }
  if (d.D % 2 != 0) {
    return LayerError(layer, "attn_head_dim " + std::to_string(d.D) +
                                 " is odd (RoPE rotates pairs)");
  }
  const InitSpec proj = InitSpec::Normal(kInitStd);
  const InitSpec out = InitSpec::Normal(
      kInitStd / std::sqrt(2.0 * std::max(num_layers, 1)));
  const InitSpec one = InitSpec::Constant(1.0);
  const struct {
    Shape shape;
    InitSpec init;
  } specs[kNumParams] = {
      {{d.C}, one},          {{d.HqD(), d.C}, proj}, {{d.KV(), d.C}, proj},
      {{d.KV(), d.C}, proj}, {{d.C, d.HqD()}, out},  {{d.C}, one},
      {{d.F, d.C}, proj},    {{d.F, d.C}, proj},     {{d.C, d.F}, out}};
  // Under TP, the dimension each parameter is split along (-1: whole).
  constexpr int kSplitDim[kNumParams] = {-1, 0, 0, 0, 1, -1, 0, 0, 1};
  AttentionLayer attn(&alloc, d, layer);
  attn.params_.reserve(kNumParams);
  for (int id = 0; id < kNumParams; ++id) {
    const ParamSplit split = d.tp.on() && kSplitDim[id] >= 0
                                 ? ParamSplit::Along(kSplitDim[id], d.tp.size, d.tp.rank)
                                 : ParamSplit::Whole();
    SF_ASSIGN_OR_RETURN(
        Param<T> p, MakeParam<T>(alloc, ParamName(static_cast<ParamId>(id)),
                                 specs[id].shape, specs[id].init, seed, layer, split));
    attn.params_.push_back(std::move(p));
  }
  return attn;
}

template <typename T>
template <typename E>
Result<Tensor<E>> AttentionLayer<T>::New(BufferClass cls, Shape shape) {
  return Tensor<E>::Uninitialized(*alloc_, cls, std::move(shape));
}

// `t` is (R, C) with R a multiple of batch, and the chunk fits the buffer.
template <typename T>
Status AttentionLayer<T>::CheckChunk(const char* what, const Tensor<T>& t,
                                     int64_t batch, int64_t start,
                                     const KvBuffer<T>& kv) const {
  if (batch < 1) return LayerError(layer_, "batch " + std::to_string(batch) + " must be >= 1");
  const int64_t R = t.rank() == 2 ? t.dim(0) : t.numel() / dims_.C;
  SF_RETURN_IF_ERROR(CheckShape(layer_, what, t.shape(), {R, dims_.C}));
  if (R % batch != 0) {
    return LayerError(layer_, std::string(what) + " has " + std::to_string(R) +
                                  " rows, not a multiple of batch " + std::to_string(batch));
  }
  if (kv.k.rank() != 3) return LayerError(layer_, "no K/V buffer (KvBuffer::Make)");
  const int64_t T_len = kv.k.dim(1), S = R / batch;
  SF_RETURN_IF_ERROR(CheckShape(layer_, "K/V buffer k", kv.k.shape(), {batch, T_len, dims_.KV()}));
  SF_RETURN_IF_ERROR(CheckShape(layer_, "K/V buffer v", kv.v.shape(), {batch, T_len, dims_.KV()}));
  if (start < 0 || start + S > T_len) {
    return LayerError(layer_, "chunk [" + std::to_string(start) + ", " +
                                  std::to_string(start + S) +
                                  ") outside the K/V buffer's " +
                                  std::to_string(T_len) + " positions");
  }
  return Status::Ok();
}

// ---- forward ----------------------------------------------------------------

template <typename T>
Status AttentionLayer<T>::Forward(Tensor<T>* y, AttentionLayerSaved<T>* saved,
                                  const Tensor<T>& x, int64_t batch,
                                  int64_t start, KvBuffer<T>* kv,
                                  models::Recompute recompute) {
  SF_RETURN_IF_ERROR(CheckChunk("input x", x, batch, start, *kv));
  *saved = AttentionLayerSaved<T>{};
  saved->batch = batch;
  saved->start = start;
  SF_ASSIGN_OR_RETURN(saved->x, CopyTensor(*alloc_, BufferClass::kActivations, x));
  if (recompute == models::Recompute::kNone) {
    return ForwardPass(y, saved, kv, BufferClass::kActivations, /*write_kv=*/true);
  }
  // kFull: run the forward with transient tensors, keep only x.
  AttentionLayerSaved<T> transient;
  transient.batch = batch;
  transient.start = start;
  transient.x = std::move(saved->x);
  SF_RETURN_IF_ERROR(ForwardPass(y, &transient, kv, kWs, /*write_kv=*/true));
  saved->x = std::move(transient.x);
  saved->recompute_full = true;
  return Status::Ok();
}

template <typename T>
Status AttentionLayer<T>::ForwardPass(Tensor<T>* y, AttentionLayerSaved<T>* s,
                                      KvBuffer<T>* kv, BufferClass cls,
                                      bool write_kv) {
  SF_RETURN_IF_ERROR(MixerForward(s, kv, cls, write_kv));
  return MlpForward(y, s, cls);
}

// xn; q; the chunk's K/V rows (write_kv); attention over the prefix;
// h = x + o Wo^T.
template <typename T>
Status AttentionLayer<T>::MixerForward(AttentionLayerSaved<T>* s,
                                       KvBuffer<T>* kv, BufferClass cls,
                                       bool write_kv) {
  const AttentionLayerDims& d = dims_;
  const int64_t R = s->x.dim(0), B = s->batch, S = R / B, start = s->start;
  SF_ASSIGN_OR_RETURN(s->xn, New(cls, {R, d.C}));
  SF_ASSIGN_OR_RETURN(s->rstd1, New<StatOf<T>>(cls, {R}));
  ops().RmsNormForward(s->xn.data(), s->rstd1.data(), s->x.data(), w(kAttnNorm),
                    R, d.C, static_cast<ComputeOf<T>>(d.norm_eps));
  SF_ASSIGN_OR_RETURN(s->q, New(cls, {R, d.HqD()}));
  ops().LinearForward(s->q.data(), s->xn.data(), w(kQProj), nullptr, R, d.C, d.HqD());
  for (int64_t b = 0; b < B; ++b) {
    attn().RopeForward(s->q.data() + b * S * d.HqD(), S, d.Hq, d.D, start, d.rope_theta);
    if (!write_kv) continue;  // a replay reads the buffer as the forward left it
    T* k = kv->k.data() + KvRow(*kv, b, start) * d.KV();  // (S, KV)
    T* v = kv->v.data() + KvRow(*kv, b, start) * d.KV();  // (S, KV)
    const T* xn = s->xn.data() + b * S * d.C;             // (S, C)
    ops().LinearForward(k, xn, w(kKProj), nullptr, S, d.C, d.KV());
    attn().RopeForward(k, S, d.Hkv, d.D, start, d.rope_theta);
    ops().LinearForward(v, xn, w(kVProj), nullptr, S, d.C, d.KV());
  }
  SF_ASSIGN_OR_RETURN(s->o, New(cls, {R, d.HqD()}));
  SF_ASSIGN_OR_RETURN(s->lse, New<StatOf<T>>(cls, {R, d.Hq}));
  for (int64_t b = 0; b < B; ++b) {
    attn().AttentionForward(s->o.data() + b * S * d.HqD(), s->lse.data() + b * S * d.Hq,
                        s->q.data() + b * S * d.HqD(),
                        kv->k.data() + KvRow(*kv, b, 0) * d.KV(),
                        kv->v.data() + KvRow(*kv, b, 0) * d.KV(), S, start,
                        d.Hq, d.Hkv, d.D, d.q_tile, d.k_tile);
  }
  SF_ASSIGN_OR_RETURN(s->h, New(cls, {R, d.C}));
  ops().LinearForward(s->h.data(), s->o.data(), w(kOProj), nullptr, R, d.HqD(), d.C);
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, s->h.data(), s->h.numel()));  // row-parallel
  ops().Add(s->h.data(), s->x.data(), s->h.numel());
  return Status::Ok();
}

// y = h + SwiGLU(RMSNorm(h) * mlp_norm).
template <typename T>
Status AttentionLayer<T>::MlpForward(Tensor<T>* y, AttentionLayerSaved<T>* s,
                                     BufferClass cls) {
  return ResidualMlpForward(*alloc_, y, s, MlpParams(), dims_.C, dims_.F,
                            RmsNormSwiglu(dims_.norm_eps), cls, dims_.tp);
}

// ---- backward ---------------------------------------------------------------

template <typename T>
Status AttentionLayer<T>::Backward(Tensor<T>* dx, AttentionLayerSaved<T>* saved,
                                   const Tensor<T>& dy, int64_t batch,
                                   int64_t start, KvBuffer<T>* kv) {
  if (saved->x.rank() != 2) {
    return LayerError(layer_, "backward without a saved forward");
  }
  if (batch != saved->batch || start != saved->start) {
    return LayerError(layer_, "backward of batch " + std::to_string(batch) +
                                  " at start " + std::to_string(start) +
                                  ", but the forward was batch " +
                                  std::to_string(saved->batch) + " at start " +
                                  std::to_string(saved->start));
  }
  SF_RETURN_IF_ERROR(CheckShape(layer_, "output gradient dy", dy.shape(), saved->x.shape()));
  SF_RETURN_IF_ERROR(CheckChunk("output gradient dy", dy, batch, start, *kv));
  if (kv->dk.shape() != kv->k.shape() || kv->dv.shape() != kv->k.shape()) {
    return LayerError(layer_, "no K/V gradient buffers dk, dv (KvBuffer::MakeGrads)");
  }
  Status status;
  if (!saved->recompute_full) {
    status = BackwardPass(dx, *saved, dy, kv);
  } else {  // replay the forward from x, its tensors transient, K/V read only
    AttentionLayerSaved<T> replay;
    replay.batch = batch;
    replay.start = start;
    replay.x = std::move(saved->x);
    Tensor<T> y_unused;
    status = ForwardPass(&y_unused, &replay, kv, kWs, /*write_kv=*/false);
    y_unused = Tensor<T>();
    if (status.ok()) status = BackwardPass(dx, replay, dy, kv);
  }
  *saved = AttentionLayerSaved<T>{};
  return status;
}

template <typename T>
Status AttentionLayer<T>::BackwardPass(Tensor<T>* dx,
                                       const AttentionLayerSaved<T>& s,
                                       const Tensor<T>& dy, KvBuffer<T>* kv) {
  Tensor<T> dh;  // (R, C) d(h): the residual's dy plus the MLP branch's
  SF_RETURN_IF_ERROR(MlpBackward(&dh, s, dy));
  Tensor<T> dq;  // (R, HqD) d(xn Wq^T), after the inverse RoPE
  SF_RETURN_IF_ERROR(AttentionBackwardPass(&dq, s, dh, kv));
  *dx = std::move(dh);  // the mixer's residual; the norm-1 branch is added
  return MixerInputsBackward(dx, s, dq, kv);
}

// dh (R, C) = dy + RMSNorm-backward(SwiGLU-backward(dy)).
template <typename T>
Status AttentionLayer<T>::MlpBackward(Tensor<T>* dh,
                                      const AttentionLayerSaved<T>& s,
                                      const Tensor<T>& dy) {
  return ResidualMlpBackward(*alloc_, dh, s, MlpParams(), dy, dims_.C, dims_.F,
                             RmsNormSwiglu(dims_.norm_eps), dims_.tp);
}

// From dh: o_proj's backward, then the attention kernel's per sequence
// (adding into dk, dv), then the inverse RoPE of dq.
template <typename T>
Status AttentionLayer<T>::AttentionBackwardPass(Tensor<T>* dq,
                                                const AttentionLayerSaved<T>& s,
                                                const Tensor<T>& dh,
                                                KvBuffer<T>* kv) {
  const AttentionLayerDims& d = dims_;
  const int64_t R = s.x.dim(0), B = s.batch, S = R / B, start = s.start;
  SF_ASSIGN_OR_RETURN(Tensor<T> d_o, New(kWs, {R, d.HqD()}));  // (R, HqD)
  ops().LinearBackward(d_o.data(), dw(kOProj), nullptr, dh.data(), s.o.data(),
                    w(kOProj), R, d.HqD(), d.C);
  SF_ASSIGN_OR_RETURN(*dq, New(kWs, {R, d.HqD()}));
  SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> D, New<StatOf<T>>(kWs, {S, d.Hq}));  // (S, Hq) one sequence's
  for (int64_t b = 0; b < B; ++b) {
    const int64_t kv0 = KvRow(*kv, b, 0) * d.KV();
    attn().AttentionBackward(dq->data() + b * S * d.HqD(), kv->dk.data() + kv0,
                         kv->dv.data() + kv0, D.data(),
                         d_o.data() + b * S * d.HqD(), s.o.data() + b * S * d.HqD(),
                         s.lse.data() + b * S * d.Hq, s.q.data() + b * S * d.HqD(),
                         kv->k.data() + kv0, kv->v.data() + kv0, S, start, d.Hq,
                         d.Hkv, d.D, d.q_tile, d.k_tile);
    attn().RopeBackward(dq->data() + b * S * d.HqD(), S, d.Hq, d.D, start, d.rope_theta);
  }
  return Status::Ok();
}

// The chunk's own K/V rows are complete: inverse RoPE of dk there; then
// dx += RMSNorm-backward(dq Wq + dk Wk + dv Wv), and the three weights'
// gradients from the chunk's xn.
template <typename T>
Status AttentionLayer<T>::MixerInputsBackward(Tensor<T>* dx,
                                              const AttentionLayerSaved<T>& s,
                                              const Tensor<T>& dq,
                                              KvBuffer<T>* kv) {
  const AttentionLayerDims& d = dims_;
  const int64_t R = s.x.dim(0), B = s.batch, S = R / B, start = s.start;
  SF_ASSIGN_OR_RETURN(Tensor<T> dxn, New(kWs, {R, d.C}));   // (R, C)
  ops().LinearBackward(dxn.data(), dw(kQProj), nullptr, dq.data(), s.xn.data(),
                    w(kQProj), R, d.C, d.HqD());
  SF_ASSIGN_OR_RETURN(Tensor<T> part, New(kWs, {R, d.C}));  // (R, C)
  // The accumulator is StatOf<T>: its RoPE backward runs in that type.
  AttentionOps<StatOf<T>>& stat_attn = *alloc_->device().template attention_ops<StatOf<T>>();
  for (int64_t b = 0; b < B; ++b) {
    stat_attn.RopeBackward(kv->dk.data() + KvRow(*kv, b, start) * d.KV(), S, d.Hkv, d.D, start,
                           d.rope_theta);
  }
  // bf16: the chunk's rows of the fp32 accumulator rounded for the GEMMs.
  Tensor<T> rows;  // (S, KV), bf16 only
  if constexpr (!std::is_same_v<StatOf<T>, T>) {
    SF_ASSIGN_OR_RETURN(rows, New(kWs, {S, d.KV()}));
  }
  for (const auto& [grad, id] : {std::pair{&kv->dk, kKProj}, std::pair{&kv->dv, kVProj}}) {
    for (int64_t b = 0; b < B; ++b) {
      const T* g = nullptr;
      if constexpr (std::is_same_v<StatOf<T>, T>) {
        g = grad->data() + KvRow(*kv, b, start) * d.KV();
      } else {
        ops().Narrow(rows.data(), grad->data() + KvRow(*kv, b, start) * d.KV(), S * d.KV());
        g = rows.data();
      }
      ops().LinearBackward(part.data() + b * S * d.C, dw(id), nullptr, g,
                           s.xn.data() + b * S * d.C, w(id), S, d.C, d.KV());
    }
    ops().Add(dxn.data(), part.data(), dxn.numel());
  }
  rows = Tensor<T>();
  SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, dxn.data(), dxn.numel()));  // column-parallel inputs
  ops().RmsNormBackward(part.data(), dw(kAttnNorm), dxn.data(), s.x.data(),
                     w(kAttnNorm), s.rstd1.data(), R, d.C);
  ops().Add(dx->data(), part.data(), dx->numel());
  return Status::Ok();
}

#define SF_INSTANTIATE(T)                  \
  template struct KvBuffer<T>;             \
  template struct AttentionLayerSaved<T>;  \
  template class AttentionLayer<T>;
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

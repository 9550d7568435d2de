// Per-layer parameters, FLOPs and tensor sizes of the layer kinds every
// model has (embedding, softmax attention, head), and the recurrence layers'
// through their family (family.h, models/families/). Derivations:
// docs/models.md (parameters) and docs/cost-model.md (everything else).
//
// Dimension legend (one sequence, one token unless said otherwise):
//   h  hidden size            m  SwiGLU size           V  vocabulary
//   Hq, Hkv, d  attention query heads, K/V heads, head dim
#include "models/layer_formulas.h"

#include <algorithm>
#include <cmath>

#include "models/family.h"
#include "models/layer_events.h"

namespace stateflow::models {
namespace {

struct Dims {
  double h, m, vocab, hq, hkv, d;
};

Dims DimsOf(const pb::ModelSpec& model) {
  Dims x{};
  x.h = model.hidden_size();
  x.m = model.mlp_size();
  x.vocab = model.vocab_size();
  x.hq = model.attn_heads();
  x.hkv = KvHeads(model);
  x.d = model.attn_head_dim();
  return x;
}

// ---- FLOPs per token, forward ----

double AttentionDenseFlops(const Dims& x) {
  const double proj = 2 * x.h * (x.hq * x.d + 2 * x.hkv * x.d) +
                      2 * x.hq * x.d * x.h;
  return proj + kRotaryFlops * (x.hq + x.hkv) * x.d;
}

// A recurrence layer: its family's mixer outside the core and the MLP half,
// the core; the backward runs each twice (input and weight gradients) plus
// the core's replay.
FlopCoeffs RecurrenceFlops(const pb::ModelSpec& model, const Dims& x) {
  const Family& family = FamilyOfValid(model);
  const double dense = family.DenseFlops(model) + MlpAndNormsFlops(x.h, x.m, BlockShapeOf(model));
  const double core = family.CoreFlops(model);
  const double replay = family.ReplayFlops(model);
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
  const double dense = AttentionDenseFlops(x) + MlpAndNormsFlops(x.h, x.m);
  FlopCoeffs f;
  f.fwd_token = dense;
  f.bwd_token = 2 * dense;
  f.fwd_pair = 4 * x.hq * x.d;   // Q K^T and P V
  f.bwd_pair = 10 * x.hq * x.d;  // S again, dV, dP, dQ, dK
  return f;
}

FlopCoeffs HeadFlops(const Dims& x, const BlockShape& shape) {
  const double norm = shape.layer_norm ? kLayerNormFlops : kNormFlops;
  FlopCoeffs f;
  f.fwd_token = norm * x.h + 2 * x.h * x.vocab + 4 * x.vocab;
  f.bwd_token = 2 * norm * x.h + 4 * x.h * x.vocab + 2 * x.vocab;
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

// AttentionLayerSaved (backend/layers/attention_layer.h) beyond the common
// ones; K and V live in the K/V buffer.
void AddAttentionElems(const Dims& x, TokenElems* e) {
  e->sharded += x.hq * x.d     // q after rotary
                + x.hq * x.d;  // attention output (o_proj input)
  e->sharded_stat += x.hq;     // log-sum-exp per head
}

}  // namespace

// ---- memory events ----

void MlpForwardEvents(double C, double F, const BlockShape& shape, BufferClass saved,
                      Events* ev) {
  ev->Act(saved, C);                    // hn
  ev->Stat(saved, shape.norm_stats());  // rstd2 (LayerNorm: mean too)
  if (shape.gelu) {
    ev->Act(saved, F);    // mlp_up (before GELU)
    ev->Act(kWs, F);      // act = GELU(up)
    ev->Act(kWs, C);      // y
    ev->FreeAct(kWs, F);  // act
    return;
  }
  ev->Act(saved, F);      // mlp_gate
  ev->Act(saved, F);      // mlp_up
  ev->Act(kWs, F);        // prod
  ev->Act(kWs, C);        // y
  ev->FreeAct(kWs, F);    // prod
}

void MlpBackwardEvents(double C, double F, const BlockShape& shape, Events* ev) {
  if (shape.gelu) {
    ev->Act(kWs, F);      // act = GELU(up), again
    ev->Act(kWs, F);      // d_act, then d_up in place
    ev->FreeAct(kWs, F);  // act
    ev->Act(kWs, C);      // d_hn
    ev->FreeAct(kWs, F);  // d_act
  } else {
    ev->Act(kWs, C);        // d_hn
    ev->Act(kWs, 2 * F);    // SwiGLU backward workspace (2, rows, F)
    ev->FreeAct(kWs, 2 * F);
  }
  ev->Act(kWs, C);        // dh (becomes dx)
  ev->FreeAct(kWs, C);    // d_hn
}

namespace {

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


MemorySegment RecurrenceLayerForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                           bool recompute_full) {
  return FamilyOfValid(model).ForwardMemory(model, b, recompute_full);
}

MemorySegment RecurrenceLayerBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                            bool recompute_full) {
  return FamilyOfValid(model).BackwardMemory(model, b, recompute_full);
}

MemorySegment HeadForwardMemory(const pb::ModelSpec& model, const TensorBytes& b) {
  const Dims x = DimsOf(model);
  const double slice = std::min<double>(kLossVocabSlice, x.vocab / b.tensor_size);
  const int stats = BlockShapeOf(model).norm_stats();
  Events ev(b);
  ev.Act(kAct, x.h);   // x, copied
  ev.Act(kAct, x.h);   // xn
  ev.Stat(kAct, stats);  // rstd (LayerNorm: mean too)
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
  const int stats = BlockShapeOf(model).norm_stats();
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
  ev.FreeStat(kAct, stats + 1);  // rstd, lse
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
  ev.Stat(kAct, BlockShapeOf(model).norm_stats());  // rstd (LayerNorm: mean too)
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
  ev.FreeStat(kAct, BlockShapeOf(model).norm_stats());  // rstd
  ev.FreeAct(kWs, x.h);       // dxn
  ev.FreeStat(kWs, 1);        // d(losses)
  return ev.segment();
}

StFlops RecurrenceStFlops(const pb::ModelSpec& model) {
  return FamilyOfValid(model).PhaseFlops(model);
}

double MlpAndNormsParamCount(const pb::ModelSpec& model) {
  const Dims x = DimsOf(model);
  const BlockShape shape = BlockShapeOf(model);
  const double mlp = (shape.gelu ? 2 : 3) * x.h * x.m;
  const double bias = shape.mlp_bias ? x.m + x.h : 0;  // up (m), down (h)
  return mlp + bias + 2 * shape.norm_params(x.h);
}

double MixerParamCount(const pb::ModelSpec& model, LayerKind kind) {
  if (kind == LayerKind::kAttention) {
    const Dims x = DimsOf(model);
    return x.h * (x.hq * x.d + 2 * x.hkv * x.d) + x.hq * x.d * x.h;
  }
  return FamilyOfValid(model).MixerParams(model);
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
    case LayerKind::kHead: return HeadFlops(x, BlockShapeOf(model));
  }
  return {};
}

std::vector<Gemm> LayerGemms(const pb::ModelSpec& model, LayerKind kind) {
  const Dims x = DimsOf(model);
  std::vector<Gemm> out;
  const bool gelu = BlockShapeOf(model).gelu;
  const auto mlp = [&] {
    out.push_back({(gelu ? 1 : 2) * x.m, x.h, false});  // (gate and) up: one linear_fc1
    out.push_back({x.h, x.m, true});                    // down
  };
  switch (kind) {
    case LayerKind::kEmbedding: return out;
    case LayerKind::kHead: out.push_back({x.vocab, x.h, false}); return out;
    case LayerKind::kRecurrence:
      out = FamilyOfValid(model).MixerGemms(model);
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

double WeightGradStoreElementsPerToken(const pb::ModelSpec& model, LayerKind kind,
                                       int tensor_size) {
  if (kind == LayerKind::kEmbedding) return static_cast<double>(model.hidden_size());
  if (kind == LayerKind::kHead) return 0;
  double per_token = 0;
  for (const Gemm& whole : LayerGemms(model, kind)) {
    const Gemm g = TensorShard(whole, tensor_size);
    per_token += g.inputs * g.k + g.n;
  }
  return per_token;
}

CoreFlops RecurrenceCoreFlops(const pb::ModelSpec& model, LayerKind kind) {
  if (kind != LayerKind::kRecurrence) return {};
  const Family& family = FamilyOfValid(model);
  const double core = family.CoreFlops(model);
  const double replay = family.ReplayFlops(model);
  return {core, 2 * core + replay};
}

double StoredBytesPerTokenNoRecompute(const pb::ModelSpec& model, LayerKind kind,
                                      double activation_bytes, int tensor_size) {
  const Dims x = DimsOf(model);
  TokenElems e;
  switch (kind) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kHead:  // norm input and output (output-layer input)
      e.replicated = 2 * x.h;
      e.replicated_stat = BlockShapeOf(model).norm_stats() + 1;  // the norm's, the log-sum-exp
      return e.Bytes(activation_bytes, tensor_size);
    case LayerKind::kRecurrence: {
      // The family's forward events over one token: what it saves in
      // kActivations (the layer input included), the one list of its sizes.
      TensorBytes one;
      one.tokens = 1;
      one.seq_tokens = 1;
      one.act = activation_bytes;
      one.tensor_size = tensor_size;
      return RecurrenceLayerForwardMemory(model, one, false).net()[static_cast<int>(kAct)];
    }
    case LayerKind::kAttention:
      e = BlockCommonElems(x);
      AddAttentionElems(x, &e);
      return e.Bytes(activation_bytes, tensor_size);
  }
  return 0;
}

double BoundaryStateBytesPerSequence(const pb::ModelSpec& model, LayerKind kind,
                                     double activation_bytes,
                                     int tensor_size) {
  if (kind != LayerKind::kRecurrence) return 0;
  return FamilyOfValid(model).BoundaryStateBytes(model, activation_bytes, tensor_size);
}

}  // namespace stateflow::models

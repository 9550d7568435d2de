// One softmax-attention layer of the hybrid models (mixer and MLP) with an
// explicit forward and backward over one sequence chunk of `batch`
// sequences (llm.c style: outputs first, then inputs; shapes in comments).
// What it computes, per token of the chunk (positions start..start+S-1):
//
//   xn = RMSNorm(x) * attn_norm                                  (R, C)
//   q  = RoPE(xn Wq^T),  k = RoPE(xn Wk^T),  v = xn Wv^T          (R, HqD|KV|KV)
//   K/V buffer rows [start, start + S) of each sequence = k, v
//   o  = CausalAttention(q, K[0:start+S], V[0:start+S])          (R, HqD)
//   h  = x + o Wo^T                                              (R, C)
//   y  = h + SwiGLU(RMSNorm(h) * mlp_norm)                       (R, C)
//
// RoPE is rope.h's rotate-half form with base kRopeTheta, by absolute
// position; attention is attention.h's kernel (GQA: query head h reads K/V
// head h / (Hq / Hkv); scale d^{-1/2}). No projection has a bias.
//
// Rows: x and every per-token tensor have R = B S rows, sequence-major (row
// b S + t is token t of sequence b); the attention kernel runs per sequence.
//
// The K/V buffer (KvBuffer) is the stage's, one per microbatch and layer:
// made (k, v: zeros) before the layer's forward of chunk 0, its gradient
// accumulators (dk, dv) before the backward of chunk N-1, all four freed
// after the backward of chunk 0. Forward writes the chunk's K (after RoPE)
// and V rows, then attends over rows [0, start + S). Backward adds every
// query's share into dk, dv rows [0, start + S); since chunks run backward
// N-1..0, rows [start, start + S) are then complete, so the layer finishes
// its own K/V projections' backward there (inverse RoPE of those dk rows,
// dxn += dk Wk + dv Wv, the Wk, Wv gradients from the chunk's xn).
//
// Recompute modes: kNone saves what the backward needs (AttentionLayerSaved,
// kActivations); kFull saves only x, and the backward replays the forward
// (its tensors in kWorkspace) reading K and V from the buffer, never writing
// it again; both give bit-identical results.
//
// Not the embedding, the head, the GDN layer or the stage module.
//
//   SF_ASSIGN_OR_RETURN(auto attn, AttentionLayer<float>::Make(alloc, dims, /*layer=*/3, /*num_layers=*/4, seed));
//   SF_ASSIGN_OR_RETURN(auto kv, KvBuffer<float>::Make(alloc, dims, batch, seq_len));  // before chunk 0
//   SF_RETURN_IF_ERROR(attn.Forward(&y, &saved, x, batch, start, &kv, models::Recompute::kNone));
//
// Dimension legend: B sequences (microbatch_size), S tokens per sequence in
// the chunk, R = B S rows, T the sequence length (K/V buffer rows), C hidden
// size, Hq query heads, Hkv K/V heads, D head dim, F SwiGLU size,
// HqD = Hq D, KV = Hkv D.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device/device.h"
#include "backend/kernels/attention.h"
#include "backend/kernels/rope.h"
#include "backend/layers/param.h"
#include "backend/layers/residual_mlp.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/tensor.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

struct AttentionLayerDims {
  int64_t C = 0, Hq = 0, Hkv = 0, D = 0, F = 0;
  double norm_eps = 1e-6;            // the two RMSNorms
  double rope_theta = kRopeTheta;    // RoPE base
  int64_t q_tile = kAttentionQueryTile, k_tile = kAttentionKeyTile;
  // Tensor parallelism (tensor_parallel.h): Hq, Hkv and F are this rank's
  // query heads, K/V heads and MLP columns (Sharded).
  TpShard tp{};

  int64_t HqD() const { return Hq * D; }
  int64_t KV() const { return Hkv * D; }

  // hidden_size, attn_heads, attn_heads / gqa_group_size, attn_head_dim,
  // mlp_size. REQUIRES: models::ValidateModel(model).ok().
  static AttentionLayerDims FromModel(const pb::ModelSpec& model);
  // Hq / TP, Hkv / TP heads and F / TP MLP columns on rank shard.rank
  // (REQUIRES: TP divides them; models::ValidateModel at TP). TP 1: as is.
  AttentionLayerDims Sharded(const TpShard& shard) const;
};

// The sequence-wide K/V of one attention layer for one microbatch, and their
// gradient accumulators (all BufferClass::kKvBuffers).
template <typename T>
struct KvBuffer {
  Tensor<T> k, v;    // (B, T, KV) K after RoPE, and V, of the positions written so far
  Tensor<StatOf<T>> dk, dv;  // (B, T, KV) their gradients, accumulated over
                             // chunks (fp32 in bf16)

  // k, v zeros (no gradients yet). Errors: batch or seq_len < 1, capacity.
  static Result<KvBuffer> Make(TrackingAllocator& alloc,
                               const AttentionLayerDims& dims, int64_t batch,
                               int64_t seq_len);
  // dk, dv zeros, shaped as k. Errors: no k (Make first), capacity.
  Status MakeGrads(TrackingAllocator& alloc);
  // Bytes of k and v together (equally of dk and dv): 2 B T KV sizeof(T).
  static int64_t Bytes(const AttentionLayerDims& dims, int64_t batch,
                       int64_t seq_len);
};

// What the forward keeps for the backward (one layer, one chunk). Under
// recompute kFull only x is held. Backward empties it.
template <typename T>
struct AttentionLayerSaved {
  bool recompute_full = false;
  int64_t batch = 0, start = 0;  // of the forward that filled it
  Tensor<T> x;                   // (R, C) layer input
  Tensor<T> xn;                  // (R, C) pre-norm output
  Tensor<StatOf<T>> rstd1;       // (R) its 1/rms
  Tensor<T> q;                   // (R, HqD) queries after RoPE
  Tensor<T> o;                   // (R, HqD) attention output
  Tensor<StatOf<T>> lse;         // (R, Hq) log-sum-exp
  Tensor<T> h, hn;               // (R, C) after the mixer, (R, C)
  Tensor<StatOf<T>> rstd2;       // (R)
  Tensor<T> mlp_gate, mlp_up;    // (R, F) SwiGLU gate and up projections

  // Elements per token under kNone: 4C + 2F + 2 + 2 HqD + Hq.
  static int64_t NumelPerToken(const AttentionLayerDims& dims);
};

template <typename T>
class AttentionLayer {
 public:
  // The parameters, in Parameters() order; names as in ParamName().
  enum ParamId {
    kAttnNorm, kQProj, kKProj, kVProj, kOProj,
    kMlpNorm, kMlpGate, kMlpUp, kMlpDown, kNumParams
  };
  // "attn_norm.weight", "q_proj.weight", ..., "mlp.down_proj.weight".
  static const char* ParamName(ParamId id);

  // Weights (kWeights) and zero gradients (kGradients) of the layer at
  // `layer` (its index in the model's layer list), initialised from
  // (seed, layer, name) only, as GdnLayer's: norms 1; projections
  // N(0, 0.02^2); o_proj and mlp.down_proj N(0, (0.02 / sqrt(2 num_layers))^2).
  // Errors: a dimension < 1, Hq not a multiple of Hkv, an odd head dim
  // (RoPE rotates pairs), capacity.
  static Result<AttentionLayer> Make(TrackingAllocator& alloc,
                                     const AttentionLayerDims& dims, int layer,
                                     int num_layers, std::uint64_t seed);

  AttentionLayer(AttentionLayer&&) = default;
  AttentionLayer& operator=(AttentionLayer&&) = default;

  // Forward of one chunk of `batch` sequences starting at position `start`.
  //   y (R, C) out, kWorkspace (the caller hands it on);
  //   saved: filled for Backward (kActivations);
  //   x (R, C); kv: from KvBuffer::Make, rows [0, start) written by the
  //   earlier chunks; rows [start, start + S) are written here.
  // Errors (naming the layer and tensor): shapes, batch < 1, R not a
  // multiple of batch, start < 0, start + S > T; allocator capacity.
  Status Forward(Tensor<T>* y, AttentionLayerSaved<T>* saved,
                 const Tensor<T>& x, int64_t batch, int64_t start,
                 KvBuffer<T>* kv, models::Recompute recompute);

  // Backward of the chunk whose forward filled `saved` (same batch, start).
  //   dx (R, C) out (kWorkspace); saved: emptied; dy (R, C);
  //   kv: k, v as the forward left them (later chunks' forwards may have
  //   written rows past start + S); dk, dv from MakeGrads, holding the later
  //   chunks' contributions. Adds into dk, dv rows [0, start + S) and turns
  //   rows [start, start + S) of dk into the gradient before RoPE.
  // Parameter gradients are added to. Errors: an empty `saved` (no
  // forward), a batch or start other than the forward's, shapes, no dk/dv,
  // allocator capacity.
  Status Backward(Tensor<T>* dx, AttentionLayerSaved<T>* saved,
                  const Tensor<T>& dy, int64_t batch, int64_t start,
                  KvBuffer<T>* kv);

  std::vector<Param<T>>& params() { return params_; }
  Param<T>& param(ParamId id) { return params_[id]; }
  const AttentionLayerDims& dims() const { return dims_; }
  int layer() const { return layer_; }

 private:
  AttentionLayer(TrackingAllocator* alloc, const AttentionLayerDims& dims,
                 int layer)
      : alloc_(alloc), dims_(dims), layer_(layer) {}

  template <typename E = T>
  Result<Tensor<E>> New(BufferClass cls, Shape shape);
  const T* w(ParamId id) const { return params_[id].value.data(); }
  GradOf<T>* dw(ParamId id) { return params_[id].grad.data(); }
  ResidualMlpParams<T> MlpParams() {
    return {w(kMlpNorm), w(kMlpGate), w(kMlpUp), w(kMlpDown),
            dw(kMlpNorm), dw(kMlpGate), dw(kMlpUp), dw(kMlpDown)};
  }
  Status CheckChunk(const char* what, const Tensor<T>& t, int64_t batch,
                    int64_t start, const KvBuffer<T>& kv) const;
  // Row offset of sequence b's position `pos` in a (B, T, .) buffer.
  int64_t KvRow(const KvBuffer<T>& kv, int64_t b, int64_t pos) const {
    return b * kv.k.dim(1) + pos;
  }

  // The forward from saved->x, filling the rest of *saved with tensors of
  // class `cls`; writes the chunk's K/V rows only if write_kv.
  Status ForwardPass(Tensor<T>* y, AttentionLayerSaved<T>* saved,
                     KvBuffer<T>* kv, BufferClass cls, bool write_kv);
  Status MixerForward(AttentionLayerSaved<T>* saved, KvBuffer<T>* kv,
                      BufferClass cls, bool write_kv);
  Status MlpForward(Tensor<T>* y, AttentionLayerSaved<T>* saved,
                    BufferClass cls);

  Status BackwardPass(Tensor<T>* dx, const AttentionLayerSaved<T>& saved,
                      const Tensor<T>& dy, KvBuffer<T>* kv);
  Status MlpBackward(Tensor<T>* dh, const AttentionLayerSaved<T>& saved,
                     const Tensor<T>& dy);
  Status AttentionBackwardPass(Tensor<T>* dq, const AttentionLayerSaved<T>& saved,
                               const Tensor<T>& dh, KvBuffer<T>* kv);
  Status MixerInputsBackward(Tensor<T>* dx, const AttentionLayerSaved<T>& saved,
                             const Tensor<T>& dq, KvBuffer<T>* kv);

  // The kernels of the device the allocator's memory lives on.
  Ops<T>& ops() const { return alloc_->device().template ops<T>(); }
  // REQUIRES: the device has attention kernels (Make checks).
  AttentionOps<T>& attn() const { return *alloc_->device().template attention_ops<T>(); }
  TrackingAllocator* alloc_;  // not owned
  AttentionLayerDims dims_;
  int layer_;
  std::vector<Param<T>> params_;  // (kNumParams)
};

}  // namespace stateflow::backend

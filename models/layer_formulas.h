// The per-layer formulas behind CostModel: parameters, FLOP coefficients and
// tensor sizes of each layer kind, for one token (or one query-key pair) of
// one sequence of the whole, un-split layer. CostModel multiplies them by the
// chunk's tokens and microbatch size and divides by the TP degree.
//
// Internal to models/: callers use CostModel. Every term is derived in
// docs/cost-model.md (FLOPs, bytes) and docs/models.md (parameters).
//
//   FlopCoeffs f = LayerFlopCoeffs(model, LayerKind::kAttention);
//   double fwd = f.fwd_token * s + f.fwd_pair * (c * s + s * s / 2.0);
#pragma once

#include <vector>

#include "models/cost_model.h"
#include "models/family.h"
#include "models/memory_segment.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::models {

// Kernel-level block T_C of the chunkwise recurrence kernels (GDN, Mamba-3,
// KDA).
inline constexpr double kKernelBlockTokens = 64;
inline constexpr double kFp32Bytes = 4;

// Bytes of one element of a statistic (norm 1/rms, log-sum-exp), a recurrent
// state or its gradient, or a logit: fp32, or the activation precision when
// that is wider (a float64 run keeps everything in float64).
inline double StatBytes(double activation_bytes) {
  return activation_bytes > kFp32Bytes ? activation_bytes : kFp32Bytes;
}

// Parameters of a block's mixer (recurrence or attention, by `kind`), and of
// its MLP plus its two RMSNorms. REQUIRES: kind is kRecurrence or kAttention.
double MixerParamCount(const pb::ModelSpec& model, LayerKind kind);
double MlpAndNormsParamCount(const pb::ModelSpec& model);

// FLOPs of one layer for one sequence, before TP: per token of the chunk and
// per causal query-key pair (c s + s^2 / 2 of them), forward and backward
// (backward = input + weight gradients, without recompute).
struct FlopCoeffs {
  double fwd_token = 0;
  double fwd_pair = 0;
  double bwd_token = 0;
  double bwd_pair = 0;
};
FlopCoeffs LayerFlopCoeffs(const pb::ModelSpec& model, LayerKind kind);

// The matmuls of a layer's forward (Gemm, cost_model.h).
std::vector<Gemm> LayerGemms(const pb::ModelSpec& model, LayerKind kind);

// A split backward's W store (zero-bubble schedules), in elements of
// activation precision per token on one TP rank: each GEMM's input and
// output gradient, k + n after the TP split (LayerGemms groups the linears
// that share an input into one GEMM; Gemm::inputs k for a group whose
// linears read distinct inputs); the embedding's output gradient h;
// nothing for the head (its output layer's weight gradient is made in the
// loss path). The backend's store holds exactly this (backend/model/
// weight_grad_store.h checks it).
double WeightGradStoreElementsPerToken(const pb::ModelSpec& model, LayerKind kind,
                                       int tensor_size);

// The recurrence core's FLOPs per token (CoreFlops, cost_model.h).
CoreFlops RecurrenceCoreFlops(const pb::ModelSpec& model, LayerKind kind);

// The recurrence core's Pre / ST / Out FLOPs per token (StFlops, family.h):
// the model's family's.
StFlops RecurrenceStFlops(const pb::ModelSpec& model);

// Elements per token of one sequence: replicated across TP ranks, or split by
// them; in activation precision, or as statistics (StatBytes: norm 1/rms,
// L2-norm 1/|.|, log-sum-exps).
struct TokenElems {
  double replicated = 0;
  double sharded = 0;
  double replicated_stat = 0;
  double sharded_stat = 0;

  double Bytes(double activation_bytes, int tensor_size) const {
    return (replicated + sharded / tensor_size) * activation_bytes +
           (replicated_stat + sharded_stat / tensor_size) * StatBytes(activation_bytes);
  }
};

// Bytes per token of one sequence that a layer saves for its backward
// without recompute, on one TP rank (K/V of attention excluded: they live in
// the K/V buffer; logits are never kept: the loss is sliced; the embedding
// saves nothing: its token ids belong to the batch). A recurrence layer's
// come from its family's forward events (what they leave in kActivations
// over one token), so its sizes are written once.
double StoredBytesPerTokenNoRecompute(const pb::ModelSpec& model, LayerKind kind,
                                      double activation_bytes, int tensor_size);

// The sizes every tensor of a layer's memory events is built from: `tokens`
// rows (t = microbatch_size * s), `seq_tokens` = s (kernels that work one
// sequence at a time), element bytes, the TP degree and whose core scratch.
struct TensorBytes {
  double tokens = 0;      // t
  double seq_tokens = 0;  // s
  double act = 0;         // activation element bytes
  int tensor_size = 1;    // TP
  CoreWorkspace core_workspace = CoreWorkspace::kCpu;
  double stat() const { return StatBytes(act); }
};

// The allocations and frees, in order, of one pass of one layer over one
// chunk, as StateFlow's backend makes them: the tensors it saves
// (kActivations), every transient tensor (kWorkspace) including the layer's
// output (t, h) or input gradient, the logits slices (kLogits). Boundary
// states and their gradients are not here: the stage adds them around the
// layer (memory_model.h). The layer's input (or output gradient) is the
// caller's. Derived from backend/layers/*.cc line by line; docs/cost-model.md
// section 3 lists them.
//
// A recurrence layer (its family's ForwardMemory / BackwardMemory: the
// layers of backend/layers/, GdnLayer, Mamba3Layer, KdaLayer);
// recompute_full saves only the layer input and replays the forward inside
// the backward.
MemorySegment RecurrenceLayerForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                           bool recompute_full);
MemorySegment RecurrenceLayerBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                            bool recompute_full);
// Attention layer (AttentionLayer::Forward / Backward); recompute_full saves
// only the layer input and replays the forward inside the backward, reading
// K and V from the K/V buffer. The K/V buffer and its gradient accumulator
// are the stage's (memory_model.h: made before the first forward and the
// first backward of the microbatch, freed after its chunk-0 backward).
MemorySegment AttentionLayerForwardMemory(const pb::ModelSpec& model,
                                          const TensorBytes& b, bool recompute_full);
MemorySegment AttentionLayerBackwardMemory(const pb::ModelSpec& model,
                                           const TensorBytes& b, bool recompute_full);
// Head (HeadLayer): final norm, output layer and cross-entropy over
// vocabulary slices of kLossVocabSlice columns (V / TP columns on a TP rank).
MemorySegment HeadForwardMemory(const pb::ModelSpec& model, const TensorBytes& b);
MemorySegment HeadBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b);
// Head as Megatron-Core runs it (System::kMegatronCore, kMsSwift; no backend
// here: derived from megatron/core/models/gpt/gpt_model.py and
// tensor_parallel/cross_entropy.py, docs/cost-model.md "Systems"). Forward:
// the norm's saved tensors, the logits (t, V/TP) in activation precision
// (kLogits), their float32 copy (kLogits) that becomes the softmax in place
// and is saved for the backward, the per-token losses; the bf16 logits are
// freed when the forward returns. Backward: the softmax becomes the logits'
// gradient in place; autograd casts it to the logits' dtype (kWorkspace)
// and releases the float32 tensor; the output layer's input gradient, the
// norm's.
MemorySegment HeadFullLogitsForwardMemory(const pb::ModelSpec& model, const TensorBytes& b);
MemorySegment HeadFullLogitsBackwardMemory(const pb::ModelSpec& model, const TensorBytes& b);

// The boundary state of one sequence, in bytes, after TP: the family's
// (Family::BoundaryStateBytes) for a recurrence layer, 0 for other kinds.
double BoundaryStateBytesPerSequence(const pb::ModelSpec& model, LayerKind kind,
                                     double activation_bytes, int tensor_size);

}  // namespace stateflow::models

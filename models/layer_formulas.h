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

#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::models {

// Kernel-level block T_C of the chunkwise recurrence kernels (GDN, Mamba-3).
inline constexpr double kKernelBlockTokens = 64;
// Mamba-3 B/C groups (the Mamba-2 default of one group shared by all heads).
inline constexpr double kMambaGroups = 1;
inline constexpr double kFp32Bytes = 4;
inline constexpr double kTokenIdBytes = 4;  // int32 token ids

// Mamba-3 inner width d_in = heads * head_dim (= 2 * hidden in the presets).
double MambaInner(const pb::ModelSpec& model);

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

// Elements per token of one sequence: replicated across TP ranks, or split by
// them; in activation precision, or fp32 (norm statistics, log-sum-exps).
struct TokenElems {
  double replicated = 0;
  double sharded = 0;
  double replicated_fp32 = 0;
  double sharded_fp32 = 0;

  double Bytes(double activation_bytes, int tensor_size) const {
    return (replicated + sharded / tensor_size) * activation_bytes +
           (replicated_fp32 + sharded_fp32 / tensor_size) * kFp32Bytes;
  }
};

// What the layer saves for its backward without recompute (K/V of attention
// excluded: they live in the K/V buffer; logits excluded: LogitsBytes).
// Embedding: nothing here (CostModel adds its int32 token ids,
// kTokenIdBytes per token).
TokenElems StoredElemsNoRecompute(const pb::ModelSpec& model, LayerKind kind);

// Kernel scratch of one call (beside the stored tensors): per token, and per
// kernel block of T_C tokens (the recurrence kernels' per-block states), in
// bytes for one sequence and TP degree `tensor_size`.
struct ScratchBytes {
  double per_token = 0;
  double per_kernel_block = 0;
};
ScratchBytes ForwardScratch(const pb::ModelSpec& model, LayerKind kind,
                            double activation_bytes, int tensor_size);
ScratchBytes BackwardScratch(const pb::ModelSpec& model, LayerKind kind,
                             double activation_bytes, int tensor_size);

// The recurrent state plus short-convolution tail (and, for Mamba-3, the
// previous-token carry) of one sequence, in bytes, after TP. 0 for other
// kinds.
double BoundaryStateBytesPerSequence(const pb::ModelSpec& model, LayerKind kind,
                                     double activation_bytes, int tensor_size);

}  // namespace stateflow::models

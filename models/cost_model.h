// The analytic cost and memory model of one model on one device kind: FLOPs,
// time and bytes per layer of the layer list (model.h) for one chunk of one
// microbatch, given the chunk's start c and length s (tokens), under a
// tensor-parallel degree and a recompute mode. Formulas, their derivations and
// which numbers are assumptions: docs/cost-model.md.
//
// Everything is per device (already divided by TP) and per microbatch
// (microbatch_size sequences).
//
// Not a scheduler and not a simulator: it answers "how much", never "when".
//
//   Result<CostModel> cm = CostModel::Make(model, precision, cluster, opts);
//   double t = cm->ForwardTime(layer, c, s);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer_class.h"
#include "common/status.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"
#include "schedule/partition.h"

namespace stateflow::models {

enum class Recompute { kNone, kFull };

// "none" or "full" ("" means none). Error names schedule.recompute.
Result<Recompute> ParseRecompute(std::string_view text);
std::string_view RecomputeName(Recompute recompute);  // "none" or "full"

struct CostModelOptions {
  int tensor_size = 1;
  int microbatch_size = 1;
  Recompute recompute = Recompute::kNone;
};

class CostModel {
 public:
  // Validates the model (ValidateModel), precision (bytes > 0 after defaults)
  // and cluster (ValidateCluster).
  static Result<CostModel> Make(const pb::ModelSpec& model,
                                const pb::PrecisionSpec& precision,
                                const pb::ClusterSpec& cluster,
                                const CostModelOptions& options);

  const std::vector<LayerKind>& layers() const { return layers_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const pb::ModelSpec& model() const { return model_; }
  const pb::ClusterSpec& cluster() const { return cluster_; }
  // The precision with defaults filled in.
  const pb::PrecisionSpec& precision() const { return precision_; }
  const CostModelOptions& options() const { return options_; }

  // ---- FLOPs of layer `l` on the chunk [c, c + s) ----
  double ForwardFlops(int l, std::int64_t c, std::int64_t s) const;
  // Backward (input and weight gradients), without recompute.
  double BackwardFlops(int l, std::int64_t c, std::int64_t s) const;
  // What backward re-runs under full recompute (the forward), else 0.
  double RecomputeFlops(int l, std::int64_t c, std::int64_t s) const;
  // Whether backward replays layer l's forward: blocks under full recompute
  // (the embedding and head are outside the recompute region, as in
  // Megatron-LM's full recompute of transformer layers).
  bool Recomputed(int l) const;

  // ---- time in seconds on the cluster's device ----
  double ForwardTime(int l, std::int64_t c, std::int64_t s) const;
  // Includes recompute under full recompute.
  double BackwardTime(int l, std::int64_t c, std::int64_t s) const;
  // HOOK for tensor-parallel communication (the all-reduces of one pass of
  // layer l over s tokens). Not modelled yet: returns 0. Forward and backward
  // times (and a recompute replay) each add it once, so filling it in here is
  // the only change needed.
  double TensorParallelCommTime(int l, std::int64_t s) const;

  // ---- bytes ----
  double ParamCount(int l) const;  // per device (after TP)
  double WeightBytes(int l) const;
  double GradientBytes(int l) const;
  double OptimizerBytes(int l) const;
  // Saved by forward for backward, freed when the chunk's backward ends.
  double StoredActivationBytes(int l, std::int64_t s) const;
  // The recurrent state and conv tail a chunk hands to the next (0 for
  // attention, embedding, head).
  double BoundaryStateBytes(int l) const;
  // K/V of one token position (microbatch_size sequences) of one
  // softmax-attention layer (0 for other layers): its K/V buffer holds
  // KvBytesPerToken * seq_len from the microbatch's first forward to its last
  // backward.
  double KvBytesPerToken(int l) const;
  // The fp32 gradient accumulator of that K/V buffer (later chunks' backward
  // adds into earlier positions' dK, dV): held from the microbatch's first
  // backward to its last. 0 for other layers.
  double KvGradBytesPerToken(int l) const;
  // Transient bytes while layer l runs forward / backward (incl. recompute)
  // on s tokens.
  double ForwardWorkspaceBytes(int l, std::int64_t s) const;
  double BackwardWorkspaceBytes(int l, std::int64_t s) const;
  // Logits (head only) held from the chunk's forward to its backward.
  double LogitsBytes(int l, std::int64_t s) const;
  // Bytes of the activation (or its gradient) sent between stages for s tokens.
  double BoundaryActivationBytes(std::int64_t s) const;

  // Coefficients of the paper's Cost_i for layers [first, last): W_tok and
  // W_soft in FLOPs (forward + backward).
  schedule::ChunkCostCoefficients ChunkCoefficients(int first, int last) const;

  // Fraction of peak reached by a kernel over `tokens` tokens (the cluster's
  // efficiency curve; 1 if it has none).
  double Efficiency(double tokens) const;

 private:
  // Per layer kind, per sequence, already divided by TP.
  struct KindTable {
    double fwd_token = 0, fwd_pair = 0, bwd_token = 0, bwd_pair = 0;  // FLOPs
    double params = 0;
    double stored_per_token = 0;  // bytes, no recompute
    double fwd_scratch_per_token = 0, fwd_scratch_per_block = 0;  // bytes
    double bwd_scratch_per_token = 0, bwd_scratch_per_block = 0;  // bytes
    double boundary_bytes = 0;
    double kv_per_token = 0;  // bytes, activation precision
  };

  CostModel() = default;
  void FillTables();
  const KindTable& Table(int l) const;
  // max(flops / (peak * efficiency), bytes / bandwidth) for s tokens.
  double KernelTime(double flops, double min_bytes, std::int64_t s) const;
  double MinForwardBytes(int l, std::int64_t s) const;
  double MinBackwardBytes(int l, std::int64_t s) const;
  // Tensors that forward makes beyond the layer's input (what full recompute
  // re-creates), for s tokens of the microbatch.
  double IntermediateBytes(int l, std::int64_t s) const;
  double Tokens(std::int64_t s) const {
    return static_cast<double>(s) * options_.microbatch_size;
  }

  pb::ModelSpec model_;
  pb::PrecisionSpec precision_;
  pb::ClusterSpec cluster_;
  CostModelOptions options_;
  std::vector<LayerKind> layers_;
  std::array<KindTable, 4> tables_;  // indexed by LayerKind
};

}  // namespace stateflow::models

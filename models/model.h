// Model and cluster presets, validation of a ModelSpec, and the model's layer
// list: what layers a model has, in order, and which stage holds which.
//
// The layer list is [embedding, layer_0, ..., layer_{L-1}, head]: the
// embedding lives on the first stage; each layer is a mixer (recurrence or
// softmax attention) plus a SwiGLU MLP, pre-norm, residual; the head (final
// norm, output layer, loss) lives on the last stage.
//
// Not the costs: those are in cost_model.h. The presets' shapes, parameter
// formulas and the reasons for each default are in docs/models.md.
//
//   Result<pb::ModelSpec> m = ModelPreset("gdn-3b");
//   std::vector<LayerKind> layers = LayerList(*m);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::models {

enum class LayerKind { kEmbedding, kRecurrence, kAttention, kHead };

std::string_view LayerKindName(LayerKind kind);

// Presets (names listed by ModelPresetNames): the paper's models
// "gdn-3b", "gdn-15b", "gdn-32b", "mamba3-3b", ..., their hybrids
// "gdn-hybrid-3b", ..., "mamba3-hybrid-32b", and tiny ones for the backend
// ("gdn-tiny", ...). Error: unknown name, listing the known ones.
Result<pb::ModelSpec> ModelPreset(std::string_view name);
std::vector<std::string> ModelPresetNames();

// GPU clusters of 8 per node on NVLink -- "a100-80gb-nvlink",
// "a100-40gb-nvlink", "h100-80gb-nvlink", "h200-141gb-nvlink",
// "b200-180gb-nvlink" (each figure's source in docs/cost-model.md, "Cluster
// presets") -- and "cpu" (this kind of machine: one device per core).
// Error: unknown name, listing the known ones.
Result<pb::ClusterSpec> ClusterPreset(std::string_view name);
std::vector<std::string> ClusterPresetNames();

// Checks every field a model needs (names the field: "model.hidden_size must
// be > 0", "model.architecture: unknown 'foo' (known: gdn, mamba3)", heads
// divisible by TP, ...). tensor_size is the TP degree; recurrence heads,
// attention heads and K/V heads must all be divisible by it. Attention fields
// are checked only for layer_pattern "hybrid". The full list: docs/models.md.
Status ValidateModel(const pb::ModelSpec& model, int tensor_size = 1);
Status ValidateCluster(const pb::ClusterSpec& cluster);

// The OOM verdict as a GPU decides it (docs/cost-model.md, "OOM verdict").
// A report's peak is the largest allocated total, what
// torch.cuda.max_memory_allocated reports; the device also holds what no
// tensor owns: the CUDA context, NCCL's buffers and the caching allocator's
// fragmentation, DeviceSpec.memory_reserve_bytes plus
// memory_reserve_fraction * capacity. Unset fields take these defaults.
inline constexpr double kDefaultMemoryReserveBytes = 1024.0 * 1024 * 1024;  // 1 GiB
inline constexpr double kDefaultMemoryReserveFraction = 0.05;
// memory_reserve_bytes + memory_reserve_fraction * memory_capacity_bytes.
double MemoryReserveBytes(const pb::DeviceSpec& device);
// memory_capacity_bytes - MemoryReserveBytes: what tensors may peak at.
double UsableMemoryBytes(const pb::DeviceSpec& device);
// peak_bytes > UsableMemoryBytes(device): the one OOM rule of simulate,
// sweep and the capacity planner.
bool OutOfMemory(double peak_bytes, const pb::DeviceSpec& device);

// What a block is made of beyond its mixer (ModelSpec.norm, mlp, mlp_bias,
// out_proj_bias), read alike by the analytic formulas (layer_formulas.cc,
// families/) and the backend's layers. The defaults: RMSNorm (eps 1e-6),
// SwiGLU, no biases; DeltaNet's: LayerNorm (eps 1e-5), GELU, biases.
struct BlockShape {
  bool layer_norm = false;     // LayerNorm (weight, bias) instead of RMSNorm
  bool gelu = false;           // GELU MLP (up, down) instead of SwiGLU
  bool mlp_bias = false;       // biases on the MLP's projections
  bool out_proj_bias = false;  // a bias on the mixer's output projection
  double norm_eps = 1e-6;      // every norm of the model (1e-5 with layer_norm)

  // Statistics a norm saves per row: mean and 1/std, or 1/rms.
  int norm_stats() const { return layer_norm ? 2 : 1; }
  // Parameters of one pre-norm over h: weight (and bias).
  double norm_params(double h) const { return layer_norm ? 2 * h : h; }
};
// REQUIRES: ValidateModel(model).ok().
BlockShape BlockShapeOf(const pb::ModelSpec& model);

// [embedding, layers..., head]; size num_layers + 2.
std::vector<LayerKind> LayerList(const pb::ModelSpec& model);

// Whether layer j (0-based among the mixer layers, 0 <= j < num_layers) is
// softmax attention: in a
// hybrid, iff (j + 1) % (hybrid_period + 1) == 0 (3:1 gives R R R A R R R A
// ...); never in a recurrent model.
bool IsAttentionLayer(const pb::ModelSpec& model, int layer);

// Softmax-attention K/V heads: attn_heads / gqa_group_size.
int KvHeads(const pb::ModelSpec& model);

// Parameters of one layer of kind `kind` (whole layer, before any TP split),
// and of the whole model. REQUIRES: ValidateModel(model).ok().
double LayerParamCount(const pb::ModelSpec& model, LayerKind kind);
// Parameters of one layer on one of `tensor_size` tensor-parallel ranks: the
// split ones divided by TP, the ones every rank keeps whole (norms, biases
// of row-parallel outputs, what no head owns: Family::MixerReplicatedParams)
// whole, as the backend holds them (backend/layers/tensor_parallel.h).
double LayerParamCountPerTensorRank(const pb::ModelSpec& model, LayerKind kind,
                                    int tensor_size);

// What the backend's tensor parallelism of degree `tensor_size` needs of the
// model (backend/layers/tensor_parallel.h): the recurrence heads, attention
// query and K/V heads, MLP size and vocabulary split into equal blocks.
// Error (Invalid, one line): the first field that does not divide, naming it
// ("model.vocab_size 259 is not divisible by parallel.tensor_size 2 ...").
Status CheckTensorParallelModel(const pb::ModelSpec& model, int tensor_size);
double ModelParamCount(const pb::ModelSpec& model);

// Layers [first, last) of the layer list on one stage.
struct StageLayers {
  int first = 0;
  int last = 0;
};

// Contiguous assignment of the layer list to `stages` stages balancing the
// per-stage cost `layer_costs` (one value per layer of the layer list, e.g.
// forward+backward time of one chunk); the embedding stays on stage 0 and the
// head on the last stage; every stage gets at least one mixer layer. Exact
// (minimises the maximum stage cost). Error if stages > num_layers.
Result<std::vector<StageLayers>> AssignStages(
    const std::vector<double>& layer_costs, int stages);

// Megatron-Core's assignment (r0.12's TransformerBlock without
// --decoder-first/last-pipeline-num-layers): layers / stages layers per
// stage, in order, the embedding with stage 0's and the head with the last
// stage's, whatever they cost. Error (naming parallel.pipeline_size) unless
// `stages` divides `layers` (the mixer layers), as Megatron-Core's config
// check refuses it.
Result<std::vector<StageLayers>> EvenLayerStages(int layers, int stages);

}  // namespace stateflow::models

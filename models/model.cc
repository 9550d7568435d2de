// Validation, layer list and parameter counts (formulas: docs/models.md).
#include "models/model.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>

#include "models/family.h"
#include "models/kernel_costs.h"
#include "models/layer_formulas.h"
#include "models/limits.h"

namespace stateflow::models {
namespace {

// "model.num_heads (20) must be divisible by parallel.tensor_size (3)"
Status Divisible(std::string_view what, long value, std::string_view by_what,
                 long by) {
  if (by > 0 && value % by == 0) return Status::Ok();
  return Status::Invalid(std::string(what) + " (" + std::to_string(value) +
                         ") must be divisible by " + std::string(by_what) +
                         " (" + std::to_string(by) + ")");
}

bool IsHybrid(const pb::ModelSpec& m) { return m.layer_pattern() == "hybrid"; }

Status OneOf(std::string_view field, const std::string& value,
             std::initializer_list<std::string_view> known) {
  std::string list;
  for (std::string_view k : known) {
    if (value.empty() || value == k) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(k);
  }
  return Status::Invalid(std::string(field) + ": unknown '" + value + "' (known: " + list + ")");
}

Status ValidateNames(const pb::ModelSpec& m) {
  SF_RETURN_IF_ERROR(FamilyOf(m).status());
  SF_RETURN_IF_ERROR(OneOf("model.layer_pattern", m.layer_pattern(), {"recurrent", "hybrid"}));
  SF_RETURN_IF_ERROR(OneOf("model.norm", m.norm(), {"rmsnorm", "layernorm"}));
  SF_RETURN_IF_ERROR(OneOf("model.mlp", m.mlp(), {"swiglu", "gelu"}));
  SF_RETURN_IF_ERROR(OneOf("model.decay", m.decay(), {"gated", "none"}));
  // The non-default block shapes are built in the gdn family's layer and the
  // head (DeltaNet), not in the other families' layers or in attention.
  const bool gdn_recurrent = m.architecture() == "gdn" && !IsHybrid(m);
  const auto only_gdn = [&](std::string_view field, bool set, std::string_view what) {
    if (!set || gdn_recurrent) return Status::Ok();
    return Status::Invalid(std::string(field) + ": " + std::string(what) +
                           " is built for the gdn family's recurrent models only (DeltaNet), not "
                           "for architecture '" + m.architecture() + "' with layer_pattern '" +
                           (m.layer_pattern().empty() ? "recurrent" : m.layer_pattern()) + "'");
  };
  SF_RETURN_IF_ERROR(only_gdn("model.norm", m.norm() == "layernorm", "layernorm"));
  SF_RETURN_IF_ERROR(only_gdn("model.mlp", m.mlp() == "gelu", "gelu"));
  SF_RETURN_IF_ERROR(only_gdn("model.mlp_bias", m.mlp_bias(), "mlp_bias"));
  SF_RETURN_IF_ERROR(only_gdn("model.out_proj_bias", m.out_proj_bias(), "out_proj_bias"));
  if (m.mlp_bias() && m.mlp() != "gelu") {
    return Status::Invalid("model.mlp_bias: biases are built for the gelu MLP only (mlp: "
                           "'gelu'), not SwiGLU");
  }
  if (m.decay() == "none" && m.architecture() != "gdn") {
    return Status::Invalid("model.decay: 'none' is the gdn family's (DeltaNet), not '" +
                           m.architecture() + "''s");
  }
  return Status::Ok();
}

// The shared fields, the family's own (Family::Validate) in between, in the
// order the fields are declared.
Status ValidateSizes(const pb::ModelSpec& m, int tensor_size) {
  SF_RETURN_IF_ERROR(CheckRange("model.num_layers", m.num_layers(), kNumLayers));
  SF_RETURN_IF_ERROR(CheckRange("model.hidden_size", m.hidden_size(), kHiddenSize));
  SF_RETURN_IF_ERROR(CheckRange("model.num_heads", m.num_heads(), kHeads));
  SF_RETURN_IF_ERROR(FamilyOfValid(m).Validate(m, tensor_size));
  SF_RETURN_IF_ERROR(CheckRange("model.conv_width", m.conv_width(), kConvWidth));
  SF_RETURN_IF_ERROR(CheckRange("model.mlp_size", m.mlp_size(), kMlpSize));
  return CheckRange("model.vocab_size", m.vocab_size(), kVocabSize);
}

Status ValidateAttention(const pb::ModelSpec& m, int tensor_size) {
  SF_RETURN_IF_ERROR(CheckRange("model.hybrid_period (layer_pattern 'hybrid')",
                                m.hybrid_period(), kHybridPeriod));
  SF_RETURN_IF_ERROR(CheckRange("model.attn_heads", m.attn_heads(), kHeads));
  SF_RETURN_IF_ERROR(CheckRange("model.attn_head_dim", m.attn_head_dim(), kHeadDim));
  if (m.attn_head_dim() % 2 != 0) {  // RoPE turns pairs (docs/models.md)
    return Status::Invalid("model.attn_head_dim (" + std::to_string(m.attn_head_dim()) +
                           ") must be even (rotary embeddings turn pairs of dimensions)");
  }
  SF_RETURN_IF_ERROR(CheckRange("model.gqa_group_size", m.gqa_group_size(), kHeads));
  SF_RETURN_IF_ERROR(Divisible("model.attn_heads", m.attn_heads(),
                               "model.gqa_group_size", m.gqa_group_size()));
  SF_RETURN_IF_ERROR(Divisible("model.attn_heads", m.attn_heads(),
                               "parallel.tensor_size", tensor_size));
  return Divisible("K/V heads (model.attn_heads / model.gqa_group_size)",
                   KvHeads(m), "parallel.tensor_size", tensor_size);
}

Status ValidateLink(const std::string& field, const pb::LinkSpec& link) {
  SF_RETURN_IF_ERROR(CheckRange(field + ".latency_s", link.latency_s(), kLatencyS));
  return CheckRange(field + ".bandwidth_bytes_per_s", link.bandwidth_bytes_per_s(),
                    kBandwidthBytesPerS);
}

Status ValidateEfficiency(const pb::DeviceSpec& d) {
  for (int i = 0; i < d.efficiency_size(); ++i) {
    const std::string field =
        "cluster.device.efficiency[" + std::to_string(i) + "]";
    const pb::EfficiencyPoint& p = d.efficiency(i);
    SF_RETURN_IF_ERROR(CheckRange(field + ".tokens", p.tokens(), kEfficiencyTokens));
    if (!(p.efficiency() > 0 && p.efficiency() <= 1)) {
      return Status::Invalid(field + ".efficiency must be in (0, 1]");
    }
    if (i > 0 && !(p.tokens() > d.efficiency(i - 1).tokens())) {
      return Status::Invalid(field + ".tokens must be > efficiency[" +
                             std::to_string(i - 1) +
                             "].tokens (points sorted by tokens)");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kRecurrence: return "recurrence";
    case LayerKind::kAttention: return "attention";
    case LayerKind::kHead: return "head";
  }
  return "unknown";
}

int KvHeads(const pb::ModelSpec& model) {
  if (model.gqa_group_size() == 0) return 0;
  return static_cast<int>(model.attn_heads() / model.gqa_group_size());
}

Status ValidateModel(const pb::ModelSpec& model, int tensor_size) {
  if (tensor_size < 1) {
    return Status::Invalid("parallel.tensor_size must be >= 1");
  }
  SF_RETURN_IF_ERROR(ValidateNames(model));
  SF_RETURN_IF_ERROR(ValidateSizes(model, tensor_size));
  SF_RETURN_IF_ERROR(Divisible("model.num_heads", model.num_heads(),
                               "parallel.tensor_size", tensor_size));
  if (IsHybrid(model)) SF_RETURN_IF_ERROR(ValidateAttention(model, tensor_size));
  return Status::Ok();
}

double MemoryReserveBytes(const pb::DeviceSpec& device) {
  const double bytes = device.has_memory_reserve_bytes() ? device.memory_reserve_bytes()
                                                         : kDefaultMemoryReserveBytes;
  const double fraction = device.has_memory_reserve_fraction()
                              ? device.memory_reserve_fraction()
                              : kDefaultMemoryReserveFraction;
  return bytes + fraction * device.memory_capacity_bytes();
}

double UsableMemoryBytes(const pb::DeviceSpec& device) {
  return device.memory_capacity_bytes() - MemoryReserveBytes(device);
}

bool OutOfMemory(double peak_bytes, const pb::DeviceSpec& device) {
  return peak_bytes > UsableMemoryBytes(device);
}

Status ValidateCluster(const pb::ClusterSpec& cluster) {
  const pb::DeviceSpec& d = cluster.device();
  SF_RETURN_IF_ERROR(CheckRange("cluster.device.peak_flops", d.peak_flops(), kPeakFlops));
  SF_RETURN_IF_ERROR(CheckRange("cluster.device.memory_bandwidth_bytes_per_s",
                                d.memory_bandwidth_bytes_per_s(), kBandwidthBytesPerS));
  SF_RETURN_IF_ERROR(CheckRange("cluster.device.memory_capacity_bytes",
                                d.memory_capacity_bytes(), kCapacityBytes));
  if (d.has_memory_reserve_bytes() &&
      !(d.memory_reserve_bytes() >= 0 && d.memory_reserve_bytes() < d.memory_capacity_bytes())) {
    return Status::Invalid("cluster.device.memory_reserve_bytes must be in [0, "
                           "memory_capacity_bytes) (got " +
                           std::to_string(d.memory_reserve_bytes()) + ")");
  }
  if (!(d.action_overhead_s() >= 0 && d.action_overhead_s() <= 1)) {
    return Status::Invalid("cluster.device.action_overhead_s must be in [0, 1] seconds (got " +
                           std::to_string(d.action_overhead_s()) + ")");
  }
  if (d.has_memory_reserve_fraction() &&
      !(d.memory_reserve_fraction() >= 0 && d.memory_reserve_fraction() < 1)) {
    return Status::Invalid("cluster.device.memory_reserve_fraction must be in [0, 1) (got " +
                           std::to_string(d.memory_reserve_fraction()) + ")");
  }
  if (!(UsableMemoryBytes(d) > 0)) {
    return Status::Invalid("cluster.device: memory_reserve_bytes + memory_reserve_fraction * "
                           "memory_capacity_bytes leaves no memory (reserve " +
                           std::to_string(MemoryReserveBytes(d)) + " of capacity " +
                           std::to_string(d.memory_capacity_bytes()) + " bytes)");
  }
  SF_RETURN_IF_ERROR(ValidateEfficiency(d));
  SF_RETURN_IF_ERROR(ValidateKernelCosts(cluster.kernel_costs()));
  SF_RETURN_IF_ERROR(
      ValidateLink("cluster.pipeline_link", cluster.pipeline_link()));
  SF_RETURN_IF_ERROR(
      ValidateLink("cluster.intra_node_link", cluster.intra_node_link()));
  SF_RETURN_IF_ERROR(
      ValidateLink("cluster.inter_node_link", cluster.inter_node_link()));
  return CheckRange("cluster.devices_per_node", cluster.devices_per_node(), kDevicesPerNode);
}

bool IsAttentionLayer(const pb::ModelSpec& model, int layer) {
  if (!IsHybrid(model) || model.hybrid_period() < 1) return false;
  // 64-bit: hybrid_period + 1 neither wraps nor overflows for any uint32.
  const std::int64_t period = static_cast<std::int64_t>(model.hybrid_period()) + 1;
  return (static_cast<std::int64_t>(layer) + 1) % period == 0;
}

BlockShape BlockShapeOf(const pb::ModelSpec& model) {
  BlockShape b;
  b.layer_norm = model.norm() == "layernorm";
  b.gelu = model.mlp() == "gelu";
  b.mlp_bias = model.mlp_bias();
  b.out_proj_bias = model.out_proj_bias();
  b.norm_eps = b.layer_norm ? 1e-5 : 1e-6;
  return b;
}

std::vector<LayerKind> LayerList(const pb::ModelSpec& model) {
  // REQUIRES: ValidateModel(model) (num_layers in kNumLayers, so it fits an int).
  const int blocks = static_cast<int>(model.num_layers());
  std::vector<LayerKind> layers;
  layers.reserve(static_cast<std::size_t>(blocks) + 2);
  layers.push_back(LayerKind::kEmbedding);
  for (int j = 0; j < blocks; ++j) {
    layers.push_back(IsAttentionLayer(model, j) ? LayerKind::kAttention
                                                : LayerKind::kRecurrence);
  }
  layers.push_back(LayerKind::kHead);
  return layers;
}

double LayerParamCount(const pb::ModelSpec& model, LayerKind kind) {
  const double h = model.hidden_size();
  const double vocab = model.vocab_size();
  switch (kind) {
    case LayerKind::kEmbedding:
      return vocab * h;
    case LayerKind::kHead:  // final norm + output layer (if untied)
      return BlockShapeOf(model).norm_params(h) + (model.untied_embeddings() ? vocab * h : 0.0);
    case LayerKind::kRecurrence:
      return MixerParamCount(model, kind) + MlpAndNormsParamCount(model);
    case LayerKind::kAttention:
      return MixerParamCount(model, kind) + MlpAndNormsParamCount(model);
  }
  return 0;
}

double LayerParamCountPerTensorRank(const pb::ModelSpec& model, LayerKind kind,
                                    int tensor_size) {
  const double all = LayerParamCount(model, kind);
  if (tensor_size <= 1) return all;
  const double h = model.hidden_size();
  const BlockShape shape = BlockShapeOf(model);
  double whole = 0;
  switch (kind) {
    case LayerKind::kEmbedding:
      break;
    case LayerKind::kHead:
      whole = shape.norm_params(h);
      break;
    case LayerKind::kRecurrence:
      // Both pre-norms, the MLP's down bias, the mixer's own.
      whole = 2 * shape.norm_params(h) + (shape.mlp_bias ? h : 0) +
              FamilyOfValid(model).MixerReplicatedParams(model);
      break;
    case LayerKind::kAttention:
      whole = 2 * shape.norm_params(h) + (shape.mlp_bias ? h : 0);
      break;
  }
  return (all - whole) / tensor_size + whole;
}

double ModelParamCount(const pb::ModelSpec& model) {
  double total = 0;
  for (LayerKind kind : LayerList(model)) total += LayerParamCount(model, kind);
  return total;
}

Status CheckTensorParallelModel(const pb::ModelSpec& model, int tensor_size) {
  if (tensor_size <= 1) return Status::Ok();
  const auto check = [&](const char* field, std::int64_t n) {
    if (n % tensor_size == 0) return Status::Ok();
    return Status::Invalid(std::string(field) + " " + std::to_string(n) +
                           " is not divisible by parallel.tensor_size " +
                           std::to_string(tensor_size) +
                           " (tensor parallelism splits it into equal blocks)");
  };
  bool recurrent = false, attention = false;
  for (int l = 0; l < static_cast<int>(model.num_layers()); ++l) {
    (IsAttentionLayer(model, l) ? attention : recurrent) = true;
  }
  if (recurrent) SF_RETURN_IF_ERROR(check("model.num_heads", model.num_heads()));
  if (attention) {
    SF_RETURN_IF_ERROR(check("model.attn_heads", model.attn_heads()));
    SF_RETURN_IF_ERROR(check("model.gqa_group_size's K/V heads", KvHeads(model)));
  }
  SF_RETURN_IF_ERROR(check("model.mlp_size", model.mlp_size()));
  return check("model.vocab_size", model.vocab_size());
}

}  // namespace stateflow::models

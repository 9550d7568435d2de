// Validation, layer list and parameter counts (formulas: docs/models.md).
#include "models/model.h"

#include <cmath>
#include <string>

#include "models/layer_formulas.h"

namespace stateflow::models {
namespace {

Status Positive(std::string_view field, double value) {
  if (value > 0 && std::isfinite(value)) return Status::Ok();
  return Status::Invalid(std::string(field) + " must be > 0");
}

Status NonNegative(std::string_view field, double value) {
  if (value >= 0 && std::isfinite(value)) return Status::Ok();
  return Status::Invalid(std::string(field) + " must be >= 0");
}

// "model.num_heads (20) must be divisible by parallel.tensor_size (3)"
Status Divisible(std::string_view what, long value, std::string_view by_what,
                 long by) {
  if (by > 0 && value % by == 0) return Status::Ok();
  return Status::Invalid(std::string(what) + " (" + std::to_string(value) +
                         ") must be divisible by " + std::string(by_what) +
                         " (" + std::to_string(by) + ")");
}

bool IsHybrid(const pb::ModelSpec& m) { return m.layer_pattern() == "hybrid"; }

Status ValidateNames(const pb::ModelSpec& m) {
  const std::string& a = m.architecture();
  if (a != "gdn" && a != "mamba3") {
    return Status::Invalid("model.architecture: unknown '" + a +
                           "' (known: gdn, mamba3)");
  }
  const std::string& p = m.layer_pattern();
  if (!p.empty() && p != "recurrent" && p != "hybrid") {
    return Status::Invalid("model.layer_pattern: unknown '" + p +
                           "' (known: recurrent, hybrid)");
  }
  return Status::Ok();
}

Status ValidateSizes(const pb::ModelSpec& m) {
  SF_RETURN_IF_ERROR(Positive("model.num_layers", m.num_layers()));
  SF_RETURN_IF_ERROR(Positive("model.hidden_size", m.hidden_size()));
  SF_RETURN_IF_ERROR(Positive("model.num_heads", m.num_heads()));
  if (m.architecture() == "gdn") {
    SF_RETURN_IF_ERROR(Positive("model.head_dim_k", m.head_dim_k()));
  }
  SF_RETURN_IF_ERROR(Positive("model.head_dim_v", m.head_dim_v()));
  if (m.architecture() == "mamba3") {
    SF_RETURN_IF_ERROR(Positive("model.state_dim", m.state_dim()));
  }
  SF_RETURN_IF_ERROR(Positive("model.conv_width", m.conv_width()));
  SF_RETURN_IF_ERROR(Positive("model.mlp_size", m.mlp_size()));
  SF_RETURN_IF_ERROR(Positive("model.vocab_size", m.vocab_size()));
  return Status::Ok();
}

Status ValidateAttention(const pb::ModelSpec& m, int tensor_size) {
  if (m.hybrid_period() < 1) {
    return Status::Invalid(
        "model.hybrid_period must be >= 1 for layer_pattern 'hybrid'");
  }
  SF_RETURN_IF_ERROR(Positive("model.attn_heads", m.attn_heads()));
  SF_RETURN_IF_ERROR(Positive("model.attn_head_dim", m.attn_head_dim()));
  SF_RETURN_IF_ERROR(Positive("model.gqa_group_size", m.gqa_group_size()));
  SF_RETURN_IF_ERROR(Divisible("model.attn_heads", m.attn_heads(),
                               "model.gqa_group_size", m.gqa_group_size()));
  SF_RETURN_IF_ERROR(Divisible("model.attn_heads", m.attn_heads(),
                               "parallel.tensor_size", tensor_size));
  return Divisible("K/V heads (model.attn_heads / model.gqa_group_size)",
                   KvHeads(m), "parallel.tensor_size", tensor_size);
}

Status ValidateLink(const std::string& field, const pb::LinkSpec& link) {
  SF_RETURN_IF_ERROR(NonNegative(field + ".latency_s", link.latency_s()));
  return Positive(field + ".bandwidth_bytes_per_s",
                  link.bandwidth_bytes_per_s());
}

Status ValidateEfficiency(const pb::DeviceSpec& d) {
  for (int i = 0; i < d.efficiency_size(); ++i) {
    const std::string field =
        "cluster.device.efficiency[" + std::to_string(i) + "]";
    const pb::EfficiencyPoint& p = d.efficiency(i);
    SF_RETURN_IF_ERROR(Positive(field + ".tokens", p.tokens()));
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
  SF_RETURN_IF_ERROR(ValidateSizes(model));
  SF_RETURN_IF_ERROR(Divisible("model.num_heads", model.num_heads(),
                               "parallel.tensor_size", tensor_size));
  if (IsHybrid(model)) SF_RETURN_IF_ERROR(ValidateAttention(model, tensor_size));
  return Status::Ok();
}

Status ValidateCluster(const pb::ClusterSpec& cluster) {
  const pb::DeviceSpec& d = cluster.device();
  SF_RETURN_IF_ERROR(Positive("cluster.device.peak_flops", d.peak_flops()));
  SF_RETURN_IF_ERROR(Positive("cluster.device.memory_bandwidth_bytes_per_s",
                              d.memory_bandwidth_bytes_per_s()));
  SF_RETURN_IF_ERROR(Positive("cluster.device.memory_capacity_bytes",
                              d.memory_capacity_bytes()));
  SF_RETURN_IF_ERROR(ValidateEfficiency(d));
  SF_RETURN_IF_ERROR(
      ValidateLink("cluster.pipeline_link", cluster.pipeline_link()));
  SF_RETURN_IF_ERROR(
      ValidateLink("cluster.intra_node_link", cluster.intra_node_link()));
  SF_RETURN_IF_ERROR(
      ValidateLink("cluster.inter_node_link", cluster.inter_node_link()));
  return Positive("cluster.devices_per_node", cluster.devices_per_node());
}

bool IsAttentionBlock(const pb::ModelSpec& model, int block) {
  if (!IsHybrid(model)) return false;
  const int period = static_cast<int>(model.hybrid_period()) + 1;
  return (block + 1) % period == 0;
}

std::vector<LayerKind> LayerList(const pb::ModelSpec& model) {
  const int blocks = static_cast<int>(model.num_layers());
  std::vector<LayerKind> layers;
  layers.reserve(blocks + 2);
  layers.push_back(LayerKind::kEmbedding);
  for (int j = 0; j < blocks; ++j) {
    layers.push_back(IsAttentionBlock(model, j) ? LayerKind::kAttention
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
    case LayerKind::kHead:  // final RMSNorm + output layer (if untied)
      return h + (model.untied_embeddings() ? vocab * h : 0.0);
    case LayerKind::kRecurrence:
      return MixerParamCount(model, kind) + MlpAndNormsParamCount(model);
    case LayerKind::kAttention:
      return MixerParamCount(model, kind) + MlpAndNormsParamCount(model);
  }
  return 0;
}

double ModelParamCount(const pb::ModelSpec& model) {
  double total = 0;
  for (LayerKind kind : LayerList(model)) total += LayerParamCount(model, kind);
  return total;
}

}  // namespace stateflow::models

#include "sim/cost_table.h"

#include <algorithm>
#include <cmath>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

namespace stateflow::sim {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

bool Known(std::string_view v, std::initializer_list<std::string_view> allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

Status CheckSample(const pb::CostSample& s, const std::string& where) {
  if (!Known(s.layer_kind(), {"embedding", "recurrence", "attention", "head"})) {
    return Status::Invalid(where + ".layer_kind: unknown '" + s.layer_kind() +
                           "' (known: embedding, recurrence, attention, head)");
  }
  if (!Known(s.pass(), {"forward", "backward"})) {
    return Status::Invalid(where + ".pass: unknown '" + s.pass() + "' (known: forward, backward)");
  }
  if (!Known(s.recompute(), {"none", "full"})) {
    return Status::Invalid(where + ".recompute: unknown '" + s.recompute() +
                           "' (known: none, full)");
  }
  if (!(s.tokens() >= 1) || !std::isfinite(s.tokens())) {
    return Status::Invalid(where + ".tokens must be >= 1 (got " + Num(s.tokens()) + ")");
  }
  if (!(s.prefix() >= 0) || !std::isfinite(s.prefix())) {
    return Status::Invalid(where + ".prefix must be >= 0 (got " + Num(s.prefix()) + ")");
  }
  if (!(s.median_s() >= 0) || !std::isfinite(s.median_s())) {
    return Status::Invalid(where + ".median_s is negative or not finite (" + Num(s.median_s()) +
                           ")");
  }
  return Status::Ok();
}

}  // namespace

std::string_view CostKindName(models::LayerKind kind) {
  switch (kind) {
    case models::LayerKind::kEmbedding: return "embedding";
    case models::LayerKind::kRecurrence: return "recurrence";
    case models::LayerKind::kAttention: return "attention";
    case models::LayerKind::kHead: return "head";
  }
  return "?";
}

Result<CostTableIndex> CostTableIndex::Make(const pb::CostTable& table,
                                            std::string_view source) {
  CostTableIndex index;
  index.source_ = std::string(source);
  const std::string src = index.source_ + ": ";
  for (int k = 0; k < table.samples_size(); ++k) {
    const pb::CostSample& s = table.samples(k);
    SF_RETURN_IF_ERROR(CheckSample(s, "samples[" + std::to_string(k) + "]").WithPrefix(index.source_));
    Curve& curve = index.curves_[{s.layer_kind(), s.pass(), s.recompute()}][s.prefix()];
    for (const auto& [tokens, seconds] : curve) {
      if (tokens == s.tokens()) {
        return Status::Invalid(src + "samples[" + std::to_string(k) + "] repeats " +
                               s.layer_kind() + " " + s.pass() + " at " + Num(s.tokens()) +
                               " tokens");
      }
    }
    curve.emplace_back(s.tokens(), s.median_s());
  }
  for (auto& [key, by_prefix] : index.curves_) {
    for (auto& [prefix, curve] : by_prefix) std::sort(curve.begin(), curve.end());
  }
  const pb::LinkSpec& link = table.link();
  if (!(link.latency_s() >= 0) || !std::isfinite(link.latency_s())) {
    return Status::Invalid(src + "link.latency_s must be >= 0");
  }
  if (!(link.bandwidth_bytes_per_s() > 0)) {
    return Status::Invalid(src + "link.bandwidth_bytes_per_s must be > 0");
  }
  if (!(table.optimizer_s_per_param() >= 0) || !std::isfinite(table.optimizer_s_per_param())) {
    return Status::Invalid(src + "optimizer_s_per_param must be >= 0");
  }
  index.link_ = link;
  index.optimizer_s_per_param_ = table.optimizer_s_per_param();
  return index;
}

Result<double> CostTableIndex::Time(models::LayerKind kind, std::string_view pass,
                                    models::Recompute recompute, double tokens,
                                    double prefix) const {
  const std::string kind_name(CostKindName(kind));
  const std::string mode(models::RecomputeName(recompute));
  // Only softmax attention depends on the prefix.
  if (kind != models::LayerKind::kAttention) prefix = 0;
  auto it = curves_.find({kind_name, std::string(pass), mode});
  if (it == curves_.end()) {
    return Status::Invalid(source_ + ": no " + kind_name + " " + std::string(pass) +
                           " samples measured with recompute " + mode);
  }
  auto curve_it = it->second.find(prefix);
  if (curve_it == it->second.end()) {
    return Status::Invalid(source_ + ": no " + kind_name + " " + std::string(pass) +
                           " samples at prefix " + Num(prefix));
  }
  const Curve& curve = curve_it->second;
  if (tokens < curve.front().first || tokens > curve.back().first) {
    return Status::Invalid(source_ + ": " + kind_name + " " + std::string(pass) + " at " +
                           Num(tokens) + " tokens is outside the measured range [" +
                           Num(curve.front().first) + ", " + Num(curve.back().first) +
                           "] (recompute " + mode + ")");
  }
  auto hi = std::lower_bound(curve.begin(), curve.end(), std::make_pair(tokens, -1.0));
  if (hi->first == tokens) return hi->second;
  auto lo = hi - 1;
  const double w = (tokens - lo->first) / (hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

Status CheckCostTableModel(const pb::CostTable& table, const pb::ModelSpec& model,
                           std::string_view source) {
  namespace gp = google::protobuf;
  const gp::Descriptor* d = pb::ModelSpec::descriptor();
  for (int f = 0; f < d->field_count(); ++f) {
    const gp::FieldDescriptor* field = d->field(f);
    if (field->name() == "name" || field->is_repeated()) continue;
    std::string table_value, model_value;
    gp::TextFormat::PrintFieldValueToString(table.model(), field, -1, &table_value);
    gp::TextFormat::PrintFieldValueToString(model, field, -1, &model_value);
    if (table_value != model_value) {
      return Status::Invalid(std::string(source) + ": measured on a different model: model." +
                             field->name() + " is " + table_value + " in the cost table but " +
                             model_value + " in the scenario");
    }
  }
  return Status::Ok();
}

}  // namespace stateflow::sim

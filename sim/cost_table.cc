#include "common/text.h"
#include "sim/cost_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include "common/quantile.h"

namespace stateflow::sim {
namespace {

bool Known(std::string_view v, std::initializer_list<std::string_view> allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

Status CheckSample(const pb::CostSample& s, const std::string& where) {
  if (!Known(s.layer_kind(), {"embedding", "recurrence", "attention", "head"})) {
    return Status::Invalid(where + ".layer_kind: unknown '" + s.layer_kind() +
                           "' (known: embedding, recurrence, attention, head)");
  }
  if (!Known(s.pass(), {"forward", "backward", "input", "weight"})) {
    return Status::Invalid(where + ".pass: unknown '" + s.pass() +
                           "' (known: forward, backward, input, weight)");
  }
  if (!Known(s.recompute(), {"none", "full"})) {
    return Status::Invalid(where + ".recompute: unknown '" + s.recompute() +
                           "' (known: none, full)");
  }
  if (!(s.tokens() >= 1) || !std::isfinite(s.tokens())) {
    return Status::Invalid(where + ".tokens must be >= 1 (got " + FormatG(s.tokens()) + ")");
  }
  if (!(s.prefix() >= 0) || !std::isfinite(s.prefix())) {
    return Status::Invalid(where + ".prefix must be >= 0 (got " + FormatG(s.prefix()) + ")");
  }
  if (!(s.median_s() >= 0) || !std::isfinite(s.median_s())) {
    return Status::Invalid(where + ".median_s is negative or not finite (" + FormatG(s.median_s()) +
                           ")");
  }
  const std::pair<const char*, double> phases[] = {
      {"pre_s", s.pre_s()}, {"st_s", s.st_s()}, {"out_s", s.out_s()}};
  for (const auto& [name, value] : phases) {
    if (!(value >= 0) || !std::isfinite(value)) {
      return Status::Invalid(where + "." + name + " is negative or not finite (" + FormatG(value) +
                             ")");
    }
    if (value > 0 && s.layer_kind() != "recurrence") {
      return Status::Invalid(where + "." + name + " is set on a " + s.layer_kind() +
                             " sample (core phases belong to recurrence samples only)");
    }
  }
  return Status::Ok();
}

double Combine(const std::vector<double>& values, MergeStatistic statistic) {
  switch (statistic) {
    case MergeStatistic::kMeanOverConcurrentProcesses: {
      double sum = 0;
      for (double v : values) sum += v;
      return sum / static_cast<double>(values.size());
    }
    case MergeStatistic::kMedianOverRounds:
      return Quantile(values, 0.5);
  }
  return 0;
}

// The samples of one key from every table that measured it, as one.
pb::CostSample MergeSamples(const std::vector<const pb::CostSample*>& samples,
                            MergeStatistic statistic, double* spread) {
  pb::CostSample merged = *samples.front();
  std::vector<double> medians, pre, st, out;
  std::uint32_t repetitions = 0;
  for (const pb::CostSample* s : samples) {
    medians.push_back(s->median_s());
    pre.push_back(s->pre_s());
    st.push_back(s->st_s());
    out.push_back(s->out_s());
    merged.set_p10_s(std::min(merged.p10_s(), s->p10_s()));
    merged.set_p90_s(std::max(merged.p90_s(), s->p90_s()));
    repetitions += s->repetitions();
  }
  const auto [lo, hi] = std::minmax_element(medians.begin(), medians.end());
  if (*lo > 0) *spread = std::max(*spread, *hi / *lo - 1);
  merged.set_median_s(Combine(medians, statistic));
  merged.set_pre_s(Combine(pre, statistic));  // the core's phases alike
  merged.set_st_s(Combine(st, statistic));
  merged.set_out_s(Combine(out, statistic));
  merged.set_repetitions(repetitions);
  return merged;
}

}  // namespace

std::string CostSampleKey(const pb::CostSample& s) {
  return s.layer_kind() + "/" + s.pass() + "/" + s.recompute() + "/" +
         std::to_string(static_cast<long long>(s.tokens())) + "/" +
         std::to_string(static_cast<long long>(s.prefix()));
}

pb::CostTable MergeCostTables(const std::vector<pb::CostTable>& tables, MergeStatistic statistic,
                              double* spread) {
  double own_spread = 0;
  if (spread == nullptr) spread = &own_spread;
  *spread = 0;
  pb::CostTable merged = tables.front();
  merged.clear_samples();
  std::vector<double> optimizer;
  std::map<std::string, std::vector<const pb::CostSample*>> by_key;
  std::vector<std::string> order;
  for (const pb::CostTable& t : tables) {
    optimizer.push_back(t.optimizer_s_per_param());
    for (const pb::CostSample& s : t.samples()) {
      std::vector<const pb::CostSample*>& list = by_key[CostSampleKey(s)];
      if (list.empty()) order.push_back(CostSampleKey(s));
      list.push_back(&s);
    }
  }
  merged.set_optimizer_s_per_param(Combine(optimizer, statistic));
  for (const std::string& key : order) {
    *merged.add_samples() = MergeSamples(by_key[key], statistic, spread);
  }
  return merged;
}

void SortCostSamples(pb::CostTable* table) {
  const auto key = [](const pb::CostSample& s) {
    return std::make_tuple(s.layer_kind(), s.recompute(), s.pass(), s.tokens(), s.prefix());
  };
  std::sort(table->mutable_samples()->begin(), table->mutable_samples()->end(),
            [&key](const pb::CostSample& x, const pb::CostSample& y) { return key(x) < key(y); });
}

std::string CostTableText(const pb::CostTable& table) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(table, &text);
  return "# A CostTable (proto/stateflow.proto) measured by `stateflow profile`;\n"
         "# replay it with `stateflow simulate --costs <this file>`.\n" +
         text;
}

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
    for (const Point& p : curve) {
      if (p.tokens == s.tokens()) {
        return Status::Invalid(src + "samples[" + std::to_string(k) + "] repeats " +
                               s.layer_kind() + " " + s.pass() + " at " + FormatG(s.tokens()) +
                               " tokens");
      }
    }
    const bool phases = s.pre_s() > 0 || s.st_s() > 0 || s.out_s() > 0;
    curve.push_back({s.tokens(), s.median_s(), {s.pre_s(), s.st_s(), s.out_s(), phases}});
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
  if (table.has_tensor_link()) {
    const pb::LinkSpec& tp = table.tensor_link();
    if (!(tp.latency_s() >= 0) || !std::isfinite(tp.latency_s())) {
      return Status::Invalid(src + "tensor_link.latency_s must be >= 0");
    }
    if (!(tp.bandwidth_bytes_per_s() > 0) || !std::isfinite(tp.bandwidth_bytes_per_s())) {
      return Status::Invalid(src + "tensor_link.bandwidth_bytes_per_s must be > 0");
    }
    index.tensor_link_ = tp;
    index.has_tensor_link_ = true;
  }
  index.optimizer_s_per_param_ = table.optimizer_s_per_param();
  index.tensor_size_ = static_cast<int>(std::max(1u, table.tensor_size()));
  index.st_overlap_ = table.st_overlap();
  index.st_tile_ = static_cast<int>(table.st_tile());
  return index;
}

Result<CostTableIndex::Bracket> CostTableIndex::Find(models::LayerKind kind,
                                                     std::string_view pass,
                                                     models::Recompute recompute,
                                                     double tokens, double prefix) const {
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
                           " samples at prefix " + FormatG(prefix));
  }
  const Curve& curve = curve_it->second;
  if (tokens < curve.front().tokens || tokens > curve.back().tokens) {
    return Status::Invalid(source_ + ": " + kind_name + " " + std::string(pass) + " at " +
                           FormatG(tokens) + " tokens is outside the measured range [" +
                           FormatG(curve.front().tokens) + ", " + FormatG(curve.back().tokens) +
                           "] (recompute " + mode + ")");
  }
  Point key;
  key.tokens = tokens;
  auto hi = std::lower_bound(curve.begin(), curve.end(), key);
  if (hi->tokens == tokens) return Bracket{&*hi, &*hi, 0.0};
  auto lo = hi - 1;
  return Bracket{&*lo, &*hi, (tokens - lo->tokens) / (hi->tokens - lo->tokens)};
}

Result<double> CostTableIndex::Time(models::LayerKind kind, std::string_view pass,
                                    models::Recompute recompute, double tokens,
                                    double prefix) const {
  SF_ASSIGN_OR_RETURN(const Bracket b, Find(kind, pass, recompute, tokens, prefix));
  if (b.lo == b.hi) return b.lo->seconds;
  return b.lo->seconds + b.w * (b.hi->seconds - b.lo->seconds);
}

Result<CorePhases> CostTableIndex::Phases(std::string_view pass, models::Recompute recompute,
                                          double tokens) const {
  SF_ASSIGN_OR_RETURN(const Bracket b,
                      Find(models::LayerKind::kRecurrence, pass, recompute, tokens, 0));
  const CorePhases &lo = b.lo->phases, &hi = b.hi->phases;
  if (!lo.measured || !hi.measured) return CorePhases{};
  if (b.lo == b.hi) return lo;
  auto lerp = [&b](double x, double y) { return x + b.w * (y - x); };
  return CorePhases{lerp(lo.pre_s, hi.pre_s), lerp(lo.st_s, hi.st_s), lerp(lo.out_s, hi.out_s),
                    true};
}

Status CheckCostTableModel(const pb::CostTable& table, const pb::ModelSpec& model,
                           std::string_view source, int microbatch_size) {
  const std::uint32_t measured = std::max(1u, table.microbatch_size());
  if (measured != static_cast<std::uint32_t>(microbatch_size)) {
    return Status::Invalid(std::string(source) + ": measured at microbatch_size " +
                           std::to_string(measured) + ", the scenario's is " +
                           std::to_string(microbatch_size) +
                           " (profile with the scenario's parallel.microbatch_size)");
  }
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

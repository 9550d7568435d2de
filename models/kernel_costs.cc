// KernelRates: lookups and log-space interpolation over a KernelCosts table.
#include "models/kernel_costs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/family.h"

namespace stateflow::models {
namespace {

// The recurrence kernels a table may measure: every family's core
// (Family::kernel_name), and Mamba-2's chunk kernel, which no family reads
// (a table may carry it for comparison).
constexpr std::string_view kTableOnlyKernels[] = {"mamba2"};

bool IsRecurrenceKernel(std::string_view name) {
  for (const Family* f : Families()) {
    if (f->kernel_name() == name) return true;
  }
  for (std::string_view k : kTableOnlyKernels) {
    if (k == name) return true;
  }
  return false;
}

// In alphabetical order: "gdn, kda, mamba2, mamba3".
std::string RecurrenceKernelNames() {
  std::vector<std::string> all;
  for (const Family* f : Families()) all.emplace_back(f->kernel_name());
  for (std::string_view k : kTableOnlyKernels) all.emplace_back(k);
  std::sort(all.begin(), all.end());
  std::string names;
  for (const std::string& k : all) names += (names.empty() ? "" : ", ") + k;
  return names;
}


constexpr char kField[] = "cluster.kernel_costs.";

Status Positive(const std::string& field, double v) {
  if (!(v > 0) || !std::isfinite(v)) {
    return Status::Invalid(field + " must be > 0 and finite (got " + std::to_string(v) + ")");
  }
  return Status::Ok();
}

Status AtLeastOne(const std::string& field, double v) {
  if (!(v >= 1) || !std::isfinite(v)) {
    return Status::Invalid(field + " must be >= 1 (got " + std::to_string(v) + ")");
  }
  return Status::Ok();
}

Status CheckSource(const std::string& field, std::uint32_t source, const pb::KernelCosts& c) {
  if (source >= static_cast<std::uint32_t>(c.sources_size())) {
    return Status::Invalid(field + ".source: " + std::to_string(source) +
                           " names no entry of cluster.kernel_costs.sources (" +
                           std::to_string(c.sources_size()) + " given)");
  }
  return Status::Ok();
}

Status CheckPass(const std::string& field, const std::string& pass) {
  if (pass != "forward" && pass != "backward" && pass != "forward+backward") {
    return Status::Invalid(field + ".pass: unknown '" + pass +
                           "' (known: forward, backward, forward+backward)");
  }
  return Status::Ok();
}

// The dtype class of activations of `act_bytes` bytes (2, 4 or 8).
int ActClass(double act_bytes) { return act_bytes <= 2 ? 2 : act_bytes <= 4 ? 4 : 8; }

int DtypeClass(const std::string& dtype) {
  if (dtype == "fp16" || dtype == "bf16") return 2;
  if (dtype == "fp32" || dtype == "tf32") return 4;
  if (dtype == "fp64") return 8;
  return 0;
}

// (x, rate) points sorted by x; equal x values averaged in log.
std::vector<std::pair<double, double>> Sorted(std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end());
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < points.size();) {
    std::size_t j = i;
    double log_sum = 0;
    while (j < points.size() && points[j].first == points[i].first) log_sum += std::log(points[j++].second);
    out.push_back({points[i].first, j - i == 1 ? points[i].second : std::exp(log_sum / (j - i))});
    i = j;
  }
  return out;
}

}  // namespace

double LogLogInterpolate(const std::vector<std::pair<double, double>>& points, double x) {
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  std::size_t i = 1;
  while (points[i].first < x) ++i;
  if (points[i].first == x) return points[i].second;
  const auto& [x0, y0] = points[i - 1];
  const auto& [x1, y1] = points[i];
  const double u = std::log(x / x0) / std::log(x1 / x0);
  return std::exp(std::log(y0) + u * (std::log(y1) - std::log(y0)));
}

Status ValidateKernelCosts(const pb::KernelCosts& c) {
  for (int i = 0; i < c.gemm_size(); ++i) {
    const pb::GemmPoint& p = c.gemm(i);
    const std::string f = std::string(kField) + "gemm[" + std::to_string(i) + "]";
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".m", p.m()));
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".n", p.n()));
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".k", p.k()));
    SF_RETURN_IF_ERROR(Positive(f + ".flops_per_s", p.flops_per_s()));
    if (DtypeClass(p.dtype()) == 0) {
      return Status::Invalid(f + ".dtype: unknown '" + p.dtype() + "' (known: fp16, bf16, fp32, tf32, fp64)");
    }
    SF_RETURN_IF_ERROR(CheckSource(f, p.source(), c));
  }
  for (int i = 0; i < c.attention_size(); ++i) {
    const pb::AttentionPoint& p = c.attention(i);
    const std::string f = std::string(kField) + "attention[" + std::to_string(i) + "]";
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".seq_len", p.seq_len()));
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".head_dim", p.head_dim()));
    SF_RETURN_IF_ERROR(CheckPass(f, p.pass()));
    SF_RETURN_IF_ERROR(Positive(f + ".flops_per_s", p.flops_per_s()));
    if (!p.dtype().empty() && DtypeClass(p.dtype()) == 0) {
      return Status::Invalid(f + ".dtype: unknown '" + p.dtype() +
                             "' (known: fp16, bf16, fp32, tf32, fp64, or none for every dtype)");
    }
    SF_RETURN_IF_ERROR(CheckSource(f, p.source(), c));
  }
  for (int i = 0; i < c.recurrence_size(); ++i) {
    const pb::RecurrencePoint& p = c.recurrence(i);
    const std::string f = std::string(kField) + "recurrence[" + std::to_string(i) + "]";
    if (!IsRecurrenceKernel(p.kernel())) {
      return Status::Invalid(f + ".kernel: unknown '" + p.kernel() + "' (known: " +
                             RecurrenceKernelNames() + ")");
    }
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".seq_len", p.seq_len()));
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".head_dim", p.head_dim()));
    SF_RETURN_IF_ERROR(CheckPass(f, p.pass()));
    SF_RETURN_IF_ERROR(Positive(f + ".flops_per_s", p.flops_per_s()));
    if (!p.dtype().empty() && DtypeClass(p.dtype()) == 0) {
      return Status::Invalid(f + ".dtype: unknown '" + p.dtype() +
                             "' (known: fp16, bf16, fp32, tf32, fp64, or none for every dtype)");
    }
    SF_RETURN_IF_ERROR(CheckSource(f, p.source(), c));
  }
  for (int i = 0; i < c.all_reduce_size(); ++i) {
    const pb::CollectivePoint& p = c.all_reduce(i);
    const std::string f = std::string(kField) + "all_reduce[" + std::to_string(i) + "]";
    if (p.ranks() < 2) {
      return Status::Invalid(f + ".ranks must be >= 2 (got " + std::to_string(p.ranks()) + ")");
    }
    SF_RETURN_IF_ERROR(AtLeastOne(f + ".bytes", p.bytes()));
    SF_RETURN_IF_ERROR(Positive(f + ".bus_bandwidth_bytes_per_s", p.bus_bandwidth_bytes_per_s()));
    SF_RETURN_IF_ERROR(CheckSource(f, p.source(), c));
  }
  return Status::Ok();
}

KernelRates::KernelRates(const pb::KernelCosts& costs) {
  for (const pb::GemmPoint& p : costs.gemm()) {
    gemm_.push_back({std::log(p.m()), std::log(p.n()), std::log(p.k()), std::log(p.flops_per_s()),
                     DtypeClass(p.dtype()), p.flops_per_s()});
  }
  for (const pb::AttentionPoint& p : costs.attention()) {
    seq_points_.push_back({"", p.seq_len(), static_cast<double>(p.head_dim()), p.causal(), p.pass(),
                           p.flops_per_s(), p.dtype().empty() ? 0 : DtypeClass(p.dtype())});
  }
  for (const pb::RecurrencePoint& p : costs.recurrence()) {
    seq_points_.push_back({p.kernel(), p.seq_len(), static_cast<double>(p.head_dim()), true,
                           p.pass(), p.flops_per_s(), p.dtype().empty() ? 0 : DtypeClass(p.dtype())});
  }
  std::map<int, std::vector<std::pair<double, double>>> by_ranks;
  for (const pb::CollectivePoint& p : costs.all_reduce()) {
    by_ranks[static_cast<int>(p.ranks())].push_back({p.bytes(), p.bus_bandwidth_bytes_per_s()});
  }
  for (auto& [ranks, points] : by_ranks) all_reduce_.push_back({ranks, Sorted(std::move(points))});
}

std::optional<double> KernelRates::Gemm(double m, double n, double k, double act_bytes) const {
  const int cls = ActClass(act_bytes);
  const double lm = std::log(m), ln = std::log(n), lk = std::log(k);
  double weight_sum = 0, log_sum = 0;
  for (const GemmLog& p : gemm_) {
    if (p.dtype_class != cls) continue;
    const double dm = lm - p.log_m, dn = ln - p.log_n, dk = lk - p.log_k;
    const double d2 = dm * dm + dn * dn + dk * dk;
    if (d2 == 0) return p.rate;
    weight_sum += 1 / d2;
    log_sum += p.log_rate / d2;
  }
  if (weight_sum == 0) return std::nullopt;
  return std::exp(log_sum / weight_sum);
}

// The points of `kernel` ("" attention) with the nearest head dim (in log),
// causal ones if any, of the pass, else of "forward+backward";
// interpolated in seq_len.
std::optional<double> KernelRates::SeqRate(std::string_view kernel, double seq_len,
                                           double head_dim, bool backward,
                                           double act_bytes) const {
  const Curve curve = SeqCurve(kernel, head_dim, backward, act_bytes);
  if (curve.empty()) return std::nullopt;
  return LogLogInterpolate(curve, seq_len);
}

KernelRates::Curve KernelRates::SeqCurve(std::string_view kernel, double head_dim,
                                         bool backward, double act_bytes) const {
  const auto usable = [&](const SeqPoint& p) {
    return p.kernel == kernel &&
           (p.dtype_class == 0 || act_bytes == 0 || p.dtype_class == ActClass(act_bytes));
  };
  double best_dist = std::numeric_limits<double>::infinity();
  for (const SeqPoint& p : seq_points_) {
    if (usable(p)) best_dist = std::min(best_dist, std::abs(std::log(p.head_dim / head_dim)));
  }
  if (!std::isfinite(best_dist)) return {};
  const auto in_dim = [&](const SeqPoint& p) {
    return usable(p) && std::abs(std::log(p.head_dim / head_dim)) == best_dist;
  };
  bool any_causal = false;
  for (const SeqPoint& p : seq_points_) any_causal |= in_dim(p) && p.causal;
  for (const char* pass : {backward ? "backward" : "forward", "forward+backward"}) {
    std::vector<std::pair<double, double>> points;
    for (const SeqPoint& p : seq_points_) {
      if (in_dim(p) && p.causal == any_causal && p.pass == pass) points.push_back({p.seq_len, p.rate});
    }
    if (!points.empty()) return Sorted(std::move(points));
  }
  return {};
}

std::optional<double> KernelRates::Attention(double seq_len, double head_dim, bool backward,
                                             double act_bytes) const {
  return SeqRate("", seq_len, head_dim, backward, act_bytes);
}

std::optional<double> KernelRates::Recurrence(std::string_view kernel, double seq_len,
                                              double head_dim, bool backward,
                                              double act_bytes) const {
  return SeqRate(kernel, seq_len, head_dim, backward, act_bytes);
}

std::optional<double> KernelRates::AllReduceBusBandwidth(double bytes, int ranks) const {
  if (all_reduce_.empty()) return std::nullopt;
  const std::vector<std::pair<double, double>>* best = nullptr;
  double best_dist = std::numeric_limits<double>::infinity();
  for (const auto& [r, points] : all_reduce_) {
    const double d = std::abs(std::log(static_cast<double>(r) / ranks));
    if (d < best_dist) {
      best_dist = d;
      best = &points;
    }
  }
  return LogLogInterpolate(*best, std::max(bytes, 1.0));
}

}  // namespace stateflow::models

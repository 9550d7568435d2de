// Calibration: CSV parsing, the parameters <-> cluster mapping, and the
// Levenberg-Marquardt fit in log space. Method: docs/cost-model.md,
// "Calibration".
#include "sim/calibrate.h"

#include <google/protobuf/text_format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>

#include "common/text.h"
#include "models/limits.h"
#include "models/model.h"
#include "schedule/policies.h"
#include "sim/simulation.h"

namespace stateflow::sim {
namespace {

constexpr std::array<std::string_view, kNumCalibParams> kParamNames = {
    "efficiency.peak",
    "efficiency.knee_tokens",
    "device.memory_bandwidth_bytes_per_s",
    "pipeline_link.bandwidth_bytes_per_s",
    "pipeline_link.latency_s",
    "intra_node_link.bandwidth_bytes_per_s",
    "intra_node_link.latency_s",
    "inter_node_link.bandwidth_bytes_per_s",
    "inter_node_link.latency_s",
    "kernel_costs.compute_scale",
    "kernel_costs.all_reduce_scale",
    "device.action_overhead_s",
};

constexpr int kCurvePoints = 31;     // 2^0 .. 2^30 tokens
// A direction of the log-Jacobian whose singular value is below this share
// of the largest is one the runs do not determine (its parameter is held).
constexpr double kMinRelativeSingular = 1e-3;
// Leave-one-out refits the runs this many times at most (one per fitted run).
constexpr std::size_t kMaxLooRuns = 50;
// A parameter on a bound is implausible when the runs pull it past the bound
// by more than this many standard errors (a Gauss-Newton step from the fit,
// bounds ignored); within it, the runs barely see it.
constexpr double kBoundSignificance = 2;
// Residuals all of one sign beyond this relative error make a fit implausible.
constexpr double kOneSignThreshold = 0.02;
constexpr double kMinLatencyS = 1e-9;

int Index(CalibParam p) { return static_cast<int>(p); }

std::string Fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

// A byte count in a message: its integer digits, or, beyond what a 64-bit
// integer holds (a CSV may give 1e308), as %g writes it.
std::string ByteText(double bytes) {
  if (std::isfinite(bytes) && std::fabs(bytes) < 9e18) {
    return std::to_string(static_cast<long long>(bytes));
  }
  return FormatG(bytes);
}

using CalibRanges = std::array<std::pair<double, double>, kNumCalibParams>;

// Each parameter's physical range (the fit clamps its steps into it), from
// the starting cluster's values taken as the datasheet's figures; the
// sources are in docs/cost-model.md, "Calibration", and sim/calibrate.h.
CalibRanges PhysicalRanges(const CalibValues& start) {
  CalibRanges r{};
  auto at = [&r](CalibParam p) -> std::pair<double, double>& { return r[Index(p)]; };
  at(CalibParam::kEfficiencyPeak) = {kMinEfficiency, 1.0};
  // Below 0.01 tokens the curve is flat at every chunk a run can have.
  at(CalibParam::kEfficiencyKnee) = {1e-2, 0x1p40};
  const double memory = start[Index(CalibParam::kMemoryBandwidth)];
  at(CalibParam::kMemoryBandwidth) = {memory / kMemoryFloorFactor,
                                      memory * kBandwidthCeilingFactor};
  for (CalibParam bw : {CalibParam::kPipelineBandwidth, CalibParam::kIntraBandwidth,
                        CalibParam::kInterBandwidth}) {
    at(bw) = {start[Index(bw)] / kLinkFloorFactor, start[Index(bw)] * kBandwidthCeilingFactor};
  }
  for (CalibParam lat : {CalibParam::kPipelineLatency, CalibParam::kIntraLatency,
                         CalibParam::kInterLatency}) {
    at(lat) = {kMinLinkLatencyS, kMaxLinkLatencyS};
  }
  at(CalibParam::kKernelComputeScale) = {kMinKernelScale, kMaxKernelScale};
  at(CalibParam::kKernelAllReduceScale) = {kMinKernelScale, kMaxKernelScale};
  at(CalibParam::kActionOverhead) = {1e-9, kMaxActionOverheadS};
  return r;
}

// ------------------------------------------------------------------ CSV ----

enum class Column {
  kName, kPolicy, kP, kM, kN, kT, kAlpha, kB, kTp, kDp, kRecompute, kSystem,
  kStepTime, kPeak, kUsed, kSet
};
constexpr std::array<std::pair<std::string_view, Column>, 16> kColumns = {{
    {"name", Column::kName}, {"policy", Column::kPolicy}, {"P", Column::kP},
    {"M", Column::kM}, {"N", Column::kN}, {"T", Column::kT}, {"alpha", Column::kAlpha},
    {"B", Column::kB}, {"tp", Column::kTp}, {"dp", Column::kDp},
    {"recompute", Column::kRecompute}, {"system", Column::kSystem},
    {"step_time_s", Column::kStepTime}, {"peak_bytes", Column::kPeak},
    {"used_bytes", Column::kUsed}, {"set", Column::kSet},
}};

std::string KnownColumns() {
  std::string out;
  for (const auto& [name, column] : kColumns) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

std::string TrimCell(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> SplitCells(std::string_view line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    cells.push_back(TrimCell(line.substr(start, comma == std::string_view::npos
                                                    ? std::string_view::npos
                                                    : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

// "<source>:<line>:<column>: <name>: <message>".
Status CellError(std::string_view source, int line, int column, std::string_view name,
                 const std::string& message) {
  return Status::Invalid(Printable(source) + ":" + std::to_string(line) + ":" +
                         std::to_string(column) + ": " + std::string(name) + ": " + message);
}

Result<long long> ParseInt(const std::string& cell, const models::IntRange& range) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(cell.c_str(), &end, 10);
  if (end == cell.c_str() || *end != '\0' || errno != 0 || v < range.lo || v > range.hi) {
    // Appended, not "'" + std::string&&: GCC 12's -Wrestrict misreads that.
    std::string message = "'";
    message += Printable(cell);
    message += "' is not an integer in " + models::RangeText(range);
    return Status::Invalid(message);
  }
  return v;
}

// A finite number >= lo (> lo when open).
Result<double> ParseReal(const std::string& cell, double lo, bool open) {
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (end == cell.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || (open && v == lo)) {
    return Status::Invalid("'" + Printable(cell) + "' is not a number " +
                           (open ? "> " : ">= ") + std::to_string(lo).substr(0, 3));
  }
  return v;
}

// Fills one cell of `row`; the error is the cell's message without position.
Status FillCell(Column column, const std::string& cell, CalibrationRow* row) {
  auto set_int = [&](std::optional<long long>* target, const models::IntRange& range) -> Status {
    SF_ASSIGN_OR_RETURN(long long v, ParseInt(cell, range));
    *target = v;
    return Status::Ok();
  };
  switch (column) {
    case Column::kName: row->name = cell; return Status::Ok();
    case Column::kPolicy: row->policy = cell; return Status::Ok();
    case Column::kRecompute: row->recompute = cell; return Status::Ok();
    case Column::kSystem: row->system = cell; return Status::Ok();
    case Column::kP: return set_int(&row->pipeline_size, models::kPipelineSize);
    case Column::kM: return set_int(&row->microbatches, models::kMicrobatches);
    case Column::kN: return set_int(&row->chunks, models::kChunks);
    case Column::kT: return set_int(&row->seq_len, models::kSeqLen);
    case Column::kB: return set_int(&row->microbatch_size, models::kMicrobatchSize);
    case Column::kTp: return set_int(&row->tensor_size, models::kTensorSize);
    case Column::kDp: return set_int(&row->data_size, models::kDataSize);
    case Column::kAlpha: {
      SF_ASSIGN_OR_RETURN(double v, ParseReal(cell, 0, false));
      SF_RETURN_IF_ERROR(models::CheckRange("alpha", v, models::kAlpha));
      row->alpha = v;
      return Status::Ok();
    }
    case Column::kStepTime: {
      SF_ASSIGN_OR_RETURN(row->step_time_s, ParseReal(cell, 0, true));
      return Status::Ok();
    }
    case Column::kPeak: {
      SF_ASSIGN_OR_RETURN(double v, ParseReal(cell, 0, true));
      row->peak_bytes = v;
      return Status::Ok();
    }
    case Column::kUsed: {
      SF_ASSIGN_OR_RETURN(double v, ParseReal(cell, 0, true));
      row->used_bytes = v;
      return Status::Ok();
    }
    case Column::kSet:
      if (cell != "fit" && cell != "holdout") {
        return Status::Invalid("'" + Printable(cell) + "' is not fit or holdout");
      }
      row->holdout = cell == "holdout";
      return Status::Ok();
  }
  return Status::Ok();
}

// ------------------------------------------------------------ the model ----

double KneeCurve(const KneeEfficiency& k, double tokens) {
  return k.peak_efficiency * tokens / (tokens + k.knee_tokens);
}

// One evaluation: every run simulated on `cluster`.
struct Prediction {
  std::vector<double> step_time_s;
  std::vector<double> peak_bytes;
};

Result<Prediction> PredictAll(const std::vector<CalibrationRun>& runs,
                              const pb::ClusterSpec& cluster) {
  Prediction out;
  for (const CalibrationRun& run : runs) {
    pb::Scenario s = run.scenario.proto();
    s.clear_cluster_preset();
    *s.mutable_cluster() = cluster;
    SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario r, scenario::Resolve(std::move(s)));
    SF_ASSIGN_OR_RETURN(Simulation sim, Simulate(r, r.proto().schedule()));
    out.step_time_s.push_back(sim.report.step_time_s());
    out.peak_bytes.push_back(sim.report.peak_memory_bytes());
  }
  return out;
}

// The fit's state: which parameters move (in log space) and the rest fixed.
class LogFit {
 public:
  // `prior_weight` w > 0 adds a ridge toward `prior` (the starting cluster)
  // in log space: rows sqrt(w) (log p_k - log prior_k), one per free
  // parameter.
  // Each free parameter's steps stay inside `ranges` (PhysicalRanges).
  LogFit(const std::vector<CalibrationRun>& runs, std::vector<int> fitted_runs,
         pb::ClusterSpec base, CalibValues start, std::vector<int> free, CalibRanges ranges,
         double prior_weight = 0, CalibValues prior = {})
      : runs_(runs), fitted_runs_(std::move(fitted_runs)), base_(std::move(base)),
        values_(start), free_(std::move(free)), ranges_(ranges), prior_weight_(prior_weight),
        prior_(prior) {}

  // log(predicted / measured) of the fitted runs at log-parameters x (and
  // the prior's rows); an error when the cluster they make is invalid or a
  // run fails.
  Result<Eigen::VectorXd> Residuals(const Eigen::VectorXd& x) const {
    SF_ASSIGN_OR_RETURN(Prediction p, PredictAll(Subset(), ClusterAt(x)));
    const std::size_t n = fitted_runs_.size();
    const std::size_t rows = n + (prior_weight_ > 0 ? free_.size() : 0);
    Eigen::VectorXd r(static_cast<Eigen::Index>(rows));
    for (std::size_t i = 0; i < n; ++i) {
      r[i] = std::log(p.step_time_s[i] / runs_[fitted_runs_[i]].row.step_time_s);
    }
    for (std::size_t k = 0; n + k < rows; ++k) {
      // A parameter with no prior value (0: a term the cluster did not have,
      // started at a seed) has none.
      const double center = prior_[free_[k]];
      r[n + k] = center > 0 ? std::sqrt(prior_weight_) * (x[k] - std::log(center)) : 0.0;
    }
    return r;
  }

  // Central differences, step h in log space.
  Result<Eigen::MatrixXd> Jacobian(const Eigen::VectorXd& x, double h) const {
    // One row per residual: the runs' and, with a prior, one per parameter.
    const std::size_t rows = fitted_runs_.size() + (prior_weight_ > 0 ? free_.size() : 0);
    Eigen::MatrixXd j(static_cast<Eigen::Index>(rows), x.size());
    for (int c = 0; c < x.size(); ++c) {
      Eigen::VectorXd up = x, down = x;
      up[c] += h;
      down[c] -= h;
      SF_ASSIGN_OR_RETURN(Eigen::VectorXd ru, Residuals(up));
      SF_ASSIGN_OR_RETURN(Eigen::VectorXd rd, Residuals(down));
      j.col(c) = (ru - rd) / (2 * h);
    }
    return j;
  }

  CalibValues ValuesAt(const Eigen::VectorXd& x) const {
    CalibValues v = values_;
    for (std::size_t k = 0; k < free_.size(); ++k) v[free_[k]] = std::exp(x[k]);
    return v;
  }
  pb::ClusterSpec ClusterAt(const Eigen::VectorXd& x) const {
    return WithCalibValues(base_, ValuesAt(x));
  }
  // x with every coordinate clamped into its parameter's range (log).
  Eigen::VectorXd Clamp(Eigen::VectorXd x) const {
    for (std::size_t k = 0; k < free_.size(); ++k) {
      const auto [lo, hi] = ranges_[free_[k]];
      x[k] = std::clamp(x[k], std::log(lo), std::log(hi));
    }
    return x;
  }
  // Whether free coordinate k sits on a bound of its range that the
  // descent direction -g[k] points beyond: it stays there this step.
  bool PinnedAtBound(const Eigen::VectorXd& x, const Eigen::VectorXd& g, int k) const {
    const auto [lo, hi] = ranges_[free_[static_cast<std::size_t>(k)]];
    return (x[k] >= std::log(hi) - 1e-12 && g[k] < 0) ||
           (x[k] <= std::log(lo) + 1e-12 && g[k] > 0);
  }
  // The starting values, in range.
  Eigen::VectorXd Start() const {
    Eigen::VectorXd x(free_.size());
    for (std::size_t k = 0; k < free_.size(); ++k) x[k] = std::log(values_[free_[k]]);
    return Clamp(std::move(x));
  }

 private:
  std::vector<CalibrationRun> Subset() const {
    std::vector<CalibrationRun> out;
    for (int i : fitted_runs_) out.push_back(runs_[i]);
    return out;
  }

  const std::vector<CalibrationRun>& runs_;
  std::vector<int> fitted_runs_;
  pb::ClusterSpec base_;
  CalibValues values_;
  std::vector<int> free_;
  CalibRanges ranges_;
  double prior_weight_ = 0;
  CalibValues prior_{};
};

struct LmResult {
  Eigen::VectorXd x;
  int iterations = 0;
  // The rule that ended the fit, for the report (never a silent cap).
  std::string stop;
  bool converged = false;
};

// A relative fall of the sum of squares below which the fit has converged.
// Well above rounding: the residuals are logs of simulated step times, whose
// last digits move with the build's vector width and contraction, and a
// threshold near 1e-15 made the iteration count (which `calibrate` prints)
// differ between an AVX2 and an AVX-512 build of the same source.
constexpr double kLmMinRelativeFall = 1e-10;
// The most a step may move one log-parameter (a factor of e): the step time
// is a max over paths, so a parameter can leave every critical path (a link
// so fast its transfers vanish) and a long Gauss-Newton step can take it
// onto such a plateau, where its gradient is zero and the fit never brings it
// back. Seen: the synthesised fit of calibrate_test on an AVX2 build sent the
// pipeline bandwidth to 6e10 times its truth in one step of 20 (log).
constexpr double kLmMaxLogStep = 1.0;

// Levenberg-Marquardt with Marquardt's scaling (diag(J^T J)): accept a step
// that lowers the sum of squares and divide the damping by 3, else multiply it
// by 4; a step longer than kLmMaxLogStep in any coordinate is shortened
// along its direction; stop when a step changes no log-parameter by more than 1e-10, the
// sum of squares falls by less than kLmMinRelativeFall, or after
// max_iterations.
Result<LmResult> LevenbergMarquardt(const LogFit& fit, int max_iterations) {
  LmResult out{fit.Start(), 0, "", false};
  SF_ASSIGN_OR_RETURN(Eigen::VectorXd r, fit.Residuals(out.x));
  double cost = r.squaredNorm();
  double lambda = 1e-3;
  for (; out.iterations < max_iterations && cost > 0; ++out.iterations) {
    SF_ASSIGN_OR_RETURN(Eigen::MatrixXd j, fit.Jacobian(out.x, 1e-5));
    const Eigen::MatrixXd a = j.transpose() * j;
    const Eigen::VectorXd g = j.transpose() * r;
    // The active set: a coordinate on a bound that the descent pushes
    // beyond is held there for this step (its row and column left out), so
    // the others take a full step instead of one bent by the clamp.
    std::vector<bool> pinned(static_cast<std::size_t>(a.rows()), false);
    for (int k = 0; k < a.rows(); ++k) pinned[k] = fit.PinnedAtBound(out.x, g, k);
    bool accepted = false;
    double step = 0;
    bool small_fall = false;
    while (lambda < 1e12) {
      Eigen::MatrixXd damped = a;
      Eigen::VectorXd rhs = -g;
      for (int k = 0; k < a.rows(); ++k) damped(k, k) += lambda * std::max(a(k, k), 1e-12);
      for (int k = 0; k < a.rows(); ++k) {
        if (!pinned[k]) continue;
        damped.row(k).setZero();
        damped.col(k).setZero();
        damped(k, k) = 1;
        rhs[k] = 0;
      }
      Eigen::VectorXd delta = damped.ldlt().solve(rhs);
      const double longest = delta.cwiseAbs().maxCoeff();
      if (longest > kLmMaxLogStep) delta *= kLmMaxLogStep / longest;
      const Eigen::VectorXd trial = fit.Clamp(out.x + delta);
      const Eigen::VectorXd moved = trial - out.x;
      Result<Eigen::VectorXd> tr = fit.Residuals(trial);
      if (tr.ok() && tr->allFinite() && tr->squaredNorm() < cost) {
        step = moved.cwiseAbs().maxCoeff();
        const double previous = cost;
        out.x = trial;
        r = *tr;
        cost = r.squaredNorm();
        lambda = std::max(lambda / 3, 1e-12);
        accepted = true;
        small_fall = previous - cost <= kLmMinRelativeFall * previous;
        break;
      }
      lambda *= 4;
    }
    if (!accepted) {
      out.stop = "converged: no step lowers the sum of squares (damping at its limit)";
      out.converged = true;
      return out;
    }
    if (small_fall) {
      out.stop = "converged: the sum of squares fell by less than 1e-10 of itself";
      out.converged = true;
      return out;
    }
    if (step < 1e-10) {
      out.stop = "converged: no log-parameter moved by more than 1e-10";
      out.converged = true;
      return out;
    }
  }
  if (cost == 0) {
    out.stop = "converged: the runs are fitted exactly";
    out.converged = true;
  } else {
    out.stop = "NOT converged: stopped at the iteration cap (" + std::to_string(max_iterations) +
               ") while the fit was still improving (--max-iterations raises it)";
  }
  return out;
}

double RmsLog(const std::vector<double>& predicted, const std::vector<CalibrationRun>& runs,
              bool holdout) {
  double sum = 0;
  int n = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].row.holdout != holdout) continue;
    const double e = std::log(predicted[i] / runs[i].row.step_time_s);
    sum += e * e;
    ++n;
  }
  return n == 0 ? 0 : std::sqrt(sum / n);
}

}  // namespace

std::string_view CalibParamName(CalibParam p) { return kParamNames[Index(p)]; }

Result<std::vector<CalibParam>> ParseCalibParams(std::string_view list) {
  std::vector<CalibParam> out;
  for (const std::string& name : SplitCells(list)) {
    if (name.empty()) continue;
    const auto it = std::find(kParamNames.begin(), kParamNames.end(), name);
    if (it == kParamNames.end()) {
      std::string known;
      for (std::string_view n : kParamNames) known += (known.empty() ? "" : ", ") + std::string(n);
      return Status::Invalid("--fit: unknown parameter '" + Printable(name) + "' (known: " +
                             known + "; or none alone: fit nothing)");
    }
    const auto p = static_cast<CalibParam>(it - kParamNames.begin());
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  if (out.empty()) return Status::Invalid("--fit: no parameter named");
  return out;
}

namespace {

// For a knee k, the best peak in log is the mean of log(e_i (t_i + k) / t_i);
// returns that peak and the sum of squared log errors.
std::pair<double, double> KneeCost(const pb::DeviceSpec& device, double knee) {
  const auto& points = device.efficiency();
  double mean = 0;
  for (const pb::EfficiencyPoint& p : points) {
    mean += std::log(p.efficiency() * (p.tokens() + knee) / p.tokens());
  }
  mean /= points.size();
  double cost = 0;
  for (const pb::EfficiencyPoint& p : points) {
    const double e = mean + std::log(p.tokens() / (p.tokens() + knee)) - std::log(p.efficiency());
    cost += e * e;
  }
  return {std::exp(mean), cost};
}

}  // namespace

KneeEfficiency KneeFromCurve(const pb::DeviceSpec& device) {
  if (device.efficiency().empty()) return {};
  // A flat curve (one point, or all equal): its value, knee 1 token (within
  // 1.6 % of the curve from 64 tokens per call up; the knee stays where the
  // fit can move it).
  const auto& points = device.efficiency();
  if (std::all_of(points.begin(), points.end(), [&](const pb::EfficiencyPoint& p) {
        return p.efficiency() == points[0].efficiency();
      })) {
    return {points[0].efficiency(), 1.0};
  }
  // The knee of least squares on a grid (2^-10 .. 2^40 tokens, steps of
  // 2^0.01), then refined by golden-section search within one grid step on
  // each side (a curve sampled from the form gives its knee back to ~1e-9).
  int best_step = -1000;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int step = -1000; step <= 4000; ++step) {
    const double cost = KneeCost(device, std::exp2(step / 100.0)).second;
    if (cost < best_cost - 1e-15) {
      best_cost = cost;
      best_step = step;
    }
  }
  const double golden = (std::sqrt(5.0) - 1) / 2;
  double lo = (best_step - 1) / 100.0, hi = (best_step + 1) / 100.0;  // log2 knee
  for (int i = 0; i < 80; ++i) {
    const double a = hi - golden * (hi - lo), b = lo + golden * (hi - lo);
    if (KneeCost(device, std::exp2(a)).second < KneeCost(device, std::exp2(b)).second) {
      hi = b;
    } else {
      lo = a;
    }
  }
  const double knee = std::exp2((lo + hi) / 2);
  KneeEfficiency best{KneeCost(device, knee).first, knee};
  if (best.knee_tokens < 1) best = {KneeCost(device, 1.0).first, 1.0};
  return best;
}

void SetKneeEfficiency(const KneeEfficiency& knee, pb::DeviceSpec* device) {
  KneeEfficiency shape = knee;
  if (knee.peak_efficiency > 1) {
    device->set_peak_flops(device->peak_flops() * knee.peak_efficiency);
    shape.peak_efficiency = 1;
  }
  device->clear_efficiency();
  for (int i = 0; i < kCurvePoints; ++i) {
    const double tokens = std::exp2(i);
    pb::EfficiencyPoint* p = device->add_efficiency();
    p->set_tokens(tokens);
    p->set_efficiency(std::max(KneeCurve(shape, tokens), 1e-12));
  }
}

CalibValues ReadCalibValues(const pb::ClusterSpec& c) {
  const KneeEfficiency knee = KneeFromCurve(c.device());
  CalibValues v{};
  v[Index(CalibParam::kEfficiencyPeak)] = knee.peak_efficiency;
  v[Index(CalibParam::kEfficiencyKnee)] = knee.knee_tokens;
  v[Index(CalibParam::kMemoryBandwidth)] = c.device().memory_bandwidth_bytes_per_s();
  v[Index(CalibParam::kPipelineBandwidth)] = c.pipeline_link().bandwidth_bytes_per_s();
  v[Index(CalibParam::kPipelineLatency)] = std::max(c.pipeline_link().latency_s(), kMinLatencyS);
  v[Index(CalibParam::kIntraBandwidth)] = c.intra_node_link().bandwidth_bytes_per_s();
  v[Index(CalibParam::kIntraLatency)] = std::max(c.intra_node_link().latency_s(), kMinLatencyS);
  v[Index(CalibParam::kInterBandwidth)] = c.inter_node_link().bandwidth_bytes_per_s();
  v[Index(CalibParam::kInterLatency)] = std::max(c.inter_node_link().latency_s(), kMinLatencyS);
  v[Index(CalibParam::kKernelComputeScale)] = 1;
  v[Index(CalibParam::kKernelAllReduceScale)] = 1;
  v[Index(CalibParam::kActionOverhead)] = std::max(c.device().action_overhead_s(), kMinLatencyS);
  return v;
}

pb::ClusterSpec WithCalibValues(pb::ClusterSpec c, const CalibValues& v) {
  SetKneeEfficiency({v[Index(CalibParam::kEfficiencyPeak)], v[Index(CalibParam::kEfficiencyKnee)]},
                    c.mutable_device());
  c.mutable_device()->set_memory_bandwidth_bytes_per_s(v[Index(CalibParam::kMemoryBandwidth)]);
  c.mutable_pipeline_link()->set_bandwidth_bytes_per_s(v[Index(CalibParam::kPipelineBandwidth)]);
  c.mutable_pipeline_link()->set_latency_s(v[Index(CalibParam::kPipelineLatency)]);
  c.mutable_intra_node_link()->set_bandwidth_bytes_per_s(v[Index(CalibParam::kIntraBandwidth)]);
  c.mutable_intra_node_link()->set_latency_s(v[Index(CalibParam::kIntraLatency)]);
  c.mutable_inter_node_link()->set_bandwidth_bytes_per_s(v[Index(CalibParam::kInterBandwidth)]);
  c.mutable_inter_node_link()->set_latency_s(v[Index(CalibParam::kInterLatency)]);
  // A cluster without an overhead (read as kMinLatencyS) keeps none.
  const double overhead = v[Index(CalibParam::kActionOverhead)];
  c.mutable_device()->set_action_overhead_s(overhead > kMinLatencyS ? overhead : 0.0);
  if (c.has_kernel_costs()) {
    pb::KernelCosts* k = c.mutable_kernel_costs();
    const double compute = v[Index(CalibParam::kKernelComputeScale)];
    for (pb::GemmPoint& p : *k->mutable_gemm()) p.set_flops_per_s(p.flops_per_s() * compute);
    for (pb::AttentionPoint& p : *k->mutable_attention()) p.set_flops_per_s(p.flops_per_s() * compute);
    for (pb::RecurrencePoint& p : *k->mutable_recurrence()) p.set_flops_per_s(p.flops_per_s() * compute);
    const double all_reduce = v[Index(CalibParam::kKernelAllReduceScale)];
    for (pb::CollectivePoint& p : *k->mutable_all_reduce()) {
      p.set_bus_bandwidth_bytes_per_s(p.bus_bandwidth_bytes_per_s() * all_reduce);
    }
  }
  return c;
}

Result<pb::ClusterSpec> VaryParameter(pb::ClusterSpec c, std::string_view name, double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) {
    return Status::Invalid("--vary " + Printable(name) + ": factor must be > 0");
  }
  pb::DeviceSpec* d = c.mutable_device();
  if (name == "memory_reserve") {
    d->set_memory_reserve_bytes(factor * (d->has_memory_reserve_bytes()
                                              ? d->memory_reserve_bytes()
                                              : models::kDefaultMemoryReserveBytes));
    d->set_memory_reserve_fraction(factor * (d->has_memory_reserve_fraction()
                                                 ? d->memory_reserve_fraction()
                                                 : models::kDefaultMemoryReserveFraction));
    return c;
  }
  const auto it = std::find(kParamNames.begin(), kParamNames.end(), name);
  if (it == kParamNames.end()) {
    std::string known;
    for (std::string_view n : kParamNames) known += std::string(n) + ", ";
    return Status::Invalid("--vary: unknown parameter '" + Printable(name) + "' (known: " + known +
                           "memory_reserve)");
  }
  switch (static_cast<CalibParam>(it - kParamNames.begin())) {
    case CalibParam::kEfficiencyPeak: d->set_peak_flops(d->peak_flops() * factor); break;
    case CalibParam::kEfficiencyKnee:
      for (pb::EfficiencyPoint& p : *d->mutable_efficiency()) p.set_tokens(p.tokens() * factor);
      break;
    case CalibParam::kMemoryBandwidth:
      d->set_memory_bandwidth_bytes_per_s(d->memory_bandwidth_bytes_per_s() * factor);
      break;
    case CalibParam::kActionOverhead:
      d->set_action_overhead_s(d->action_overhead_s() * factor);
      break;
    case CalibParam::kKernelComputeScale:
    case CalibParam::kKernelAllReduceScale: {
      CalibValues v{};
      v.fill(1);
      v[it - kParamNames.begin()] = factor;
      pb::KernelCosts scaled = WithCalibValues(c, v).kernel_costs();  // only the scales used
      *c.mutable_kernel_costs() = scaled;
      break;
    }
    default: {
      pb::LinkSpec* link = it - kParamNames.begin() <= Index(CalibParam::kPipelineLatency)
                               ? c.mutable_pipeline_link()
                           : it - kParamNames.begin() <= Index(CalibParam::kIntraLatency)
                               ? c.mutable_intra_node_link()
                               : c.mutable_inter_node_link();
      if (name.ends_with("latency_s")) {
        link->set_latency_s(link->latency_s() * factor);
      } else {
        link->set_bandwidth_bytes_per_s(link->bandwidth_bytes_per_s() * factor);
      }
    }
  }
  return c;
}

Result<std::vector<CalibrationRow>> ParseCalibrationCsv(std::string_view text,
                                                        std::string_view source) {
  std::vector<Column> header;
  std::vector<std::string> header_names;
  std::vector<CalibrationRow> rows;
  int line_no = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    const std::string trimmed = TrimCell(line);
    if (trimmed.empty() || trimmed[0] == '#') continue;
    const std::vector<std::string> cells = SplitCells(line);
    if (header.empty()) {
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const auto it = std::find_if(kColumns.begin(), kColumns.end(),
                                     [&](const auto& k) { return k.first == cells[c]; });
        if (it == kColumns.end()) {
          return CellError(source, line_no, c + 1, "header",
                           "unknown column '" + Printable(cells[c]) + "' (known: " +
                               KnownColumns() + ")");
        }
        if (std::find(header.begin(), header.end(), it->second) != header.end()) {
          return CellError(source, line_no, c + 1, "header", "column '" + cells[c] + "' twice");
        }
        header.push_back(it->second);
        header_names.push_back(cells[c]);
      }
      if (std::find(header.begin(), header.end(), Column::kStepTime) == header.end()) {
        return Status::Invalid(Printable(source) + ":" + std::to_string(line_no) +
                               ": header: no step_time_s column (the measured step time)");
      }
      continue;
    }
    if (cells.size() != header.size()) {
      return Status::Invalid(Printable(source) + ":" + std::to_string(line_no) + ": " +
                             std::to_string(cells.size()) + " cells, the header has " +
                             std::to_string(header.size()));
    }
    CalibrationRow row;
    row.line = line_no;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (cells[c].empty()) {
        if (header[c] == Column::kStepTime) {
          return CellError(source, line_no, c + 1, header_names[c], "empty (required)");
        }
        continue;
      }
      if (Status s = FillCell(header[c], cells[c], &row); !s.ok()) {
        return CellError(source, line_no, c + 1, header_names[c], s.message());
      }
    }
    rows.push_back(std::move(row));
  }
  if (header.empty()) return Status::Invalid(Printable(source) + ": no header line");
  if (rows.empty()) return Status::Invalid(Printable(source) + ": no runs after the header");
  return rows;
}

Result<std::vector<CalibrationRun>> ApplyRows(
    const scenario::ResolvedScenario& base, const std::vector<CalibrationRow>& rows,
    std::string_view source, const std::function<Status(const pb::Scenario&)>& check) {
  if (!base.proto().cost_model().empty() && base.proto().cost_model() != "analytic") {
    return Status::Invalid("calibrate: cost_model '" + Printable(base.proto().cost_model()) +
                           "' has no parameters to fit (only analytic has)");
  }
  std::vector<CalibrationRun> runs;
  for (const CalibrationRow& row : rows) {
    pb::Scenario s = base.proto();
    s.clear_baselines();
    pb::ScheduleSpec* schedule = s.mutable_schedule();
    pb::ParallelSpec* par = s.mutable_parallel();
    if (!row.policy.empty()) {
      schedule->set_policy(row.policy);
    }
    const std::optional<long long> chunks = schedule::ChunksFor(row.policy, row.chunks);
    if (chunks) schedule->set_chunks(static_cast<std::uint32_t>(*chunks));
    if (row.alpha) schedule->set_alpha(*row.alpha);
    if (!row.recompute.empty()) schedule->set_recompute(row.recompute);
    if (!row.system.empty()) schedule->set_system(row.system);
    if (row.pipeline_size) par->set_pipeline_size(static_cast<std::uint32_t>(*row.pipeline_size));
    if (row.microbatches) par->set_microbatches(static_cast<std::uint32_t>(*row.microbatches));
    if (row.microbatch_size) par->set_microbatch_size(static_cast<std::uint32_t>(*row.microbatch_size));
    if (row.tensor_size) par->set_tensor_size(static_cast<std::uint32_t>(*row.tensor_size));
    if (row.data_size) par->set_data_size(static_cast<std::uint32_t>(*row.data_size));
    if (row.seq_len) s.set_seq_len(static_cast<std::uint64_t>(*row.seq_len));
    if (check) {
      Status bounded = check(s);
      if (!bounded.ok()) {
        return bounded.WithPrefix(Printable(source) + ":" + std::to_string(row.line));
      }
    }
    const std::string where = Printable(source) + ":" + std::to_string(row.line) +
                              ": the model cannot express this run";
    Result<scenario::ResolvedScenario> resolved = scenario::Resolve(std::move(s));
    if (!resolved.ok()) return resolved.status().WithPrefix(where);
    Result<Simulation> sim = Simulate(*resolved, resolved->proto().schedule());
    if (!sim.ok()) return sim.status().WithPrefix(where);
    runs.push_back({row, std::move(resolved).value()});
  }
  return runs;
}

Result<Calibration> Calibrate(const std::vector<CalibrationRun>& runs,
                              const CalibrationOptions& options) {
  std::vector<int> fitted_runs;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].row.holdout) fitted_runs.push_back(static_cast<int>(i));
  }
  if (fitted_runs.empty() && !options.evaluate_only) {
    return Status::Invalid("calibrate: every run is held out (set = holdout): nothing to fit "
                           "(--fit none predicts them with the cluster as given)");
  }
  // The runs whose sensitivities choose the free parameters: the fitted
  // ones, or every run when nothing is fitted.
  std::vector<int> probe_runs = fitted_runs;
  if (probe_runs.empty()) {
    for (std::size_t i = 0; i < runs.size(); ++i) probe_runs.push_back(static_cast<int>(i));
  }
  const pb::ClusterSpec& base = runs[0].scenario.proto().cluster();
  CalibValues start = ReadCalibValues(base);
  const int action_overhead = Index(CalibParam::kActionOverhead);
  const bool has_overhead = base.device().action_overhead_s() > 0;
  std::vector<int> asked;
  if (options.evaluate_only) {
    // Nothing asked for: every parameter held.
  } else if (options.fit.empty()) {
    // A term the cluster does not have is fitted only when asked for.
    for (int k = 0; k < kNumCalibParams; ++k) {
      if (k != action_overhead || has_overhead) asked.push_back(k);
    }
  } else {
    for (CalibParam p : options.fit) asked.push_back(Index(p));
  }
  const bool fit_overhead =
      std::find(asked.begin(), asked.end(), action_overhead) != asked.end();
  if (fit_overhead && !has_overhead) {
    double shortest = 1;  // s: DeviceSpec's limit
    for (int i : fitted_runs) {
      const pb::Scenario& sc = runs[static_cast<std::size_t>(i)].scenario.proto();
      const double actions = 2.0 * std::max(1u, sc.parallel().microbatches()) *
                             std::max(1u, sc.schedule().chunks());
      shortest = std::min(shortest, runs[static_cast<std::size_t>(i)].row.step_time_s / actions);
    }
    start[action_overhead] = std::clamp(kActionOverheadSeedShare * shortest, 1e-8, 1.0);
  }
  const bool seeded = fit_overhead && !has_overhead;

  // Sensitivities at the start, of every parameter, to choose the free ones.
  std::vector<int> all(kNumCalibParams);
  for (int k = 0; k < kNumCalibParams; ++k) all[k] = k;
  const CalibRanges ranges = PhysicalRanges(start);
  const LogFit probe(runs, probe_runs, base, start, all, ranges);
  SF_ASSIGN_OR_RETURN(Eigen::MatrixXd sens, probe.Jacobian(probe.Start(), 1e-4));

  Calibration out;
  pb::CalibrationReport& report = out.report;
  if (seeded) {
    report.add_notes(std::string(kParamNames[action_overhead]) + ": the cluster has none; the fit "
                     "starts at " + Fmt("%.3g", start[action_overhead]) + " s (" +
                     Fmt("%g", 100 * kActionOverheadSeedShare) +
                     " % of the shortest run's mean action)");
  }
  std::vector<int> free;
  for (int k = 0; k < kNumCalibParams; ++k) {
    pb::CalibrationParameter* p = report.add_parameters();
    p->set_name(std::string(kParamNames[k]));
    p->set_initial(start[k]);
    Eigen::Index row = 0;
    const double s = sens.col(k).cwiseAbs().maxCoeff(&row);
    p->set_max_sensitivity(s);
    p->set_most_sensitive_line(runs[probe_runs[row]].row.line);
    const bool wanted = std::find(asked.begin(), asked.end(), k) != asked.end();
    if (options.evaluate_only) {
      p->set_status("held: --fit none");
    } else if (!wanted && k == action_overhead && !has_overhead) {
      p->set_status("held: the cluster has none (--fit " + std::string(kParamNames[k]) +
                    " fits it)");
    } else if (!wanted) {
      p->set_status("held: not asked for");
    } else if (s < options.min_sensitivity) {
      p->set_status("held: not constrained by the runs");
    } else {
      p->set_status("fitted");
      free.push_back(k);
    }
  }

  // Identifiability: the singular values of the free parameters' columns
  // of d log(step time) / d log(parameter) over the fitted runs, each
  // column scaled to length 1 (so that they measure how nearly collinear the
  // parameters' effects are, whatever their sizes). A
  // direction with a singular value below kMinRelativeSingular of the
  // largest is one the runs do not determine: its parameter with the
  // largest share of that direction is held at the start (and named), and
  // the rest checked again, so that no combination the runs cannot see
  // wanders off to its bound.
  if (free.size() > 1) {
    std::string first_values;
    for (;;) {
      Eigen::MatrixXd j(sens.rows(), static_cast<Eigen::Index>(free.size()));
      // Columns scaled to unit length: a small sensitivity is
      // min_sensitivity's question; this one is collinearity alone.
      for (std::size_t k = 0; k < free.size(); ++k) {
        j.col(k) = sens.col(free[k]) / std::max(sens.col(free[k]).norm(), 1e-300);
      }
      Eigen::JacobiSVD<Eigen::MatrixXd> svd(j, Eigen::ComputeFullV);
      Eigen::VectorXd sigma = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(free.size()));
      sigma.head(svd.singularValues().size()) = svd.singularValues();
      if (first_values.empty()) {
        for (Eigen::Index k = 0; k < sigma.size(); ++k) {
          first_values += (k == 0 ? "" : ", ") + Fmt("%.3g", sigma[k]);
        }
      }
      const double largest = sigma.maxCoeff();
      Eigen::Index weakest = 0;
      const double smallest = sigma.minCoeff(&weakest);
      if (free.size() <= 1 || smallest >= kMinRelativeSingular * largest) break;
      Eigen::Index worst = 0;
      svd.matrixV().col(weakest).cwiseAbs().maxCoeff(&worst);
      const int held = free[static_cast<std::size_t>(worst)];
      std::string with;
      for (std::size_t k = 0; k < free.size(); ++k) {
        if (static_cast<Eigen::Index>(k) == worst) continue;
        if (std::abs(svd.matrixV()(static_cast<Eigen::Index>(k), weakest)) > 0.1) {
          with += (with.empty() ? "" : ", ") + std::string(kParamNames[free[k]]);
        }
      }
      report.mutable_parameters(held)->set_status(
          "held: not identifiable from these runs" +
          (with.empty() ? std::string() : " (trades off with " + with + ")"));
      free.erase(free.begin() + worst);
    }
    report.add_notes("identifiability: singular values of d log(step time) / d log(parameter) "
                     "over the fitted runs (each parameter's column scaled to length 1), largest "
                     "first: " + first_values +
                     "; a direction below " + Fmt("%.0e", kMinRelativeSingular) +
                     " of the largest is held at the start");
  }

  // The prior's centre: the starting cluster, except a seeded term (none).
  CalibValues prior = start;
  if (seeded) prior[action_overhead] = 0;
  const LogFit fit(runs, fitted_runs, base, start, free, ranges, options.prior_weight, prior);
  Eigen::VectorXd x = fit.Start();
  if (!free.empty()) {
    SF_ASSIGN_OR_RETURN(LmResult lm, LevenbergMarquardt(fit, options.max_iterations));
    x = lm.x;
    report.set_iterations(lm.iterations);
    report.add_notes("fit: " + lm.stop + ", after " + std::to_string(lm.iterations) +
                     " iterations");
    if (options.prior_weight > 0) {
      report.add_notes("prior: a ridge toward the starting cluster in log space, weight " +
                       Fmt("%g", options.prior_weight) +
                       " per parameter (--prior-weight; 0: none)");
    }
  } else if (options.evaluate_only) {
    report.add_notes("--fit none: nothing fitted; every run is predicted with the cluster as "
                     "given");
  } else {
    report.add_notes("no parameter is constrained by the runs: the cluster is unchanged");
  }
  const CalibValues fitted = fit.ValuesAt(x);
  // Uncertainty: one standard error of each fitted log-parameter, from the
  // Gauss-Newton covariance s^2 (J^T J)^-1 at the fit (J: the runs' rows and
  // the prior's; s^2: the runs' squared log errors summed over n - k degrees
  // of freedom). It reads the runs' errors as independent noise and the model
  // as right: a missing term shows in the residuals and the notes, not here.
  // With it, the Gauss-Newton step the runs ask for from the fit, bounds
  // ignored: how far past a bound they pull a parameter that ended on one.
  const std::size_t n_fit = fitted_runs.size(), n_free = free.size();
  Eigen::VectorXd std_error, wanted;
  if (n_free > 0 && n_fit > n_free) {
    SF_ASSIGN_OR_RETURN(Eigen::MatrixXd j, fit.Jacobian(x, 1e-5));
    SF_ASSIGN_OR_RETURN(Eigen::VectorXd r, fit.Residuals(x));
    const double s2 = r.head(static_cast<Eigen::Index>(n_fit)).squaredNorm() /
                      static_cast<double>(n_fit - n_free);
    const Eigen::MatrixXd inverse =
        Eigen::CompleteOrthogonalDecomposition<Eigen::MatrixXd>(j.transpose() * j).pseudoInverse();
    std_error = (s2 * inverse.diagonal()).cwiseMax(0).cwiseSqrt();
    wanted = -inverse * (j.transpose() * r);
  }
  // A parameter on a bound of its physical range: implausible when the runs
  // pull it past the bound by more than kBoundSignificance standard errors
  // (or when there is no standard error); else the runs barely see it and
  // it rests on the bound within their noise.
  std::vector<bool> at_bound(n_free, false);
  for (std::size_t f = 0; f < n_free; ++f) {
    const int k = free[f];
    const auto [lo, hi] = ranges[k];
    const double v = fitted[k];
    if (std::abs(std::log(v / lo)) >= 1e-6 && std::abs(std::log(v / hi)) >= 1e-6) continue;
    at_bound[f] = true;
    const std::string where = std::string(kParamNames[k]) + " ended at its bound " +
                              Fmt("%.3g", v) + " (physical range " + Fmt("%.3g", lo) + " to " +
                              Fmt("%.3g", hi) + ")";
    const auto e = static_cast<Eigen::Index>(f);
    if (std_error.size() > 0 && std::isfinite(std_error[e]) && std::isfinite(wanted[e]) &&
        std::abs(wanted[e]) <= kBoundSignificance * std_error[e]) {
      report.add_notes(where + ", within " + Fmt("%g", kBoundSignificance) +
                       " standard errors of where the runs put it (" +
                       Fmt("%.3g", std::exp(std::log(v) + wanted[e])) + " +/-" +
                       Fmt("%.0f", 100 * std::expm1(std_error[e])) +
                       "%): the runs barely see it");
    } else {
      report.add_notes("implausible: " + where + ": the runs pull it past what the hardware "
                       "allows");
    }
  }
  // No standard error for a parameter on its bound (the linearisation does
  // not hold there).
  if (std_error.size() > 0) {
    for (std::size_t f = 0; f < n_free; ++f) {
      const double se = std_error[static_cast<Eigen::Index>(f)];
      if (!at_bound[f] && std::isfinite(se)) {
        report.mutable_parameters(free[f])->set_log_std_error(se);
      }
    }
    report.add_notes("uncertainty: one standard error per fitted parameter (the +/- column: "
                     "x/ e^se), from the fit's Jacobian and its residuals over " +
                     std::to_string(n_fit - n_free) +
                     " degrees of freedom; it reads the runs' errors as noise and the model "
                     "as right");
  } else if (n_free > 0) {
    report.add_notes("uncertainty: not estimated: " + std::to_string(n_fit) +
                     " fitted runs for " + std::to_string(n_free) +
                     " free parameters (it needs more runs than parameters)");
  }
  for (int k = 0; k < kNumCalibParams; ++k) report.mutable_parameters(k)->set_fitted(fitted[k]);
  out.cluster = WithCalibValues(base, fitted);

  SF_ASSIGN_OR_RETURN(Prediction before, PredictAll(runs, WithCalibValues(base, start)));
  SF_ASSIGN_OR_RETURN(Prediction after, PredictAll(runs, out.cluster));

  // The reserve: the largest measured overhead beyond the allocated peak.
  double overhead = -1;
  pb::DeviceSpec* device = out.cluster.mutable_device();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const CalibrationRow& row = runs[i].row;
    if (!row.used_bytes) continue;
    const double peak = row.peak_bytes ? *row.peak_bytes : after.peak_bytes[i];
    // A reserve of the whole device would leave no memory: the preset could
    // not be used (ValidateCluster refuses it), so the row is refused here.
    if (*row.used_bytes - peak >= device->memory_capacity_bytes()) {
      return Status::Invalid(
          "line " + std::to_string(row.line) + " (run '" + Printable(row.name) +
          "'): used_bytes - peak_bytes = " +
          ByteText(*row.used_bytes - peak) +
          " bytes is not below the device's memory_capacity_bytes (" +
          ByteText(device->memory_capacity_bytes()) +
          "): the memory reserve it implies leaves no memory");
    }
    overhead = std::max(overhead, *row.used_bytes - peak);
  }
  if (overhead >= 0) {
    device->set_memory_reserve_bytes(overhead);
    device->set_memory_reserve_fraction(0);
    report.add_notes("memory reserve: the largest used_bytes - peak_bytes of the runs (" +
                     std::to_string(overhead / (1024.0 * 1024 * 1024)).substr(0, 6) +
                     " GiB), fraction 0");
  } else {
    report.add_notes("memory reserve: the cluster's (no run gives used_bytes)");
  }
  report.set_memory_reserve_bytes(device->has_memory_reserve_bytes()
                                      ? device->memory_reserve_bytes()
                                      : models::kDefaultMemoryReserveBytes);
  report.set_memory_reserve_fraction(device->has_memory_reserve_fraction()
                                         ? device->memory_reserve_fraction()
                                         : models::kDefaultMemoryReserveFraction);

  for (std::size_t i = 0; i < runs.size(); ++i) {
    const CalibrationRow& row = runs[i].row;
    const pb::Scenario& s = runs[i].scenario.proto();
    pb::CalibrationRunResult* r = report.add_runs();
    r->set_line(row.line);
    r->set_name(row.name);
    r->set_policy(s.schedule().policy());
    r->set_pipeline_size(s.parallel().pipeline_size());
    r->set_microbatches(s.parallel().microbatches());
    r->set_chunks(s.schedule().chunks());
    r->set_seq_len(static_cast<double>(s.seq_len()));
    r->set_alpha(s.schedule().alpha());
    r->set_tensor_size(s.parallel().tensor_size());
    r->set_data_size(s.parallel().data_size());
    r->set_measured_step_time_s(row.step_time_s);
    r->set_initial_step_time_s(before.step_time_s[i]);
    r->set_predicted_step_time_s(after.step_time_s[i]);
    r->set_step_time_rel_error((after.step_time_s[i] - row.step_time_s) / row.step_time_s);
    r->set_predicted_peak_bytes(after.peak_bytes[i]);
    if (row.peak_bytes) {
      r->set_measured_peak_bytes(*row.peak_bytes);
      r->set_peak_rel_error((after.peak_bytes[i] - *row.peak_bytes) / *row.peak_bytes);
    }
    if (row.used_bytes) r->set_measured_used_bytes(*row.used_bytes);
    r->set_fitted(!row.holdout);
  }
  // Leave-one-out: each fitted run predicted by the fit to the others
  // (started from the full fit, the same free parameters and rules), so a
  // user sees how the fit predicts a run it has not seen, run by run.
  std::vector<std::optional<double>> loo(runs.size());
  if (!free.empty() && fitted_runs.size() >= 2 && fitted_runs.size() <= kMaxLooRuns) {
    double sum = 0;
    for (std::size_t i = 0; i < fitted_runs.size(); ++i) {
      std::vector<int> others = fitted_runs;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      const LogFit sub(runs, others, base, fitted, free, ranges, options.prior_weight, prior);
      SF_ASSIGN_OR_RETURN(LmResult lm, LevenbergMarquardt(sub, options.max_iterations));
      const int run = fitted_runs[i];
      SF_ASSIGN_OR_RETURN(Prediction p, PredictAll({runs[run]}, sub.ClusterAt(lm.x)));
      const double e = (p.step_time_s[0] - runs[run].row.step_time_s) / runs[run].row.step_time_s;
      loo[run] = e;
      sum += std::log1p(e) * std::log1p(e);
    }
    report.set_loo_rms_log_error(std::sqrt(sum / static_cast<double>(fitted_runs.size())));
  } else if (!free.empty() && fitted_runs.size() > kMaxLooRuns) {
    report.add_notes("leave-one-out: not computed (more than " + std::to_string(kMaxLooRuns) +
                     " fitted runs)");
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (loo[i]) report.mutable_runs(static_cast<int>(i))->set_loo_rel_error(*loo[i]);
  }

  // Residuals all of one sign, each beyond kOneSignThreshold: no value of
  // the free parameters reaches these runs, so a term is missing or wrong.
  {
    int over = 0, under = 0, n = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].row.holdout) continue;
      const double e = (after.step_time_s[i] - runs[i].row.step_time_s) / runs[i].row.step_time_s;
      over += e > kOneSignThreshold;
      under += e < -kOneSignThreshold;
      ++n;
    }
    if (n >= 3 && (over == n || under == n) && options.evaluate_only) {
      report.add_notes("every run is predicted " +
                       std::string(over == n ? "slower" : "faster") + " than measured by more than " +
                       Fmt("%.0f", 100 * kOneSignThreshold) +
                       " %: the cluster misses what these runs have (a term or a scale)");
    } else if (n >= 3 && (over == n || under == n)) {
      report.add_notes("implausible: every fitted run is predicted " +
                       std::string(over == n ? "slower" : "faster") + " than measured by more than " +
                       Fmt("%.0f", 100 * kOneSignThreshold) +
                       " %: the fitted parameters cannot reach these runs (a missing or wrong "
                       "term, or a parameter held at a bound)");
    }
  }
  report.set_initial_rms_log_error(RmsLog(before.step_time_s, runs, false));
  report.set_rms_log_error(RmsLog(after.step_time_s, runs, false));
  report.set_holdout_rms_log_error(RmsLog(after.step_time_s, runs, true));
  return out;
}

std::string ClusterPresetText(const pb::ClusterSpec& cluster,
                              const std::vector<std::string>& comment) {
  std::string text;
  // Each line printable (common/text.h): a newline or escape sequence in an
  // echoed value (a path) cannot end the comment and turn into preset text.
  for (const std::string& line : comment) text += "# " + Printable(line) + "\n";
  std::string body;
  google::protobuf::TextFormat::PrintToString(cluster, &body);
  return text + body;
}

}  // namespace stateflow::sim

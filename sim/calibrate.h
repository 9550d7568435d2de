// Calibration: the analytic cost model's free parameters fitted to runs a
// user measured on their own cluster (`stateflow calibrate`), so that
// simulate, sweep and the capacity planner predict that cluster.
//
// The runs are a CSV (ParseCalibrationCsv; columns in docs/cost-model.md,
// "Calibration"): the configuration fields that vary from run to run and the
// measured step time (and, optionally, the peak allocated bytes and what the
// device really used). Calibrate simulates every run with the scenario's
// analytic cost model and fits, by a deterministic Levenberg-Marquardt
// least-squares fit of log(predicted / measured step time), the parameters
// below; the memory reserve is set from the measured overheads. What it
// returns is a cluster (a preset that `--cluster FILE` loads) and a report
// of the error per run before and after.
//
// Not a profiler (that measures per-chunk costs, backend/profile) and not a
// replay of measured costs (cost_table.h): the fitted model stays analytic,
// so it predicts configurations nobody measured.
//
//   SF_ASSIGN_OR_RETURN(std::vector<CalibrationRow> rows, ParseCalibrationCsv(text, "runs.csv"));
//   SF_ASSIGN_OR_RETURN(std::vector<CalibrationRun> runs, ApplyRows(base, rows, "runs.csv"));
//   SF_ASSIGN_OR_RETURN(Calibration c, Calibrate(runs, {}));  // c.cluster, c.report
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"

namespace stateflow::sim {

// The free parameters, each a positive number fitted in log space. The
// device's efficiency curve is fitted in the two-parameter form
//   eff(t) = peak_efficiency * t / (t + knee_tokens)        (t tokens per call)
// (KneeEfficiency); the links' latency and bandwidth as the cost model uses
// them (docs/cost-model.md, sections 2 and 5).
enum class CalibParam {
  kEfficiencyPeak,      // "efficiency.peak"     all runs (compute-bound passes)
  kEfficiencyKnee,      // "efficiency.knee_tokens"  runs at different tokens per chunk
  kMemoryBandwidth,     // "device.memory_bandwidth_bytes_per_s"  the roofline floor
  kPipelineBandwidth,   // "pipeline_link.bandwidth_bytes_per_s"  P > 1
  kPipelineLatency,     // "pipeline_link.latency_s"              P > 1
  kIntraBandwidth,      // "intra_node_link.bandwidth_bytes_per_s" TP > 1, DP in a node
  kIntraLatency,        // "intra_node_link.latency_s"
  kInterBandwidth,      // "inter_node_link.bandwidth_bytes_per_s" DP across nodes
  kInterLatency,        // "inter_node_link.latency_s"
  // With kernel costs (ClusterSpec.kernel_costs), factors on their tables,
  // 1 at the start (relative to the cluster's table): every GEMM, attention
  // and recurrence rate, and every all-reduce bus bandwidth.
  kKernelComputeScale,    // "kernel_costs.compute_scale"
  kKernelAllReduceScale,  // "kernel_costs.all_reduce_scale"
  // The framework's fixed time per action (DeviceSpec.action_overhead_s):
  // fitted only when asked for (--fit) or when the cluster already has one
  // (> 0); a fit from 0 starts at kActionOverheadSeedShare of the runs'
  // shortest mean action.
  kActionOverhead,  // "device.action_overhead_s"
};
inline constexpr int kNumCalibParams = 12;
// Where a fit of the per-action overhead starts when the cluster has none:
// this share of the shortest fitted run's mean action (its measured step
// over its stage's 2 M N actions), so that the term starts where it moves
// the runs by about 1 % (from zero, or from a fixed guess far below the
// runs' actions, its sensitivity would hide it from the fit).
inline constexpr double kActionOverheadSeedShare = 0.01;
using CalibValues = std::array<double, kNumCalibParams>;

// The free parameters' physical ranges: the fit stays inside them, and a
// parameter that ends on a bound is reported implausible (the runs pull it
// past what the hardware allows, so a term is missing or wrong). Bandwidths
// are ranged around the starting cluster's figure, read as the datasheet's;
// the rest are absolute. Sources: docs/cost-model.md, "Calibration".
//   efficiency.peak         [kMinEfficiency, 1]: no kernel runs above the
//                           device's peak FLOP/s.
//   efficiency.knee_tokens  [0.01, 2^40] tokens (the form's own limits).
//   memory bandwidth        [start / kMemoryFloorFactor, start x kBandwidthCeilingFactor]
//   link bandwidths         [start / kLinkFloorFactor, start x kBandwidthCeilingFactor]
//   link latencies          [kMinLinkLatencyS, kMaxLinkLatencyS]
//   kernel-cost scales      [kMinKernelScale, kMaxKernelScale]
//   action overhead         [1e-9 s (none), kMaxActionOverheadS]
inline constexpr double kMinEfficiency = 0.01;
// Achieved bandwidth is at most the datasheet's (a copy on the H200 reached
// 87.5 % of its 4.8 TB/s, scenarios/measured/h200-2026-11-28; nccl-tests'
// bus bandwidth on NVLink stays below the link's figure); 25 % above it
// admits a preset that states an achieved rather than a datasheet figure.
inline constexpr double kBandwidthCeilingFactor = 1.25;
inline constexpr double kMemoryFloorFactor = 10;
// A link's bandwidth down to 1/20 of its figure: host-staged transfers and
// PCIe without peer-to-peer stay above that.
inline constexpr double kLinkFloorFactor = 20;
// A message's fixed cost: from 0.1 us (below any NIC or NVLink round trip)
// to 10 ms (beyond that it is a framework's cost per action, not a link's).
inline constexpr double kMinLinkLatencyS = 1e-7;
inline constexpr double kMaxLinkLatencyS = 1e-2;
// The kernel-cost tables are rates measured on the device kind: a framework
// runs the same kernels at no more than 1.5x and no less than 0.1x of them.
inline constexpr double kMinKernelScale = 0.1;
inline constexpr double kMaxKernelScale = 1.5;
// A framework's fixed time per F or B action (launches, dispatch): above
// 0.1 s it would be a step's worth of the runs this project models.
inline constexpr double kMaxActionOverheadS = 0.1;

std::string_view CalibParamName(CalibParam p);
// Comma-separated names ("efficiency.peak,pipeline_link.latency_s"); the
// error names the unknown one and lists the known.
Result<std::vector<CalibParam>> ParseCalibParams(std::string_view list);

// The efficiency curve in the fitted form.
struct KneeEfficiency {
  double peak_efficiency = 1;  // may exceed 1: then the device's peak FLOP/s grows
  double knee_tokens = 1;
};
// The form's least-squares fit (in log) to the device's curve points (the
// fit's starting point); {1, 1} for a device without points, {e, 1} for a
// flat curve at e. knee_tokens is at least 1, so the fit can move it.
KneeEfficiency KneeFromCurve(const pb::DeviceSpec& device);
// Writes the form as points at 2^0, 2^1, ..., 2^30 tokens (the cost model
// interpolates in log between them). A peak_efficiency above 1 multiplies
// device->peak_flops instead (points stay in (0, 1]).
void SetKneeEfficiency(const KneeEfficiency& knee, pb::DeviceSpec* device);

// The parameters' values in a cluster (the curve by KneeFromCurve; a 0
// latency reads as 1e-9 s, so that its log exists; the kernel-cost scales
// read 1), and a copy of `base` with them written (the scales multiply
// base's kernel-cost rates).
CalibValues ReadCalibValues(const pb::ClusterSpec& cluster);
pb::ClusterSpec WithCalibValues(pb::ClusterSpec base, const CalibValues& values);

// `cluster` with one free parameter multiplied by `factor` (> 0), as it
// stands in the cluster rather than through the fitted form: efficiency.peak
// scales the device's peak FLOP/s (what the curve multiplies),
// efficiency.knee_tokens the curve's token positions, the kernel-cost scales
// the tables' rates, "memory_reserve" the reserve (bytes and fraction, unset
// ones from their defaults), the others the field they name. For
// sensitivity studies (`--vary NAME=FACTOR`). The error names the unknown
// parameter and lists the known ones.
Result<pb::ClusterSpec> VaryParameter(pb::ClusterSpec cluster, std::string_view name,
                                      double factor);

// One line of the runs CSV. Configuration fields not given keep the
// scenario's value.
struct CalibrationRow {
  int line = 0;  // 1-based line in the file
  std::string name;
  std::string policy, recompute, system;
  std::optional<long long> pipeline_size, microbatches, chunks, seq_len;  // P, M, N, T
  std::optional<long long> microbatch_size, tensor_size, data_size;       // B, tp, dp
  std::optional<double> alpha;
  double step_time_s = 0;                 // measured, > 0
  std::optional<double> peak_bytes;       // largest allocated total of any stage
  std::optional<double> used_bytes;       // what the device held (allocator + runtime)
  bool holdout = false;                   // column set = holdout: predicted, not fitted
};

// Parses the CSV: '#' lines and blank lines are skipped, the first other line
// is the header (column names, any order: name, policy, P, M, N, T, alpha, B,
// tp, dp, recompute, system, step_time_s, peak_bytes, used_bytes, set).
// step_time_s is required; an empty cell means "not given". Errors, one
// line: "<source>:<line>:<column>: <column name>: <what is wrong>".
Result<std::vector<CalibrationRow>> ParseCalibrationCsv(std::string_view text,
                                                        std::string_view source);

// A row applied to the scenario and checked by simulating it once.
struct CalibrationRun {
  CalibrationRow row;
  scenario::ResolvedScenario scenario;  // the row's configuration, its schedule only
};

// Applies each row's fields to `base` (a policy drops the baselines; 1f1b
// without N gets N = 1) and simulates it once. A row the model cannot
// express is an error "<source>:<line>: the model cannot express this run:
// <reason>". The base's cost model must be analytic. `check`, if given, is
// called on each row's scenario before anything is built for it (the
// command's bounded-work check); its error is returned as
// "<source>:<line>: <error>".
Result<std::vector<CalibrationRun>> ApplyRows(
    const scenario::ResolvedScenario& base, const std::vector<CalibrationRow>& rows,
    std::string_view source,
    const std::function<Status(const pb::Scenario&)>& check = nullptr);

struct CalibrationOptions {
  // Parameters to fit; empty: every parameter the runs constrain.
  std::vector<CalibParam> fit{};
  // Fit nothing (`--fit none`): every run, fitted or held out, predicted
  // with the cluster as given (a preset fitted elsewhere, evaluated on other
  // runs: another model, other lengths). The report is a fit's, with every
  // parameter held and the predictions before and after equal.
  bool evaluate_only = false;
  // A parameter is constrained when some fitted run's
  // |d log(step time) / d log(parameter)| reaches this.
  double min_sensitivity = 1e-3;
  int max_iterations = 100;
  // The ridge toward the starting cluster, in log space: the fit minimises
  // sum_i r_i^2 + prior_weight sum_k (log p_k - log p0_k)^2 over the free
  // parameters k (r_i: the runs' log errors). 0: no prior. The command's
  // default is kDefaultPriorWeight.
  double prior_weight = 0;
};

// `calibrate --prior-weight`'s default: a run's log error of 0.01 (1 %)
// weighs as much as a parameter one e-fold (log change 1) away from the
// preset, so the prior moves only what the runs barely see (on the
// synthesised runs of calibrate_test, the links' latencies, whose
// sensitivities are below 0.05; the rest come back within 1 %).
inline constexpr double kDefaultPriorWeight = 1e-4;

struct Calibration {
  pb::ClusterSpec cluster;     // the base cluster with the fitted values and reserve
  pb::CalibrationReport report;  // runs_path, cluster, provenance left to the caller
};

// Fits the runs not held out (at least one, unless options.evaluate_only).
// Deterministic: the same runs give the same fit.
Result<Calibration> Calibrate(const std::vector<CalibrationRun>& runs,
                              const CalibrationOptions& options);

// The cluster as a preset file: a comment header (`comment` lines, each
// prefixed "# ") and the ClusterSpec in text format.
std::string ClusterPresetText(const pb::ClusterSpec& cluster,
                              const std::vector<std::string>& comment);

}  // namespace stateflow::sim

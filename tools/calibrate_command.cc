// `stateflow calibrate`: the analytic model's free parameters fitted to runs
// measured on the user's cluster (sim/calibrate.h), the error per run as a
// table or JSON, and the fitted cluster written as a preset that
// `--cluster FILE` loads in simulate, sweep and capacity.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/text.h"
#include "models/cost_model.h"
#include "models/limits.h"
#include "models/model.h"
#include "scenario/load.h"
#include "sim/calibrate.h"
#include "tools/calibrate_run.h"
#include "tools/cli.h"
#include "tools/report_format.h"
#include "tools/work_bounds.h"

namespace stateflow::tools {
namespace {

constexpr char kCalibrateName[] = "calibrate";

constexpr char kCalibrateExamples[] = R"(The runs CSV: a header line, then one line per measured run ('#' lines are
comments). Columns, any order, empty cell = the scenario's value:
  name                     a label for the table
  policy P M N T alpha B tp dp recompute system
                           the run's configuration (as the scenario fields)
  step_time_s              measured seconds per training step (required)
  peak_bytes               largest allocated total of any stage
                           (torch.cuda.max_memory_allocated), optional
  used_bytes               what the device held at that moment (allocator's
                           reserved bytes + CUDA context + NCCL), optional:
                           used_bytes - peak_bytes sets the memory reserve
  set                      fit (default) or holdout (predicted, not fitted)
Fitted parameters (log space, Levenberg-Marquardt on log step time): the
efficiency curve eff(t) = peak * t / (t + knee_tokens), the device's memory
bandwidth (roofline floor), each link's latency and bandwidth, and factors on
the cluster's kernel costs (compute rates, all-reduce bus bandwidth); only
those the runs constrain (see the sensitivity column) unless --fit names
them. docs/cost-model.md, section 7, says which runs constrain which.

examples:
  stateflow calibrate --runs runs.csv --cluster a100-80gb-nvlink --model gdn-3b --out my-a100.textproto
  stateflow sweep --scenario scenarios/paper/gdn-3b.textproto --cluster my-a100.textproto
  stateflow calibrate --runs cpu-runs.csv --scenario scenarios/tiny-train.textproto \
      --fit efficiency.peak,efficiency.knee_tokens --json
  stateflow calibrate --runs gdn-small-runs.csv --model gdn-small --cluster my-cpu.textproto --fit none
      (a preset fitted on gdn-tiny's runs, judged on gdn-small's: nothing fitted)
)";

std::string Fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, value);
  return buf;
}

std::string Percent(double rel) { return Fmt("%+.2f%%", 100 * rel); }

std::string Aligned(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (std::size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size() + 2);
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = "  ";
    for (std::size_t k = 0; k < row.size(); ++k) {
      line += row[k];
      if (k + 1 < row.size()) line.append(width[k] - row[k].size(), ' ');
    }
    out += line + "\n";
  }
  return out;
}

// A parameter's standard error as a relative one, "+/-2.30%" (the fit's
// value times or divided by e^se, written as e^se - 1), or "-" when none.
std::string StdErrorText(const pb::CalibrationParameter& p) {
  if (!p.has_log_std_error()) return "-";
  return "+/-" + Fmt("%.2f%%", 100 * std::expm1(p.log_std_error()));
}

std::string FormatReport(const pb::CalibrationReport& r) {
  std::string out = "calibrate: " + std::to_string(r.runs_size()) + " runs of " + r.runs_path() +
                    ", model " + r.model() + ", starting from cluster " + r.cluster() + "\n\n";
  std::vector<std::vector<std::string>> params = {
      {"parameter", "initial", "fitted", "change", "+/- (1 s.e.)", "max |dlog t/dlog p|",
       "at line", "status"}};
  for (const pb::CalibrationParameter& p : r.parameters()) {
    params.push_back({p.name(), Fmt("%.4g", p.initial()), Fmt("%.4g", p.fitted()),
                      Percent(p.fitted() / p.initial() - 1), StdErrorText(p),
                      Fmt("%.3g", p.max_sensitivity()), std::to_string(p.most_sensitive_line()),
                      p.status()});
  }
  out += "parameters:\n" + Aligned(params) + "\n";
  std::vector<std::vector<std::string>> runs = {
      {"line", "name", "set", "policy", "P", "M", "N", "T", "tp", "dp", "measured s", "initial s",
       "fitted s", "error", "LOO error", "peak GiB meas", "pred", "error"}};
  for (const pb::CalibrationRunResult& run : r.runs()) {
    const bool peak = run.measured_peak_bytes() > 0;
    runs.push_back({std::to_string(run.line()), run.name().empty() ? "-" : Printable(run.name()),
                    run.fitted() ? "fit" : "holdout", run.policy(),
                    std::to_string(run.pipeline_size()), std::to_string(run.microbatches()),
                    std::to_string(run.chunks()), Fmt("%.0f", run.seq_len()),
                    std::to_string(run.tensor_size()), std::to_string(run.data_size()),
                    Fmt("%.4g", run.measured_step_time_s()), Fmt("%.4g", run.initial_step_time_s()),
                    Fmt("%.4g", run.predicted_step_time_s()), Percent(run.step_time_rel_error()),
                    run.has_loo_rel_error() ? Percent(run.loo_rel_error()) : "-",
                    peak ? Fmt("%.3f", run.measured_peak_bytes() / (1024.0 * 1024 * 1024)) : "-",
                    Fmt("%.3f", run.predicted_peak_bytes() / (1024.0 * 1024 * 1024)),
                    peak ? Percent(run.peak_rel_error()) : "-"});
  }
  out += "runs (error = (predicted - measured) / measured; LOO: by a fit to the other fitted "
         "runs):\n" + Aligned(runs) + "\n";
  out += "rms log error of step time over fitted runs: " + Fmt("%.4f", r.initial_rms_log_error()) +
         " before, " + Fmt("%.4f", r.rms_log_error()) + " after (" +
         std::to_string(r.iterations()) + " iterations)";
  bool holdout = false;
  for (const auto& run : r.runs()) holdout |= !run.fitted();
  if (holdout) out += "; held-out runs: " + Fmt("%.4f", r.holdout_rms_log_error());
  bool loo = false;
  for (const auto& run : r.runs()) loo |= run.has_loo_rel_error();
  if (loo) out += "; leave-one-out: " + Fmt("%.4f", r.loo_rms_log_error());
  out += "\n";
  for (const std::string& note : r.notes()) out += "note: " + note + "\n";
  if (!r.preset_path().empty()) {
    out += "preset written to " + r.preset_path() + " (use it with --cluster " + r.preset_path() +
           ")\n";
  }
  return out;
}

Result<pb::CalibrationReport> Run(const ScenarioFlags& flags, const std::string& runs_path,
                                  const std::string& fit_list, const std::string& out_path,
                                  const std::string& dtype, double prior_weight,
                                  int max_iterations) {
  if (runs_path.empty()) return Status::Invalid("--runs: required (a CSV of measured runs)");
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario base, LoadResolvedScenario(flags));
  SF_ASSIGN_OR_RETURN(std::string text, ReadTextFile(runs_path, kMaxTextFileBytes));
  SF_ASSIGN_OR_RETURN(CalibrateResult result,
                      CalibrateRunsCsv(base, {.runs_text = std::move(text),
                                              .runs_source = runs_path,
                                              .fit_list = fit_list,
                                              .dtype = dtype,
                                              .prior_weight = prior_weight,
                                              .max_iterations = max_iterations,
                                              .max_actions = flags.max_actions,
                                              .cluster_label = flags.cluster_preset}));
  pb::CalibrationReport& report = result.fit.report;
  if (!out_path.empty()) {
    SF_RETURN_IF_ERROR(WriteFile(out_path, result.preset_text));
    report.set_preset_path(IsUtf8(out_path) ? out_path : Printable(out_path));  // JSON
  }
  return report;
}

}  // namespace

int CalibrateCommand(int argc, char** argv) {
  ScenarioFlags flags;
  std::string runs_path, fit_list, out_path, dtype;
  double prior_weight = sim::kDefaultPriorWeight;
  long long max_iterations = 100;
  po::options_description desc("stateflow calibrate --runs FILE.csv [options]");
  desc.add_options()("help,h", "show this help")
      ("runs", po::value(&runs_path),
       ("the measured runs, a CSV (columns below; at most " + LimitText(kMaxTextFileBytes) + ")").c_str())
      ("fit", po::value(&fit_list),
       "comma-separated parameters to fit (default: every one the runs constrain; "
       "device.action_overhead_s only when named here or when the cluster has one), or none: "
       "fit nothing and predict every run with the cluster as given (a preset fitted on "
       "other runs)")
      ("out", po::value(&out_path), "write the fitted cluster preset (text format) here")
      ("max-iterations", po::value(&max_iterations),
       "Levenberg-Marquardt iterations at most (default 100); a fit stopped by it says "
       "\"NOT converged\"")
      ("prior-weight", po::value(&prior_weight),
       ("the ridge toward the starting cluster in log space: the fit minimises sum of "
        "squared log errors + W x sum of squared log changes of the fitted parameters "
        "(default " + Fmt("%g", sim::kDefaultPriorWeight) + "; 0: the runs alone)").c_str())
      ("dtype", po::value(&dtype),
       "float32 or float64: count bytes as this project's backend does in that type (runs "
       "measured by `stateflow validate`); default: the scenario's precision")
      ("json", "print the CalibrationReport as JSON on stdout instead of the tables");
  AddScenarioOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kCalibrateName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kCalibrateExamples;
    return kExitOk;
  }
  // Before the fit (issue 31): a preset path that cannot be written is
  // refused before any work.
  if (Status s = CheckOutputPath("--out", out_path); !s.ok()) return Fail(kCalibrateName, s);
  if (!std::isfinite(prior_weight) || prior_weight < 0) {
    return Fail(kCalibrateName, Status::Invalid("--prior-weight must be finite and >= 0"));
  }
  if (max_iterations < 1 || max_iterations > 100000) {
    return Fail(kCalibrateName, Status::Invalid("--max-iterations must be in [1, 100000]"));
  }
  Result<pb::CalibrationReport> report = Run(flags, runs_path, fit_list, out_path, dtype,
                                             prior_weight, static_cast<int>(max_iterations));
  if (!report.ok()) return Fail(kCalibrateName, report.status());
  std::cout << (vm.count("json") ? MessageToJson(*report) : FormatReport(*report));
  return kExitOk;
}

}  // namespace stateflow::tools

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
#include "tools/cli.h"
#include "tools/report_format.h"
#include "tools/work_bounds.h"

namespace stateflow::tools {
namespace {

constexpr char kName[] = "calibrate";

constexpr char kExamples[] = R"(The runs CSV: a header line, then one line per measured run ('#' lines are
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

std::string FormatReport(const pb::CalibrationReport& r) {
  std::string out = "calibrate: " + std::to_string(r.runs_size()) + " runs of " + r.runs_path() +
                    ", model " + r.model() + ", starting from cluster " + r.cluster() + "\n\n";
  std::vector<std::vector<std::string>> params = {
      {"parameter", "initial", "fitted", "change", "max |dlog t/dlog p|", "at line", "status"}};
  for (const pb::CalibrationParameter& p : r.parameters()) {
    params.push_back({p.name(), Fmt("%.4g", p.initial()), Fmt("%.4g", p.fitted()),
                      Percent(p.fitted() / p.initial() - 1), Fmt("%.3g", p.max_sensitivity()),
                      std::to_string(p.most_sensitive_line()), p.status()});
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
  if (!dtype.empty()) {
    // Count bytes as a backend run in that dtype does (its peaks are measured so).
    Result<pb::PrecisionSpec> precision = models::PrecisionForDtype(dtype);
    if (!precision.ok()) return Status::Invalid("--dtype: unknown '" + Printable(dtype) + "' (known: float32, float64, bf16)");
    pb::Scenario s = base.proto();
    *s.mutable_precision() = *precision;
    SF_ASSIGN_OR_RETURN(base, scenario::Resolve(std::move(s)));
  }
  SF_ASSIGN_OR_RETURN(std::string text, ReadTextFile(runs_path, kMaxTextFileBytes));
  SF_ASSIGN_OR_RETURN(std::vector<sim::CalibrationRow> rows,
                      sim::ParseCalibrationCsv(text, runs_path));
  // Bounded work: a number of runs a fit can hold, each run's plan within
  // --max-actions and this machine's memory, and all of them together (one
  // evaluation of the fit simulates every run) within --max-actions too.
  if (rows.size() > kMaxCalibrationRuns) {
    return Status::Invalid(runs_path + ": " + std::to_string(rows.size()) +
                           " runs, above the limit of " + std::to_string(kMaxCalibrationRuns) +
                           " for one calibration");
  }
  std::int64_t total_actions = 0;
  const std::int64_t limit = flags.max_actions.value_or(kDefaultMaxActions);
  const auto bounded = [&](const pb::Scenario& s) -> Status {
    SF_RETURN_IF_ERROR(CheckPlanBounds(s, nullptr, flags.max_actions));
    total_actions += EstimateLargestPlan(s, nullptr).actions;
    if (total_actions > limit) {
      return Status::Invalid("the runs up to here have " + std::to_string(total_actions) +
                             " actions in all, which every evaluation of the fit simulates: "
                             "above the limit of " + std::to_string(limit) +
                             " (--max-actions raises it)");
    }
    return Status::Ok();
  };
  SF_ASSIGN_OR_RETURN(std::vector<sim::CalibrationRun> runs,
                      sim::ApplyRows(base, rows, runs_path, bounded));
  sim::CalibrationOptions options;
  options.prior_weight = prior_weight;
  options.max_iterations = max_iterations;
  if (!fit_list.empty()) {
    SF_ASSIGN_OR_RETURN(options.fit, sim::ParseCalibParams(fit_list));
  }
  SF_ASSIGN_OR_RETURN(sim::Calibration c, sim::Calibrate(runs, options));
  pb::CalibrationReport& report = c.report;
  report.set_runs_path(IsUtf8(runs_path) ? runs_path : Printable(runs_path));  // JSON
  report.set_model(base.proto().model().name());
  report.set_cluster(flags.cluster_preset.empty() ? base.proto().cluster().name()
                                                  : flags.cluster_preset);
  pb::Report provenance;
  FillProvenance(1, &provenance);
  *report.mutable_provenance() = provenance.provenance();
  if (!out_path.empty()) {
    pb::ClusterSpec cluster = c.cluster;
    cluster.set_name(base.proto().cluster().name() + "-calibrated");
    std::vector<std::string> header = {
        "Calibrated by `stateflow calibrate --runs " + runs_path + "` from " +
            std::to_string(runs.size()) + " runs of model " + report.model() + ", starting from " +
            report.cluster() + " (commit " + report.provenance().git_commit() + ").",
        "rms log error of step time: " + Fmt("%.4f", report.initial_rms_log_error()) +
            " before, " + Fmt("%.4f", report.rms_log_error()) + " after."};
    for (const pb::CalibrationParameter& p : report.parameters()) {
      header.push_back(p.name() + ": " + Fmt("%.6g", p.initial()) + " -> " +
                       Fmt("%.6g", p.fitted()) + " (" + p.status() + ")");
    }
    // How the fit ended and whether it is plausible travel with the preset.
    for (const std::string& note : report.notes()) {
      if (note.rfind("fit: ", 0) == 0 || note.rfind("implausible: ", 0) == 0) {
        header.push_back(note);
      }
    }
    header.push_back("The efficiency points sample eff(t) = peak * t / (t + knee_tokens).");
    // The preset is read back as `--cluster FILE` reads it and validated
    // before it is written: a file this command writes means what it says.
    const std::string text = sim::ClusterPresetText(cluster, header);
    pb::ClusterSpec reread;
    Status back = scenario::ParseTextProto(text, out_path, &reread);
    if (back.ok()) back = models::ValidateCluster(reread);
    if (back.ok() && reread.SerializeAsString() != cluster.SerializeAsString()) {
      back = Status::Internal("it reads back as another cluster");
    }
    if (!back.ok()) {
      return Status::Internal("--out " + out_path + ": the fitted preset does not read back as "
                              "a valid cluster (" + back.message() + "); nothing written");
    }
    SF_RETURN_IF_ERROR(WriteFile(out_path, text));
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
       "comma-separated parameters to fit (default: every one the runs constrain)")
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
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kExamples;
    return kExitOk;
  }
  // Before the fit (issue 31): a preset path that cannot be written is
  // refused before any work.
  if (Status s = CheckOutputPath("--out", out_path); !s.ok()) return Fail(kName, s);
  if (!std::isfinite(prior_weight) || prior_weight < 0) {
    return Fail(kName, Status::Invalid("--prior-weight must be finite and >= 0"));
  }
  if (max_iterations < 1 || max_iterations > 100000) {
    return Fail(kName, Status::Invalid("--max-iterations must be in [1, 100000]"));
  }
  Result<pb::CalibrationReport> report = Run(flags, runs_path, fit_list, out_path, dtype,
                                             prior_weight, static_cast<int>(max_iterations));
  if (!report.ok()) return Fail(kName, report.status());
  std::cout << (vm.count("json") ? MessageToJson(*report) : FormatReport(*report));
  return kExitOk;
}

}  // namespace stateflow::tools

// One calibration from a runs CSV (calibrate_run.h).
#include "tools/calibrate_run.h"

#include <cstdio>
#include <cmath>
#include <string>
#include <vector>

#include "common/text.h"
#include "models/cost_model.h"
#include "models/limits.h"
#include "models/model.h"
#include "scenario/load.h"
#include "tools/report_format.h"
#include "tools/work_bounds.h"

namespace stateflow::tools {
namespace {

std::string Fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace

Result<CalibrateResult> CalibrateRunsCsv(const scenario::ResolvedScenario& scenario,
                                         const CalibrateRequest& request) {
  scenario::ResolvedScenario base = scenario;
  const std::string& source = request.runs_source;
  if (!request.dtype.empty()) {
    // Count bytes as a backend run in that dtype does (its peaks are measured so).
    Result<pb::PrecisionSpec> precision = models::PrecisionForDtype(request.dtype);
    if (!precision.ok()) {
      return Status::Invalid("--dtype: unknown '" + Printable(request.dtype) +
                             "' (known: float32, float64, bf16)");
    }
    pb::Scenario s = base.proto();
    *s.mutable_precision() = *precision;
    SF_ASSIGN_OR_RETURN(base, scenario::Resolve(std::move(s)));
  }
  SF_ASSIGN_OR_RETURN(std::vector<sim::CalibrationRow> rows,
                      sim::ParseCalibrationCsv(request.runs_text, source));
  // Bounded work: a number of runs a fit can hold, each run's plan within
  // --max-actions and this machine's memory, and all of them together (one
  // evaluation of the fit simulates every run) within --max-actions too.
  if (rows.size() > kMaxCalibrationRuns) {
    return Status::Invalid(source + ": " + std::to_string(rows.size()) +
                           " runs, above the limit of " + std::to_string(kMaxCalibrationRuns) +
                           " for one calibration");
  }
  std::int64_t total_actions = 0;
  const std::int64_t limit = request.max_actions.value_or(kDefaultMaxActions);
  const auto bounded = [&](const pb::Scenario& s) -> Status {
    SF_RETURN_IF_ERROR(CheckPlanBounds(s, nullptr, request.max_actions));
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
                      sim::ApplyRows(base, rows, source, bounded));
  sim::CalibrationOptions options;
  options.prior_weight = request.prior_weight;
  options.max_iterations = request.max_iterations;
  if (request.fit_list == "none") {
    options.evaluate_only = true;
  } else if (!request.fit_list.empty()) {
    SF_ASSIGN_OR_RETURN(options.fit, sim::ParseCalibParams(request.fit_list));
  }
  CalibrateResult result;
  SF_ASSIGN_OR_RETURN(result.fit, sim::Calibrate(runs, options));
  pb::CalibrationReport& report = result.fit.report;
  report.set_runs_path(IsUtf8(source) ? source : Printable(source));  // JSON
  report.set_model(base.proto().model().name());
  report.set_cluster(request.cluster_label.empty() ? base.proto().cluster().name()
                                                   : request.cluster_label);
  pb::Report provenance;
  FillProvenance(1, &provenance);
  *report.mutable_provenance() = provenance.provenance();

  pb::ClusterSpec cluster = result.fit.cluster;
  cluster.set_name(base.proto().cluster().name() + "-calibrated");
  std::vector<std::string> header = {
      "Calibrated by `stateflow calibrate --runs " + source + "` from " +
          std::to_string(runs.size()) + " runs of model " + report.model() + ", starting from " +
          report.cluster() + " (commit " + report.provenance().git_commit() + ").",
      "rms log error of step time: " + Fmt("%.4f", report.initial_rms_log_error()) +
          " before, " + Fmt("%.4f", report.rms_log_error()) + " after."};
  for (const pb::CalibrationParameter& p : report.parameters()) {
    header.push_back(p.name() + ": " + Fmt("%.6g", p.initial()) + " -> " +
                     Fmt("%.6g", p.fitted()) + " (" + p.status() +
                     (p.has_log_std_error()
                          ? ", +/-" + Fmt("%.2f", 100 * std::expm1(p.log_std_error())) +
                                "% at one standard error"
                          : std::string()) +
                     ")");
  }
  // How the fit ended and whether it is plausible travel with the preset.
  for (const std::string& note : report.notes()) {
    if (note.rfind("fit: ", 0) == 0 || note.rfind("implausible: ", 0) == 0 ||
        note.rfind("uncertainty: ", 0) == 0) {
      header.push_back(note);
    }
  }
  header.push_back("The efficiency points sample eff(t) = peak * t / (t + knee_tokens).");
  // The preset is read back as `--cluster FILE` reads it and validated: a
  // file written from it means what it says.
  result.preset_text = sim::ClusterPresetText(cluster, header);
  pb::ClusterSpec reread;
  Status back = scenario::ParseTextProto(result.preset_text, "<fitted preset>", &reread);
  if (back.ok()) back = models::ValidateCluster(reread);
  if (back.ok() && reread.SerializeAsString() != cluster.SerializeAsString()) {
    back = Status::Internal("it reads back as another cluster");
  }
  if (!back.ok()) {
    return Status::Internal("the fitted preset does not read back as a valid cluster (" +
                            back.message() + ")");
  }
  return result;
}

}  // namespace stateflow::tools

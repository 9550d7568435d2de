// One calibration from a runs CSV, as `stateflow calibrate` and the Python
// module (`stateflow.calibrate`) both run it: the base scenario counted in
// the runs' dtype, the rows parsed and applied within the bounded-work
// limits, the fit, the report's labels and provenance, and the fitted
// cluster as a preset text that reads back as the same valid cluster.
//
// Not the flags or the printing (tools/calibrate_command.cc), and not the
// fit itself (sim/calibrate.h).
//
//   SF_ASSIGN_OR_RETURN(CalibrateResult r, CalibrateRunsCsv(base, {.runs_text = csv,
//                                                                  .runs_source = "runs.csv"}));
//   WriteFile("fitted.textproto", r.preset_text);
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "scenario/resolve.h"
#include "sim/calibrate.h"

namespace stateflow::tools {

struct CalibrateRequest {
  std::string runs_text;    // the CSV (sim::ParseCalibrationCsv's columns)
  std::string runs_source;  // its name in messages and the report: a path, "<runs>"
  std::string fit_list;     // parameters to fit, comma-separated; "": every one constrained
  std::string dtype;        // count bytes as the backend does in it; "": the scenario's
  double prior_weight = sim::kDefaultPriorWeight;
  int max_iterations = 100;
  std::optional<long long> max_actions;  // tools/work_bounds.h; nullopt: the default
  std::string cluster_label;  // the report's cluster; "": the base cluster's name
};

struct CalibrateResult {
  sim::Calibration fit;    // fit.report: labelled, with provenance
  std::string preset_text;  // the fitted cluster (named "<base>-calibrated") as a preset
};

// Errors name the source's line and column, the field, or the limit (as the
// command's: "--dtype: unknown 'x' (known: float32, float64, bf16)").
Result<CalibrateResult> CalibrateRunsCsv(const scenario::ResolvedScenario& base,
                                         const CalibrateRequest& request);

}  // namespace stateflow::tools

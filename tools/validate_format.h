// The output of `stateflow validate`: a ValidationReport as a text table
// (predicted beside measured with relative errors, one block per
// configuration, then the summary and the notes), and as a figure drawn by
// plots/stateflow_plots.py.
//
// Not the comparison (sim/validation.h).
//
//   std::cout << FormatValidationReport(report, names);
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::tools {

// `run_names[k]` names report.runs(k). REQUIRES: one name per run.
std::string FormatValidationReport(const pb::ValidationReport& report,
                                   const std::vector<std::string>& run_names);

// Runs `python` plots/stateflow_plots.py validate on the report, writing the
// figure to `plot_path`. Errors: no temporary file, the plot's own message
// (named --plot).
Status DrawValidationPlot(const pb::ValidationReport& report, const std::string& python,
                          const std::string& plot_path);

}  // namespace stateflow::tools

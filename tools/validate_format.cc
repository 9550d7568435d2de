#include "tools/validate_format.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "backend/profile/launch.h"
#include "common/files.h"
#include "sim/validation.h"
#include "tools/report_format.h"

namespace stateflow::tools {
namespace {

using sim::RelError;

std::string Percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%+.1f %%", 100 * fraction);
  return text;
}

std::string Row(const std::string& label, const std::string& predicted, const std::string& measured,
                const std::string& error) {
  char line[256];
  std::snprintf(line, sizeof(line), "  %-22s %12s %12s %10s\n", label.c_str(), predicted.c_str(),
                measured.c_str(), error.c_str());
  return line;
}

std::string Ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f ms", seconds * 1e3);
  return text;
}

std::string Fraction(double f) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %%", 100 * f);
  return text;
}

std::string FormatStage(const pb::ValidationStage& s) {
  const std::string r = "stage " + std::to_string(s.stage());
  std::string out = Row(r + " busy", Ms(s.predicted_busy_s()), Ms(s.measured_busy_s()),
                        Percent(s.busy_rel_error()));
  out += Row(r + " peak", FormatBytes(s.predicted_peak_memory_bytes()),
             FormatBytes(s.measured_peak_memory_bytes()), Percent(s.peak_memory_rel_error()));
  for (int c = 0; c < s.predicted_peak_by_class_size(); ++c) {
    const double p = s.predicted_peak_by_class(c).bytes(), m = s.measured_peak_by_class(c).bytes();
    if (p == 0 && m == 0) continue;
    out += Row("  " + s.predicted_peak_by_class(c).buffer_class(), FormatBytes(p), FormatBytes(m),
               m > 0 ? Percent(RelError(p, m)) : "-");
  }
  return out;
}

std::string FormatRun(const pb::ValidationRun& r, const std::string& name) {
  std::string out = "\n" + name + " (P=" + std::to_string(r.pipeline_size()) + ", " +
                    std::to_string(r.measured_steps()) + " measured steps" +
                    (r.rounds() > 1 ? " in each of " + std::to_string(r.rounds()) + " runs" : "") +
                    ")\n";
  out += Row("", "predicted", "measured", "error");
  out += Row("step time", Ms(r.predicted_step_time_s()), Ms(r.measured_step_time_s()),
             Percent(r.step_time_rel_error()));
  if (r.rounds() > 1) {
    out += Row("  runs' range", "", Ms(r.measured_step_time_min_s()) + " .. " +
                                        Ms(r.measured_step_time_max_s()), "");
  }
  out += Row("  run's own costs", Ms(r.replayed_step_time_s()), Ms(r.replayed_run_step_time_s()),
             Percent(r.replay_step_time_rel_error()));
  out += Row("bubble", Fraction(r.predicted_bubble_fraction()),
             Fraction(r.measured_bubble_fraction()), "");
  for (const pb::ValidationStage& s : r.stages()) out += FormatStage(s);
  return out;
}

}  // namespace

std::string FormatValidationReport(const pb::ValidationReport& report,
                                   const std::vector<std::string>& run_names) {
  std::string out = "validate " + report.scenario() + " (" + report.model() + ", " +
                    report.dtype() + ", costs " + report.costs() + ")\n";
  for (int k = 0; k < report.runs_size(); ++k)
    out += FormatRun(report.runs(k), run_names[static_cast<std::size_t>(k)]);
  char line[256];
  std::snprintf(line, sizeof(line),
                "\n%d configuration%s: step time |error| median %.1f %%, worst %.1f %%; "
                "with each run's own costs median %.1f %%, worst %.1f %%; "
                "peak memory per stage |error| worst %.2f %%\n",
                report.runs_size(), report.runs_size() == 1 ? "" : "s",
                100 * report.median_abs_step_time_rel_error(),
                100 * report.max_abs_step_time_rel_error(),
                100 * report.median_abs_replay_step_time_rel_error(),
                100 * report.max_abs_replay_step_time_rel_error(),
                100 * report.max_abs_peak_memory_rel_error());
  out += line;
  for (const std::string& note : report.notes()) out += "  " + note + "\n";
  return out;
}

// plots/stateflow_plots.py validate --report <json> --out <plot>.
Status DrawValidationPlot(const pb::ValidationReport& report, const std::string& python,
                          const std::string& plot_path) {
  SF_ASSIGN_OR_RETURN(TempFile json, TempFile::Create("validate-json"));
  SF_RETURN_IF_ERROR(WriteFile(json.path(), MessageToJson(report)));
  Result<backend::ChildResult> run =
      backend::RunChild({python, std::string(SF_PLOTS_DIR) + "/stateflow_plots.py",
                         "validate", "--report", json.path(), "--out", plot_path},
                        120);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    // The plotter's last line says why; a program that says nothing (say
    // `--python /bin/false`) is named with its exit instead.
    const std::string last = backend::LastLine(run->err);
    const std::string how = run->timed_out         ? "timed out after 120 s"
                            : run->exit_code < 0 ? "was ended by a signal"
                                                 : "exited with code " + std::to_string(run->exit_code);
    return Status::Invalid("--plot: " + python + " " + how + (last.empty() ? "" : ": " + last));
  }
  return Status::Ok();
}

}  // namespace stateflow::tools

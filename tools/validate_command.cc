// `stateflow validate`: how well the simulator, fed with costs measured on
// this machine, predicts real runs. For each configuration (the scenario's
// schedule and baselines, or a grid from list flags) it simulates the plan
// with the replayed CostTable (profiled here, or --costs), runs the real
// backend on the same scenario (`mpirun -n P stateflow train --json`, one
// process when P = 1), and prints predicted beside measured: step time,
// bubble fraction, per-stage busy time and peak memory, and the bytes per
// buffer class at each stage's peak, with relative errors
// (predicted - measured) / measured.
//
// The prediction counts bytes at the backend's element size (float32: 4 per
// weight, gradient and activation element, 8 of optimizer state per
// parameter), not the scenario's mixed-precision defaults: the same buffers
// in the same type.
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "backend/comm/mpi.h"
#include "backend/profile/launch.h"
#include "backend/profile/spread.h"
#include "models/cost_model.h"
#include "sim/cost_table.h"
#include "sim/simulation.h"
#include "sim/validation.h"
#include "tools/cli.h"
#include "tools/profile_command.h"
#include "tools/report_format.h"
#include "tools/scenario.h"

namespace stateflow::tools {
namespace {

constexpr char kName[] = "validate";

constexpr char kExamples[] = R"(examples:
  stateflow validate
      the tiny-train scenario: profile, simulate, run under mpirun -n 2, compare
  stateflow validate --costs costs.textproto -M 2 -N 2 -T 64 --steps 3 --json
      reuse a table from `stateflow profile`; one JSON ValidationReport
  stateflow validate --microbatches-list 2,4,8 --chunks-list 1,2,4,8 \
      --recompute-list none,full --json --plot validate.png
      a grid of 24 configurations and the predicted-versus-measured figure
  stateflow validate --microbatches-list 2,4,8 --chunks-list 1,2,4,8 \
      --recompute-list none,full --rounds 7 --json
      the same, profiled and run 7 times in turn: medians that a noisy,
      shared machine moves less (docs/validation.md)
)";

struct ValidateFlags {
  ScenarioFlags scenario;
  ConfigFlags configs;
  ProfileFlags profile;
  std::string costs_path, costs_out, plot_path;
  std::string python = "/usr/bin/python3";
  std::optional<long long> steps, timeout_s, rounds;
  bool json = false;
};

double RelError(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / measured : 0.0;
}

// Progress lines go to stderr only when it is a terminal (so that an error
// stays the one line there).
std::ostream* Log() { return isatty(STDERR_FILENO) ? &std::cerr : nullptr; }

// The 1-minute load average (/proc/loadavg), or -1 if unknown.
double LoadAverage() {
  std::ifstream file("/proc/loadavg");
  double load = -1;
  file >> load;
  return file ? load : -1;
}

// A sentence on how busy the machine was around the measurements.
std::string LoadNote(double before, double after) {
  char text[256];
  std::snprintf(text, sizeof(text),
                "machine load: 1-minute load average %.2f before profiling, %.2f after the last "
                "run, on %u hardware threads (other processes share the cores with the ranks)",
                before, after, std::thread::hardware_concurrency());
  return text;
}

// ---- costs ----------------------------------------------------------------------

struct Costs {
  pb::CostTable table;
  std::string label;  // the --costs path, or "profiled"
};

// The profile taken right before one configuration's run: its chunk
// lengths, in P processes at once (one per core, as the run's ranks) unless
// --concurrent says otherwise; `per_stage` gets each process's own table.
Result<pb::CostTable> ProfileBeforeRun(const pb::Scenario& scenario, const RunConfig& config,
                                       const ValidateFlags& flags,
                                       std::vector<pb::CostTable>* per_stage) {
  ProfileFlags profile = flags.profile;
  if (!profile.concurrent) profile.concurrent = scenario.parallel().pipeline_size();
  return ProfileForConfigs(scenario, {config}, profile, nullptr, per_stage);
}

// All the profiles as one table (for --costs-out): each sample any of them
// measured, its median the median of theirs, p10 the lowest, p90 the
// highest, repetitions summed; the optimizer the median; the link and the
// notes those of the first.
pb::CostTable MergeTables(const std::vector<pb::CostTable>& tables) {
  pb::CostTable merged = tables.front();
  merged.clear_samples();
  std::vector<double> optimizer;
  std::map<std::string, std::vector<const pb::CostSample*>> by_key;
  std::vector<std::string> order;
  for (const pb::CostTable& t : tables) {
    optimizer.push_back(t.optimizer_s_per_param());
    for (const pb::CostSample& s : t.samples()) {
      auto& list = by_key[CostSampleKey(s)];
      if (list.empty()) order.push_back(CostSampleKey(s));
      list.push_back(&s);
    }
  }
  merged.set_optimizer_s_per_param(backend::Quantile(optimizer, 0.5));
  for (const std::string& key : order) {
    const std::vector<const pb::CostSample*>& list = by_key[key];
    pb::CostSample m = *list.front();
    std::vector<double> medians;
    std::uint32_t reps = 0;
    for (const pb::CostSample* s : list) {
      medians.push_back(s->median_s());
      m.set_p10_s(std::min(m.p10_s(), s->p10_s()));
      m.set_p90_s(std::max(m.p90_s(), s->p90_s()));
      reps += s->repetitions();
    }
    m.set_median_s(backend::Quantile(medians, 0.5));
    m.set_repetitions(reps);
    *merged.add_samples() = std::move(m);
  }
  std::sort(merged.mutable_samples()->begin(), merged.mutable_samples()->end(),
            [](const pb::CostSample& x, const pb::CostSample& y) {
              return std::make_tuple(x.layer_kind(), x.recompute(), x.pass(), x.tokens(),
                                     x.prefix()) <
                     std::make_tuple(y.layer_kind(), y.recompute(), y.pass(), y.tokens(),
                                     y.prefix());
            });
  merged.add_notes("merged: " + std::to_string(tables.size()) +
                   " profiles (one before each run); each sample's median is the median of "
                   "theirs");
  return merged;
}

Status WriteCostsOut(const pb::CostTable& table, const ValidateFlags& flags) {
  if (flags.costs_out.empty()) return Status::Ok();
  std::ofstream out(flags.costs_out);
  out << CostTableText(table);
  if (!out) return Status::Invalid(flags.costs_out + ": cannot write the cost table");
  return Status::Ok();
}

Result<Costs> LoadCosts(const pb::Scenario& scenario, const ValidateFlags& flags,
                        const Precision& precision) {
  SF_ASSIGN_OR_RETURN(pb::CostTable table, LoadCostTableFile(flags.costs_path));
  SF_RETURN_IF_ERROR(sim::CheckCostTableModel(table, scenario.model(), flags.costs_path));
  if (!table.dtype().empty() && table.dtype() != precision.dtype) {
    return Status::Invalid(flags.costs_path + ": measured in " + table.dtype() +
                           " but the runs use " + precision.dtype + " (--dtype)");
  }
  return Costs{std::move(table), flags.costs_path};
}

// ---- the real run -----------------------------------------------------------------

// The line of `err` that train printed about itself, else its last line.
std::string TrainMessage(const std::string& err) {
  const std::size_t at = err.find("stateflow train:");
  if (at == std::string::npos) return backend::LastLine(err);
  return err.substr(at, err.find('\n', at) - at);
}

Result<std::string> WriteScenario(const pb::Scenario& scenario) {
  char path[] = "/tmp/stateflow-validate-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return Status::Resource("cannot make a temporary scenario file");
  close(fd);
  std::string text;
  google::protobuf::TextFormat::PrintToString(scenario, &text);
  std::ofstream(path) << text;
  return std::string(path);
}

std::vector<std::string> TrainArgv(const pb::Scenario& s, const std::string& path,
                                   const std::string& trace_path, const ValidateFlags& flags,
                                   const Precision& precision) {
  const std::vector<std::string> program = {backend::SelfExecutable(),
                                            "train",
                                            "--scenario",
                                            path,
                                            "--json",
                                            "--trace",
                                            trace_path,
                                            "--steps",
                                            std::to_string(flags.steps.value_or(5)),
                                            "--dtype",
                                            precision.dtype,
                                            "--threads",
                                            std::to_string(precision.threads)};
  const int P = static_cast<int>(s.parallel().pipeline_size());
  return P > 1 ? backend::MpirunArgv(flags.profile.mpirun, P, program) : program;
}

// One real run: its report, and every action's and optimizer step's time
// (the median over the steps after the first) from its trace.
struct MeasuredRun {
  pb::Report report;
  sim::MeasuredDurations durations;
};

// Every action's and optimizer step's time from train's trace
// (sim::DurationsFromTrace).
Result<sim::MeasuredDurations> DurationsFromTrace(const std::string& path, int stages) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  pb::Trace trace;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!in || !google::protobuf::util::JsonStringToMessage(text.str(), &trace, options).ok()) {
    return Status::Internal("stateflow train wrote no readable trace to " + path);
  }
  return sim::DurationsFromTrace(trace, stages);
}

Result<std::string> TempPath(const char* what) {
  char path[] = "/tmp/stateflow-validate-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return Status::Resource(std::string("cannot make a temporary ") + what + " file");
  close(fd);
  return std::string(path);
}

Result<MeasuredRun> RunTrain(const pb::Scenario& scenario, const ValidateFlags& flags,
                             const Precision& precision) {
  SF_ASSIGN_OR_RETURN(std::string path, WriteScenario(scenario));
  Result<std::string> trace_path = TempPath("trace");
  if (!trace_path.ok()) {
    std::remove(path.c_str());
    return trace_path.status();
  }
  Result<backend::ChildResult> run =
      backend::RunChild(TrainArgv(scenario, path, *trace_path, flags, precision),
                        static_cast<double>(flags.timeout_s.value_or(600)));
  std::remove(path.c_str());
  const int stages = static_cast<int>(scenario.parallel().pipeline_size());
  Result<sim::MeasuredDurations> durations =
      run.ok() && run->exit_code == 0 ? DurationsFromTrace(*trace_path, stages)
                                      : Status::Internal("no run");
  std::remove(trace_path->c_str());
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    const std::string what =
        "stateflow train " +
        (run->timed_out ? std::string("timed out")
                        : "failed (exit " + std::to_string(run->exit_code) + ")") +
        ": " + TrainMessage(run->err);
    return run->exit_code == kExitBadInput ? Status::Invalid(what) : Status::Resource(what);
  }
  pb::Report report;
  if (!google::protobuf::util::JsonStringToMessage(run->out, &report).ok() ||
      report.stages_size() != stages) {
    return Status::Internal("stateflow train printed no usable JSON report: " +
                            backend::LastLine(run->out));
  }
  if (!durations.ok()) return durations.status();
  return MeasuredRun{std::move(report), std::move(durations).value()};
}

// The median of the steps after the first (the warm-up), or the only one.
double MeasuredStepTime(const pb::Report& measured, std::uint32_t* steps) {
  std::vector<double> times(measured.step_times_s().begin(), measured.step_times_s().end());
  if (times.size() >= 2) times.erase(times.begin());
  *steps = static_cast<std::uint32_t>(times.size());
  return times.empty() ? measured.step_time_s() : backend::Quantile(times, 0.5);
}

// ---- comparison -------------------------------------------------------------------

std::map<std::string, double> ByClass(const pb::StageReport& stage) {
  std::map<std::string, double> bytes;
  for (const pb::BufferBytes& b : stage.peak_by_class()) bytes[b.buffer_class()] = b.bytes();
  return bytes;
}

void AddClasses(const pb::StageReport& stage,
                google::protobuf::RepeatedPtrField<pb::BufferBytes>* out) {
  const std::map<std::string, double> bytes = ByClass(stage);
  for (std::string_view name : kBufferClassNames) {
    pb::BufferBytes* b = out->Add();
    b->set_buffer_class(std::string(name));
    auto it = bytes.find(std::string(name));
    b->set_bytes(it == bytes.end() ? 0.0 : it->second);
  }
}

pb::ValidationStage CompareStage(const pb::StageReport& p, const pb::StageReport& m,
                                 double measured_step_s) {
  pb::ValidationStage s;
  s.set_stage(p.stage());
  s.set_predicted_busy_s(p.busy_s());
  s.set_measured_busy_s(m.busy_s());
  s.set_busy_rel_error(RelError(p.busy_s(), m.busy_s()));
  s.set_predicted_bubble_fraction(p.bubble_fraction());
  s.set_measured_bubble_fraction(measured_step_s > 0 ? 1 - m.busy_s() / measured_step_s : 0);
  s.set_predicted_peak_memory_bytes(p.peak_memory_bytes());
  s.set_measured_peak_memory_bytes(m.peak_memory_bytes());
  s.set_peak_memory_rel_error(RelError(p.peak_memory_bytes(), m.peak_memory_bytes()));
  AddClasses(p, s.mutable_predicted_peak_by_class());
  AddClasses(m, s.mutable_measured_peak_by_class());
  return s;
}

// The round whose step time is the median (the lower middle one).
std::size_t MedianRound(const std::vector<MeasuredRun>& rounds) {
  std::vector<std::pair<double, std::size_t>> by_time;
  std::uint32_t steps = 0;
  for (std::size_t k = 0; k < rounds.size(); ++k) {
    by_time.emplace_back(MeasuredStepTime(rounds[k].report, &steps), k);
  }
  std::sort(by_time.begin(), by_time.end());
  return by_time[(by_time.size() - 1) / 2].second;
}

pb::ValidationRun Compare(const RunConfig& config, const pb::Report& predicted,
                          const std::vector<MeasuredRun>& rounds, const pb::Report& replayed) {
  std::vector<std::pair<double, std::size_t>> by_time;
  std::vector<double> times;
  std::uint32_t steps = 0;
  for (std::size_t k = 0; k < rounds.size(); ++k) {
    by_time.emplace_back(MeasuredStepTime(rounds[k].report, &steps), k);
    times.push_back(by_time.back().first);
  }
  std::sort(by_time.begin(), by_time.end());
  const pb::Report& measured = rounds[MedianRound(rounds)].report;
  pb::ValidationRun run;
  run.set_policy(predicted.policy());
  run.set_pipeline_size(predicted.pipeline_size());
  run.set_microbatches(static_cast<std::uint32_t>(config.microbatches));
  run.set_chunks(predicted.chunks());
  run.set_alpha(predicted.alpha());
  run.set_seq_len(static_cast<double>(config.seq_len));
  run.set_recompute(predicted.recompute());
  const double step = backend::Quantile(times, 0.5);
  run.set_measured_steps(steps);
  run.set_rounds(static_cast<std::uint32_t>(rounds.size()));
  run.set_measured_step_time_min_s(by_time.front().first);
  run.set_measured_step_time_max_s(by_time.back().first);
  const double own = MeasuredStepTime(measured, &steps);
  run.set_replayed_step_time_s(replayed.step_time_s());
  run.set_replayed_run_step_time_s(own);
  run.set_replay_step_time_rel_error(RelError(replayed.step_time_s(), own));
  run.set_predicted_step_time_s(predicted.step_time_s());
  run.set_measured_step_time_s(step);
  run.set_step_time_rel_error(RelError(predicted.step_time_s(), step));
  run.set_predicted_bubble_fraction(predicted.bubble_fraction());
  double busy = 0;
  for (int r = 0; r < predicted.stages_size(); ++r) {
    pb::ValidationStage s = CompareStage(predicted.stages(r), measured.stages(r), step);
    busy += s.measured_busy_s();
    if (std::abs(s.peak_memory_rel_error()) >= std::abs(run.peak_memory_rel_error())) {
      run.set_peak_memory_rel_error(s.peak_memory_rel_error());
    }
    *run.add_stages() = std::move(s);
  }
  const double stages = predicted.stages_size();
  run.set_measured_bubble_fraction(step > 0 ? 1 - busy / (stages * step) : 0);
  return run;
}

void Summarize(pb::ValidationReport* report) {
  std::vector<double> step_errors;
  for (const pb::ValidationRun& r : report->runs()) {
    step_errors.push_back(std::abs(r.step_time_rel_error()));
    report->set_max_abs_step_time_rel_error(
        std::max(report->max_abs_step_time_rel_error(), std::abs(r.step_time_rel_error())));
    report->set_max_abs_peak_memory_rel_error(
        std::max(report->max_abs_peak_memory_rel_error(), std::abs(r.peak_memory_rel_error())));
  }
  std::vector<double> replay_errors;
  for (const pb::ValidationRun& r : report->runs()) {
    replay_errors.push_back(std::abs(r.replay_step_time_rel_error()));
    report->set_max_abs_replay_step_time_rel_error(std::max(
        report->max_abs_replay_step_time_rel_error(), std::abs(r.replay_step_time_rel_error())));
  }
  if (!step_errors.empty()) {
    report->set_median_abs_step_time_rel_error(backend::Quantile(step_errors, 0.5));
    report->set_median_abs_replay_step_time_rel_error(backend::Quantile(replay_errors, 0.5));
  }
}

// ---- output ----------------------------------------------------------------------

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

std::string FormatReport(const pb::ValidationReport& report,
                         const std::vector<RunConfig>& configs) {
  std::string out = "validate " + report.scenario() + " (" + report.model() + ", " +
                    report.dtype() + ", costs " + report.costs() + ")\n";
  for (int k = 0; k < report.runs_size(); ++k)
    out += FormatRun(report.runs(k), ConfigName(configs[k]));
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
Status DrawPlot(const pb::ValidationReport& report, const ValidateFlags& flags) {
  char path[] = "/tmp/stateflow-validate-json-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return Status::Resource("cannot make a temporary file for the plot's input");
  close(fd);
  std::ofstream(path) << MessageToJson(report);
  Result<backend::ChildResult> run =
      backend::RunChild({flags.python, std::string(SF_PLOTS_DIR) + "/stateflow_plots.py",
                         "validate", "--report", path, "--out", flags.plot_path},
                        120);
  std::remove(path);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return Status::Invalid("--plot: " + backend::LastLine(run->err));
  }
  return Status::Ok();
}

// ---- the command ------------------------------------------------------------------

Result<pb::Report> Predict(const pb::Scenario& scenario, const RunConfig& config,
                           const sim::CostTableIndex& costs, const Precision& precision,
                           const sim::MeasuredDurations* durations = nullptr) {
  pb::Scenario narrowed = ScenarioFor(scenario, config);
  // The ledger in the backend's element type (models/cost_model.h).
  SF_ASSIGN_OR_RETURN(*narrowed.mutable_precision(), models::PrecisionForDtype(precision.dtype));
  Result<sim::Simulation> predicted =
      sim::Simulate(narrowed, narrowed.schedule(), {.costs = &costs, .durations = durations});
  if (!predicted.ok()) return predicted.status().WithPrefix(ConfigName(config));
  return predicted->report;
}

pb::ValidationReport NewReport(const pb::Scenario& scenario, const Costs& costs,
                               const Precision& precision, int rounds) {
  pb::ValidationReport report;
  report.set_scenario(scenario.name());
  report.set_model(scenario.model().name());
  report.set_dtype(precision.dtype);
  report.set_costs(costs.label);
  pb::Report holder;
  FillProvenance(precision.threads, &holder);
  *report.mutable_provenance() = holder.provenance();
  for (const std::string& note : costs.table.notes()) report.add_notes(note);
  report.add_notes(
      "measured step time: the median of the steps after the first" +
      std::string(rounds > 1 ? " of each run, then the median over the " + std::to_string(rounds) +
                                   " runs of each configuration (a round runs every "
                                   "configuration once)"
                             : "") +
      "; the prediction replays the costs on the same plan, counting bytes at the backend's " +
      precision.dtype + " element size" +
      (costs.label == "profiled"
           ? "; each run is predicted from a profile of its chunk lengths taken right before "
             "it, in P processes at once bound as the run's ranks, stage r replaying the "
             "costs of process r (the predicted step time is the median over the rounds)"
           : ""));
  report.add_notes(
      "run's own costs: the simulator on the same plan with every action's and optimizer "
      "step's time taken from the median run's trace (each the median over its steps after "
      "the first), transfers from the table, beside that run's step time: the schedule "
      "model's error without the costs'");
  return report;
}

// The prediction of one configuration from one profile: stage r replays the
// costs of the profile's process r when there is one per stage, else the
// profile's merged table.
Result<pb::Report> PredictFromProfile(const pb::Scenario& scenario, const RunConfig& config,
                                      const pb::CostTable& merged,
                                      const std::vector<pb::CostTable>& per_stage,
                                      const Precision& precision,
                                      const sim::MeasuredDurations* durations = nullptr) {
  SF_ASSIGN_OR_RETURN(sim::CostTableIndex index, sim::CostTableIndex::Make(merged, "profiled"));
  if (per_stage.size() != static_cast<std::size_t>(scenario.parallel().pipeline_size())) {
    return Predict(scenario, config, index, precision, durations);
  }
  std::vector<sim::CostTableIndex> indexes;
  for (std::size_t r = 0; r < per_stage.size(); ++r) {
    SF_ASSIGN_OR_RETURN(sim::CostTableIndex i,
                        sim::CostTableIndex::Make(per_stage[r], "profiled, process " +
                                                                    std::to_string(r)));
    indexes.push_back(std::move(i));
  }
  std::vector<const sim::CostTableIndex*> pointers;
  for (const sim::CostTableIndex& i : indexes) pointers.push_back(&i);
  pb::Scenario narrowed = ScenarioFor(scenario, config);
  SF_ASSIGN_OR_RETURN(*narrowed.mutable_precision(), models::PrecisionForDtype(precision.dtype));
  Result<sim::Simulation> predicted =
      sim::Simulate(narrowed, narrowed.schedule(),
                    {.stage_costs = &pointers, .durations = durations});
  if (!predicted.ok()) return predicted.status().WithPrefix(ConfigName(config));
  return predicted->report;
}

// The report whose step time is the median (the lower middle one).
const pb::Report& MedianReport(const std::vector<pb::Report>& reports) {
  std::vector<std::pair<double, std::size_t>> by_time;
  for (std::size_t k = 0; k < reports.size(); ++k) {
    by_time.emplace_back(reports[k].step_time_s(), k);
  }
  std::sort(by_time.begin(), by_time.end());
  return reports[by_time[(by_time.size() - 1) / 2].second];
}

int Validate(const ValidateFlags& flags) {
  const double load_before = LoadAverage();
  Result<pb::Scenario> scenario =
      LoadResolvedScenario(flags.scenario, TinyTrainScenarioText(), "<tiny-train scenario>");
  if (!scenario.ok()) return Fail(kName, scenario.status());
  Result<std::vector<RunConfig>> configs = ConfigsFor(*scenario, flags.configs, false);
  if (!configs.ok()) return Fail(kName, configs.status());
  Result<Precision> precision = PrecisionFor(*scenario, flags.profile);
  if (!precision.ok()) return Fail(kName, precision.status());
  const bool profiling = flags.costs_path.empty();
  Costs costs;
  std::optional<sim::CostTableIndex> given;
  if (!profiling) {
    Result<Costs> loaded = LoadCosts(*scenario, flags, *precision);
    if (!loaded.ok()) return Fail(kName, loaded.status());
    costs = std::move(loaded).value();
    Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(costs.table, costs.label);
    if (!index.ok()) return Fail(kName, index.status());
    given.emplace(std::move(index).value());
  }
  const int rounds = static_cast<int>(flags.rounds.value_or(1));
  std::vector<pb::CostTable> tables;  // every profile (round by round), merged over processes
  std::vector<std::vector<pb::Report>> predicted(configs->size());
  std::vector<std::vector<MeasuredRun>> measured(configs->size());
  std::vector<std::vector<std::vector<pb::CostTable>>> stage_tables(configs->size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < configs->size(); ++k) {
      const RunConfig& config = (*configs)[k];
      if (std::ostream* log = Log()) {
        *log << "stateflow validate: round " << round + 1 << "/" << rounds << ", " << k + 1 << "/"
             << configs->size() << " " << ConfigName(config) << "\n";
      }
      // Predict first: a plan the simulator cannot replay fails before its run.
      Result<pb::Report> prediction = Status::Internal("no prediction");
      std::vector<pb::CostTable> per_stage;
      if (profiling) {
        Result<pb::CostTable> table = ProfileBeforeRun(*scenario, config, flags, &per_stage);
        if (!table.ok()) return Fail(kName, table.status().WithPrefix(ConfigName(config)));
        prediction = PredictFromProfile(*scenario, config, *table, per_stage, *precision);
        tables.push_back(std::move(table).value());
      } else {
        prediction = Predict(*scenario, config, *given, *precision);
      }
      if (!prediction.ok()) return Fail(kName, prediction.status());
      predicted[k].push_back(std::move(prediction).value());
      stage_tables[k].push_back(profiling ? std::move(per_stage) : std::vector<pb::CostTable>{});
      Result<MeasuredRun> run = RunTrain(ScenarioFor(*scenario, config), flags, *precision);
      if (!run.ok()) return Fail(kName, run.status().WithPrefix(ConfigName(config)));
      measured[k].push_back(std::move(run).value());
    }
  }
  if (profiling) {
    costs = Costs{MergeTables(tables), "profiled"};
    if (Status s = WriteCostsOut(costs.table, flags); !s.ok()) return Fail(kName, s);
  }
  Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(costs.table, costs.label);
  if (!index.ok()) return Fail(kName, index.status());
  pb::ValidationReport report = NewReport(*scenario, costs, *precision, rounds);
  for (std::size_t k = 0; k < configs->size(); ++k) {
    const std::size_t median_round = MedianRound(measured[k]);
    const MeasuredRun& median_run = measured[k][median_round];
    // The run's own action times; transfers from the costs of its round.
    Result<pb::Report> replayed =
        profiling ? PredictFromProfile(*scenario, (*configs)[k],
                                       tables[median_round * configs->size() + k],
                                       stage_tables[k][median_round], *precision,
                                       &median_run.durations)
                  : Predict(*scenario, (*configs)[k], *index, *precision, &median_run.durations);
    if (!replayed.ok()) return Fail(kName, replayed.status());
    pb::ValidationRun run = Compare((*configs)[k], MedianReport(predicted[k]), measured[k], *replayed);
    *report.add_runs() = std::move(run);
  }
  Summarize(&report);
  report.add_notes(LoadNote(load_before, LoadAverage()));
  std::cout << (flags.json ? MessageToJson(report) : FormatReport(report, *configs));
  if (!flags.plot_path.empty()) {
    if (Status s = DrawPlot(report, flags); !s.ok()) return Fail(kName, s);
    if (!flags.json) std::cout << "figure written to " << flags.plot_path << "\n";
  }
  return kExitOk;
}

void AddValidateOptions(po::options_description* desc, ValidateFlags* f) {
  desc->add_options()("help,h", "show this help")("costs", po::value(&f->costs_path),
                                                  "replay this CostTable instead of profiling")(
      "costs-out", po::value(&f->costs_out), "also write the profiled CostTable here")(
      "steps", Optional(&f->steps), "training steps per run, the first is warm-up (default 5)")(
      "json", po::bool_switch(&f->json), "print one ValidationReport as JSON")(
      "plot", po::value(&f->plot_path), "draw predicted versus measured to this picture")(
      "python", po::value(&f->python), "the Python with matplotlib (default /usr/bin/python3)")(
      "timeout", Optional(&f->timeout_s), "seconds allowed per real run (default 600)")(
      "rounds", Optional(&f->rounds),
      "repeat: each round profiles (unless --costs) and runs every configuration once; "
      "predicted from the rounds' median costs, measured the median run (default 1)");
  AddProfileOptions(desc, &f->profile);
  AddConfigOptions(desc, &f->configs);
  AddScenarioOptions(desc, &f->scenario);
}

}  // namespace

int RunValidate(int argc, char** argv) {
  ValidateFlags flags;
  po::options_description desc(
      "stateflow validate [options] (without --scenario: scenarios/tiny-train.textproto)");
  AddValidateOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kExamples;
    return kExitOk;
  }
  if (backend::LaunchedByMpirun()) {
    return FailOnRankZero(kName, Status::Invalid("run validate without mpirun: it starts "
                                                 "`mpirun -n P` for each real run itself"));
  }
  if (flags.steps && (*flags.steps < 1 || *flags.steps > 100000)) {
    return Fail(kName, Status::Invalid("--steps must be in [1, 100000]"));
  }
  if (flags.rounds && (*flags.rounds < 1 || *flags.rounds > 1000)) {
    return Fail(kName, Status::Invalid("--rounds must be in [1, 1000]"));
  }
  if (flags.timeout_s && *flags.timeout_s < 1) {
    return Fail(kName, Status::Invalid("--timeout must be >= 1"));
  }
  return Validate(flags);
}

}  // namespace stateflow::tools

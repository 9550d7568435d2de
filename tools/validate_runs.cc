#include "tools/validate_runs.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "backend/profile/launch.h"
#include "common/files.h"
#include "models/cost_model.h"
#include "scenario/configure.h"
#include "schedule/policies.h"
#include "sim/simulation.h"
#include "tools/cli.h"

namespace stateflow::tools {
namespace {

// The line of `err` that train printed about itself, else its last line.
std::string TrainMessage(const std::string& err) {
  const std::size_t at = err.find("stateflow train:");
  if (at == std::string::npos) return backend::LastLine(err);
  return err.substr(at, err.find('\n', at) - at);
}

Result<TempFile> WriteScenario(const pb::Scenario& scenario) {
  SF_ASSIGN_OR_RETURN(TempFile file, TempFile::Create("validate-scenario"));
  std::string text;
  google::protobuf::TextFormat::PrintToString(scenario, &text);
  SF_RETURN_IF_ERROR(WriteFile(file.path(), text));
  return file;
}

std::vector<std::string> TrainArgv(const pb::Scenario& s, const std::string& path,
                                   const std::string& trace_path, const TrainRunOptions& options,
                                   const Precision& precision) {
  const std::vector<std::string> program = {backend::SelfExecutable(),
                                            "train",
                                            "--scenario",
                                            path,
                                            "--json",
                                            "--trace",
                                            trace_path,
                                            "--steps",
                                            std::to_string(options.steps),
                                            "--dtype",
                                            precision.dtype,
                                            "--threads",
                                            std::to_string(precision.threads),
                                            "--device",
                                            precision.device};
  // One rank per stage, data-parallel replica and tensor rank.
  const int ranks = static_cast<int>(s.parallel().pipeline_size()) *
                    static_cast<int>(std::max(1u, s.parallel().data_size())) *
                    static_cast<int>(std::max(1u, s.parallel().tensor_size()));
  return ranks > 1 ? backend::MpirunArgv(options.mpirun, ranks, program) : program;
}

// Every action's and optimizer step's time from train's trace
// (sim::DurationsFromTrace).
Result<sim::MeasuredDurations> DurationsFromTraceFile(const std::string& path,
                                                      const pb::Scenario& scenario) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  pb::Trace trace;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!in || !google::protobuf::util::JsonStringToMessage(text.str(), &trace, options).ok()) {
    return Status::Internal("stateflow train wrote no readable trace to " + path);
  }
  const pb::ScheduleSpec& schedule = scenario.schedule();
  return sim::DurationsFromTrace(trace, static_cast<int>(scenario.parallel().pipeline_size()),
                                 scenario::VirtualStagesOf(schedule),
                                 schedule::PolicyPlacement(schedule.policy()));
}

// The profile taken right before one configuration's run: its chunk
// lengths, in P processes at once (one per core, as the run's ranks) unless
// --concurrent says otherwise; `per_stage` gets each process's own table.
Result<pb::CostTable> ProfileBeforeRun(const scenario::ResolvedScenario& scenario,
                                       const RunConfig& config,
                                       const ProfileFlags& flags,
                                       std::vector<pb::CostTable>* per_stage) {
  ProfileFlags profile = flags;
  // As many processes as the run's ranks: P D TP.
  if (!profile.concurrent) {
    profile.concurrent = scenario.stages() *
                         static_cast<int>(std::max(1u, scenario.proto().parallel().data_size())) *
                         static_cast<int>(std::max(1u, scenario.proto().parallel().tensor_size()));
  }
  return ProfileForConfigs(scenario, {config}, profile, nullptr, per_stage);
}

// The scenario narrowed to one configuration, in the backend's element type
// (models/cost_model.h) and with the run's device, whose recurrence-core
// scratch the ledger counts (models/placement.cc).
Result<scenario::ResolvedScenario> NarrowedFor(const scenario::ResolvedScenario& scenario,
                                               const RunConfig& config,
                                               const Precision& precision) {
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario narrowed, ScenarioFor(scenario, config));
  return scenario::ForBackendRun(narrowed, precision.dtype, precision.device);
}

}  // namespace

Result<pb::Report> Predict(const scenario::ResolvedScenario& scenario, const RunConfig& config,
                           const sim::CostTableIndex& costs, const Precision& precision,
                           const sim::MeasuredDurations* durations) {
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario narrowed,
                      NarrowedFor(scenario, config, precision));
  Result<sim::Simulation> predicted = sim::Simulate(
      narrowed, narrowed.proto().schedule(), {.costs = &costs, .durations = durations});
  if (!predicted.ok()) return predicted.status().WithPrefix(ConfigName(config));
  return predicted->report;
}

Result<pb::Report> PredictFromProfile(const scenario::ResolvedScenario& scenario,
                                      const RunConfig& config,
                                      const pb::CostTable& merged,
                                      const std::vector<pb::CostTable>& per_stage,
                                      const Precision& precision,
                                      const sim::MeasuredDurations* durations) {
  SF_ASSIGN_OR_RETURN(sim::CostTableIndex index, sim::CostTableIndex::Make(merged, "profiled"));
  if (per_stage.size() != static_cast<std::size_t>(scenario.stages())) {
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
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario narrowed,
                      NarrowedFor(scenario, config, precision));
  Result<sim::Simulation> predicted =
      sim::Simulate(narrowed, narrowed.proto().schedule(),
                    {.stage_costs = &pointers, .durations = durations});
  if (!predicted.ok()) return predicted.status().WithPrefix(ConfigName(config));
  return predicted->report;
}

Result<sim::MeasuredRun> RunMeasuredTrain(const pb::Scenario& scenario, const TrainRunOptions& options,
                                  const Precision& precision) {
  SF_ASSIGN_OR_RETURN(TempFile scenario_file, WriteScenario(scenario));
  SF_ASSIGN_OR_RETURN(TempFile trace_file, TempFile::Create("validate-trace"));
  Result<backend::ChildResult> run = backend::RunChild(
      TrainArgv(scenario, scenario_file.path(), trace_file.path(), options, precision),
      options.timeout_s);
  const int stages = static_cast<int>(scenario.parallel().pipeline_size());
  Result<sim::MeasuredDurations> durations =
      run.ok() && run->exit_code == 0 ? DurationsFromTraceFile(trace_file.path(), scenario)
                                      : Status::Internal("no run");
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    // A run that timed out may have printed nothing (a stopped mpirun
    // forwards no output): the deadline then says what happened.
    const std::string message = TrainMessage(run->err);
    std::ostringstream deadline;
    deadline << options.timeout_s;
    const std::string what =
        "stateflow train " +
        (run->timed_out ? "timed out after " + deadline.str() + " s (--timeout " +
                              deadline.str() + ")" +
                              (run->stopped ? ": it was stopped (process state T: SIGSTOP, "
                                              "Ctrl-Z or a debugger), not slow; ended"
                                            : ", stopped") +
                              " with its process group"
                        : "failed (exit " + std::to_string(run->exit_code) + ")") +
        (message.empty() ? "" : ": " + message);
    return run->exit_code == kExitBadInput ? Status::Invalid(what) : Status::Resource(what);
  }
  pb::Report report;
  if (!google::protobuf::util::JsonStringToMessage(run->out, &report).ok() ||
      report.stages_size() != stages) {
    return Status::Internal("stateflow train printed no usable JSON report: " +
                            backend::LastLine(run->out));
  }
  if (!durations.ok()) return durations.status();
  return sim::MeasuredRun{std::move(report), std::move(durations).value()};
}

namespace {

// One configuration in one round: profile (unless `given`), predict, run.
Status ObserveOne(const scenario::ResolvedScenario& scenario, const RunConfig& config,
                  const ProfileFlags& profile, const TrainRunOptions& train,
                  const Precision& precision, const sim::CostTableIndex* given, std::size_t k,
                  Observations* seen) {
  // Predict first: a plan the simulator cannot replay fails before its run.
  Result<pb::Report> prediction = Status::Internal("no prediction");
  std::vector<pb::CostTable> per_stage;
  if (given == nullptr) {
    Result<pb::CostTable> table = ProfileBeforeRun(scenario, config, profile, &per_stage);
    if (!table.ok()) return table.status().WithPrefix(ConfigName(config));
    prediction = PredictFromProfile(scenario, config, *table, per_stage, precision);
    seen->tables.push_back(std::move(table).value());
  } else {
    prediction = Predict(scenario, config, *given, precision);
  }
  SF_RETURN_IF_ERROR(prediction.status());
  seen->predicted[k].push_back(std::move(prediction).value());
  seen->stage_tables[k].push_back(std::move(per_stage));
  Result<scenario::ResolvedScenario> narrowed = ScenarioFor(scenario, config);
  if (!narrowed.ok()) return narrowed.status().WithPrefix(ConfigName(config));
  Result<sim::MeasuredRun> run = RunMeasuredTrain(narrowed->proto(), train, precision);
  if (!run.ok()) return run.status().WithPrefix(ConfigName(config));
  seen->measured[k].push_back(std::move(run).value());
  return Status::Ok();
}

}  // namespace

// Every round runs every configuration once.
Result<Observations> Observe(const scenario::ResolvedScenario& scenario,
                             const std::vector<RunConfig>& configs,
                             const ProfileFlags& profile, const TrainRunOptions& train,
                             const Precision& precision, const sim::CostTableIndex* given,
                             int rounds, std::ostream* log) {
  Observations seen;
  seen.predicted.resize(configs.size());
  seen.measured.resize(configs.size());
  seen.stage_tables.resize(configs.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < configs.size(); ++k) {
      if (log != nullptr) {
        *log << "stateflow validate: round " << round + 1 << "/" << rounds << ", " << k + 1 << "/"
             << configs.size() << " " << ConfigName(configs[k]) << "\n";
      }
      SF_RETURN_IF_ERROR(
          ObserveOne(scenario, configs[k], profile, train, precision, given, k, &seen));
    }
  }
  return seen;
}

// Configuration k compared: the median prediction against the rounds' runs,
// and the median run replayed with its own durations (transfers from the
// costs of its round).
Result<pb::ValidationRun> CompareConfig(const scenario::ResolvedScenario& scenario,
                                        const RunConfig& config,
                                        std::size_t k, std::size_t num_configs,
                                        const Observations& seen, const Precision& precision,
                                        const sim::CostTableIndex* given) {
  const std::size_t median_round = sim::MedianRound(seen.measured[k]);
  const sim::MeasuredRun& median_run = seen.measured[k][median_round];
  SF_ASSIGN_OR_RETURN(
      pb::Report replayed,
      given == nullptr
          ? PredictFromProfile(scenario, config, seen.tables[median_round * num_configs + k],
                               seen.stage_tables[k][median_round], precision,
                               &median_run.durations)
          : Predict(scenario, config, *given, precision, &median_run.durations));
  return sim::Compare(seen.predicted[k][sim::MedianReport(seen.predicted[k])], seen.measured[k],
                      replayed,
                      {.microbatches = config.microbatches,
                       .seq_len = static_cast<double>(config.seq_len)});
}

}  // namespace stateflow::tools

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
//
// Flags and orchestration only: the comparison is sim/validation.h, the
// rounds of predictions and real runs tools/validate_runs.h, the output
// tools/validate_format.h.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "backend/comm/mpi.h"
#include "common/files.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "sim/cost_table.h"
#include "sim/validation.h"
#include "tools/cli.h"
#include "tools/profile_jobs.h"
#include "tools/profiling.h"
#include "tools/report_format.h"
#include "tools/run_configs.h"
#include "tools/validate_format.h"
#include "tools/validate_runs.h"

namespace stateflow::tools {
namespace {

constexpr char kValidateName[] = "validate";

constexpr char kValidateExamples[] = R"(examples:
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

// All the profiles as one table (for --costs-out): each sample's median the
// median over the profiles that measured it (sim::MergeCostTables), sorted.
pb::CostTable MergeProfiles(const std::vector<pb::CostTable>& tables) {
  pb::CostTable merged = sim::MergeCostTables(tables, sim::MergeStatistic::kMedianOverRounds);
  sim::SortCostSamples(&merged);
  merged.add_notes("merged: " + std::to_string(tables.size()) +
                   " profiles (one before each run); each sample's median is the median of "
                   "theirs");
  return merged;
}

Status WriteCostsOut(const pb::CostTable& table, const ValidateFlags& flags) {
  if (flags.costs_out.empty()) return Status::Ok();
  return WriteCostTableFile(flags.costs_out, table);
}

Result<Costs> LoadCosts(const pb::Scenario& scenario, const ValidateFlags& flags,
                        const Precision& precision) {
  SF_ASSIGN_OR_RETURN(pb::CostTable table, scenario::LoadCostTableFile(flags.costs_path));
  SF_RETURN_IF_ERROR(sim::CheckCostTableModel(table, scenario.model(), flags.costs_path,
                                              static_cast<int>(scenario.parallel().microbatch_size())));
  if (!table.dtype().empty() && table.dtype() != precision.dtype) {
    return Status::Invalid(flags.costs_path + ": measured in " + table.dtype() +
                           " but the runs use " + precision.dtype + " (--dtype)");
  }
  return Costs{std::move(table), flags.costs_path};
}

// ---- the command ------------------------------------------------------------------

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

int Validate(const ValidateFlags& flags) {
  const double load_before = LoadAverage();
  Result<scenario::ResolvedScenario> scenario = LoadResolvedScenario(
      flags.scenario, scenario::TinyTrainScenarioText(), "<tiny-train scenario>");
  if (!scenario.ok()) return Fail(kValidateName, scenario.status());
  Result<std::vector<RunConfig>> configs = ConfigsFor(*scenario, flags.configs, false);
  if (!configs.ok()) return Fail(kValidateName, configs.status());
  Result<Precision> precision = PrecisionFor(scenario->proto(), flags.profile);
  if (!precision.ok()) return Fail(kValidateName, precision.status());
  const bool profiling = flags.costs_path.empty();
  Costs costs;
  std::optional<sim::CostTableIndex> given;
  if (!profiling) {
    Result<Costs> loaded = LoadCosts(scenario->proto(), flags, *precision);
    if (!loaded.ok()) return Fail(kValidateName, loaded.status());
    costs = std::move(loaded).value();
    Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(costs.table, costs.label);
    if (!index.ok()) return Fail(kValidateName, index.status());
    given.emplace(std::move(index).value());
  }
  const int rounds = static_cast<int>(flags.rounds.value_or(1));
  const TrainRunOptions train{static_cast<int>(flags.steps.value_or(5)),
                              static_cast<double>(flags.timeout_s.value_or(600)),
                              flags.profile.mpirun};
  Result<Observations> seen = Observe(*scenario, *configs, flags.profile, train, *precision,
                                      given ? &*given : nullptr, rounds, Log());
  if (!seen.ok()) return Fail(kValidateName, seen.status());
  if (profiling) {
    costs = Costs{MergeProfiles(seen->tables), "profiled"};
    if (Status s = WriteCostsOut(costs.table, flags); !s.ok()) return Fail(kValidateName, s);
  }
  pb::ValidationReport report = NewReport(scenario->proto(), costs, *precision, rounds);
  std::vector<std::string> names;
  for (std::size_t k = 0; k < configs->size(); ++k) {
    Result<pb::ValidationRun> run = CompareConfig(*scenario, (*configs)[k], k, configs->size(),
                                                  *seen, *precision, given ? &*given : nullptr);
    if (!run.ok()) return Fail(kValidateName, run.status());
    *report.add_runs() = std::move(run).value();
    names.push_back(ConfigName((*configs)[k]));
  }
  sim::Summarize(&report);
  report.add_notes(LoadNote(load_before, LoadAverage()));
  std::cout << (flags.json ? MessageToJson(report) : FormatValidationReport(report, names));
  if (!flags.plot_path.empty()) {
    Status drawn = DrawValidationPlot(report, flags.python, flags.plot_path);
    if (!drawn.ok()) return Fail(kValidateName, drawn);
    if (!flags.json) std::cout << "figure written to " << flags.plot_path << "\n";
  }
  return kExitOk;
}

void AddValidateOptions(po::options_description* desc, ValidateFlags* f) {
  desc->add_options()("help,h", "show this help")("costs", po::value(&f->costs_path),
                                                  ("replay this CostTable instead of profiling (at most " + LimitText(kMaxTextFileBytes) + ")").c_str())(
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

int ValidateCommand(int argc, char** argv) {
  ValidateFlags flags;
  po::options_description desc(
      "stateflow validate [options] (without --scenario: scenarios/tiny-train.textproto)");
  AddValidateOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kValidateName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kValidateExamples;
    return kExitOk;
  }
  if (backend::LaunchedByMpirun()) {
    return FailOnRankZero(kValidateName, Status::Invalid("run validate without mpirun: it starts "
                                                 "`mpirun -n P` for each real run itself"));
  }
  if (flags.steps && (*flags.steps < 1 || *flags.steps > 100000)) {
    return Fail(kValidateName, Status::Invalid("--steps must be in [1, 100000]"));
  }
  if (flags.rounds && (*flags.rounds < 1 || *flags.rounds > 1000)) {
    return Fail(kValidateName, Status::Invalid("--rounds must be in [1, 1000]"));
  }
  if (flags.timeout_s && *flags.timeout_s < 1) {
    return Fail(kValidateName, Status::Invalid("--timeout must be >= 1"));
  }
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--costs-out", flags.costs_out},
                                   {"--plot", flags.plot_path}}) {
    if (Status s = CheckOutputPath(flag, path); !s.ok()) return Fail(kValidateName, s);
  }
  if (Status s = CheckPictureFormat("--plot", flags.plot_path); !s.ok()) return Fail(kValidateName, s);
  if (vm.count("mpirun")) {
    if (Status s = CheckProgram("--mpirun", flags.profile.mpirun); !s.ok()) return Fail(kValidateName, s);
  }
  if (vm.count("python")) {
    if (Status s = CheckProgram("--python", flags.python); !s.ok()) return Fail(kValidateName, s);
  }
  return WithInterruptForwarding(kValidateName, [&] { return Validate(flags); });
}

}  // namespace stateflow::tools

// Shared pieces of the `stateflow` subcommands: the exit-code convention, the
// scenario options every command accepts, and error printing.
//
// Exit codes: 0 success; 2 bad input (flags, files, field values: the message
// names which); 1 anything else (a resource ran out, an internal error).
//
// Not a library: only tools/ includes this.
#pragma once

#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "schedule/plan.h"
#include "sim/cost_table.h"

namespace stateflow::tools {

namespace po = boost::program_options;

// A program_options value that sets `target` only when the flag is given.
template <typename T>
auto Optional(std::optional<T>* target) {
  return po::value<T>()->notifier([target](const T& v) { *target = v; });
}

// `s` without leading and trailing spaces and tabs.
std::string Trim(const std::string& s);

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

// Prints "stateflow <command>: <message>" to stderr, then the status's
// detail lines (a plan's grid) indented by two spaces, and returns the exit
// code for the status. Every line passes through Printable.
int Fail(const std::string& command, const Status& status);

// Flushes standard output and checks that everything written to it arrived
// (std::cout and the C stdout under it): a full disk, /dev/full or a closed
// pipe (SIGPIPE is ignored, see main.cc) is an error naming the reason.
Status FlushStandardOutput();

// The exit code of a command that returned `code`, once its standard output
// is flushed: `code` if the output arrived or the command had failed anyway,
// else a one-line error on stderr and kExitFailure.
int CheckedExit(const std::string& command, int code);

// An output file given by `flag` (--out, --trace, --costs-out, --plot,
// --dump-weights), checked before the work whose result it receives, so that
// a long run is not lost to a typo at its end: `path` is not a directory
// and is either a writable file or a new name in a writable directory.
// Errors (kInvalidInput) name the flag and the path. A full device
// (/dev/full) still passes and fails at the write (kResource, exit 1).
// An empty `path` (flag not given) is fine.
Status CheckOutputPath(const std::string& flag, const std::string& path);

// The picture formats the plotter (plots/stateflow_plots.py, _FORMATS)
// writes, by the path's extension.
inline constexpr const char* kPictureFormats[] = {"png", "svg", "pdf"};

// Ok for an empty path or one whose extension is a picture format; else
// "FLAG PATH: unknown picture format '.EXT' (use .png, .svg, .pdf)", so that
// a figure that cannot be drawn is refused before the work it shows.
Status CheckPictureFormat(const std::string& flag, const std::string& path);

// The program given to --mpirun: a path to an executable file, or a name
// found as one in PATH. Error (kInvalidInput): neither.
Status CheckProgram(const std::string& flag, const std::string& program);

// --scenario and the flag overrides of the common fields.
struct ScenarioFlags {
  std::string scenario_path;
  std::string model_preset;
  std::string cluster_preset;  // a preset name, or a ClusterSpec file (LoadResolvedScenario)
  std::string policy;
  std::optional<long long> chunks;
  std::optional<long long> virtual_stages;
  std::optional<double> alpha;
  std::optional<long long> microbatches;
  std::optional<long long> microbatch_size;
  std::optional<long long> stages;
  std::optional<long long> tensor_size;
  std::optional<long long> data_size;
  std::optional<long long> context_size;
  std::string distributed_optimizer;  // "on" or "off"; empty: the scenario's
  std::string overlap_grad_reduce;    // "on" or "off"; empty: the scenario's
  std::optional<long long> seq_len;
  std::string recompute;
  std::string system;  // --system: every schedule's ScheduleSpec.system
  std::string cost_model;
  std::string st_overlap;                 // "on" / "off" (every schedule)
  std::optional<std::int64_t> st_tile;    // schedule.st_tile (every schedule)
  std::optional<std::int64_t> compute_units;  // cluster.device.compute_units
  std::optional<long long> max_actions;  // tools/work_bounds.h
  // --vary NAME=FACTOR (repeatable): a cluster parameter scaled
  // (sim::VaryParameter), for sensitivity studies.
  std::vector<std::string> vary;
};

// Adds the scenario options to `desc`, writing into `flags`.
void AddScenarioOptions(po::options_description* desc, ScenarioFlags* flags);

// The CostTable at `path` (scenario/load.h), checked against the scenario's
// model and microbatch size (sim::CheckCostTableModel), as the index the
// simulator replays. Errors name the file.
Result<sim::CostTableIndex> LoadCostsFor(const std::string& path, const pb::Scenario& scenario);

// Writes `table` to `path` in text format (sim::CostTableText) after reading
// the text back as --costs reads it: parsed (scenario::ParseTextProto),
// equal to `table`, and indexed (sim::CostTableIndex::Make). A table that
// would not load is kInternal, and nothing is written; else WriteFile's
// errors.
// `samples_only`: a table of link samples alone (profile's link worker),
// read back but not indexed (it has no layers and no link fit yet).
Status WriteCostTableFile(const std::string& path, const pb::CostTable& table,
                          bool samples_only = false);

// A plan file for --plan: our text form (plan-dump's), or
// torch.distributed.pipelining's schedule CSV (schedule/torch_csv.h: told
// apart by its first line), whose torch microbatches are `chunks` (default
// 1) chunks each of our microbatches. Parsed, not validated; errors name the
// file and line.
Result<schedule::Plan> LoadPlanFile(const std::string& path, std::optional<long long> chunks);

// The schedule policy a run of `plan` is configured with: the plan's own
// name when the schedule core knows it, else "stateflow" (the most general:
// any chunk count), or for a plan with virtual stages "interleaved"
// ("zb-interleaved" when it splits its backwards, "zbv" when placed in a
// V); the
// plan's name then names the run in its report. (A run of a plan also takes
// its chunks and virtual stages unless the flags say otherwise.)
std::string SchedulePolicyFor(const schedule::Plan& plan);

// Loads the scenario (the file, or the embedded default), applies the flag
// overrides and resolves it. `policy` or `chunks`/`alpha` overrides apply to
// the schedule under study; a `policy` override also drops the baselines.
Result<scenario::ResolvedScenario> LoadResolvedScenario(const ScenarioFlags& flags);
// As above, with `default_text` (a scenario in text format, called
// `default_name` in messages) in place of the embedded default scenario.
Result<scenario::ResolvedScenario> LoadResolvedScenario(const ScenarioFlags& flags,
                                          std::string_view default_text,
                                          std::string_view default_name);

// Parses argv with `desc` (positional arguments are rejected); on error
// returns a Status naming the bad option.
Status ParseOptions(int argc, char** argv, const po::options_description& desc,
                    po::variables_map* vm);

// Subcommands (argv[0] is the subcommand name): `stateflow <name>`'s entry
// points, one per command file.
int SimulateCommand(int argc, char** argv);      // simulate_command.cc
int PlanDumpCommand(int argc, char** argv);      // plan_command.cc
int PresetsCommand(int argc, char** argv);       // plan_command.cc
int SweepCommand(int argc, char** argv);         // sweep_command.cc
int CapacityPlanCommand(int argc, char** argv);  // capacity_plan_command.cc
int TrainCommand(int argc, char** argv);         // train_command.cc
int ProfileCommand(int argc, char** argv);       // profile_command.cc
int ValidateCommand(int argc, char** argv);      // validate_command.cc
int CalibrateCommand(int argc, char** argv);     // calibrate_command.cc

}  // namespace stateflow::tools

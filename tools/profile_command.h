// What `stateflow profile` and `stateflow validate` share: the list of
// configurations a command covers (the scenario's schedule and baselines, or
// the grid of sweep list flags crossed with recompute modes), the options of
// a measurement (repetitions, warm-up, element type, threads, how to reach a
// second MPI rank), and profiling everything a list of configurations needs
// into one CostTable.
//
// Not a library outside tools/; the measuring itself is backend/profile/.
//
//   SF_ASSIGN_OR_RETURN(std::vector<RunConfig> configs, ConfigsFor(scenario, flags.configs, false));
//   SF_ASSIGN_OR_RETURN(pb::CostTable table, ProfileForConfigs(scenario, configs, flags.profile, &std::cerr));
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "tools/sweep_options.h"

namespace stateflow::tools {

// One configuration: a schedule (policy, N, alpha, recompute) at M
// microbatches of T tokens.
struct RunConfig {
  pb::ScheduleSpec schedule;
  int microbatches = 1;       // M
  std::int64_t seq_len = 1;   // T
};

// "stateflow N=4 M=8 T=256 recompute full" (alpha when not 0).
std::string ConfigName(const RunConfig& config);

// The scenario narrowed to `config`: its schedule, no baselines and no
// sweep, M and T set (and the precision, if given), resolved again.
Result<scenario::ResolvedScenario> ScenarioFor(const scenario::ResolvedScenario& scenario,
                                               const RunConfig& config,
                                               const pb::PrecisionSpec* precision = nullptr);

// The list flags (--policies, --chunks-list, --alpha-list,
// --microbatches-list, --seq-len-list, --global-batch-list as in
// `stateflow sweep`, and --recompute-list none,full).
struct ConfigFlags {
  SweepFlags sweep;
  std::optional<std::string> recompute;
  bool any() const;
};
void AddConfigOptions(boost::program_options::options_description* desc, ConfigFlags* flags);

// Without list flags: the scenario's schedule and each baseline, at its M
// and T. With them: the grid sim::ExpandSweep makes of the scenario's sweep
// ranges with the flags applied (1f1b gets N = 1), crossed with
// --recompute-list (else each schedule keeps its mode). `with_sweep` adds
// the grid of the scenario's own sweep ranges even without flags (what
// `profile` measures for). Errors name the flag or sweep field.
Result<std::vector<RunConfig>> ConfigsFor(const scenario::ResolvedScenario& scenario, const ConfigFlags& flags,
                                          bool with_sweep);

// How to measure.
struct ProfileFlags {
  std::optional<long long> repetitions;  // default 10
  std::optional<long long> warmup;       // default 2
  std::string dtype;                     // default train.dtype
  std::optional<long long> threads;      // default train.threads
  std::string link = "auto";             // auto, mpi or in-process
  std::string mpirun = "mpirun";
  // Processes timing the layers at once (mpirun -n K of this program, each
  // bound to its own hardware thread when there are enough); 1: this one.
  std::optional<long long> concurrent;
};
void AddProfileOptions(boost::program_options::options_description* desc, ProfileFlags* flags);

// The element type and Eigen thread count a measurement uses: the flags, else
// the scenario's train block, else float32 and 1. Errors name the flag.
struct Precision {
  std::string dtype;
  int threads = 1;
};
Result<Precision> PrecisionFor(const pb::Scenario& scenario, const ProfileFlags& flags);

// Profiles every layer kind of the scenario's model at every chunk length the
// configurations produce, under each of their recompute modes, and the
// optimizer: in this process, or with --concurrent K > 1 in K processes at
// once (`mpirun -n K` of this program in a hidden worker mode), so that every
// core computes as in a K-stage run, each sample's median then the mean of
// the K processes' medians. Then the link (`mpirun -n 2` of this program; or,
// with --link in-process or when that fails under --link auto, the
// in-process comm, which the table's notes then say). Progress goes to `log`
// (may be null). With K > 1 processes, `per_process` (may be null) gets
// each process's own table (process k is bound to hardware thread k, as MPI
// rank k of a run is), else it is left empty. Errors: bad flags, a
// configuration that cannot be cut, the timer's; a failed worker job; with
// --link mpi, a failed MPI job.
Result<pb::CostTable> ProfileForConfigs(const scenario::ResolvedScenario& scenario,
                                        const std::vector<RunConfig>& configs,
                                        const ProfileFlags& flags, std::ostream* log,
                                        std::vector<pb::CostTable>* per_process = nullptr);

// "recurrence/forward/none/64/0": what a sample measured (kind, pass, mode,
// tokens, prefix), equal for the same measurement in two tables.
std::string CostSampleKey(const pb::CostSample& sample);

// The table in text format, opened by comment lines saying what it is.
std::string CostTableText(const pb::CostTable& table);

// Fail (cli.h), printing only on MPI rank 0 of a job mpirun started (the
// rank read from the environment; MPI is not initialised).
int FailOnRankZero(const std::string& command, const Status& status);

}  // namespace stateflow::tools

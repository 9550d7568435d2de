// Profiling for `stateflow profile` and `stateflow validate`: the options of
// a measurement (repetitions, warm-up, element type, threads, how to reach a
// second MPI rank, concurrent processes) and profiling everything a list of
// configurations needs into one CostTable.
//
// Not a library outside tools/: the measuring itself is backend/profile/,
// the merge of tables sim/cost_table.h, the mpirun jobs tools/profile_jobs.h.
//
//   SF_ASSIGN_OR_RETURN(std::vector<RunConfig> configs, ConfigsFor(scenario, flags.configs, false));
//   SF_ASSIGN_OR_RETURN(pb::CostTable table, ProfileForConfigs(scenario, configs, flags.profile, &std::cerr));
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

#include "backend/profile/layer_timer.h"
#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "tools/run_configs.h"

namespace stateflow::tools {


// How to measure.
struct ProfileFlags {
  std::optional<long long> repetitions;  // default 10
  std::optional<long long> warmup;       // default 2
  std::string dtype;                     // default train.dtype
  std::string device;                    // default train.device (cpu)
  std::optional<long long> threads;      // default train.threads
  std::string link = "auto";             // auto, mpi or in-process
  std::string mpirun = "mpirun";
  // Processes timing the layers at once (mpirun -n K of this program, each
  // bound to its own hardware thread when there are enough); 1: this one.
  std::optional<long long> concurrent;
  // One line per timing step on stderr, with its wall seconds: a long
  // profile's progress, and where its time goes.
  bool verbose = false;
};
void AddProfileOptions(boost::program_options::options_description* desc, ProfileFlags* flags);

// The element type and Eigen thread count a measurement uses: the flags, else
// the scenario's train block, else float32 and 1. Errors name the flag.
struct Precision {
  std::string dtype;
  int threads = 1;
  std::string device = "cpu";
};
Result<Precision> PrecisionFor(const pb::Scenario& scenario, const ProfileFlags& flags);

// Repetitions and warm-up of every timing (defaults 10 and 2).
backend::TimingOptions Timing(const ProfileFlags& flags);

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

// `profile --kernel-costs`: this device's linear kernel (backend/profile/
// gemm_timer.h) timed at every GEMM the cost model looks up for the
// scenario's model and each of `extra_models` (models::LayerGemms of every
// layer kind, one tensor rank's share at parallel.tensor_size), forward,
// input and weight gradient, at B s tokens for every chunk length s the
// configurations produce; and, for each (kernel, head dim) of the models
// whose recurrence core the backend times phase by phase (every family: GDN
// and DeltaNet, Mamba-3, KDA), the
// core's forward and backward (Pre + ST + Out, the backward with its replay:
// LayerTimer::TimePhasesOnce) at every chunk length, at the cost model's
// core FLOPs (models::RecurrenceCoreFlops). Each the median of the
// repetitions. Returns the scenario's (resolved) cluster with
// `kernel_costs` replaced by a table of these GEMM and recurrence points and
// one source naming the device, host, threads, commit and time; attention
// and all-reduce points are left out (those run on the efficiency curve and
// the link model). Errors: bad flags, a model tensor_size does not divide
// (names it), the timers'. `gemm` and `recurrence` choose the components
// timed (--kernel-components).
struct KernelComponents {
  bool gemm = true;
  bool recurrence = true;
};
Result<pb::ClusterSpec> MeasureKernelCosts(const scenario::ResolvedScenario& scenario,
                                         const std::vector<RunConfig>& configs,
                                         const ProfileFlags& flags,
                                         const std::vector<pb::ModelSpec>& extra_models,
                                         KernelComponents components,
                                         std::ostream* log);

// Fail (cli.h), printing only on MPI rank 0 of a job mpirun started (the
// rank read from the environment; MPI is not initialised).
int FailOnRankZero(const std::string& command, const Status& status);

}  // namespace stateflow::tools

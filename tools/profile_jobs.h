// The mpirun jobs of profiling: `mpirun -n 2` of this program timing the
// link between two ranks, and `mpirun -n K` timing the layers in K
// processes at once; and the hidden worker modes of `stateflow profile`
// that those jobs run (--link-worker, --layers-worker).
//
// Not the profiling plan (tools/profiling.h) nor the measuring
// (backend/profile/).
//
//   SF_ASSIGN_OR_RETURN(LayerMeasurement m, LayersByMpirun(request, flags, /*ranks=*/4));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/profile/profiler.h"
#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "tools/profiling.h"

namespace stateflow::tools {

// For the commands that start child jobs (validate, profile): runs `body`
// with SIGINT, SIGTERM, SIGHUP and SIGQUIT forwarded to the running child
// (backend/profile/launch.h InstallInterruptForwarding). After an interrupt
// the exit code is 128 + the signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP,
// 131 SIGQUIT); `body` has printed the one
// line (a RunChild failed with "interrupted by ..."), or, if it finished
// anyway, this prints it.
int WithInterruptForwarding(const std::string& command, const std::function<int()>& body);

// `mpirun -n 2` of this program in its hidden link-worker mode: the
// ping-pong samples of messages of `elements` elements. Errors: no path to
// this program, a failed job (its last line of stderr).
Result<std::vector<pb::LinkSample>> LinkByMpirun(const std::vector<std::int64_t>& elements,
                                                 const ProfileFlags& flags,
                                                 const Precision& precision);

// `mpirun -n ranks` of this program in its hidden link-worker mode with
// --tensor-sums: the backend's tensor-parallel sum among `ranks` processes
// (backend::TimeTensorSumsMpi) of `elements` elements. Errors: as
// LinkByMpirun.
Result<std::vector<pb::LinkSample>> TensorSumsByMpirun(const std::vector<std::int64_t>& elements,
                                                       const ProfileFlags& flags,
                                                       const Precision& precision, int ranks);

// The layers timed in `ranks` processes at once: the merged table (each
// sample the mean of the processes' medians, sim::MergeCostTables), a note
// saying how, and each process's own table.
struct LayerMeasurement {
  pb::CostTable table;
  std::string note;
  std::vector<pb::CostTable> per_process;  // each worker's own table
};

// `mpirun -n K` of this program in its hidden layers-worker mode. Errors: a
// failed job (the workers' own message when they printed one: kInvalidInput
// for a model the backend cannot run), unreadable or differing tables.
Result<LayerMeasurement> LayersByMpirun(const backend::ProfileRequest& request,
                                        const ProfileFlags& flags, int ranks);

// The worker modes, run by the jobs above under mpirun; each returns the
// process's exit code.
// Ranks 0 and 1 ping-pong messages of `elements_text` ("64,4096") elements;
// rank 0 writes the samples as a CostTable to `out_path`.
// With `tensor_sums`, every rank of the job times the tensor-parallel sum
// instead, and rank 0 writes those samples.
int RunLinkWorker(const std::string& out_path, const std::string& elements_text,
                  const ProfileFlags& flags, bool tensor_sums = false);
// Every rank times the layers of the model in the CostTable at `job` at
// `tokens_text` chunk lengths under `modes_text` recompute modes and writes
// its table to <job>.<rank>.
int RunLayersWorker(const std::string& job, const std::string& tokens_text,
                    const std::string& modes_text, const ProfileFlags& flags);

}  // namespace stateflow::tools

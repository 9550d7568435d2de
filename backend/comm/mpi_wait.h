// The watchdog of the MPI backend (like NCCL's and Megatron's timeouts): every
// wait of this rank on another -- a message (MpiComm), a step collective
// (MpiGroup) -- polls its request and gives up after MpiWatchdogSeconds()
// without completing, with an error naming what it waited for and the peer.
// The command line then ends the job on every rank (AbortMpiJob), so a rank
// that stalls (a stopped process, a hung node) does not leave the others
// waiting forever.
//
// Internal to backend/comm/ (it includes <mpi.h>); the setting is in mpi.h.
//
//   SF_RETURN_IF_ERROR(WaitWithWatchdog(&request, &status, "stage 0: the activation of 1F0.2 from stage 1"));
#pragma once

#include <mpi.h>

#include <string>

#include "common/status.h"

namespace stateflow::backend {

// MPI_Wait with the watchdog. `what` names the wait and the peer. Errors
// (Resource): the MPI call's; "<what>: nothing for <s> s (the watchdog,
// --watchdog <s>): rank stalled or dead?".
Status WaitWithWatchdog(MPI_Request* request, MPI_Status* status, const std::string& what);

// "MPI_Xxx: <the MPI error string>".
Status MpiFailed(const char* call, int rc);

}  // namespace stateflow::backend

// The watchdog of the MPI backend (like NCCL's and Megatron's timeouts): every
// wait of this rank on another -- a message (MpiComm), a step collective
// (MpiGroup) -- polls its request and gives up after MpiWatchdogSeconds()
// without completing, with an error naming what it waited for and the peer.
// The command line then ends the job on every rank (AbortMpiJob), so a rank
// that stalls (a stopped process, a hung node) does not leave the others
// waiting forever.
//
// Stopped processes (docs/reliability.md, "A stopped job, a stopped
// mpirun"):
// - Time this rank itself was not running does not count: a whole job
//   stopped and continued (Ctrl-Z and fg, which mpirun forwards to its
//   ranks as SIGTSTP and SIGCONT; a batch system's suspend and resume)
//   goes on where it was, however long the stop. A gap of more than
//   kNotRunningGap_s between two looks at the clock of a polling loop
//   means the process was stopped (or not scheduled), and is left out.
// - The launcher (this rank's parent: mpirun, or Open MPI's daemon on a
//   remote node) stopped alone (SIGSTOP): the rank pauses in its next wait,
//   sleeping, until the launcher runs again, so the whole job pauses and
//   a SIGCONT to mpirun continues it; the pause does not count against a
//   peer. If the launcher stays stopped longer than the watchdog, the rank
//   prints its one line and exits (exit code 1) by itself: MPI_Abort would
//   wait for the stopped launcher, so nothing else could end it.
//
// A wait spins for its first 50 ms, then backs off (sleeps of 0.1 ms, 1 ms
// after 200 ms), so that a rank waiting on a stalled peer or a long bubble
// does not hold a core (before issue 31: all of one).
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

// A gap between two looks at the clock of a polling loop above which this
// process was not running (stopped, or not scheduled): left out of the time
// counted against a peer.
inline constexpr double kNotRunningGap_s = 0.5;

// "MPI_Xxx: <the MPI error string>".
Status MpiFailed(const char* call, int rc);

}  // namespace stateflow::backend

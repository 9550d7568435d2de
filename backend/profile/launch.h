// Starting this program's MPI jobs from inside it: `stateflow profile` runs
// its link ping-pong as `mpirun -n 2` of itself, and `stateflow validate`
// runs the real backend as `mpirun -n P stateflow train`. A child runs with
// stdin from /dev/null, stdout and stderr captured through files, in its own
// process group, and is killed (the whole group) when its time is up.
//
// Not a general process library (POSIX only; no pipes, no streaming) and not
// an MPI launcher of its own: mpirun starts the ranks.
//
//   std::vector<std::string> argv = MpirunArgv("mpirun", 2, {SelfExecutable(), "train", "--json"});
//   SF_ASSIGN_OR_RETURN(ChildResult r, RunChild(argv, /*timeout_s=*/300));
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace stateflow::backend {

struct ChildResult {
  int exit_code = -1;      // -1 if killed by a signal or by the time limit
  bool timed_out = false;
  // At the deadline, the child itself was stopped (process state T: SIGSTOP,
  // Ctrl-Z, a debugger), not running slowly.
  bool stopped = false;
  double elapsed_s = 0;
  std::string out;         // stdout
  std::string err;         // stderr
};

// Runs `argv` (argv[0] looked up in PATH) and waits for it, at most
// `timeout_s` seconds. Error (Resource): the program could not be started,
// or the capture files could not be made; or an interrupt (below). A
// non-zero exit is not an error here: the caller reads exit_code and err.
Result<ChildResult> RunChild(const std::vector<std::string>& argv, double timeout_s);

// Interrupts. After InstallInterruptForwarding(), SIGINT, SIGTERM, SIGHUP
// (a closed terminal, a dropped ssh session) and SIGQUIT no longer end this
// process at once: the first one is recorded, a running RunChild forwards it
// to the child's process group (SIGINT as SIGINT, the others as SIGTERM;
// mpirun forwards it to its ranks), waits up to kInterruptGrace_s for the child, then kills the
// whole group (SIGKILL), waits for the child's own children (mpirun's
// ranks, in groups of their own; SIGKILL after 1 s), and returns "interrupted by SIGTERM: stopped ...";
// a RunChild called after the interrupt returns that error without
// starting anything. The caller returns normally, so every TempFile is
// removed, and exits with 128 + PendingInterrupt() (130, 143, 129, 131).
// Work done in this process between children finishes its current item
// first.
inline constexpr double kInterruptGrace_s = 10;
void InstallInterruptForwarding();
// 0, or the first of those signals received since InstallInterruptForwarding.
int PendingInterrupt();
// "SIGINT", "SIGTERM", "SIGHUP" or "SIGQUIT".
std::string InterruptName(int signal);

// The path of the running executable (/proc/self/exe), or "" if unknown.
std::string SelfExecutable();

// `<mpirun> --quiet --oversubscribe --bind-to hwthread|none
// [--allow-run-as-root] -n <ranks> <program...>`; --quiet so that a failed
// rank's one line is all its stderr holds (Open MPI's frames about non-zero
// exits left out), --allow-run-as-root only when this process runs
// as root (Open MPI refuses root otherwise), --oversubscribe so that P ranks
// start on fewer cores. Each rank is bound to its own hardware thread when
// there are enough (std::thread::hardware_concurrency), so that a rank keeps
// one core for the whole run and a profile can time on the cores a run uses;
// else the ranks share the cores unbound.
std::vector<std::string> MpirunArgv(const std::string& mpirun, int ranks,
                                    const std::vector<std::string>& program);

// The last non-empty line of `text` (for one-line errors from a child).
std::string LastLine(const std::string& text);

}  // namespace stateflow::backend

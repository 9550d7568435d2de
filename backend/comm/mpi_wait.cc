#include "backend/comm/mpi_wait.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "backend/comm/mpi.h"
#include "common/process.h"

namespace stateflow::backend {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<double> watchdog_seconds{kDefaultWatchdogSeconds};

// How often a wait looks at its launcher, and how often a paused rank does.
constexpr auto kLauncherCheckEvery = std::chrono::milliseconds(100);
constexpr auto kPausePoll = std::chrono::milliseconds(20);

// A wait spins (MPI_Test back to back, as Open MPI's MPI_Wait does) for its
// first kSpinFor, then backs off: it sleeps kShortSleep between tests, and
// kLongSleep once it has waited kLongWait. A message that arrives during a
// sleep is seen at most one sleep late: at most 0.5 % of the wait so far
// (0.1 ms of a wait over 50 ms, 1 ms of one over 200 ms).
// A rank waiting on a stalled peer uses about 3 % of a core, not all of it.
constexpr auto kSpinFor = std::chrono::milliseconds(50);
constexpr auto kLongWait = std::chrono::milliseconds(200);
constexpr auto kShortSleep = std::chrono::microseconds(100);
constexpr auto kLongSleep = std::chrono::milliseconds(1);

std::string Seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// This rank's launcher: its parent when the rank started (mpirun, or Open
// MPI's daemon on a remote node); 0 when not started by mpirun.
pid_t Launcher() {
  static const pid_t launcher = LaunchedByMpirun() ? getppid() : 0;
  return launcher;
}

// Sleeps while the launcher is stopped (the job pauses with it). Past
// `limit` seconds of it, prints the rank's line and exits: MPI_Abort would
// wait for the stopped launcher.
void PauseWhileLauncherStopped(double limit, const std::string& what) {
  const pid_t launcher = Launcher();
  if (launcher == 0 || !ProcessIsStopped(launcher)) return;
  const Clock::time_point since = Clock::now();
  while (ProcessIsStopped(launcher)) {
    if (Since(since) > limit) {
      const std::string line = "stateflow: " + what + ": the launcher (mpirun, pid " +
                               std::to_string(launcher) + ") has been stopped for " +
                               Seconds(limit) + " s (the watchdog, --watchdog " + Seconds(limit) +
                               "): is it stalled? this rank ends\n";
      std::fputs(line.c_str(), stderr);
      std::fflush(stderr);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(kPausePoll);
  }
}

}  // namespace

void SetMpiWatchdogSeconds(double seconds) { watchdog_seconds.store(seconds); }
double MpiWatchdogSeconds() { return watchdog_seconds.load(); }

Status MpiFailed(const char* call, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  return Status::Resource(std::string(call) + ": " + std::string(text, static_cast<std::size_t>(length)));
}

Status WaitWithWatchdog(MPI_Request* request, MPI_Status* status, const std::string& what) {
  const double limit = MpiWatchdogSeconds();
  if (!(limit > 0) || std::isinf(limit)) {  // no watchdog: MPI's own wait
    const int rc = MPI_Wait(request, status);
    return rc == MPI_SUCCESS ? Status::Ok() : MpiFailed("MPI_Wait", rc).WithPrefix(what);
  }
  // One look at the launcher per kLauncherCheckEvery, across waits.
  static thread_local Clock::time_point next_launcher_check{};
  double waited_s = 0;  // running time spent waiting: what counts against the peer
  const Clock::time_point began = Clock::now();
  Clock::time_point last = began;
  bool backing_off = false;
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS) return MpiFailed("MPI_Test", rc).WithPrefix(what);
    if (done != 0) return Status::Ok();
    // Open MPI's MPI_Wait polls as well; while spinning, the clock is read
    // now and then; backing off, at every test.
    if (!backing_off && spins % 1024 != 1023) continue;
    const Clock::time_point now = Clock::now();
    const double gap = std::chrono::duration<double>(now - last).count();
    last = now;
    if (gap < kNotRunningGap_s) waited_s += gap;  // else this rank was stopped
    if (now >= next_launcher_check) {
      next_launcher_check = now + kLauncherCheckEvery;
      PauseWhileLauncherStopped(limit, what);
      last = Clock::now();  // a pause is not the peer's
    }
    if (waited_s > limit) {
      return Status::Resource(what + ": nothing for " + Seconds(limit) +
                              " s (the watchdog, --watchdog " + Seconds(limit) +
                              "): is that rank stalled or dead?");
    }
    const auto in_wait = now - began;
    if (in_wait >= kSpinFor) {
      backing_off = true;
      std::this_thread::sleep_for(in_wait >= kLongWait ? kLongSleep : kShortSleep);
    }
  }
}

}  // namespace stateflow::backend

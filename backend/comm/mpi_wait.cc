#include "backend/comm/mpi_wait.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <sstream>

#include "backend/comm/mpi.h"

namespace stateflow::backend {
namespace {

std::atomic<double> watchdog_seconds{kDefaultWatchdogSeconds};

std::string Seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
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
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Test(request, &done, status);
    if (rc != MPI_SUCCESS) return MpiFailed("MPI_Test", rc).WithPrefix(what);
    if (done != 0) return Status::Ok();
    // Open MPI's MPI_Wait polls as well; the clock is read now and then.
    if (spins % 1024 == 1023 &&
        std::chrono::duration<double>(Clock::now() - start).count() > limit) {
      return Status::Resource(what + ": nothing for " + Seconds(limit) +
                              " s (the watchdog, --watchdog " + Seconds(limit) +
                              "): is that rank stalled or dead?");
    }
  }
}

}  // namespace stateflow::backend

#include "backend/threading.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdlib>
#include <thread>

namespace stateflow::backend {

void SetKernelThreads(int threads) {
  omp_set_num_threads(threads);
  Eigen::setNbThreads(threads);
}

int KernelThreads() { return Eigen::nbThreads(); }

int LoopTeam(long long tasks) {
  const int threads = std::max(1, KernelThreads());
  if (threads == 1) return 1;
  return static_cast<int>(std::clamp<long long>(tasks, 2, threads));
}

int HardwareThreads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

int DefaultKernelThreads(int ranks_on_node) {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1, HardwareThreads() / std::max(1, ranks_on_node));
}

}  // namespace stateflow::backend

// Threads within one rank: the one place that sets how many threads the
// kernels use, Eigen's matrix products and the kernels' own OpenMP loops
// (heads of the GDN recurrence) alike. Results are deterministic for a given
// thread count: every parallel loop uses a static schedule and no reduction
// depends on which thread finishes first.
//
// Not a thread pool and not MPI: each rank sets its own count; ranks on one
// node share its cores (DefaultKernelThreads).
//
//   SetKernelThreads(DefaultKernelThreads(/*ranks_on_node=*/2));
//   ... GdnCoreForward / Eigen products run on KernelThreads() threads ...
#pragma once

namespace stateflow::backend {

// Sets the thread count of Eigen's products and of OpenMP parallel regions in
// this process. REQUIRES: threads >= 1.
void SetKernelThreads(int threads);

// The count set last (OpenMP's default, usually the hardware threads, before
// any SetKernelThreads).
int KernelThreads();

// The team size for a kernel's parallel loop over `tasks` independent lanes
// (heads, query tiles): min(tasks, KernelThreads()), but never a team of one
// while KernelThreads() > 1. Outside a parallel region Eigen splits every
// product over KernelThreads() threads (it checks omp_get_num_threads() ==
// 1), which for the kernels' small per-block products costs 50 to 100 times
// their single-thread time (docs/performance.md, "Threads and small
// products"); inside a team of two or more its products run on the calling
// thread. So with one head and two threads one thread works and one waits.
int LoopTeam(long long tasks);

// The hardware threads this process may use (std::thread::hardware_concurrency,
// at least 1).
int HardwareThreads();

// The default per rank when neither --threads nor train.threads is given:
// OMP_NUM_THREADS when it is set to a positive number (the OpenMP
// convention; the tests set 1), else max(1, HardwareThreads() /
// ranks_on_node), so that the ranks on one node share its cores without
// oversubscribing them.
int DefaultKernelThreads(int ranks_on_node);

}  // namespace stateflow::backend

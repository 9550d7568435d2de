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

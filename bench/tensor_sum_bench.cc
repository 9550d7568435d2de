// The tensor-parallel sum of the real backend (backend/comm/tensor_group.h:
// an MPI_Iallgather, then the additions in rank order) beside MPI's own
// MPI_Allreduce and beside what the cost model charges for it on a link of
// the given latency and bandwidth (models::RingAllReduceTime), for the
// activation sizes of a chunk: the measurement behind docs/validation.md
// "Tensor parallelism". Not Google Benchmark: it runs under mpirun.
//
//   mpirun -n 2 build/bench/tensor_sum_bench [latency_s bandwidth_bytes_per_s]
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/comm/mpi.h"
#include "models/cost_model.h"

int main(int argc, char** argv) {
  namespace sb = stateflow::backend;
  sb::MpiSession session(&argc, &argv);
  if (!session.status().ok()) {
    std::fprintf(stderr, "%s\n", session.status().message().c_str());
    return 1;
  }
  stateflow::pb::LinkSpec link;
  link.set_latency_s(argc > 2 ? std::atof(argv[1]) : 0.0);
  link.set_bandwidth_bytes_per_s(argc > 2 ? std::atof(argv[2]) : 1.0);
  auto group = sb::MakeMpiTensorGroup(1, session.size());
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().message().c_str());
    return 1;
  }
  const int reps = 2000;
  if ((*group)->rank() == 0) {
    std::printf("| floats | bytes | gather-sum (backend) | MPI_Allreduce |%s\n",
                argc > 2 ? " cost model on the link |" : "");
    std::printf("| ---: | ---: | ---: | ---: |%s\n", argc > 2 ? " ---: |" : "");
  }
  for (long n : {256L, 1024L, 4096L, 16384L, 65536L}) {
    std::vector<float> v(static_cast<std::size_t>(n), 1.0f);
    for (int w = 0; w < 100; ++w) (void)(*group)->AllReduceSum(v.data(), n);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      if (!(*group)->AllReduceSum(v.data(), n).ok()) return 1;
    }
    const double ours =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t1 = MPI_Wtime();
    for (int r = 0; r < reps; ++r) {
      MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }
    const double theirs = (MPI_Wtime() - t1) / reps;
    if ((*group)->rank() == 0) {
      std::printf("| %ld | %ld | %.2f us | %.2f us |", n, 4 * n, 1e6 * ours, 1e6 * theirs);
      if (argc > 2) {
        std::printf(" %.2f us |",
                    1e6 * stateflow::models::RingAllReduceTime(4.0 * n, session.size(), link));
      }
      std::printf("\n");
    }
  }
  return 0;
}

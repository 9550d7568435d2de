// The data-parallel replicas of one pipeline stage (parallel.data_size = D):
// what the trainer needs across them at the end of a step -- the gradient
// sum (plain data parallelism), and for the distributed optimizer the sum of
// each replica's shard delivered to that replica (a reduce-scatter, done
// piece by piece) and the updated shard sent back to every replica (an
// all-gather, likewise).
//
// Ranks are laid out as Megatron-LM lays them (its default order
// "tp-cp-ep-dp-pp": tensor fastest, pipeline slowest); with TP = 1 the
// world rank of (pipeline stage r, replica d) is GridRank: r D + d. So a
// stage's D replicas are D consecutive ranks, and a replica's P stages are
// ranks d, D + d, 2 D + d, ...
//
// Two implementations, as for Comm: MPI (each rank holds one replica:
// `local` has one buffer; a communicator of the stage's D ranks) and in one
// process (the caller holds all D replicas: `local` has D buffers in
// replica order). In one process the sum is taken in replica order, 0 to
// D - 1; MPI's order is its own (for D = 2 the same bits: a + b = b + a).
//
// Not pipeline traffic (comm.h) and not the step's scalar collectives
// (group.h). Collective over the stage's replicas: each makes the same calls
// in the same order. Host memory only (the cpu and host-grid devices).
//
//   std::unique_ptr<ReplicaSync> sync = MakeInProcessReplicaSync(2);
//   SF_RETURN_IF_ERROR(sync->AllReduceSum({grad0, grad1}, n));
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"

namespace stateflow::backend {

// World rank of pipeline stage `stage`, data-parallel replica `replica`.
inline int GridRank(int stage, int replica, int replicas) { return stage * replicas + replica; }

class ReplicaSync {
 public:
  virtual ~ReplicaSync() = default;
  virtual int replicas() const = 0;  // D
  // The replicas this process holds: first_local() .. + local_count() - 1.
  virtual int first_local() const = 0;
  virtual int local_count() const = 0;

  // Afterwards every local buffer of n elements holds the sum over the D
  // replicas' buffers. REQUIRES: local.size() == local_count().
  virtual Status AllReduceSum(std::span<float* const> local, std::int64_t n) = 0;
  virtual Status AllReduceSum(std::span<double* const> local, std::int64_t n) = 0;
  // Afterwards replica `root`'s buffer holds the sum; the others' are
  // unchanged.
  virtual Status ReduceSum(std::span<float* const> local, std::int64_t n, int root) = 0;
  virtual Status ReduceSum(std::span<double* const> local, std::int64_t n, int root) = 0;
  // Afterwards every replica's `bytes` bytes are replica `root`'s.
  virtual Status Broadcast(std::span<void* const> local, std::int64_t bytes, int root) = 0;
};

// All D replicas in this process. REQUIRES: replicas >= 1.
std::unique_ptr<ReplicaSync> MakeInProcessReplicaSync(int replicas);

}  // namespace stateflow::backend

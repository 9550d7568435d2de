// The tensor-parallel (TP) ranks of one pipeline stage of one data-parallel
// replica (parallel.tensor_size = TP): the collectives Megatron-style tensor
// parallelism needs inside a layer -- the sum of the partial outputs of a
// row-parallel projection (forward) and of the partial input gradients of a
// column-parallel one (backward), and the gather of per-token values that
// the vocabulary-parallel cross-entropy combines.
//
// Ranks are laid out as Megatron-LM lays them (its order "tp-cp-dp-pp":
// tensor fastest, pipeline slowest): world rank ((r D) + d) TP + t is tensor
// rank t of stage r of replica d (GridRank in replica_sync.h). So a stage's
// TP ranks are TP consecutive world ranks.
//
// Every sum is taken in rank order, 0 to TP - 1, on every rank (an
// all-gather, then the same additions everywhere): every rank holds the same
// bits, so the parameters that every TP rank keeps whole (norms, biases of
// row-parallel outputs) stay identical without being synchronised. (NCCL's
// and MPI's all-reduce give no such promise in general; this gather moves
// TP - 1 times the bytes of a ring all-reduce's 2 (TP - 1) / TP: a host-memory
// implementation for exactness, not speed.)
//
// Host memory only (the cpu and host-grid devices). Collective over the
// group: each rank makes the same calls in the same order.
//
//   TensorGroup* tp = transport.tensor.get();
//   SF_RETURN_IF_ERROR(tp->AllReduceSum(partial.data(), partial.numel()));
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"

namespace stateflow::backend {

class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;  // t
  virtual int size() const = 0;  // TP

  // Afterwards every rank's n elements hold the sum over the group's ranks,
  // added in rank order.
  virtual Status AllReduceSum(float* data, std::int64_t n) = 0;
  virtual Status AllReduceSum(double* data, std::int64_t n) = 0;
  // out (size() n elements) = every rank's `in` (n elements), in rank order.
  virtual Status AllGather(const float* in, float* out, std::int64_t n) = 0;
  virtual Status AllGather(const double* in, double* out, std::int64_t n) = 0;
};

// World rank of tensor rank t of stage r of replica d (TP ranks, D replicas).
inline int GridRank(int stage, int replica, int replicas, int tensor, int tensors) {
  return (stage * replicas + replica) * tensors + tensor;
}

// A TP group of one rank: sums and gathers are copies.
std::unique_ptr<TensorGroup> MakeSoloTensorGroup();

// For timing one tensor rank's share of a layer in one process (profile at
// parallel.tensor_size > 1): rank 0 of `size`, whose sums leave the data as
// it is and whose gathers repeat this rank's part `size` times. The values
// are not the whole layer's; the compute is one rank's, and the sums' time
// is the cost model's from a measured link (sim/cost_source.cc).
std::unique_ptr<TensorGroup> MakeTimingTensorGroup(int size);

}  // namespace stateflow::backend

// Megatron-style tensor parallelism inside a layer (parallel.tensor_size =
// TP): this rank's place in its TP group and the sum the layers call where a
// sharded computation meets a whole one.
//
// What a layer does on TP rank t of TP (docs/backend.md "Tensor
// parallelism"): its heads (recurrence and attention heads, K/V heads) and
// MLP columns are split into TP equal blocks and rank t holds block t: the
// input projections (q, k, v, gates, conv taps, per-head vectors, the MLP's
// gate and up) by rows (column-parallel), the output projections (o_proj,
// the MLP's down) by columns (row-parallel). Norms over the hidden size and
// biases of the row-parallel outputs are whole on every rank. So:
//   forward:  the row-parallel output is a partial sum (its bias added by
//             rank 0 alone): TpAllReduceSum, then the residual;
//   backward: the column-parallel input projections' d(input) is a partial
//             sum: TpAllReduceSum before the norm's backward.
// Every rank then holds the same block input and output gradient, and the
// whole parameters' gradients agree on every rank -- except those of the
// whole parameters only some heads use (Param::tp_partial_grad), which the
// trainer sums over the group after the step's backward.
//
//   SF_RETURN_IF_ERROR(TpAllReduceSum(d.tp, s->h.data(), S * d.C));
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/comm/tensor_group.h"
#include "backend/device/bf16.h"
#include "common/status.h"

namespace stateflow::backend {

struct TpShard {
  int rank = 0;
  int size = 1;
  TensorGroup* group = nullptr;  // not owned; null when size == 1

  bool on() const { return size > 1; }
  // This rank's block of n (REQUIRES: size divides n).
  std::int64_t Part(std::int64_t n) const { return n / size; }
  // Where that block starts.
  std::int64_t Offset(std::int64_t n) const { return rank * (n / size); }
};

// data (n, host memory) = the sum over the TP group (rank order); bf16 summed
// in float and rounded once. Nothing to do at TP = 1.
template <typename T>
Status TpAllReduceSum(const TpShard& tp, T* data, std::int64_t n) {
  if (!tp.on()) return Status::Ok();
  if (tp.group == nullptr) return Status::Internal("tensor parallelism without a tensor group");
  if constexpr (std::is_same_v<T, bf16>) {
    std::vector<float> wide(static_cast<std::size_t>(n));
    for (std::int64_t e = 0; e < n; ++e) wide[static_cast<std::size_t>(e)] = float(data[e]);
    SF_RETURN_IF_ERROR(tp.group->AllReduceSum(wide.data(), n));
    for (std::int64_t e = 0; e < n; ++e) data[e] = bf16(wide[static_cast<std::size_t>(e)]);
    return Status::Ok();
  } else {
    return tp.group->AllReduceSum(data, n);
  }
}

}  // namespace stateflow::backend

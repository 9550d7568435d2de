// Partitions of one sequence of T tokens into N chunks C_0..C_{N-1} with
// boundaries 0 = c_0 < c_1 < ... < c_N = T (paper, "Hybrid-Aware Sequence
// Chunking"). Chunk i starts at c_i and has s_i = c_{i+1} - c_i tokens.
//
//   equal:    c_i = i T / N
//   balanced: Cost_i equal for all i, where
//             Cost_i = W_tok s_i + W_soft (c_i s_i + s_i^2 / 2),
//             W_tok = L_lin C_lin + C_dense, W_soft = L_soft C_soft.
//             Since Cost_i = Acc(c_{i+1}) - Acc(c_i) with
//             Acc(c) = W_tok c + W_soft c^2 / 2, the boundaries solve
//             Acc(c_i) = (i / N) Acc(T) in closed form.
//   alpha:    c_i(alpha) = (1 - alpha) c_i^equal + alpha c_i^balanced,
//             alpha >= 0 (alpha > 1 exaggerates the imbalance),
//             then rounded to the nearest multiple of the granularity with
//             every chunk non-empty.
//
// Not a schedule: a partition says where chunks are, not when they run.
//
//   Result<Partition> p = MakePartition(65536, 8, 0.5, {1.0, 1e-4}, 128);
//   p->length(3);  // s_3
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace stateflow::schedule {

// Per-token and per-query-key-pair cost coefficients of Cost_i (any unit,
// only their ratio matters). per_pair = 0 makes the balanced partition equal.
struct ChunkCostCoefficients {
  double per_token = 1.0;  // W_tok
  double per_pair = 0.0;   // W_soft
};

class Partition {
 public:
  Partition() = default;
  // REQUIRES: boundaries strictly increasing, starting at 0 (checked by
  // MakeFromBoundaries, not here).
  explicit Partition(std::vector<std::int64_t> boundaries)
      : boundaries_(std::move(boundaries)) {}

  int num_chunks() const { return static_cast<int>(boundaries_.size()) - 1; }
  std::int64_t seq_len() const { return boundaries_.back(); }
  std::int64_t start(int i) const { return boundaries_[i]; }         // c_i
  std::int64_t length(int i) const {                                 // s_i
    return boundaries_[i + 1] - boundaries_[i];
  }
  const std::vector<std::int64_t>& boundaries() const { return boundaries_; }

  // Cost_i of the paper for these coefficients.
  double ChunkCost(int i, const ChunkCostCoefficients& coeffs) const;

 private:
  std::vector<std::int64_t> boundaries_;  // (N + 1)
};

// Real-valued boundaries (N + 1 values) of the equal partition; c_0 = 0 and
// c_N = seq_len exactly. Empty if num_chunks < 1.
std::vector<double> EqualBoundaries(std::int64_t seq_len, int num_chunks);

// Real-valued boundaries of the FLOP-balanced partition, solved exactly:
// c_i = 2 t_i / (W_tok + sqrt(W_tok^2 + 2 W_soft t_i)), t_i = (i/N) Acc(T)
// (the positive root of the quadratic, in a form without cancellation).
// per_pair == 0 returns EqualBoundaries. Empty if num_chunks < 1.
// REQUIRES: coefficients finite, >= 0, not both 0 (MakePartition checks).
std::vector<double> BalancedBoundaries(std::int64_t seq_len, int num_chunks,
                                       const ChunkCostCoefficients& coeffs);

// The alpha-interpolated partition rounded to `granularity` (g). Each inner
// boundary c_i(alpha), i = 1..N-1, is rounded to the nearest multiple of g
// (halves away from zero); c_0 = 0 and c_N = seq_len stay exact, so the last
// chunk need not be a multiple of g. Repair, which leaves boundaries that are
// already distinct and inside (0, T) untouched: boundaries are clamped to the
// multiples of g inside (0, T), sorted (alpha > 1 can make the real
// boundaries non-monotone or push them past T), and then made strictly
// increasing by moving a boundary that is not above its left neighbour one
// multiple past it, and pulling back from the right end any that ran past
// the last multiple below T. So alpha > 1 never fails, it only saturates:
// a chunk it would make empty (or negative) gets one multiple of g instead.
// Errors (naming the field): seq_len < 1, schedule.chunks < 1,
// schedule.alpha < 0 or not finite, schedule.granularity < 1, coefficients
// negative, not finite or both 0, or fewer than N - 1 multiples of g
// inside (0, seq_len) ("seq_len 300 cannot be cut into 4 non-empty chunks at
// granularity 128").
Result<Partition> MakePartition(std::int64_t seq_len, int num_chunks,
                                double alpha,
                                const ChunkCostCoefficients& coeffs,
                                int granularity);

// Checks user-given boundaries (e.g. from a plan file): at least two values,
// the first 0, strictly increasing. The error names the bad index.
Result<Partition> MakeFromBoundaries(std::vector<std::int64_t> boundaries);

}  // namespace stateflow::schedule

#include "schedule/partition.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace stateflow::schedule {
namespace {

// Acc(c) = W_tok c + W_soft c^2 / 2: the cost of the prefix [0, c).
double AccumulatedCost(double c, const ChunkCostCoefficients& coeffs) {
  return coeffs.per_token * c + 0.5 * coeffs.per_pair * c * c;
}

// The c >= 0 with Acc(c) = target >= 0. Of the two roots of
// (W_soft / 2) c^2 + W_tok c - target = 0 this is the non-negative one,
// written as 2 target / (W_tok + sqrt(W_tok^2 + 2 W_soft target)) so that no
// difference of nearly equal numbers is formed (the textbook
// (-W_tok + sqrt(...)) / W_soft loses all digits when W_soft << W_tok).
double InverseAccumulatedCost(double target,
                              const ChunkCostCoefficients& coeffs) {
  if (target <= 0.0) return 0.0;
  const double w_tok = coeffs.per_token;
  const double w_soft = coeffs.per_pair;
  return 2.0 * target / (w_tok + std::sqrt(w_tok * w_tok + 2.0 * w_soft * target));
}

Status CheckCoefficients(const ChunkCostCoefficients& coeffs) {
  if (!(coeffs.per_token >= 0.0) || !std::isfinite(coeffs.per_token)) {
    return Status::Invalid("chunk cost per_token (W_tok) must be finite and >= 0, got " +
                           std::to_string(coeffs.per_token));
  }
  if (!(coeffs.per_pair >= 0.0) || !std::isfinite(coeffs.per_pair)) {
    return Status::Invalid("chunk cost per_pair (W_soft) must be finite and >= 0, got " +
                           std::to_string(coeffs.per_pair));
  }
  if (coeffs.per_token == 0.0 && coeffs.per_pair == 0.0) {
    return Status::Invalid("chunk cost per_token (W_tok) and per_pair (W_soft) are both 0");
  }
  return Status::Ok();
}

// Inner boundaries, in multiples of the granularity g, from the real ones:
// each is rounded to the nearest multiple (halves away from zero), clamped to
// [1, max_multiple] (the multiples of g inside (0, T)), sorted, and then made
// strictly increasing by two sweeps: upward, a boundary not above its left
// neighbour moves to one multiple past it; downward, a boundary not below its
// right neighbour (or past max_multiple) moves to one multiple before it.
// REQUIRES: max_multiple >= real_inner.size().
std::vector<std::int64_t> RoundedInnerMultiples(const std::vector<double>& real_inner,
                                                int granularity,
                                                std::int64_t max_multiple) {
  const std::size_t n = real_inner.size();
  std::vector<std::int64_t> m(n);  // (N - 1) multiples of g
  for (std::size_t k = 0; k < n; ++k) {
    const double q = std::round(real_inner[k] / granularity);
    // Clamped before converting, so that the conversion cannot overflow
    // (NaN, not reachable with a finite alpha, goes to 1).
    if (!(q > 1.0)) {
      m[k] = 1;
    } else if (q >= static_cast<double>(max_multiple)) {
      m[k] = max_multiple;
    } else {
      m[k] = static_cast<std::int64_t>(q);
    }
  }
  std::sort(m.begin(), m.end());
  for (std::size_t k = 1; k < n; ++k) m[k] = std::max(m[k], m[k - 1] + 1);
  std::int64_t upper = max_multiple + 1;
  for (std::size_t k = n; k-- > 0;) {
    m[k] = std::min(m[k], upper - 1);
    upper = m[k];
  }
  return m;
}

}  // namespace

double Partition::ChunkCost(int i, const ChunkCostCoefficients& coeffs) const {
  const double c = static_cast<double>(start(i));
  const double s = static_cast<double>(length(i));
  return coeffs.per_token * s + coeffs.per_pair * (c * s + 0.5 * s * s);
}

std::vector<double> EqualBoundaries(std::int64_t seq_len, int num_chunks) {
  if (num_chunks < 1) return {};
  std::vector<double> c(num_chunks + 1);
  for (int i = 0; i <= num_chunks; ++i) {
    c[i] = static_cast<double>(i) * static_cast<double>(seq_len) / num_chunks;
  }
  c[num_chunks] = static_cast<double>(seq_len);
  return c;
}

std::vector<double> BalancedBoundaries(std::int64_t seq_len, int num_chunks,
                                       const ChunkCostCoefficients& coeffs) {
  if (num_chunks < 1) return {};
  if (coeffs.per_pair == 0.0) return EqualBoundaries(seq_len, num_chunks);
  const double total = AccumulatedCost(static_cast<double>(seq_len), coeffs);
  std::vector<double> c(num_chunks + 1);
  for (int i = 0; i < num_chunks; ++i) {
    c[i] = InverseAccumulatedCost(total * i / num_chunks, coeffs);
  }
  c[num_chunks] = static_cast<double>(seq_len);
  return c;
}

Result<Partition> MakePartition(std::int64_t seq_len, int num_chunks,
                                double alpha,
                                const ChunkCostCoefficients& coeffs,
                                int granularity) {
  if (seq_len < 1) {
    return Status::Invalid("seq_len must be >= 1, got " + std::to_string(seq_len));
  }
  if (num_chunks < 1) {
    return Status::Invalid("schedule.chunks must be >= 1, got " + std::to_string(num_chunks));
  }
  if (!(alpha >= 0.0) || !std::isfinite(alpha)) {
    return Status::Invalid("schedule.alpha must be finite and >= 0, got " + std::to_string(alpha));
  }
  if (granularity < 1) {
    return Status::Invalid("schedule.granularity must be >= 1, got " +
                           std::to_string(granularity));
  }
  SF_RETURN_IF_ERROR(CheckCoefficients(coeffs));
  // Inner boundaries must be distinct multiples of g in (0, T): g, 2g, ..., Kg.
  const std::int64_t max_multiple = (seq_len - 1) / granularity;  // K
  if (max_multiple < num_chunks - 1) {
    return Status::Invalid("seq_len " + std::to_string(seq_len) + " cannot be cut into " +
                           std::to_string(num_chunks) + " non-empty chunks at granularity " +
                           std::to_string(granularity) + " (schedule.chunks, schedule.granularity)");
  }
  const std::vector<double> equal = EqualBoundaries(seq_len, num_chunks);
  const std::vector<double> balanced = BalancedBoundaries(seq_len, num_chunks, coeffs);
  std::vector<double> inner(num_chunks - 1);
  for (int i = 1; i < num_chunks; ++i) {
    // (1 - alpha) e + alpha h, written so that a huge alpha gives +-inf
    // (clamped below), never inf - inf.
    inner[i - 1] = equal[i] + alpha * (balanced[i] - equal[i]);
  }
  const std::vector<std::int64_t> multiples =
      RoundedInnerMultiples(inner, granularity, max_multiple);
  std::vector<std::int64_t> boundaries;
  boundaries.reserve(num_chunks + 1);
  boundaries.push_back(0);
  for (std::int64_t m : multiples) boundaries.push_back(m * granularity);
  boundaries.push_back(seq_len);
  return Partition(std::move(boundaries));
}

Result<Partition> MakeFromBoundaries(std::vector<std::int64_t> boundaries) {
  if (boundaries.size() < 2) {
    return Status::Invalid("chunk boundaries: need at least 2 values (0 and seq_len), got " +
                           std::to_string(boundaries.size()));
  }
  if (boundaries[0] != 0) {
    return Status::Invalid("chunk boundaries[0] must be 0, got " + std::to_string(boundaries[0]));
  }
  for (std::size_t k = 1; k < boundaries.size(); ++k) {
    if (boundaries[k] <= boundaries[k - 1]) {
      return Status::Invalid("chunk boundaries[" + std::to_string(k) + "] = " +
                             std::to_string(boundaries[k]) + " must be greater than boundaries[" +
                             std::to_string(k - 1) + "] = " + std::to_string(boundaries[k - 1]) +
                             " (every chunk non-empty)");
    }
  }
  return Partition(std::move(boundaries));
}

}  // namespace stateflow::schedule

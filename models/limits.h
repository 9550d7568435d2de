// The accepted range of every numeric input: scenario fields and the command
// line flags that override them. One table, so that the scenario validators,
// the flag checks and --help state the same limits, and so that every size
// computed from in-range inputs fits in 64 bits (and in a double, finite).
//
// Not the checks of a field's relation to another (divisibility, P <= layers):
// those stay with the validators in models/model.cc and scenario/resolve.cc.
//
//   SF_RETURN_IF_ERROR(CheckRange("model.num_layers", m.num_layers(), kNumLayers));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace stateflow::models {

// An inclusive integer range [lo, hi].
struct IntRange {
  std::int64_t lo;
  std::int64_t hi;
};

// An inclusive real range [lo, hi]; `lo_open` makes it (lo, hi].
struct RealRange {
  double lo;
  double hi;
  bool lo_open = false;
};

// ---- model (proto ModelSpec); hybrid_period only for layer_pattern hybrid.
inline constexpr IntRange kNumLayers{1, 1 << 16};
inline constexpr IntRange kHybridPeriod{1, 1 << 16};
inline constexpr IntRange kHiddenSize{1, 1 << 20};
inline constexpr IntRange kHeads{1, 1 << 16};     // num_heads, attn_heads, gqa_group_size
inline constexpr IntRange kHeadDim{1, 1 << 16};   // head_dim_k/v, state_dim, attn_head_dim
inline constexpr IntRange kConvWidth{1, 1 << 10};
inline constexpr IntRange kMlpSize{1, 1 << 24};
inline constexpr IntRange kVocabSize{1, 1 << 24};

// ---- cluster (proto ClusterSpec), in FLOP/s, bytes, bytes/s and seconds.
// A rate's lower end keeps every time finite; its upper end is loose, since
// tests model a free resource with 1e30.
inline constexpr RealRange kPeakFlops{1.0, 1e30};
inline constexpr RealRange kBandwidthBytesPerS{1.0, 1e30};
inline constexpr RealRange kCapacityBytes{1.0, 1e18};
inline constexpr RealRange kLatencyS{0.0, 3600.0};
inline constexpr RealRange kEfficiencyTokens{1.0, 1e15};
inline constexpr IntRange kDevicesPerNode{1, 1 << 16};

// ---- precision (proto PrecisionSpec): bytes per parameter or element
// (0 in the scenario takes the default).
inline constexpr RealRange kPrecisionBytes{0.0, 64.0, /*lo_open=*/true};

// ---- parallelism, schedule, sequence (also the flags -P, -M, -N, -T, ...).
inline constexpr IntRange kPipelineSize{1, 4096};
inline constexpr IntRange kTensorSize{1, 4096};
inline constexpr IntRange kDataSize{1, 1 << 20};
inline constexpr IntRange kContextSize{1, 4096};
inline constexpr IntRange kMicrobatchSize{1, 1 << 20};
inline constexpr IntRange kMicrobatches{1, 1 << 20};
inline constexpr IntRange kChunks{1, 1 << 20};
// schedule.virtual_stages (v, model stages per pipeline stage) and its flag.
inline constexpr IntRange kVirtualStages{1, 1 << 10};
// schedule.st_tile (B_V, the state transition's tile of value rows), the
// --st-tile flag and a sweep's st_tile list.
inline constexpr IntRange kStTile{1, 4096};
inline constexpr IntRange kGranularity{1, 1 << 20};
// parallel.grad_bucket_size (parameters; 0 in the scenario: Megatron's default).
inline constexpr IntRange kGradBucketSize{1, std::int64_t{1} << 50};
inline constexpr RealRange kAlpha{0.0, 100.0};
// framework.vocab_divisible_by (Megatron's --make-vocab-size-divisible-by).
inline constexpr IntRange kVocabDivisibleBy{1, 4096};
inline constexpr IntRange kSeqLen{1, std::int64_t{1} << 40};
// Global batch = M * microbatch_size * data_size (sequences per step).
inline constexpr IntRange kGlobalBatch{1, INT32_MAX};

// "[1, 65536]" or "(0, 64]".
std::string RangeText(const IntRange& range);
std::string RangeText(const RealRange& range);

// Ok when `value` is in `range`, else "FIELD must be in [LO, HI] (got V)".
// The unsigned overload takes any proto integer without a narrowing cast.
Status CheckRange(std::string_view field, std::uint64_t value, const IntRange& range);
Status CheckRange(std::string_view field, std::int64_t value, const IntRange& range);
inline Status CheckRange(std::string_view field, std::uint32_t value, const IntRange& range) {
  return CheckRange(field, static_cast<std::uint64_t>(value), range);
}
inline Status CheckRange(std::string_view field, int value, const IntRange& range) {
  return CheckRange(field, static_cast<std::int64_t>(value), range);
}
// Also rejects NaN and infinities.
Status CheckRange(std::string_view field, double value, const RealRange& range);

}  // namespace stateflow::models

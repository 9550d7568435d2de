// Timing the device's linear kernel (Ops<T>::LinearForward and
// LinearBackward, what every projection of every layer calls) at a shape, so
// that a cluster's kernel-cost table (models/kernel_costs.h, GemmPoint) can
// carry this device's own GEMM rates by shape: `stateflow profile
// --kernel-costs` (docs/cost-model.md, "Kernel costs"). One repetition is one
// call, or, for a call shorter than kMinSpanS, as many calls in one timer
// span as reach it (the span's seconds divided by the calls).
//
// A linear of R tokens, C input and D output features is three GEMMs, each
// recorded in the cost model's (m, n, k) convention for the pass
// (CostModel::ComputeTime): the forward y = x W^T is [R, C] x [C, D] (m R,
// n D, k C); the input gradient dx = dy W is [R, D] x [D, C] (m R, n C, k
// D); the weight gradient dW += dy^T x is looked up as m C, n D, k R.
//
// Not the layer timer (layer_timer.h: whole layers) and not a writer of
// cluster files (tools/profiling.h).
//
//   SF_ASSIGN_OR_RETURN(std::vector<double> s, TimeLinear<float>(dev, {LinearPass::kForward, 256, 64, 192}, {}));
//   pb::GemmPoint p = GemmPointOf({LinearPass::kForward, 256, 64, 192}, Median(s), "fp32");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/device/device.h"
#include "backend/profile/layer_timer.h"
#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

enum class LinearPass { kForward, kInputGrad, kWeightGrad };

// A call of the linear kernel: the pass, R tokens, C input and D output
// features.
struct LinearShape {
  LinearPass pass = LinearPass::kForward;
  std::int64_t rows = 0, in = 0, out = 0;
  friend bool operator<(const LinearShape& a, const LinearShape& b) {
    if (a.pass != b.pass) return a.pass < b.pass;
    if (a.rows != b.rows) return a.rows < b.rows;
    if (a.in != b.in) return a.in < b.in;
    return a.out < b.out;
  }
  friend bool operator==(const LinearShape&, const LinearShape&) = default;
};

// A timer span shorter than this is repeated inside one span.
constexpr double kMinSpanS = 2e-4;

// "forward", "input-grad", "weight-grad".
const char* LinearPassName(LinearPass pass);

// Seconds per call of `shape`'s pass on `device` (nullptr: the CPU), one per
// kept repetition (options.repetitions after options.warmup thrown away),
// inputs a fixed pattern of unit scale. Errors: a dimension < 1 (names it),
// more than 2^31 elements in one operand, the allocator's, the timer's.
template <typename T>
Result<std::vector<double>> TimeLinear(Device* device, const LinearShape& shape,
                                       const TimingOptions& options);

// The GemmPoint of `shape` in the cost model's convention (above), at
// 2 R C D FLOPs in `seconds`; `dtype` as GemmPoint.dtype ("fp32", "bf16",
// "fp64").
pb::GemmPoint GemmPointOf(const LinearShape& shape, double seconds, const std::string& dtype);

}  // namespace stateflow::backend

// The KDA gate as grid functors: the per-channel log decay
//   g[t, h, c] = -exp(A_log[h]) softplus(a[t, h, c] + dt_bias[h, c])
// and its backward. GDN's gate (elementwise.h GdnGateForwardFn, rows.h
// GdnGateParamGradFn) with a decay per key channel: dt_bias is per head and
// channel, A_log per head.
//
// The parameter gradients are reductions over tokens: one call per output
// element loops over the tokens in order (and, for dA_log, the channels), so
// they need no atomics and give the same bits on every run and device.
//
// Not the core (kda_forward.h) and not beta (SigmoidForwardFn, elementwise.h).
//
//   exec.ForEach(T * H * Dk, grid::KdaGateForwardFn<float>{g, a, A_log, dt_bias, H, Dk});
//   exec.ForEach(T * H * Dk, grid::KdaGateInputGradFn<float>{da, dg, a, A_log, dt_bias, H, Dk});
//   exec.ForEach(H * Dk, grid::KdaGateBiasGradFn<float>{ddt_bias, da, T, H, Dk});
//   exec.ForEach(H, grid::KdaGateDecayGradFn<float>{dA_log, dg, a, A_log, dt_bias, T, H, Dk});
//
// Dimensions: T tokens, H heads, Dk key channels. Layouts: a, g, da, dg
// (T, H, Dk); A_log, dA_log (H); dt_bias, ddt_bias (H, Dk).
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"
#include "backend/device/precision.h"

namespace stateflow::backend::grid {

// Element (t, h, c): g = -exp(A_log[h]) softplus(a + dt_bias[h, c]).
template <typename T>
struct KdaGateForwardFn {
  T* g;               // (T, H, Dk), written
  const T* a;         // (T, H, Dk)
  const T* A_log;     // (H)
  const T* dt_bias;   // (H, Dk)
  int64_t H, Dk;
  SF_HD void operator()(int64_t i) const {
    const int64_t hc = i % (H * Dk), h = hc / Dk;
    const ComputeOf<T> x = ComputeOf<T>(a[i]) + ComputeOf<T>(dt_bias[hc]);
    g[i] = -Exp(ComputeOf<T>(A_log[h])) * Softplus(x);
  }
};

// Element (t, h, c): da = -dg exp(A_log[h]) sigmoid(a + dt_bias[h, c]).
template <typename T>
struct KdaGateInputGradFn {
  T* da;              // (T, H, Dk), written
  const T* dg;        // (T, H, Dk)
  const T* a;
  const T* A_log;
  const T* dt_bias;
  int64_t H, Dk;
  SF_HD void operator()(int64_t i) const {
    const int64_t hc = i % (H * Dk), h = hc / Dk;
    const ComputeOf<T> x = ComputeOf<T>(a[i]) + ComputeOf<T>(dt_bias[hc]);
    da[i] = -ComputeOf<T>(dg[i]) * Exp(ComputeOf<T>(A_log[h])) * Sigmoid(x);
  }
};

// Entry (h, c): ddt_bias[h, c] += sum_t da[t, h, c] (da from
// KdaGateInputGradFn), tokens in order.
template <typename T>
struct KdaGateBiasGradFn {
  GradOf<T>* ddt_bias;  // (H, Dk), accumulated
  const T* da;          // (T, H, Dk)
  int64_t T_len, H, Dk;
  SF_HD void operator()(int64_t hc) const {
    ComputeOf<T> sum = 0;
    for (int64_t t = 0; t < T_len; ++t) sum += ComputeOf<T>(da[t * H * Dk + hc]);
    ddt_bias[hc] += sum;
  }
};

// Head h: dA_log[h] += sum_{t, c} -dg exp(A_log[h]) softplus(a + dt_bias[h, c])
// (= sum dg g), tokens in order, channels in order inside each.
template <typename T>
struct KdaGateDecayGradFn {
  GradOf<T>* dA_log;  // (H), accumulated
  const T* dg;        // (T, H, Dk)
  const T* a;
  const T* A_log;
  const T* dt_bias;
  int64_t T_len, H, Dk;
  SF_HD void operator()(int64_t h) const {
    const ComputeOf<T> rate = Exp(ComputeOf<T>(A_log[h]));
    ComputeOf<T> sum = 0;
    for (int64_t t = 0; t < T_len; ++t) {
      for (int64_t c = 0; c < Dk; ++c) {
        const int64_t i = (t * H + h) * Dk + c;
        const ComputeOf<T> x = ComputeOf<T>(a[i]) + ComputeOf<T>(dt_bias[h * Dk + c]);
        sum += -ComputeOf<T>(dg[i]) * rate * Softplus(x);
      }
    }
    dA_log[h] += sum;
  }
};

}  // namespace stateflow::backend::grid

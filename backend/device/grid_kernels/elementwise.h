// The per-element grid kernels: one functor per map, called as f(i) for every
// i in [0, n) by an executor's ForEach (a host loop, or one CUDA thread per
// i). Each writes only element i of its outputs, so any order and any
// parallel split gives the same bits.
//
// What each computes is the contract of the CPU kernel or Ops method named in
// its comment (backend/kernels/*.h, backend/device/ops.h); GridOps
// (grid_ops.h) launches them. Not the row, column or tile kernels (rows.h,
// gdn.h).
//
//   exec.ForEach(n, grid::SiluForwardFn<float>{y, x});
//
// Dimensions: n elements (any shape, flattened); R rows, C columns.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"
#include "backend/device/precision.h"

namespace stateflow::backend::grid {

// x[i] = value.
template <typename T>
struct FillFn {
  T* x;
  T value;
  SF_HD void operator()(int64_t i) const { x[i] = value; }
};

// y[i] = x[i] converted: exact when widening, rounded to nearest even when
// narrowing float to bf16 (bf16.h).
template <typename To, typename From>
struct ConvertFn {
  To* y;
  const From* x;
  SF_HD void operator()(int64_t i) const { y[i] = static_cast<To>(x[i]); }
};

// y[i] = x[i].
template <typename T>
struct CopyFn {
  T* y;
  const T* x;
  SF_HD void operator()(int64_t i) const { y[i] = x[i]; }
};

// y[i] += x[i].
template <typename T>
struct AddFn {
  T* y;
  const T* x;
  SF_HD void operator()(int64_t i) const { y[i] += x[i]; }
};

// y[i] = a[i] * b[i] (y may alias a or b).
template <typename T>
struct MulFn {
  T* y;
  const T* a;
  const T* b;
  SF_HD void operator()(int64_t i) const { y[i] = a[i] * b[i]; }
};

// y (R, C) = (x * rstd per row) * w per column; i = n * C + c.
template <typename T>
struct RmsNormApplyFn {
  T* y;
  const T* x;
  const StatOf<T>* rstd;  // (R)
  const T* w;     // (C)
  int64_t C;
  SF_HD void operator()(int64_t i) const {
    y[i] = x[i] * rstd[i / C] * w[i % C];
  }
};

// LayerNormForward's apply: y (R, C) = (x - mean) * rstd per row * w per
// column + b per column (b nullptr: none); i = n * C + c.
template <typename T>
struct LayerNormApplyFn {
  T* y;
  const T* x;
  const StatOf<T>* mean;  // (R)
  const StatOf<T>* rstd;  // (R)
  const T* w;     // (C)
  const T* b;     // (C) or nullptr
  int64_t C;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = i / C, c = i % C;
    const ComputeOf<T> v = (x[i] - mean[n]) * rstd[n] * w[c];
    y[i] = b != nullptr ? v + b[c] : v;
  }
};

// y (R, D) += b (D) per row; i = n * D + d (LinearForward's bias).
template <typename T>
struct AddBiasFn {
  T* y;
  const T* b;
  int64_t D;
  SF_HD void operator()(int64_t i) const { y[i] += b[i % D]; }
};

// SiluForward: y = x sigmoid(x) (y may alias x).
template <typename T>
struct SiluForwardFn {
  T* y;
  const T* x;
  SF_HD void operator()(int64_t i) const { y[i] = x[i] * Sigmoid(x[i]); }
};

// SiluBackward: dx = dy s (1 + x (1 - s)), s = sigmoid(x) (dx may alias dy).
template <typename T>
struct SiluBackwardFn {
  T* dx;
  const T* dy;
  const T* x;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> s = Sigmoid(x[i]);
    dx[i] = dy[i] * s * (ComputeOf<T>(1) + x[i] * (ComputeOf<T>(1) - s));
  }
};

// GeluForward: y = x Phi(x) (y may alias x).
template <typename T>
struct GeluForwardFn {
  T* y;
  const T* x;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> v = x[i];
    y[i] = v * NormalCdf(v);
  }
};

// GeluBackward: dx = dy (Phi(x) + x phi(x)) (dx may alias dy).
template <typename T>
struct GeluBackwardFn {
  T* dx;
  const T* dy;
  const T* x;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> v = x[i];
    dx[i] = dy[i] * (NormalCdf(v) + v * NormalPdf(v));
  }
};

// The SwiGLU hidden h = silu(gate) * up (SwigluMlpForward).
template <typename T>
struct SwigluHiddenFn {
  T* h;
  const T* gate;
  const T* up;
  SF_HD void operator()(int64_t i) const {
    h[i] = gate[i] * Sigmoid(gate[i]) * up[i];
  }
};

// SwigluMlpBackward's middle: from dh (in dgate) to d(gate) (in dgate) and
// d(up) (in hd).
template <typename T>
struct SwigluBackwardFn {
  T* dgate;  // in: dh; out: d(gate)
  T* hd;     // out: d(up)
  const T* gate;
  const T* up;
  SF_HD void operator()(int64_t i) const {
    const ComputeOf<T> s = Sigmoid(gate[i]);
    const ComputeOf<T> dh = dgate[i];
    dgate[i] = dh * up[i] * s * (ComputeOf<T>(1) + gate[i] * (ComputeOf<T>(1) - s));
    hd[i] = dh * gate[i] * s;
  }
};

// GdnGateForward: g = -exp(A_log[h]) softplus(a + dt_bias[h]); i = t H + h.
template <typename T>
struct GdnGateForwardFn {
  T* g;
  const T* a;
  const T* A_log;
  const T* dt_bias;
  int64_t H;
  SF_HD void operator()(int64_t i) const {
    const int64_t h = i % H;
    g[i] = -Exp(A_log[h]) * Softplus(a[i] + dt_bias[h]);
  }
};

// GdnGateBackward's da = -dg exp(A_log[h]) sigmoid(a + dt_bias[h]).
template <typename T>
struct GdnGateInputGradFn {
  T* da;
  const T* dg;
  const T* a;
  const T* A_log;
  const T* dt_bias;
  int64_t H;
  SF_HD void operator()(int64_t i) const {
    const int64_t h = i % H;
    da[i] = -dg[i] * Exp(A_log[h]) * Sigmoid(a[i] + dt_bias[h]);
  }
};

// SigmoidForward: beta = sigmoid(b) (Ops::SigmoidForward).
template <typename T>
struct SigmoidForwardFn {
  T* beta;
  const T* b;
  SF_HD void operator()(int64_t i) const { beta[i] = Sigmoid(b[i]); }
};

// SigmoidBackward: db = dbeta beta (1 - beta).
template <typename T>
struct SigmoidBackwardFn {
  T* db;
  const T* dbeta;
  const T* beta;
  SF_HD void operator()(int64_t i) const {
    db[i] = dbeta[i] * beta[i] * (ComputeOf<T>(1) - beta[i]);
  }
};

// One AdamW update of element i (train/adamw.cc's loop body): the moments,
// then w -= step_size m / (sqrt(v) inv_sqrt_c2 + eps) + lr_decay w.
template <typename T>
struct AdamWFn {
  T* w;
  T* m;
  T* v;
  const T* g;
  ComputeOf<T> beta1, one_minus_beta1, beta2, one_minus_beta2;
  ComputeOf<T> step_size, inv_sqrt_c2, eps, lr_decay;
  SF_HD void operator()(int64_t i) const {
    m[i] = beta1 * m[i] + one_minus_beta1 * g[i];
    v[i] = beta2 * v[i] + one_minus_beta2 * g[i] * g[i];
    w[i] -= step_size * m[i] / (Sqrt(v[i]) * inv_sqrt_c2 + eps) +
            lr_decay * w[i];
  }
};

}  // namespace stateflow::backend::grid

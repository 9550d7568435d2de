// The per-row and per-column grid kernels: one functor call owns one row (a
// reduction along it, then the row's outputs) or one column (a sum down the
// rows, in row order). Accumulations across rows -- RMSNorm's dw,
// LayerNorm's dw and db, a bias's column sums, the embedding's scatter-add
// with repeated ids, a short convolution's dw -- are one call per output
// column looping over the rows, so they need no atomics and give the same
// bits on every run and device.
//
// The contracts are those of the CPU kernels named beside each functor
// (backend/kernels/*.h); GridOps (grid_ops.h) launches them. Not the GDN
// core's tiles (gdn.h).
//
//   exec.ForEach(R, grid::RmsNormRstdFn<float>{rstd, x, C, eps});
//
// Dimensions: R rows (tokens, or vectors to normalise), C columns (features),
// D a normalised vector's length, T tokens, H heads, W conv taps, V
// vocabulary, vs the width of one vocabulary slice.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"
#include "backend/device/precision.h"

namespace stateflow::backend::grid {

// ---- RMSNorm (rmsnorm.h) ----------------------------------------------------

// Row n: rstd[n] = 1 / sqrt(mean_c x^2 + eps).
template <typename T>
struct RmsNormRstdFn {
  StatOf<T>* rstd;      // (R)
  const T* x;   // (R, C)
  int64_t C;
  ComputeOf<T> eps;
  SF_HD void operator()(int64_t n) const {
    ComputeOf<T> ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    rstd[n] = ComputeOf<T>(1) / Sqrt(ss / ComputeOf<T>(C) + eps);
  }
};

// Row n of RmsNormBackward's dx = rstd (g - xhat mean_c(g xhat)),
// g = dy w, xhat = x rstd.
template <typename T>
struct RmsNormInputGradFn {
  T* dx;          // (R, C)
  const T* dy;    // (R, C)
  const T* x;     // (R, C)
  const T* w;     // (C)
  const StatOf<T>* rstd;  // (R)
  int64_t C;
  SF_HD void operator()(int64_t n) const {
    const ComputeOf<T> r = rstd[n];
    ComputeOf<T> m = 0;
    for (int64_t c = 0; c < C; ++c) {
      m += (dy[n * C + c] * w[c]) * (x[n * C + c] * r);
    }
    m /= ComputeOf<T>(C);
    for (int64_t c = 0; c < C; ++c) {
      const ComputeOf<T> g = dy[n * C + c] * w[c];
      dx[n * C + c] = (g - (x[n * C + c] * r) * m) * r;
    }
  }
};

// Column c: dw[c] += sum_n dy xhat (rows in order).
template <typename T>
struct RmsNormWeightGradFn {
  GradOf<T>* dw;          // (C)
  const T* dy;    // (R, C)
  const T* x;     // (R, C)
  const StatOf<T>* rstd;  // (R)
  int64_t R, C;
  SF_HD void operator()(int64_t c) const {
    ComputeOf<T> acc = 0;
    for (int64_t n = 0; n < R; ++n) {
      acc += dy[n * C + c] * (x[n * C + c] * rstd[n]);
    }
    dw[c] += acc;
  }
};

// ---- LayerNorm (layer_norm.h) ----------------------------------------------
// Applied per element by LayerNormApplyFn (elementwise.h).

// Row n: mean[n] = mean_c x, rstd[n] = 1 / sqrt(mean_c (x - mean)^2 + eps):
// two passes over the row, so that a row far from zero keeps its variance
// (never E[x^2] - mean^2).
template <typename T>
struct LayerNormStatsFn {
  StatOf<T>* mean;  // (R)
  StatOf<T>* rstd;  // (R)
  const T* x;       // (R, C)
  int64_t C;
  ComputeOf<T> eps;
  SF_HD void operator()(int64_t n) const {
    ComputeOf<T> s = 0;
    for (int64_t c = 0; c < C; ++c) s += x[n * C + c];
    const ComputeOf<T> m = s / ComputeOf<T>(C);
    ComputeOf<T> ss = 0;
    for (int64_t c = 0; c < C; ++c) {
      const ComputeOf<T> d = x[n * C + c] - m;
      ss += d * d;
    }
    mean[n] = m;
    rstd[n] = ComputeOf<T>(1) / Sqrt(ss / ComputeOf<T>(C) + eps);
  }
};

// Row n of LayerNormBackward's dx =
// rstd (g - mean_c(g) - xhat mean_c(g xhat)), g = dy w, xhat = (x - mean) rstd.
template <typename T>
struct LayerNormInputGradFn {
  T* dx;                  // (R, C)
  const T* dy;            // (R, C)
  const T* x;             // (R, C)
  const T* w;             // (C)
  const StatOf<T>* mean;  // (R)
  const StatOf<T>* rstd;  // (R)
  int64_t C;
  SF_HD void operator()(int64_t n) const {
    const ComputeOf<T> mu = mean[n], r = rstd[n];
    ComputeOf<T> mg = 0, mgx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const ComputeOf<T> g = dy[n * C + c] * w[c];
      mg += g;
      mgx += g * ((x[n * C + c] - mu) * r);
    }
    mg /= ComputeOf<T>(C);
    mgx /= ComputeOf<T>(C);
    for (int64_t c = 0; c < C; ++c) {
      const ComputeOf<T> g = dy[n * C + c] * w[c];
      const ComputeOf<T> xhat = (x[n * C + c] - mu) * r;
      dx[n * C + c] = ((g - mg) - xhat * mgx) * r;
    }
  }
};

// Column c: dw[c] += sum_n dy xhat, db[c] += sum_n dy (nullptr: skipped),
// rows in order.
template <typename T>
struct LayerNormParamGradFn {
  GradOf<T>* dw;          // (C)
  GradOf<T>* db;          // (C) or nullptr
  const T* dy;            // (R, C)
  const T* x;             // (R, C)
  const StatOf<T>* mean;  // (R)
  const StatOf<T>* rstd;  // (R)
  int64_t R, C;
  SF_HD void operator()(int64_t c) const {
    ComputeOf<T> acc_w = 0, acc_b = 0;
    for (int64_t n = 0; n < R; ++n) {
      const ComputeOf<T> d = dy[n * C + c];
      acc_w += d * ((x[n * C + c] - mean[n]) * rstd[n]);
      acc_b += d;
    }
    dw[c] += acc_w;
    if (db != nullptr) db[c] += acc_b;
  }
};

// Column c: out[c] += sum_n in[n, c] (a bias gradient: LinearBackward's db).
template <typename T>
struct ColumnSumAddFn {
  GradOf<T>* out;  // (C): a bias's gradient
  const T* in;   // (R, C)
  int64_t R, C;
  SF_HD void operator()(int64_t c) const {
    ComputeOf<T> acc = 0;
    for (int64_t n = 0; n < R; ++n) acc += in[n * C + c];
    out[c] += acc;
  }
};

// ---- L2 norm (gdn_prep.h) ---------------------------------------------------

// Row r: rnorm = 1 / sqrt(|x_r|^2 + eps), y_r = x_r (rnorm scale).
template <typename T>
struct L2NormForwardFn {
  T* y;         // (R, D)
  StatOf<T>* rnorm;     // (R)
  const T* x;   // (R, D)
  int64_t D;
  ComputeOf<T> scale, eps;
  SF_HD void operator()(int64_t r) const {
    ComputeOf<T> ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += x[r * D + d] * x[r * D + d];
    const ComputeOf<T> n = ComputeOf<T>(1) / Sqrt(ss + eps);
    rnorm[r] = n;
    for (int64_t d = 0; d < D; ++d) y[r * D + d] = x[r * D + d] * (n * scale);
  }
};

// Row r: dx = (dy - x rnorm^2 (x . dy)) (rnorm scale).
template <typename T>
struct L2NormBackwardFn {
  T* dx;           // (R, D)
  const T* dy;     // (R, D)
  const T* x;      // (R, D)
  const StatOf<T>* rnorm;  // (R)
  int64_t D;
  ComputeOf<T> scale;
  SF_HD void operator()(int64_t r) const {
    ComputeOf<T> xdy = 0;
    for (int64_t d = 0; d < D; ++d) xdy += x[r * D + d] * dy[r * D + d];
    const ComputeOf<T> n = rnorm[r];
    const ComputeOf<T> c = n * n * xdy;
    for (int64_t d = 0; d < D; ++d) {
      dx[r * D + d] = (dy[r * D + d] - x[r * D + d] * c) * (n * scale);
    }
  }
};

// ---- GDN gate (gdn_prep.h) --------------------------------------------------

// Head h: ddt_bias[h] += sum_t da[t, h] (da from GdnGateInputGradFn);
// dA_log[h] += sum_t -dg exp(A_log) softplus(a + dt_bias).
template <typename T>
struct GdnGateParamGradFn {
  GradOf<T>* dA_log;        // (H)
  GradOf<T>* ddt_bias;      // (H)
  const T* da;      // (T, H)
  const T* dg;      // (T, H)
  const T* a;       // (T, H)
  const T* A_log;   // (H)
  const T* dt_bias; // (H)
  int64_t T_len, H;
  SF_HD void operator()(int64_t h) const {
    const ComputeOf<T> decay_rate = Exp(A_log[h]);
    ComputeOf<T> sum_da = 0, sum_dalog = 0;
    for (int64_t t = 0; t < T_len; ++t) {
      const int64_t i = t * H + h;
      sum_da += da[i];
      sum_dalog += -dg[i] * decay_rate * Softplus(a[i] + dt_bias[h]);
    }
    ddt_bias[h] += sum_da;
    dA_log[h] += sum_dalog;
  }
};

// ---- short convolution (short_conv.h) ---------------------------------------
// xbar = [tail_in; x] (W-1+T, C); x_t is xbar row t+W-1.

template <typename T>
SF_HD inline ComputeOf<T> Xbar(const T* x, const T* tail_in, int64_t p,
                               int64_t c, int64_t C, int64_t W) {
  if (p >= W - 1) return x[(p - (W - 1)) * C + c];
  return tail_in != nullptr ? ComputeOf<T>(tail_in[p * C + c]) : ComputeOf<T>(0);
}

// Element (t, c): y = sum_j w[j, c] xbar[t + W-1-j, c].
template <typename T>
struct ShortConvForwardFn {
  T* y;               // (T, C)
  const T* x;         // (T, C)
  const T* w;         // (W, C)
  const T* tail_in;   // (W-1, C) or nullptr
  int64_t C, W;
  SF_HD void operator()(int64_t i) const {
    const int64_t t = i / C, c = i % C;
    ComputeOf<T> acc = 0;
    for (int64_t j = 0; j < W; ++j) {
      acc += Xbar(x, tail_in, t + W - 1 - j, c, C, W) * w[j * C + c];
    }
    y[i] = acc;
  }
};

// Element (m, c) of the outgoing tail: xbar[T + m, c].
template <typename T>
struct ShortConvTailFn {
  T* tail_out;        // (W-1, C)
  const T* x;         // (T, C)
  const T* tail_in;   // (W-1, C) or nullptr
  int64_t T_len, C, W;
  SF_HD void operator()(int64_t i) const {
    const int64_t m = i / C, c = i % C;
    tail_out[i] = Xbar(x, tail_in, T_len + m, c, C, W);
  }
};

// Element (p, c) of d(xbar) (W-1+T, C): every output that read xbar row p,
// plus d(tail_out) for the rows the tail hands on; written to dx (rows
// p >= W-1) or dtail_in (rows p < W-1; skipped when nullptr).
template <typename T>
struct ShortConvInputGradFn {
  T* dx;               // (T, C)
  T* dtail_in;         // (W-1, C) or nullptr
  const T* dy;         // (T, C)
  const T* dtail_out;  // (W-1, C) or nullptr
  const T* w;          // (W, C)
  int64_t T_len, C, W;
  SF_HD void operator()(int64_t i) const {
    const int64_t p = i / C, c = i % C;
    if (p < W - 1 && dtail_in == nullptr) return;
    ComputeOf<T> acc = 0;
    for (int64_t j = 0; j < W; ++j) {  // output t = p - (W-1) + j reads row p
      const int64_t t = p - (W - 1) + j;
      if (t >= 0 && t < T_len) acc += dy[t * C + c] * w[j * C + c];
    }
    if (dtail_out != nullptr && p >= T_len) acc += dtail_out[(p - T_len) * C + c];
    if (p >= W - 1) {
      dx[(p - (W - 1)) * C + c] = acc;
    } else {
      dtail_in[p * C + c] = acc;
    }
  }
};

// Element (j, c) of dw: += sum_t dy[t, c] xbar[t + W-1-j, c].
template <typename T>
struct ShortConvWeightGradFn {
  GradOf<T>* dw;              // (W, C)
  const T* dy;        // (T, C)
  const T* x;         // (T, C)
  const T* tail_in;   // (W-1, C) or nullptr
  int64_t T_len, C, W;
  SF_HD void operator()(int64_t i) const {
    const int64_t j = i / C, c = i % C;
    ComputeOf<T> acc = 0;
    for (int64_t t = 0; t < T_len; ++t) {
      acc += dy[t * C + c] * Xbar(x, tail_in, t + W - 1 - j, c, C, W);
    }
    dw[i] += acc;
  }
};

// ---- embedding (embedding.h) ------------------------------------------------

// Element (n, c): y = table[ids[n], c].
template <typename T>
struct EmbeddingGatherFn {
  T* y;               // (R, C)
  const int32_t* ids; // (R)
  const T* table;     // (V, C)
  int64_t C;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = i / C, c = i % C;
    // id -1: another tensor-parallel rank's row (a zero row here).
    y[i] = ids[n] < 0 ? T(0) : table[static_cast<int64_t>(ids[n]) * C + c];
  }
};

// Column c: dtable[ids[n], c] += dy[n, c] for n = 0..R-1 in order. One call
// per column owns that column of every row, so repeated ids add up without
// atomics, in the CPU kernel's order.
template <typename T>
struct EmbeddingScatterAddFn {
  GradOf<T>* dtable;          // (V, C)
  const T* dy;        // (R, C)
  const int32_t* ids; // (R)
  int64_t R, C;
  SF_HD void operator()(int64_t c) const {
    for (int64_t n = 0; n < R; ++n) {
      if (ids[n] >= 0) dtable[static_cast<int64_t>(ids[n]) * C + c] += dy[n * C + c];
    }
  }
};

// ---- output layer + cross-entropy (output_loss.h) ---------------------------

// Row n, one vocabulary slice of logits z (R, vs): the running logsumexp
// lse[n] (initially -inf) absorbs the slice:
//   m = max(lse, max_v z),  lse = m + log(exp(lse - m) + sum_v exp(z_v - m)).
// One number per token carries the online logsumexp across slices.
template <typename T>
struct OnlineLogsumexpFn {
  StatOf<T>* lse;        // (R)
  const StatOf<T>* z;    // (R, vs)
  int64_t vs;
  SF_HD void operator()(int64_t n) const {
    ComputeOf<T> m = lse[n];
    for (int64_t v = 0; v < vs; ++v) m = Max(m, z[n * vs + v]);
    ComputeOf<T> s = Exp(lse[n] - m);
    for (int64_t v = 0; v < vs; ++v) s += Exp(z[n * vs + v] - m);
    lse[n] = m + Log(s);
  }
};

// Row n: loss_n = lse_n - x_n . w_{targets[n]}, into out[n] and, when not
// nullptr, losses[n].
template <typename T>
struct TokenLossFn {
  StatOf<T>* out;       // (R)
  StatOf<T>* losses;            // (R) or nullptr
  const StatOf<T>* lse;         // (R)
  const T* x;           // (R, C)
  const T* w;           // (V, C)
  const int32_t* targets; // (R)
  int64_t C;
  SF_HD void operator()(int64_t n) const {
    // Target -1: another tensor-parallel rank's column (no target logit here).
    ComputeOf<T> zt = 0;
    if (targets[n] >= 0) {
      const T* wt = w + static_cast<int64_t>(targets[n]) * C;
      for (int64_t c = 0; c < C; ++c) zt += x[n * C + c] * wt[c];
    }
    const ComputeOf<T> loss = lse[n] - zt;
    out[n] = loss;
    if (losses != nullptr) losses[n] = loss;
  }
};

// Element (n, v) of one slice starting at v0: z (the logits) becomes
// dZ = dlosses_n (softmax_v - [v0 + v == target_n]).
template <typename T>
struct SoftmaxGradFn {
  StatOf<T>* z;           // (R, vs) in: logits; out: dZ
  const StatOf<T>* lse;           // (R)
  const StatOf<T>* dlosses;       // (R)
  const int32_t* targets; // (R)
  int64_t vs, v0;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = i / vs, v = i % vs;
    ComputeOf<T> d = Exp(z[i] - lse[n]) * dlosses[n];
    if (targets[n] == v0 + v) d -= dlosses[n];
    z[i] = d;
  }
};

}  // namespace stateflow::backend::grid

// Causal softmax attention and RoPE as grid kernels (the contracts of
// backend/kernels/attention.h and rope.h). One call per (query row, query
// head) runs FlashAttention's online softmax over the keys tile by tile (no
// score row is ever stored: a running max, sum and output row); the backward
// is one call per query row for dq and one per (key row, K/V head) for dk
// and dv, each looping over the rows it depends on, so every gradient row is
// owned by one call (no atomics; the same bits on every run).
//
// Not the tiled shared-memory form a tuned GPU kernel would use (a block of
// threads per (head, query tile) sharing K/V tiles): these define the
// arithmetic and are run as-is by both executors.
//
//   exec.ForEach(s * Hq, grid::AttentionForwardFn<float>{o, lse, q, k, v, shape});
//
// Dimensions: s queries from position start, keys = start + s, Hq query heads,
// Hkv K/V heads (G = Hq / Hkv query heads per K/V head), d head dim.
// Layouts: q, o, dO, dq (s, Hq, d); k, v, dk, dv (keys, Hkv, d); lse, D (s, Hq).
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"
#include "backend/device/precision.h"

namespace stateflow::backend::grid {

// A row of d running sums that ends in `out`: where T computes in T (float,
// double) the row of `out` itself, as it always was; for bf16 a local float
// row, loaded from `out` or zeroed, written back rounded once by Store, so
// that the sums never round to bf16 on the way.
template <typename T, bool kInPlace = std::is_same_v<ComputeOf<T>, T>>
struct AccRow {
  T* out;
  SF_HD AccRow(T* row, int64_t /*d*/, bool /*load*/) : out(row) {}
  SF_HD T& operator[](int64_t e) { return out[e]; }
  SF_HD void Store(int64_t /*d*/) {}
};
template <typename T>
struct AccRow<T, false> {
  T* out;
  ComputeOf<T> acc[kMaxBf16AttentionHeadDim];
  SF_HD AccRow(T* row, int64_t d, bool load) : out(row) {
    for (int64_t e = 0; e < d; ++e) acc[e] = load ? ComputeOf<T>(row[e]) : ComputeOf<T>(0);
  }
  SF_HD ComputeOf<T>& operator[](int64_t e) { return acc[e]; }
  SF_HD void Store(int64_t d) {
    for (int64_t e = 0; e < d; ++e) out[e] = acc[e];
  }
};

struct AttnShape {
  int64_t s, start, Hq, Hkv, d, k_tile;
  SF_HD int64_t G() const { return Hq / Hkv; }
  SF_HD int64_t Q(int64_t i, int64_t h) const { return (i * Hq + h) * d; }
  SF_HD int64_t K(int64_t j, int64_t g) const { return (j * Hkv + g) * d; }
};

// Row (i, h): o_i = sum_{j <= start+i} softmax_j(scale q_i . k_j) v_j and
// lse_i, by an online softmax over key tiles of k_tile keys.
template <typename T>
struct AttentionForwardFn {
  T* o;
  StatOf<T>* lse;
  const T* q;
  const T* k;
  const T* v;
  AttnShape a;
  ComputeOf<T> scale;
  SF_HD void operator()(int64_t idx) const {
    const int64_t i = idx / a.Hq, h = idx % a.Hq, g = h / a.G();
    const int64_t keys = a.start + i + 1;
    const T* qi = q + a.Q(i, h);
    AccRow<T> oi(o + a.Q(i, h), a.d, /*load=*/false);
    for (int64_t e = 0; e < a.d; ++e) oi[e] = ComputeOf<T>(0);
    ComputeOf<T> m = NegInf<T>(), l = ComputeOf<T>(0);
    for (int64_t j0 = 0; j0 < keys; j0 += a.k_tile) {
      const int64_t j1 = Min(j0 + a.k_tile, keys);
      ComputeOf<T> m_new = m;
      for (int64_t j = j0; j < j1; ++j) {
        m_new = Max(m_new, scale * Dot(qi, k + a.K(j, g), a.d));
      }
      const ComputeOf<T> f = Exp(m - m_new);
      l *= f;
      for (int64_t e = 0; e < a.d; ++e) oi[e] *= f;
      for (int64_t j = j0; j < j1; ++j) {
        const ComputeOf<T> p = Exp(scale * Dot(qi, k + a.K(j, g), a.d) - m_new);
        l += p;
        const T* vj = v + a.K(j, g);
        for (int64_t e = 0; e < a.d; ++e) oi[e] += p * vj[e];
      }
      m = m_new;
    }
    for (int64_t e = 0; e < a.d; ++e) oi[e] /= l;
    oi.Store(a.d);
    lse[idx] = m + Log(l);
  }
};

// Row (i, h): D = dO_i . o_i.
template <typename T>
struct AttentionDeltaFn {
  StatOf<T>* D;
  const T* dO;
  const T* o;
  int64_t d;
  SF_HD void operator()(int64_t idx) const { D[idx] = Dot(dO + idx * d, o + idx * d, d); }
};

// dS_ij = P_ij (dO_i . v_j - D_i) scale with P_ij = exp(scale q_i . k_j - lse_i).
template <typename T>
SF_HD inline void AttentionPair(ComputeOf<T>* p, ComputeOf<T>* ds, const T* qi, const T* kj,
                                const T* dOi, const T* vj, StatOf<T> lse_i, StatOf<T> D_i,
                                ComputeOf<T> scale, int64_t d) {
  *p = Exp(scale * Dot(qi, kj, d) - lse_i);
  *ds = *p * (Dot(dOi, vj, d) - D_i) * scale;
}

// Row (i, h): dq_i = sum_{j <= start+i} dS_ij k_j (written).
template <typename T>
struct AttentionQueryGradFn {
  T* dq;
  const T* dO;
  const StatOf<T>* lse;
  const StatOf<T>* D;
  const T* q;
  const T* k;
  const T* v;
  AttnShape a;
  ComputeOf<T> scale;
  SF_HD void operator()(int64_t idx) const {
    const int64_t i = idx / a.Hq, h = idx % a.Hq, g = h / a.G();
    AccRow<T> dqi(dq + a.Q(i, h), a.d, /*load=*/false);
    for (int64_t e = 0; e < a.d; ++e) dqi[e] = ComputeOf<T>(0);
    for (int64_t j = 0; j <= a.start + i; ++j) {
      ComputeOf<T> p, ds;
      AttentionPair<T>(&p, &ds, q + a.Q(i, h), k + a.K(j, g), dO + a.Q(i, h),
                    v + a.K(j, g), lse[idx], D[idx], scale, a.d);
      const T* kj = k + a.K(j, g);
      for (int64_t e = 0; e < a.d; ++e) dqi[e] += ds * kj[e];
    }
    dqi.Store(a.d);
  }
};

// Row (j, g): dk_j += sum dS_ij q_i, dv_j += sum P_ij dO_i over the queries
// i >= j - start of the G query heads that read K/V head g.
template <typename T>
struct AttentionKeyValueGradFn {
  StatOf<T>* dk;  // the accumulator: fp32 in bf16
  StatOf<T>* dv;
  const T* dO;
  const StatOf<T>* lse;
  const StatOf<T>* D;
  const T* q;
  const T* k;
  const T* v;
  AttnShape a;
  ComputeOf<T> scale;
  SF_HD void operator()(int64_t idx) const {
    const int64_t j = idx / a.Hkv, g = idx % a.Hkv;
    AccRow<StatOf<T>> dkj(dk + a.K(j, g), a.d, /*load=*/true);
    AccRow<StatOf<T>> dvj(dv + a.K(j, g), a.d, /*load=*/true);
    for (int64_t i = Max<int64_t>(0, j - a.start); i < a.s; ++i) {
      for (int64_t h = g * a.G(); h < (g + 1) * a.G(); ++h) {
        ComputeOf<T> p, ds;
        const int64_t r = i * a.Hq + h;
        AttentionPair<T>(&p, &ds, q + a.Q(i, h), k + a.K(j, g), dO + a.Q(i, h),
                      v + a.K(j, g), lse[r], D[r], scale, a.d);
        const T* qi = q + a.Q(i, h);
        const T* dOi = dO + a.Q(i, h);
        for (int64_t e = 0; e < a.d; ++e) {
          dkj[e] += ds * qi[e];
          dvj[e] += p * dOi[e];
        }
      }
    }
    dkj.Store(a.d);
    dvj.Store(a.d);
  }
};

// Pair (n, h, i), i < d/2, rotated in place by sign * pos theta_i (pos =
// pos0 + n, theta_i = base^(-2 i / d)); cos and sin in double, rounded to T,
// as rope.cc.
template <typename T>
struct RopeFn {
  T* x;        // (R, H, d)
  int64_t H, d, pos0;
  double base;
  ComputeOf<T> sign;
  SF_HD void operator()(int64_t idx) const {
    const int64_t half = d / 2;
    const int64_t i = idx % half, n = idx / (half * H);
    const double ang = static_cast<double>(pos0 + n) *
                       PowD(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    const ComputeOf<T> c = static_cast<ComputeOf<T>>(CosD(ang));
    const ComputeOf<T> s = static_cast<ComputeOf<T>>(SinD(ang)) * sign;
    T* a = x + (idx / half) * d;
    const ComputeOf<T> ai = a[i], bi = a[i + half];
    a[i] = ai * c - bi * s;
    a[i + half] = bi * c + ai * s;
  }
};

}  // namespace stateflow::backend::grid

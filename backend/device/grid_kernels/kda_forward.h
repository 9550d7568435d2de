// The KDA core's forward as grid passes (kda_common.h has the math; the CPU
// kernel is backend/kernels/kda_core.h):
//   Pre  KdaCumDecayFn   (T, H, Dk)          G = g_0 + ... + g_r per channel
//        KdaGramFn       (H, nb, bs, bs)     KK_rs = sum_c k_rc k_sc E_rsc, s < r
//        KdaEndDecayFn   (T, H, Dk)          Kt = k o exp(G_{L-1} - G)
//        KdaPreSolveFn   (H, nb, Dv + Dk)    one column of U or W by forward
//                                            substitution with M
//   ST   per block in order, batched over heads (DeltaStForward):
//        GEMM V_new = U - W S_b^T; KdaCarryFn (H, Dv, Dk)
//        S_{b+1} = exp(G_{L-1}) o S_b; GEMM S_{b+1} += V_new^T Kt
//   Out  KdaScaleByDecayFn (T, H, Dk)        Qh = q o exp(G)
//        KdaGramFn       (H, nb, bs, bs)     P_rs = sum_c q_rc k_sc E_rsc, s <= r
//        GEMMs                               o = Qh S_b^T + P V_new
// Unlike GDN's, the decay is per channel, so KK and P are not a Gram matrix
// times a decay mask: one call per tile entry sums over the channels with
// one exponential of a difference each. Pre and Out run every block of every
// head at once; ST is the only pass that walks the blocks in order (its
// products GEMMs over every head, grid_recurrent.h). A pass reads what the earlier ones wrote
// into the workspace and writes disjoint elements, so each is race-free in
// any order.
//
//   exec.ForEach(s.tokens() * s.Dk, KdaCumDecayFn<float>{ws.G, g, s});
//
// Dimensions and layouts: kda_common.h.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_forward.h"
#include "backend/device/grid_kernels/kda_common.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

// Element (t, h, c): G = sum of g[., h, c] over block b's tokens t0..t.
template <typename T>
struct KdaCumDecayFn {
  T* G;          // (T, H, Dk)
  const T* g;    // (T, H, Dk)
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t hc = i % (s.H * s.Dk), t = i / (s.H * s.Dk);
    const int64_t stride = s.H * s.Dk;
    T acc = 0;
    for (int64_t u = (t / s.bs) * s.bs; u <= t; ++u) acc += g[u * stride + hc];
    G[i] = acc;
  }
};

// Tile entry (r, c) of block b, head h: sum_d X_rd Y_cd E_rcd for c < r
// (strict: KK, X = Y = k) or c <= r (P, X = q, Y = k), r < L; else 0.
template <typename T>
struct KdaGramFn {
  T* tile;       // (H, nb, bs, bs), written
  const T* X;    // (T, H, Dk)
  const T* Y;    // (T, H, Dk)
  const T* G;    // (T, H, Dk)
  KdaShape s;
  bool strict;
  SF_HD void operator()(int64_t i) const {
    const TileIndex x(i, s);
    if (x.r >= s.L(x.b) || x.c > x.r || (strict && x.c == x.r)) {
      tile[i] = T(0);
      return;
    }
    const int64_t t0 = x.b * s.bs;
    const T* xr = X + s.Row(t0 + x.r, x.h, s.Dk);
    const T* yc = Y + s.Row(t0 + x.c, x.h, s.Dk);
    const T* Gr = G + s.Row(t0 + x.r, x.h, s.Dk);
    const T* Gc = G + s.Row(t0 + x.c, x.h, s.Dk);
    T acc = 0;
    for (int64_t d = 0; d < s.Dk; ++d) acc += (xr[d] * yc[d]) * Exp(Gr[d] - Gc[d]);
    tile[i] = acc;
  }
};

// Element (t, h, c): Kt = k exp(G_{L-1,c} - G_rc) (the key decayed to its
// block's end).
template <typename T>
struct KdaEndDecayFn {
  T* Kt;         // (T, H, Dk), written
  const T* k;    // (T, H, Dk)
  const T* G;    // (T, H, Dk)
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t hc = i % (s.H * s.Dk), t = i / (s.H * s.Dk), b = t / s.bs;
    const int64_t last = (b * s.bs + s.L(b) - 1) * s.H * s.Dk + hc;
    Kt[i] = k[i] * Exp(G[last] - G[i]);
  }
};

// Element i of (T, H, Dk) buffers: out = x exp(G) (Qh from q).
template <typename T>
struct KdaScaleByDecayFn {
  T* out;        // (T, H, Dk), written
  const T* x;    // (T, H, Dk)
  const T* G;    // (T, H, Dk)
  SF_HD void operator()(int64_t i) const { out[i] = x[i] * Exp(G[i]); }
};

// (h, b, j): column j of U (j < Dv) or of W (j = Dv + channel) for block b:
// X = M^{-1} B with M = I + diag(beta) KK, B = diag(beta) V or
// diag(beta) (K o exp(G)), by forward substitution (rows ascending).
template <typename T>
struct KdaPreSolveFn {
  T* U;          // (T, H, Dv), written
  T* W;          // (T, H, Dk), written
  const T* KK;   // (H, nb, bs, bs)
  const T* k;    // (T, H, Dk)
  const T* v;    // (T, H, Dv)
  const T* beta; // (T, H)
  const T* G;    // (T, H, Dk)
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t cols = s.Dv + s.Dk;
    const int64_t j = i % cols, b = (i / cols) % s.nb, h = i / (cols * s.nb);
    const int64_t t0 = b * s.bs, L = s.L(b);
    const bool is_u = j < s.Dv;
    T* X = is_u ? U + j : W + (j - s.Dv);
    const int64_t D = is_u ? s.Dv : s.Dk;
    for (int64_t r = 0; r < L; ++r) {
      const T br = beta[(t0 + r) * s.H + h];
      T acc;
      if (is_u) {
        acc = br * v[s.Row(t0 + r, h, s.Dv) + j];
      } else {
        const int64_t e = s.Row(t0 + r, h, s.Dk) + (j - s.Dv);
        acc = br * (k[e] * Exp(G[e]));
      }
      for (int64_t c = 0; c < r; ++c) {
        acc -= (br * KK[s.Tile(h, b, r, c)]) * X[s.Row(t0 + c, h, D)];
      }
      X[s.Row(t0 + r, h, D)] = acc;
    }
  }
};

// Element (h, j) of a state (Dv Dk per head, j = i Dk + c) across block b:
// dst = exp(G_{L-1, c}) src (+ dst when accumulate): ST's per-channel decay
// of the state entering block b (forward), and of the gradient of the state
// leaving it (backward; the decay is diagonal).
template <typename T>
struct KdaCarryFn {
  T* dst;
  int64_t dst_stride;  // per head
  const T* src;
  int64_t src_stride;
  const T* G;          // (T, H, Dk)
  KdaShape s;
  int64_t b;
  bool accumulate;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = s.Dv * s.Dk, h = i / n, j = i % n;
    const int64_t last = b * s.bs + s.L(b) - 1;
    const T v = Exp(G[s.Row(last, h, s.Dk) + j % s.Dk]) * src[h * src_stride + j];
    T& out = dst[h * dst_stride + j];
    out = accumulate ? out + v : v;
  }
};

}  // namespace stateflow::backend::grid

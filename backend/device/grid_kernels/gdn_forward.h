// The GDN core's forward as grid passes (docs/gdn-kernel.md, gdn_core.h):
//   Pre  GdnCumDecayFn   (T, H)              G_r = g_0 + ... + g_r per block
//        GEMMs, GdnMaskDecayFn (H, nb, bs, bs) KG_rs = (k_r . k_s) Gam_rs, s < r
//        GdnPreSolveFn   (H, nb, Dv + Dk)    one column of U or W by forward
//                                            substitution with (I + A)
//   ST   GdnDecayedKeyFn (T, H, Dk)          Kd_r = d_r k_r
//        per block in order, batched over heads (DeltaStForward):
//        GEMM V_new = U - W S_b^T; GdnCarryFn (H, Dv, Dk) S_{b+1} = gam S_b;
//        GEMM S_{b+1} += V_new^T Kd
//   Out  GEMMs, GdnMaskDecayFn (H, nb, bs, bs) P_rs = (q_r . k_s) Gam_rs, s <= r
//        GEMM o = Q S_b^T; GdnScaleByDecayFn (T, H, Dv) o *= gam;
//        GEMM o += P V_new
// Every product with a dimension of L, Dk or Dv (the Gram matrices K K^T and
// Q K^T, Out's products) is a batched GEMM per head over the blocks (the
// executor's; cuBLAS on a GPU: grid::BlockGemm, grid_recurrent.h). Pre and Out run every block of every
// head at once; ST is the only pass
// that walks the blocks in order, each block's products GEMMs over all
// heads (grid_recurrent.h). A pass reads what
// the earlier ones wrote into the workspace (gdn_common.h) and writes
// disjoint elements, so each is race-free in any order.
//
//   exec.ForEach(s.tokens(), GdnCumDecayFn<float>{ws.G, g, s});
//
// Dimensions and layouts: gdn_common.h.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

// Entry (t, h): G = sum of g over block b's tokens t0..t.
template <typename T>
struct GdnCumDecayFn {
  T* G;          // (T, H)
  const T* g;    // (T, H)
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t t = i / s.H, h = i % s.H;
    T acc = 0;
    for (int64_t u = (t / s.bs) * s.bs; u <= t; ++u) acc += g[u * s.H + h];
    G[i] = acc;
  }
};

// Decodes an (H, nb, bs, bs) index into head, block, row, column.
struct TileIndex {
  int64_t h, b, r, c;
  SF_HD TileIndex(int64_t i, const GdnShape& s) {
    c = i % s.bs;
    r = (i / s.bs) % s.bs;
    b = (i / (s.bs * s.bs)) % s.nb;
    h = i / (s.bs * s.bs * s.nb);
  }
};

// Tile entry (r, c) of a block's Gram matrix X_r . Y_c (computed by GEMMs,
// GdnBlockGram in grid_ops.h) times the decay: tile_rc *= Gam_rc for c < r
// (strict: KG = (K K^T) o Gam) or c <= r (P = (Q K^T) o Gam), else 0.
template <typename T>
struct GdnMaskDecayFn {
  T* tile;       // (H, nb, bs, bs)
  const T* G;    // (T, H)
  GdnShape s;
  bool strict;
  SF_HD void operator()(int64_t i) const {
    const TileIndex x(i, s);
    const int64_t L = s.L(x.b);
    if (x.r >= L || x.c > x.r || (strict && x.c == x.r)) {
      tile[i] = T(0);
      return;
    }
    tile[i] *= Decay(G, s, x.h, x.b * s.bs, x.r, x.c);
  }
};

// Tile entry (r, c): 0 outside the block's L x L (a Gram matrix the GEMMs
// left unwritten there), else unchanged.
template <typename T>
struct GdnMaskBlockFn {
  T* tile;       // (H, nb, bs, bs)
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TileIndex x(i, s);
    if (x.r >= s.L(x.b) || x.c >= s.L(x.b)) tile[i] = T(0);
  }
};

// (h, b, j): column j of U (j < Dv) or of W (j = Dv + column of K) for block
// b: X = (I + A)^{-1} B with A_rs = beta_r KG_rs, B = diag(beta) V or
// diag(beta gam) K, by forward substitution (rows ascending).
template <typename T>
struct GdnPreSolveFn {
  T* U;          // (T, H, Dv)
  T* W;          // (T, H, Dk)
  const T* KG;   // (H, nb, bs, bs)
  const T* k;    // (T, H, Dk)
  const T* v;    // (T, H, Dv)
  const T* beta; // (T, H)
  const T* G;    // (T, H)
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t cols = s.Dv + s.Dk;
    const int64_t j = i % cols, b = (i / cols) % s.nb, h = i / (cols * s.nb);
    const int64_t t0 = b * s.bs, L = s.L(b);
    const bool is_u = j < s.Dv;
    T* X = is_u ? U + j : W + (j - s.Dv);
    const int64_t D = is_u ? s.Dv : s.Dk;
    for (int64_t r = 0; r < L; ++r) {
      const T br = beta[(t0 + r) * s.H + h];
      T acc = is_u ? br * v[s.Row(t0 + r, h, s.Dv) + j]
                   : (br * Exp(G[(t0 + r) * s.H + h])) *
                         k[s.Row(t0 + r, h, s.Dk) + (j - s.Dv)];
      for (int64_t c = 0; c < r; ++c) {
        acc -= (br * KG[s.Tile(h, b, r, c)]) * X[s.Row(t0 + c, h, D)];
      }
      X[s.Row(t0 + r, h, D)] = acc;
    }
  }
};

// Element (t, h, c): Kd = d_r k_r, d_r = exp(G_{L-1} - G_r) over the
// token's block: the keys as the state leaving the block sees them (ST's
// GEMMs, GridRecurrentCore::DeltaStForward / DeltaStBackward).
template <typename T>
struct GdnDecayedKeyFn {
  T* Kd;         // (T, H, Dk)
  const T* k;    // (T, H, Dk)
  const T* G;    // (T, H)
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t t = i / (s.H * s.Dk), h = (i / s.Dk) % s.H;
    const int64_t b = t / s.bs, last = b * s.bs + s.L(b) - 1;
    const T d = Exp(-(G[t * s.H + h] - G[last * s.H + h]));
    Kd[i] = d * k[i];
  }
};

// Element (h, j) of a state (Dv Dk per head) across block b:
// dst = gam_{L-1} src (+ dst when accumulate), gam_{L-1} = exp(G_{L-1}):
// the decay that ST applies to the state entering block b (forward), and
// its transpose on the gradient of the state leaving it (backward).
template <typename T>
struct GdnCarryFn {
  T* dst;
  int64_t dst_stride;  // per head
  const T* src;
  int64_t src_stride;
  const T* G;          // (T, H)
  GdnShape s;
  int64_t b;
  bool accumulate;
  SF_HD void operator()(int64_t i) const {
    const int64_t n = s.Dv * s.Dk, h = i / n, j = i % n;
    const int64_t last = b * s.bs + s.L(b) - 1;
    const T v = Exp(G[last * s.H + h]) * src[h * src_stride + j];
    T& out = dst[h * dst_stride + j];
    out = accumulate ? out + v : v;
  }
};

// Element (t, h, j) of a (T, H, D) buffer: x *= gam_t = exp(G_t) (Out's
// scaling of Q S_b^T, row by row).
template <typename T>
struct GdnScaleByDecayFn {
  T* x;          // (T, H, D)
  const T* G;    // (T, H)
  GdnShape s;
  int64_t D;
  SF_HD void operator()(int64_t i) const { x[i] *= Exp(G[i / D]); }
};

}  // namespace stateflow::backend::grid

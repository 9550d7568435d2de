// The KDA core's forward as grid passes (kda_common.h has the math; the CPU
// kernel is backend/kernels/kda_core.h):
//   Pre  KdaCumDecayFn   (T, H, Dk)          G = g_0 + ... + g_r per channel
//        KdaGramFn       (H, nb, bs, bs)     KK_rs = sum_c k_rc k_sc E_rsc, s < r
//        KdaEndDecayFn   (T, H, Dk)          Kt = k o exp(G_{L-1} - G)
//        KdaPreSolveFn   (H, nb, Dv + Dk)    one column of U or W by forward
//                                            substitution with M
//   ST   KdaSTFn         (H, tiles, B_V)     one state row: blocks in order
//   Out  KdaScaleByDecayFn (T, H, Dk)        Qh = q o exp(G)
//        KdaGramFn       (H, nb, bs, bs)     P_rs = sum_c q_rc k_sc E_rsc, s <= r
//        GEMMs                               o = Qh S_b^T + P V_new
// Unlike GDN's, the decay is per channel, so KK and P are not a Gram matrix
// times a decay mask: one call per tile entry sums over the channels with
// one exponential of a difference each. Pre and Out run every block of every
// head at once; ST is the only pass that walks the blocks in order, over
// heads x value rows (StTiles). A pass reads what the earlier ones wrote
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

// (h, i): row i of head h's state through blocks [b0, b1) in order (StTiles
// decodes the index). Block b's entering row S_b[i] is in the states buffer
// (block 0's copied there from S_in; a later segment's written by the ST of
// the blocks before it); then
//   V_new[r, i]  = U[r, i] - W_r . S_b[i]          (over U when Vn == U)
//   S_{b+1}[i]_c = exp(G_{L-1,c}) S_b[i]_c + sum_r V_new[r, i] Kt_rc,
// the last block's into S_out (skipped when nullptr). S_in nullptr: zeros.
template <typename T>
struct KdaSTFn {
  T* states;      // (H, nb, Dv, Dk)
  T* Vn;          // (T, H, Dv), may be U
  T* S_out;       // (H, Dv, Dk) or nullptr
  const T* U;     // (T, H, Dv)
  const T* W;     // (T, H, Dk)
  const T* Kt;    // (T, H, Dk)
  const T* G;     // (T, H, Dk)
  const T* S_in;  // (H, Dv, Dk) or nullptr
  KdaShape s;
  StTiles st;
  int64_t b0 = 0, b1 = 0;  // the blocks [b0, b1)
  SF_HD void operator()(int64_t idx) const {
    int64_t h, i;
    if (!st.Decode(idx, s.Dv, &h, &i)) return;
    T* out = S_out != nullptr ? S_out + (h * s.Dv + i) * s.Dk : nullptr;
    if (b0 == 0) {
      const T* in = S_in != nullptr ? S_in + (h * s.Dv + i) * s.Dk : nullptr;
      T* first = s.nb > 0 ? states + s.State(h, 0, i, s.nb) : out;
      if (first == nullptr) return;
      for (int64_t c = 0; c < s.Dk; ++c) first[c] = in != nullptr ? in[c] : T(0);
    }
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * s.bs, L = s.L(b);
      const T* Sb = states + s.State(h, b, i, s.nb);
      for (int64_t r = 0; r < L; ++r) {
        const int64_t row = s.Row(t0 + r, h, s.Dv) + i;
        Vn[row] = U[row] - Dot(W + s.Row(t0 + r, h, s.Dk), Sb, s.Dk);
      }
      T* next = b + 1 < s.nb ? states + s.State(h, b + 1, i, s.nb) : out;
      if (next == nullptr) continue;
      const T* G_last = G + s.Row(t0 + L - 1, h, s.Dk);
      for (int64_t c = 0; c < s.Dk; ++c) next[c] = Exp(G_last[c]) * Sb[c];
      for (int64_t r = 0; r < L; ++r) {
        const T vr = Vn[s.Row(t0 + r, h, s.Dv) + i];
        const T* kt = Kt + s.Row(t0 + r, h, s.Dk);
        for (int64_t c = 0; c < s.Dk; ++c) next[c] += vr * kt[c];
      }
    }
  }
};

}  // namespace stateflow::backend::grid

// What the GDN core's grid passes (gdn_forward.h, gdn_backward.h) share: the
// chunk's shape, the index arithmetic of its buffers, and the layout of the
// workspace through which the separate passes hand each other their results.
// The math is docs/gdn-kernel.md's; the CPU kernel is backend/kernels/
// gdn_core.{h,cc}.
//
// Not a kernel: no functor here writes anything.
//
//   GdnShape s = GdnShape::Make(T, H, Dk, Dv, block_size);
//   GdnForwardWorkspace<float> ws(workspace, s);   // pointers into it
//
// Dimensions: T tokens in the chunk, H heads, Dk key dim, Dv value dim,
// bs the block size T_C, nb = ceil(T / bs) blocks, L tokens in block b
// (bs, or fewer for the last one); r, s token indices inside a block.
// Layouts: q, k, W, dW (T, H, Dk); v, o, U, V_new (T, H, Dv); g, beta, G
// (T, H); per-block (L, L) matrices in (H, nb, bs, bs) (rows and columns
// past L unused); states (H, nb, Dv, Dk), state gradients (H, nb + 1, Dv, Dk).
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

struct GdnShape {
  int64_t T, H, Dk, Dv, bs, nb;

  static GdnShape Make(int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                       int64_t block_size) {
    return {T_len, H, Dk, Dv, block_size,
            (T_len + block_size - 1) / block_size};
  }
  // Tokens in block b.
  SF_HD int64_t L(int64_t b) const { return Min(bs, T - b * bs); }
  // Element d of head h's row for token t in a (T, H, D) buffer.
  SF_HD int64_t Row(int64_t t, int64_t h, int64_t D) const {
    return (t * H + h) * D;
  }
  // Element (r, s) of head h's block b in an (H, nb, bs, bs) buffer.
  SF_HD int64_t Tile(int64_t h, int64_t b, int64_t r, int64_t s) const {
    return ((h * nb + b) * bs + r) * bs + s;
  }
  // Row i of head h's state in slot b of an (H, slots, Dv, Dk) buffer.
  SF_HD int64_t State(int64_t h, int64_t b, int64_t i, int64_t slots) const {
    return ((h * slots + b) * Dv + i) * Dk;
  }
  int64_t tokens() const { return T * H; }
  int64_t tiles() const { return H * nb * bs * bs; }
  int64_t states(int64_t slots) const { return H * slots * Dv * Dk; }
};

// f over the blocks [b0, b1) of an index space laid out (outer, nb,
// per_block): index i of the n = outer * n_in indices (n_in = (b1 - b0)
// per_block, or the token count of a partial last block) calls f on the
// index it stands for in the whole space. For (T, H, D) buffers outer = 1 and
// per_block = bs H D; for (H, nb, ...) ones outer = H. A pass over a segment
// of blocks (the families' overlapped grid cores, grid_recurrent.h) is then the whole pass's functor
// restricted, element for element the same arithmetic.
template <class F>
struct BlockRangeFn {
  F f;
  int64_t per_block, nb, b0, n_in;
  SF_HD void operator()(int64_t i) const {
    f(((i / n_in) * nb + b0) * per_block + i % n_in);
  }
};

// The Mamba-3 ST passes' grid (Mamba3STFn, Mamba3STGradFn; the delta-rule
// cores' ST is GEMMs, grid_recurrent.h): heads x tiles of B_V
// value rows x the rows of a tile, ceil(Dv / B_V) tiles per head, the last
// one partial when B_V does not divide Dv (its spare indices do nothing).
// Row i of the state never meets another row in ST (S_{b+1}[i] and
// V_new[:, i] read only S_b[i]; dS likewise), so tiles are independent
// chains; on a GPU one tile is one thread block (CudaExec::ForEachTile).
// B_V <= 0 or >= Dv: one tile of Dv rows per head.
struct StTiles {
  int64_t tile = 1, per_head = 0;  // B_V, tiles per head
  static StTiles Make(int64_t Dv, int64_t st_tile) {
    const int64_t t = st_tile <= 0 || st_tile > Dv ? Dv : st_tile;
    if (t <= 0) return {1, 0};
    return {t, (Dv + t - 1) / t};
  }
  // Index idx -> head h and value row i; false for a partial tile's spare.
  SF_HD bool Decode(int64_t idx, int64_t Dv, int64_t* h, int64_t* i) const {
    *h = idx / (tile * per_head);
    *i = ((idx / tile) % per_head) * tile + idx % tile;
    return *i < Dv;
  }
  int64_t tiles(int64_t H) const { return H * per_head; }
};

// Element (h, j) of H per-head matrices of n elements (a state's Dv Dk):
// dst[h dst_stride + j] = src[h src_stride + j], or 0 when src is nullptr
// (a state slot filled from S_in or d(S_out), or copied out of one).
template <typename T>
struct StateCopyFn {
  T* dst;
  int64_t dst_stride;
  const T* src;  // or nullptr: zeros
  int64_t src_stride;
  int64_t n;
  SF_HD void operator()(int64_t i) const {
    const int64_t h = i / n, j = i % n;
    dst[h * dst_stride + j] = src != nullptr ? src[h * src_stride + j] : T(0);
  }
};

// Gam_rs = exp(G_r - G_s) for s <= r, else 0 (G of head h, block start t0).
template <typename T>
SF_HD inline T Decay(const T* G, const GdnShape& sh, int64_t h, int64_t t0,
                     int64_t r, int64_t s) {
  return s <= r ? Exp(G[(t0 + r) * sh.H + h] - G[(t0 + s) * sh.H + h]) : T(0);
}

// The forward's workspace (GdnForwardWorkspaceSize elements), in order:
//   G      (T, H)            cumulative log decay inside each block   [Pre]
//   KG     (H, nb, bs, bs)   (k_r . k_s) Gam_rs, s < r               [Pre]
//                            then P = (Q K^T) o Gam                  [Out]
//   W      (T, H, Dk)        (I + A)^{-1} diag(beta gam) K           [Pre]
//   U      (T, H, Dv)        (I + A)^{-1} diag(beta) V               [Pre]
//                            then V_new = U - W S^T in place         [ST]
//   S      (H, nb, Dv, Dk)   the state entering each block           [ST]
//   Kd     (T, H, Dk)        d_r k_r, the decayed keys of ST's GEMMs  [ST]
template <typename T>
struct GdnForwardWorkspace {
  T *G, *KG, *W, *U, *S, *Kd;
  static int64_t Size(const GdnShape& s) {
    return s.tokens() + s.tiles() + s.tokens() * (2 * s.Dk + s.Dv) + s.states(s.nb);
  }
  GdnForwardWorkspace(T* ws, const GdnShape& s) {
    G = ws;
    KG = G + s.tokens();
    W = KG + s.tiles();
    U = W + s.tokens() * s.Dk;
    S = U + s.tokens() * s.Dv;
    Kd = S + s.states(s.nb);
  }
};

// The backward's workspace (GdnBackwardWorkspaceSize elements). Beyond the
// forward's (replayed, with U and V_new kept apart because Pre's backward
// needs U), the passes of the backward hand over:
//   P      (H, nb, bs, bs)   (Q K^T) o Gam                            [Out]
//   dP     (H, nb, bs, bs)   dO V_new^T, then dA (Pre's backward)
//   Vn     (T, H, Dv)        V_new
//   dVn    (T, H, Dv)        d(V_new), then (I + A)^{-T} d(V_new)
//   Z      (T, H, Dv)        ST's share of d(V_new): diag(d) K dS_out^T
//   dW     (T, H, Dk)        d(W), then (I + A)^{-T} d(W)
//   e      (T, H)            ST's decay terms e_s (docs/gdn-kernel.md)
//   dS     (H, nb + 1, Dv, Dk) slot b: the gradient of the state entering
//                            block b (slot nb: d(S_out)); before ST's
//                            backward, slot b < nb holds block b's own share
// The CPU backward keeps only the entering states (H nb Dv Dk) and recomputes
// the rest block by block in small scratch; a grid runs every block of a pass
// at once, so each pass's results for all blocks must exist together.
template <typename T>
struct GdnBackwardWorkspace {
  GdnForwardWorkspace<T> f;
  T *P, *dP, *Vn, *dVn, *Z, *dW, *e, *dS;
  static int64_t Size(const GdnShape& s) {
    return GdnForwardWorkspace<T>::Size(s) + 2 * s.tiles() +
           3 * s.tokens() * s.Dv + s.tokens() * s.Dk + s.tokens() +
           s.states(s.nb + 1);
  }
  GdnBackwardWorkspace(T* ws, const GdnShape& s)
      : f(ws, s) {
    P = ws + GdnForwardWorkspace<T>::Size(s);
    dP = P + s.tiles();
    Vn = dP + s.tiles();
    dVn = Vn + s.tokens() * s.Dv;
    Z = dVn + s.tokens() * s.Dv;
    dW = Z + s.tokens() * s.Dv;
    e = dW + s.tokens() * s.Dk;
    dS = e + s.tokens();
  }
};

}  // namespace stateflow::backend::grid

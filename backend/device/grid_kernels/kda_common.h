// What the Kimi Delta Attention (KDA) core's grid passes (kda_forward.h,
// kda_backward.h) share: the chunk's shape (GdnShape's index arithmetic), the
// per-channel pairwise decay, and the layout of the workspace through which
// the separate passes hand each other their results. The math is
// backend/kernels/kda_core.h's (the CPU kernel and the float64 reference);
// the passes are driven by backend/device/grid_kda_core.h.
//
// Not a kernel: no functor here writes anything.
//
//   KdaShape s = KdaShape::Make(T, H, Dk, Dv, block_size);
//   KdaForwardWorkspace<float> ws(workspace, s);   // pointers into it
//
// Dimensions: T tokens in the chunk, H heads, Dk key dim, Dv value dim, bs
// the block size T_C, nb = ceil(T / bs) blocks, L tokens in block b (bs, or
// fewer for the last one); r, s token indices inside a block, c a key
// channel, i a value row of the state.
// Layouts: q, k, g, G, W, Kt (T, H, Dk); v, o, U, V_new (T, H, Dv); beta
// (T, H); per-block (L, L) matrices in (H, nb, bs, bs) (rows and columns past
// L zero or unused); states (H, nb, Dv, Dk), state gradients
// (H, nb + 1, Dv, Dk).
//
// The per-block quantities (G the cumulative log decay per channel,
// E_rsc = exp(G_rc - G_sc) for s <= r, one exponential, never exp(G_r)
// exp(-G_s), which overflows under strong decays):
//   KK_rs = sum_c k_rc k_sc E_rsc (s < r)    P_rs = sum_c q_rc k_sc E_rsc (s <= r)
//   Kt_rc = k_rc exp(G_{L-1,c} - G_rc)      Qh_rc = q_rc exp(G_rc)
//   M = I + diag(beta) KK,  W = M^{-1} diag(beta) (K o exp(G)),
//   U = M^{-1} diag(beta) V,  V_new = U - W S_b^T,
//   o = Qh S_b^T + P V_new,   S_{b+1} = S_b diag(exp(G_{L-1})) + V_new^T Kt.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

// GDN's chunk shape: the same index arithmetic (Row, Tile, State, L).
using KdaShape = GdnShape;

// E_rsc = exp(G_rc - G_sc) of head h's block starting at token t0, channel c
// (s <= r: the caller masks).
template <typename T>
SF_HD inline T KdaDecay(const T* G, const KdaShape& sh, int64_t h, int64_t t0,
                        int64_t r, int64_t s, int64_t c) {
  return Exp(G[sh.Row(t0 + r, h, sh.Dk) + c] - G[sh.Row(t0 + s, h, sh.Dk) + c]);
}

// The forward's workspace, Size() = 3 T H Dk + T H Dv + H nb bs^2
// + H nb Dv Dk elements, in order:
//   G   (T, H, Dk)        cumulative log decay per channel in each block [Pre]
//   KK  (H, nb, bs, bs)   sum_c k_rc k_sc E_rsc, s < r (0 elsewhere)     [Pre]
//                         then P = sum_c q_rc k_sc E_rsc, s <= r         [Out]
//   Kt  (T, H, Dk)        k_rc exp(G_{L-1,c} - G_rc)                      [Pre]
//   W   (T, H, Dk)        M^{-1} diag(beta) (K o exp(G))                 [Pre]
//                         then Qh = q o exp(G) (ST no longer reads W)    [Out]
//   U   (T, H, Dv)        M^{-1} diag(beta) V                            [Pre]
//                         then V_new = U - W S^T in place                [ST]
//   S   (H, nb, Dv, Dk)   the state entering each block                  [ST]
// Out overwrites only the rows of its own blocks, so a segment's Out may run
// beside the ST of later segments (the overlapped forward).
template <typename T>
struct KdaForwardWorkspace {
  T *G, *KK, *Kt, *W, *U, *S;
  static int64_t Size(const KdaShape& s) {
    return 3 * s.tokens() * s.Dk + s.tokens() * s.Dv + s.tiles() + s.states(s.nb);
  }
  KdaForwardWorkspace(T* ws, const KdaShape& s) {
    G = ws;
    KK = G + s.tokens() * s.Dk;
    Kt = KK + s.tiles();
    W = Kt + s.tokens() * s.Dk;
    U = W + s.tokens() * s.Dk;
    S = U + s.tokens() * s.Dv;
  }
};

// The backward's workspace, Size() = KdaForwardWorkspace::Size()
// + H nb bs^2 + 2 T H Dv + 2 T H Dk + H (nb + 1) Dv Dk elements. The
// forward's (replayed by Pre and ST, with V_new kept apart from U because
// Pre's backward needs U; its W stays W), then:
//   PdP (H, nb, bs, bs)   P (Out's backward, for d(V_new) = P^T dO), then
//                         dP = dO V_new^T (s <= r), then dA = d(M) (s < r)
//                         (Pre's backward)
//   Vn  (T, H, Dv)        V_new
//   dVn (T, H, Dv)        d(V_new): P^T dO, plus ST's share Kt dS'^T (ST's
//                         backward), then M^{-T} d(V_new) (= dVb, Pre's
//                         backward)
//   Qh  (T, H, Dk)        q o exp(G) (Out's backward), then dKt = V_new dS',
//                         then e = dKt o Kt in place
//   dQh (T, H, Dk)        dO S_b (Out's backward), then dW = -d(V_new) S_b,
//                         then M^{-T} dW (= dKb)
//   dS  (H, nb + 1, Dv, Dk) slot b: the gradient of the state entering block
//                         b (slot nb: d(S_out)); before ST's backward, slot
//                         b < nb holds Out's share dO^T Qh
// (dS' below: slot b + 1, the gradient of the state leaving block b.) Out's
// backward of every block finishes before the first of the rest, so the
// buffers it hands over (Qh, dQh, P) are free for the rest's reuse.
template <typename T>
struct KdaBackwardWorkspace {
  KdaForwardWorkspace<T> f;
  T *PdP, *Vn, *dVn, *Qh, *dQh, *dS;
  static int64_t Size(const KdaShape& s) {
    return KdaForwardWorkspace<T>::Size(s) + s.tiles() + 2 * s.tokens() * s.Dv +
           2 * s.tokens() * s.Dk + s.states(s.nb + 1);
  }
  KdaBackwardWorkspace(T* ws, const KdaShape& s) : f(ws, s) {
    PdP = ws + KdaForwardWorkspace<T>::Size(s);
    Vn = PdP + s.tiles();
    dVn = Vn + s.tokens() * s.Dv;
    Qh = dVn + s.tokens() * s.Dv;
    dQh = Qh + s.tokens() * s.Dk;
    dS = dQh + s.tokens() * s.Dk;
  }
};

}  // namespace stateflow::backend::grid

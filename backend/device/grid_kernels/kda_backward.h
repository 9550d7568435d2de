// The KDA core's backward as grid passes, after a replay of the forward's
// Pre and ST (kda_forward.h) that leaves G, KK, Kt, W, U, V_new and every
// block's entering state S_b in the workspace (kda_common.h):
//   Out  KdaScaleByDecayFn   (T, H, Dk)       Qh = q o exp(G)
//        KdaGramFn           (H, nb, bs, bs)  P (s <= r)
//        GEMMs, KdaCausalMaskFn               d(V_new) = P^T dO, then
//                                             dP = dO V_new^T (s <= r) over P,
//                                             dQh = dO S_b
//        KdaOutQueryGradFn   (T, H, Dk)       dq, dG from Out's queries (written)
//        KdaOutKeyGradFn     (T, H, Dk)       dk (written), dG from P's keys
//        GEMM                                 slot b of dS = dO^T Qh
//   ST   per block in reverse, batched over heads (DeltaStBackward):
//        GEMM d(V_new) += Kt dS'^T (ST's share); KdaCarryFn
//        dS_b += exp(G_{L-1}) o dS'; GEMM dS_b -= d(V_new)^T W
//   rest GEMM                                 dKt = V_new dS'
//        KdaSTKeyGradFn      (T, H, Dk)       dk, dG from Kt; e = dKt o Kt
//        KdaSTDecayGradFn    (H, nb, Dk)      dG_{L-1} from ST
//        GEMM                                 dW = -d(V_new) S_b
//        GdnPreBackSolveFn   (H, nb, Dv + Dk) M^{-T} on one column (GDN's:
//                                             the same solve)
//        GdnDAFn             (H, nb, bs, bs)  dA = d(M) (strictly lower)
//        GdnScaleByBetaFn    (T, H, Dv)       dv (written)
//        KdaPreRowGradFn     (T, H)           dbeta (written)
//        KdaPreKeyGradFn     (T, H, Dk)       dk, dG from Pre
//        KdaDecayCumsumFn    (H, nb, Dk)      dg = reverse cumsum of dG
// Only the ST pass walks the blocks in order. Every pass writes disjoint
// elements (an accumulation into a gradient is by the one call that owns the
// element), so each is race-free in any order and deterministic.
//
// The gradients, per block (dS' = the gradient of the state leaving it,
// D = dVb, dKb the solved d(V_new), dW; dA = d(M), strictly lower):
//   d(V_new) = P^T dO + Kt dS'^T,  dP = dO V_new^T,  dQh = dO S_b,
//   dS_b     = dO^T Qh + dS' diag(exp(G_{L-1})) - d(V_new)^T W,
//   dW       = -d(V_new) S_b,  dKt = V_new dS',
//   dq_r     = sum_{s<=r} dP_rs k_s o E_rs. + dQh_r o exp(G_r),
//   dk_s     = sum_{r>=s} dP_rs q_r o E_rs. + dKt_s o exp(G_{L-1} - G_s)
//              + beta_s dKb_s o exp(G_s) + sum_{u<s} beta_s dA_su k_u o E_su.
//              + sum_{r>s} beta_r dA_rs k_r o E_rs.,
//   dv = diag(beta) dVb,
//   dbeta_r  = dVb_r . v_r + dKb_r . (k_r o exp(G_r)) + sum_s dA_rs KK_rs,
//   dG       = q o dq - k o (P's share of dk) - e + [r = L-1] (sum_s e_s
//              + exp(G_{L-1}) o diag(S_b^T dS')) + beta_r dKb_r o k_r o exp(G_r)
//              + k o (KK's row share of dk - KK's column share),
//   e = dKt o Kt, dg = the reverse cumulative sum of dG inside each block.
// (Each E_rsc depends on G_r - G_s: its share of dG is + on row r, - on row
// s, the products above with q or k.)
//
// Dimensions and layouts: kda_common.h. dO (T, H, Dv); dS_out, dS_in
// (H, Dv, Dk); dq, dk, dg (T, H, Dk); dv (T, H, Dv); dbeta (T, H).
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_backward.h"
#include "backend/device/grid_kernels/kda_common.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

// Tile entry (r, c): 0 unless c <= r < L (dP's GEMM wrote the whole L x L
// and nothing past it), else unchanged.
template <typename T>
struct KdaCausalMaskFn {
  T* tile;       // (H, nb, bs, bs)
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const TileIndex x(i, s);
    if (x.r >= s.L(x.b) || x.c > x.r) tile[i] = T(0);
  }
};

// Element (t, h, c): dq = sum_{s <= r} dP_rs k_sc E_rsc + dQh_rc exp(G_rc);
// dG = q dq (written: the share of G_r in P's E_r.c and in Qh).
template <typename T>
struct KdaOutQueryGradFn {
  T* dq;          // (T, H, Dk), written
  T* dG;          // (T, H, Dk), written
  const T* dP;    // (H, nb, bs, bs)
  const T* q;
  const T* k;
  const T* dQh;   // (T, H, Dk)
  const T* G;
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dk, s);
    T acc = 0;
    for (int64_t c = 0; c <= x.r; ++c) {
      acc += (dP[s.Tile(x.h, x.b, x.r, c)] * k[s.Row(x.t0 + c, x.h, s.Dk) + x.j]) *
             KdaDecay(G, s, x.h, x.t0, x.r, c, x.j);
    }
    const T d = acc + dQh[i] * Exp(G[i]);
    dq[i] = d;
    dG[i] = q[i] * d;
  }
};

// Element (t, h, c), t the key's token s: dk = sum_{r >= s} dP_rs q_rc E_rsc
// (written); dG -= k dk (G_s's share of E_r.c).
template <typename T>
struct KdaOutKeyGradFn {
  T* dk;          // (T, H, Dk), written
  T* dG;          // (T, H, Dk), accumulated
  const T* dP;
  const T* q;
  const T* k;
  const T* G;
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dk, s);
    T acc = 0;
    for (int64_t r = x.r; r < s.L(x.b); ++r) {
      acc += (dP[s.Tile(x.h, x.b, r, x.r)] * q[s.Row(x.t0 + r, x.h, s.Dk) + x.j]) *
             KdaDecay(G, s, x.h, x.t0, r, x.r, x.j);
    }
    dk[i] = acc;
    dG[i] -= k[i] * acc;
  }
};

// Element (t, h, c), e holding dKt = V_new dS' (the GEMM's): dk += dKt
// exp(G_{L-1,c} - G_rc); e = dKt Kt in place; dG -= e (G_r's share of Kt;
// G_{L-1}'s is KdaSTDecayGradFn's).
template <typename T>
struct KdaSTKeyGradFn {
  T* dk;          // (T, H, Dk), accumulated
  T* dG;          // (T, H, Dk), accumulated
  T* e;           // (T, H, Dk): in dKt, out e
  const T* Kt;
  const T* G;
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t hc = i % (s.H * s.Dk), t = i / (s.H * s.Dk), b = t / s.bs;
    const int64_t last = (b * s.bs + s.L(b) - 1) * s.H * s.Dk + hc;
    const T dkt = e[i];
    dk[i] += dkt * Exp(G[last] - G[i]);
    const T er = dkt * Kt[i];
    e[i] = er;
    dG[i] -= er;
  }
};

// (h, b, c): dG_{L-1,c} += exp(G_{L-1,c}) sum_i dS'_ic S_b,ic + sum_r e_rc.
template <typename T>
struct KdaSTDecayGradFn {
  T* dG;            // (T, H, Dk), accumulated
  const T* e;       // (T, H, Dk)
  const T* dS;      // (H, nb + 1, Dv, Dk)
  const T* states;  // (H, nb, Dv, Dk)
  const T* G;
  KdaShape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t c = idx % s.Dk, b = (idx / s.Dk) % s.nb, h = idx / (s.Dk * s.nb);
    const int64_t t0 = b * s.bs, L = s.L(b);
    const T* next = dS + s.State(h, b + 1, 0, s.nb + 1) + c;
    const T* Sb = states + s.State(h, b, 0, s.nb) + c;
    T ip = 0;
    for (int64_t i = 0; i < s.Dv; ++i) ip += next[i * s.Dk] * Sb[i * s.Dk];
    T esum = 0;
    for (int64_t r = 0; r < L; ++r) esum += e[s.Row(t0 + r, h, s.Dk) + c];
    const int64_t last = s.Row(t0 + L - 1, h, s.Dk) + c;
    dG[last] += Exp(G[last]) * ip + esum;
  }
};

// Entry (t, h): dbeta_r = dVb_r . v_r + dKb_r . (k_r o exp(G_r))
//                         + sum_s dA_rs KK_rs                     (written).
template <typename T>
struct KdaPreRowGradFn {
  T* dbeta;       // (T, H), written
  const T* dVb;   // (T, H, Dv)
  const T* dKb;   // (T, H, Dk)
  const T* dA;    // (H, nb, bs, bs)
  const T* KK;    // (H, nb, bs, bs)
  const T* k;
  const T* v;
  const T* G;
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, 1, s);
    const int64_t L = s.L(x.b), row = s.Row(x.t, x.h, s.Dk);
    T kterm = 0;
    for (int64_t c = 0; c < s.Dk; ++c) {
      kterm += dKb[row + c] * (k[row + c] * Exp(G[row + c]));
    }
    T aterm = 0;
    for (int64_t c = 0; c < L; ++c) {
      aterm += dA[s.Tile(x.h, x.b, x.r, c)] * KK[s.Tile(x.h, x.b, x.r, c)];
    }
    dbeta[i] = (Dot(dVb + s.Row(x.t, x.h, s.Dv), v + s.Row(x.t, x.h, s.Dv), s.Dv) +
                kterm) + aterm;
  }
};

// Element (t, h, c), token r: with a = beta_r dKb_rc (the gradient of
// K o exp(G)), m1 = sum_{u < r} beta_r dA_ru k_uc E_ruc and
// m2 = sum_{u > r} beta_u dA_ur k_uc E_urc (KK's row and column shares):
//   dk += a exp(G_rc) + m1 + m2;   dG += a k_rc exp(G_rc) + k_rc (m1 - m2).
template <typename T>
struct KdaPreKeyGradFn {
  T* dk;          // (T, H, Dk), accumulated
  T* dG;          // (T, H, Dk), accumulated
  const T* dKb;   // (T, H, Dk)
  const T* dA;    // (H, nb, bs, bs)
  const T* k;
  const T* beta;
  const T* G;
  KdaShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dk, s);
    const int64_t L = s.L(x.b);
    const T br = beta[x.t * s.H + x.h];
    const T eg = Exp(G[i]);
    const T a = br * dKb[i];
    T m1 = 0, m2 = 0;
    for (int64_t u = 0; u < x.r; ++u) {
      m1 += ((br * dA[s.Tile(x.h, x.b, x.r, u)]) * k[s.Row(x.t0 + u, x.h, s.Dk) + x.j]) *
            KdaDecay(G, s, x.h, x.t0, x.r, u, x.j);
    }
    for (int64_t u = x.r + 1; u < L; ++u) {
      m2 += ((beta[(x.t0 + u) * s.H + x.h] * dA[s.Tile(x.h, x.b, u, x.r)]) *
             k[s.Row(x.t0 + u, x.h, s.Dk) + x.j]) *
            KdaDecay(G, s, x.h, x.t0, u, x.r, x.j);
    }
    dk[i] += a * eg;
    dk[i] += m1 + m2;
    dG[i] += (a * k[i]) * eg;
    dG[i] += k[i] * (m1 - m2);
  }
};

// (h, b, c): dg_rc = sum_{u >= r} dG_uc inside the block, in place.
template <typename T>
struct KdaDecayCumsumFn {
  T* dg;         // (T, H, Dk): in dG, out dg
  KdaShape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t c = idx % s.Dk, b = (idx / s.Dk) % s.nb, h = idx / (s.Dk * s.nb);
    const int64_t t0 = b * s.bs;
    T acc = 0;
    for (int64_t r = s.L(b) - 1; r >= 0; --r) {
      T* x = dg + s.Row(t0 + r, h, s.Dk) + c;
      acc += *x;
      *x = acc;
    }
  }
};

}  // namespace stateflow::backend::grid

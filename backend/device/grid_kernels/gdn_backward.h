// The GDN core's backward as grid passes (docs/gdn-kernel.md, "Backward"),
// after a replay of the forward's Pre and ST (gdn_forward.h) that leaves G,
// KG, W, U, V_new and every block's entering state S_b in the workspace:
//   Out  GEMMs + masks         (H, nb, bs, bs)  P = (Q K^T) o Gam, dP = dO V_new^T
//        GEMM                                  dO S_b (over dq)
//        GdnOutDecayGradFn    (T, H)           dG from Out (written)
//        GdnOutQueryGradFn    (T, H, Dk)       dq (written)
//        GdnOutKeyGradFn      (T, H, Dk)       dk from Out (written)
//        GdnOutValueGradFn    (T, H, Dv)       d(V_new) from Out = P^T dO
//        GdnStateShareFn      (H, nb, Dv, Dk)  each block's own share of dS:
//                                              dOg^T Q - dV_new(Out)^T W
//   ST   per block in reverse, batched over heads (DeltaStBackward):
//        GEMM Z = Kd dS'^T (ST's share of d(V_new)); GdnCarryFn
//        dS_b += gam dS'; GEMM dS_b -= Z^T W
//        GEMM dKd = V_new dS' (over dW); GdnSTRowGradFn (T, H) dk from ST, e_r
//        GdnSTDecayGradFn     (H, nb)          dG from ST
//        GEMM                                  dW = -d(V_new) S_b
//   Pre  GdnPreBackSolveFn    (H, nb, Dv + Dk) (I + A)^{-T} on one column
//        GdnDAFn              (H, nb, bs, bs)  dA (strictly lower)
//        GdnScaleByBetaFn     (T, H, Dv)       dv (written)
//        GdnPreRowGradFn      (T, H)           dbeta (written), dG from Pre
//        GdnPreKeyGradFn      (T, H, Dk)       dk from Pre
//        GdnDecayCumsumFn     (H, nb)          dg = reverse cumsum of dG
// Only the ST passes walk the blocks in order. Products with a dimension of
// Dk or Dv over a block are GEMMs (grid::BlockGemm). Every pass writes disjoint
// elements (an accumulation into a gradient is by the one call that owns
// the element), so each is race-free in any order and deterministic.
//
// Dimensions and layouts: gdn_common.h. dO (T, H, Dv); dS_out, dS_in
// (H, Dv, Dk).
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/grid_kernels/gdn_forward.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

// Decodes a (T, H, D) index into token, head, column, with the block.
struct TokenIndex {
  int64_t t, h, j, b, t0, r;
  SF_HD TokenIndex(int64_t i, int64_t D, const GdnShape& s) {
    j = i % D;
    h = (i / D) % s.H;
    t = i / (D * s.H);
    b = t / s.bs;
    t0 = b * s.bs;
    r = t - t0;
  }
};

// Entry (t, h): dG_r = sum_c E_rc - sum_c E_cr (E = dP o P)
//                      + gam_r (dO S_b)_r . q_r,
// (dO S_b) the GEMM's, waiting in dq (GdnOutQueryGradFn then overwrites it).
template <typename T>
struct GdnOutDecayGradFn {
  T* dG;            // (T, H), written
  const T* P;
  const T* dP;
  const T* q;
  const T* dOS;     // (T, H, Dk): dO S_b
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, 1, s);
    const int64_t L = s.L(x.b);
    T rows = 0, cols = 0;
    for (int64_t c = 0; c < L; ++c) {
      rows += dP[s.Tile(x.h, x.b, x.r, c)] * P[s.Tile(x.h, x.b, x.r, c)];
      cols += dP[s.Tile(x.h, x.b, c, x.r)] * P[s.Tile(x.h, x.b, c, x.r)];
    }
    const T qterm = Dot(dOS + s.Row(x.t, x.h, s.Dk), q + s.Row(x.t, x.h, s.Dk), s.Dk);
    dG[i] = (rows - cols) + Exp(G[i]) * qterm;
  }
};

// Element (t, h, k): dq = sum_c (dP_rc Gam_rc) k_c + gam_r (dO S_b)_rk, dq
// holding (dO S_b) (the GEMM's) on entry.
template <typename T>
struct GdnOutQueryGradFn {
  T* dq;            // (T, H, Dk): in dO S_b, out dq
  const T* dP;
  const T* k;
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dk, s);
    T acc = 0;
    for (int64_t c = 0; c <= x.r; ++c) {
      acc += (dP[s.Tile(x.h, x.b, x.r, c)] * Decay(G, s, x.h, x.t0, x.r, c)) *
             k[s.Row(x.t0 + c, x.h, s.Dk) + x.j];
    }
    dq[i] = acc + Exp(G[x.t * s.H + x.h]) * dq[i];
  }
};

// Element (t, h, k), t the key's token c: dk = sum_{r >= c} (dP_rc Gam_rc) q_r.
template <typename T>
struct GdnOutKeyGradFn {
  T* dk;         // (T, H, Dk), written
  const T* dP;
  const T* q;
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dk, s);
    T acc = 0;
    for (int64_t r = x.r; r < s.L(x.b); ++r) {
      acc += (dP[s.Tile(x.h, x.b, r, x.r)] * Decay(G, s, x.h, x.t0, r, x.r)) *
             q[s.Row(x.t0 + r, x.h, s.Dk) + x.j];
    }
    dk[i] = acc;
  }
};

// Element (t, h, j), t the token c: d(V_new)_cj = sum_{r >= c} P_rc dO_rj.
template <typename T>
struct GdnOutValueGradFn {
  T* dVn;        // (T, H, Dv), written
  const T* P;
  const T* dO;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dv, s);
    T acc = 0;
    for (int64_t r = x.r; r < s.L(x.b); ++r) {
      acc += P[s.Tile(x.h, x.b, r, x.r)] * dO[s.Row(x.t0 + r, x.h, s.Dv) + x.j];
    }
    dVn[i] = acc;
  }
};

// Element (h, b, i, k) of dS slot b: sum_r dO_ri gam_r q_rk
//                                   - sum_r d(V_new)_ri W_rk.
template <typename T>
struct GdnStateShareFn {
  T* dS;         // (H, nb + 1, Dv, Dk)
  const T* dO;
  const T* q;
  const T* dVn;
  const T* W;
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t k = idx % s.Dk, i = (idx / s.Dk) % s.Dv;
    const int64_t b = (idx / (s.Dk * s.Dv)) % s.nb;
    const int64_t h = idx / (s.Dk * s.Dv * s.nb);
    const int64_t t0 = b * s.bs, L = s.L(b);
    T out = 0, st = 0;
    for (int64_t r = 0; r < L; ++r) {
      const int64_t t = t0 + r;
      out += (dO[s.Row(t, h, s.Dv) + i] * Exp(G[t * s.H + h])) *
             q[s.Row(t, h, s.Dk) + k];
      st += dVn[s.Row(t, h, s.Dv) + i] * W[s.Row(t, h, s.Dk) + k];
    }
    dS[s.State(h, b, i, s.nb + 1) + k] = out - st;
  }
};

// Entry (t, h), with dS' the gradient of the state leaving the token's
// block: dKd_r = V_new_r^T dS' (Dk); dk_r += d_r dKd_r;
// e_r = d_r (dKd_r . k_r).
template <typename T>
struct GdnSTRowGradFn {
  T* dk;          // (T, H, Dk), accumulated
  T* e;           // (T, H), written
  const T* dKd;   // (T, H, Dk): V_new dS' (the GEMM's)
  const T* k;
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, 1, s);
    const int64_t L = s.L(x.b);
    const T d = Exp(-(G[i] - G[(x.t0 + L - 1) * s.H + x.h]));
    const T* dkd = dKd + s.Row(x.t, x.h, s.Dk);
    const T* kr = k + s.Row(x.t, x.h, s.Dk);
    T* dkr = dk + s.Row(x.t, x.h, s.Dk);
    T ek = 0;
    for (int64_t c = 0; c < s.Dk; ++c) {
      dkr[c] += d * dkd[c];
      ek += dkd[c] * kr[c];
    }
    e[i] = ek * d;
  }
};

// (h, b): dG_{L-1} += gam_{L-1} <dS', S_b> + sum_r e_r; dG_r -= e_r.
template <typename T>
struct GdnSTDecayGradFn {
  T* dG;            // (T, H), accumulated
  const T* e;       // (T, H)
  const T* dS;      // (H, nb + 1, Dv, Dk)
  const T* states;  // (H, nb, Dv, Dk)
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t h = idx / s.nb, b = idx % s.nb;
    const int64_t t0 = b * s.bs, L = s.L(b);
    const int64_t last = (t0 + L - 1) * s.H + h;
    const T ip = Dot(dS + s.State(h, b + 1, 0, s.nb + 1),
                     states + s.State(h, b, 0, s.nb), s.Dv * s.Dk);
    T esum = 0;
    for (int64_t r = 0; r < L; ++r) esum += e[(t0 + r) * s.H + h];
    dG[last] += Exp(G[last]) * ip;
    dG[last] += esum;
    for (int64_t r = 0; r < L; ++r) dG[(t0 + r) * s.H + h] -= e[(t0 + r) * s.H + h];
  }
};

// (h, b, j): column j of dVn (j < Dv) or of dW := (I + A)^{-T} itself, by
// back substitution (rows descending): X_r -= sum_{c > r} A_cr X_c,
// A_cr = beta_c KG_cr.
template <typename T>
struct GdnPreBackSolveFn {
  T* dVn;        // (T, H, Dv)
  T* dW;         // (T, H, Dk)
  const T* KG;
  const T* beta;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t cols = s.Dv + s.Dk;
    const int64_t j = i % cols, b = (i / cols) % s.nb, h = i / (cols * s.nb);
    const int64_t t0 = b * s.bs, L = s.L(b);
    const bool is_v = j < s.Dv;
    T* X = is_v ? dVn + j : dW + (j - s.Dv);
    const int64_t D = is_v ? s.Dv : s.Dk;
    for (int64_t r = L - 1; r >= 0; --r) {
      T acc = X[s.Row(t0 + r, h, D)];
      for (int64_t c = r + 1; c < L; ++c) {
        acc -= (beta[(t0 + c) * s.H + h] * KG[s.Tile(h, b, c, r)]) *
               X[s.Row(t0 + c, h, D)];
      }
      X[s.Row(t0 + r, h, D)] = acc;
    }
  }
};

// Tile entry (r, c): dA_rc = -(dVb_r . U_c) - (dKb_r . W_c) for c < r < L,
// else 0 (dVb, dKb: the solved dVn, dW).
template <typename T>
struct GdnDAFn {
  T* dA;         // (H, nb, bs, bs)
  const T* dVb;
  const T* dKb;
  const T* U;
  const T* W;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TileIndex x(i, s);
    const int64_t t0 = x.b * s.bs;
    if (x.c >= x.r || x.r >= s.L(x.b)) {
      dA[i] = T(0);
      return;
    }
    dA[i] = -Dot(dVb + s.Row(t0 + x.r, x.h, s.Dv), U + s.Row(t0 + x.c, x.h, s.Dv),
                 s.Dv) -
            Dot(dKb + s.Row(t0 + x.r, x.h, s.Dk), W + s.Row(t0 + x.c, x.h, s.Dk),
                s.Dk);
  }
};

// Element (t, h, j): out = beta_t in (dv = diag(beta) dVb).
template <typename T>
struct GdnScaleByBetaFn {
  T* out;          // (T, H, D)
  const T* in;     // (T, H, D)
  const T* beta;   // (T, H)
  int64_t D;
  SF_HD void operator()(int64_t i) const { out[i] = beta[i / D] * in[i]; }
};

// Entry (t, h): with c_r = dKb_r . k_r, B = dA o KG:
//   dbeta_r = dVb_r . v_r + gam_r c_r + sum_c B_rc              (written)
//   dG_r   += beta_r gam_r c_r + sum_c beta_r B_rc - sum_c beta_c B_cr.
template <typename T>
struct GdnPreRowGradFn {
  T* dbeta;      // (T, H), written
  T* dG;         // (T, H), accumulated
  const T* dVb;
  const T* dKb;
  const T* dA;
  const T* KG;
  const T* k;
  const T* v;
  const T* beta;
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, 1, s);
    const int64_t L = s.L(x.b);
    const T gam = Exp(G[i]);
    const T c_r = Dot(dKb + s.Row(x.t, x.h, s.Dk), k + s.Row(x.t, x.h, s.Dk), s.Dk);
    T brow = 0, erow = 0, ecol = 0;
    for (int64_t c = 0; c < L; ++c) {
      const T b_rc = dA[s.Tile(x.h, x.b, x.r, c)] * KG[s.Tile(x.h, x.b, x.r, c)];
      const T b_cr = dA[s.Tile(x.h, x.b, c, x.r)] * KG[s.Tile(x.h, x.b, c, x.r)];
      brow += b_rc;
      erow += beta[i] * b_rc;
      ecol += beta[(x.t0 + c) * s.H + x.h] * b_cr;
    }
    dbeta[i] = (Dot(dVb + s.Row(x.t, x.h, s.Dv), v + s.Row(x.t, x.h, s.Dv), s.Dv) +
                gam * c_r) + brow;
    dG[i] += (beta[i] * gam) * c_r;
    dG[i] += erow - ecol;
  }
};

// Element (t, h, k): dk_r += beta_r gam_r dKb_r + sum_c M_rc k_c
// + sum_c M_cr k_c, M_rc = beta_r (dA_rc Gam_rc).
template <typename T>
struct GdnPreKeyGradFn {
  T* dk;         // (T, H, Dk), accumulated
  const T* dKb;
  const T* dA;
  const T* k;
  const T* beta;
  const T* G;
  GdnShape s;
  SF_HD void operator()(int64_t i) const {
    const TokenIndex x(i, s.Dk, s);
    const int64_t L = s.L(x.b);
    const int64_t ri = x.t * s.H + x.h;
    T a = (beta[ri] * Exp(G[ri])) * dKb[i];
    T m1 = 0, m2 = 0;
    for (int64_t c = 0; c < L; ++c) {
      const T kc = k[s.Row(x.t0 + c, x.h, s.Dk) + x.j];
      m1 += (beta[ri] * (dA[s.Tile(x.h, x.b, x.r, c)] *
                         Decay(G, s, x.h, x.t0, x.r, c))) * kc;
      m2 += (beta[(x.t0 + c) * s.H + x.h] *
             (dA[s.Tile(x.h, x.b, c, x.r)] * Decay(G, s, x.h, x.t0, c, x.r))) * kc;
    }
    dk[i] += a;
    dk[i] += m1;
    dk[i] += m2;
  }
};

// (h, b): dg_s = sum_{r >= s} dG_r inside the block, in place.
template <typename T>
struct GdnDecayCumsumFn {
  T* dg;         // (T, H): in dG, out dg
  GdnShape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t h = idx / s.nb, b = idx % s.nb;
    const int64_t t0 = b * s.bs;
    T acc = 0;
    for (int64_t r = s.L(b) - 1; r >= 0; --r) {
      T* x = dg + (t0 + r) * s.H + h;
      acc += *x;
      *x = acc;
    }
  }
};

}  // namespace stateflow::backend::grid

// The Mamba-3 core (backend/kernels/mamba3_core.h: the math, the
// float64 reference, the CPU kernel) as grid passes, the paper's Pre / ST /
// Out split as separate launches over a workspace:
//   forward
//     Pre  GdnCumDecayFn (T, H)              G_r = a_0 + ... + a_r per block
//          Mamba3BlockUFn (H, nb, Dv, Dk)    U_b = V^T diag(M_{L-1,.}) K
//     ST   Mamba3STFn (H, tiles, B_V)        one state row through the blocks
//                                            in order: S'_b = S_b + beta_0
//                                            vp kp^T (stored), S_{b+1} =
//                                            exp(G_{L-1}) S'_b + U_b
//     Out  Mamba3ScoreFn (H, nb, bs, bs)     P_rs = (q_r . k_s) M_rs, s <= r
//          Mamba3OutFn (T, H, Dv)            o = exp(G_r) S'_b q_r + P V
//          Mamba3CarryOutFn (H, Dk + Dv)     k_out, v_out: the last token's
//   backward (the forward's Pre and ST replayed first)
//     Mamba3GramFn (H, nb, bs, bs) x2        Q K^T and dO V^T, s <= r
//     Mamba3OutStateGradFn (H, nb, Dv, Dk)   Z_b = sum_r exp(G_r) dO_r q_r^T
//     Mamba3STGradFn (H, tiles, B_V)         dS'_b = exp(G_{L-1}) dS'_{b+1}
//                                            + Z_b, blocks in reverse
//     Mamba3WeightGradFn (H, nb, bs, bs)     dM_rs
//     Mamba3QueryGradFn, Mamba3KeyGradFn, Mamba3ValueGradFn: dq, dk, dv
//     Mamba3DecayGradFn (T, H), Mamba3CumGradFn (T, H): dG, then da
//     Mamba3GateGradFn (T, H)                dgamma, dbeta
//     Mamba3CarryInGradFn (H, Dk + Dv)       dk_in, dv_in
// Only the two ST passes walk the blocks in order, over heads x tiles of B_V
// state rows (StTiles, gdn_common.h: schedule.st_tile; one tile is one
// thread block on a GPU): row i of S' and of dS' needs only row i of the
// state (or gradient) before it, so the tile changes the grid, not the bits;
// every other pass runs every block of every head at once. Every pass also
// runs on a range of blocks (a segment: the families' overlapped grid cores, the ST
// passes with their b0, b1, the others restricted by BlockRangeFn), element
// for element the same arithmetic as over the whole chunk. Each functor
// writes disjoint elements per index; every sum runs inside one index in a
// fixed order: deterministic, no atomics.
//
// Per block b of head h (local tokens r, s; L tokens; t0 its first token):
//   c_s = gamma_s + beta_{s+1},  M_rs = exp(G_r - G_s) c_s (s < r),
//   M_rr = gamma_r, 0 above;  m = M_{L-1,.}.
// The backward, with D = dS'_{b+1} (the gradient of the state leaving block
// b; d(S_out) or 0 for the last block):
//   dS'_b  = exp(G_{L-1}) D + sum_r exp(G_r) dO_r q_r^T        (= dS_b)
//   dM_rs  = (q_r . k_s)(dO_r . v_s) + [r = L-1] v_s^T D k_s     (s <= r)
//   dq_r   = exp(G_r) S'^T dO_r + sum_{s<=r} M_rs (dO_r . v_s) k_s
//   dk_s   = sum_{r>=s} M_rs (dO_r . v_s) q_r + m_s D^T v_s (+ the carry)
//   dv_s   = sum_{r>=s} M_rs (q_r . k_s) dO_r + m_s D k_s     (+ the carry)
//   dG_r   = exp(G_r) dO_r . S' q_r + [r = L-1] exp(G_{L-1}) <D, S'>
//            + sum_{s<r} dM_rs M_rs - sum_{u>r} dM_ur M_ur
//   da_u   = sum_{r>=u} dG_r,   dc_s = sum_{r>s} dM_rs exp(G_r - G_s)
//   dgamma_s = dM_ss + dc_s (s < L-1),  dbeta_s = dc_{s-1} (s > 0)
//   the carry (block b's kp, vp = the previous token's k, v or the carry in):
//     dbeta_0 = vp^T dS'_b kp, dkp = beta_0 dS'_b^T vp, dvp = beta_0 dS'_b kp.
//
//   GridOps<double, HostExec>::Mamba3CoreForward(...) runs them (grid_ops.h).
//
// Dimensions and layouts: mamba3_core.h's and gdn_common.h's (GdnShape: the
// same index arithmetic, with Dk the state dim and Dv the SSM head dim);
// per-block matrices (H, nb, bs, bs), states (H, nb, Dv, Dk).
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

using Mamba3Shape = GdnShape;

// M_rs of head h's block b (local r, s).
template <typename T>
SF_HD inline T Mamba3Weight(const T* G, const T* gamma, const T* beta,
                            const Mamba3Shape& sh, int64_t h, int64_t b,
                            int64_t r, int64_t s) {
  const int64_t t0 = b * sh.bs;
  if (s > r) return T(0);
  if (s == r) return gamma[(t0 + r) * sh.H + h];
  const T c = gamma[(t0 + s) * sh.H + h] + beta[(t0 + s + 1) * sh.H + h];
  return Exp(G[(t0 + r) * sh.H + h] - G[(t0 + s) * sh.H + h]) * c;
}

// The forward's workspace (Mamba3ForwardWorkspace::Size elements), in order:
//   G   (T, H)             cumulative log decay inside each block     [Pre]
//   P   (H, nb, bs, bs)    (Q K^T) o M                                [Out]
//   U   (H, nb, Dv, Dk)    each block's own state contribution        [Pre]
//   S   (H, nb, Dv, Dk)    S'_b: the state entering block b, carried  [ST]
template <typename T>
struct Mamba3ForwardWorkspace {
  T *G, *P, *U, *S;
  static int64_t Size(const Mamba3Shape& s) {
    return s.tokens() + s.tiles() + 2 * s.states(s.nb);
  }
  Mamba3ForwardWorkspace(T* ws, const Mamba3Shape& s) {
    G = ws;
    P = G + s.tokens();
    U = P + s.tiles();
    S = U + s.states(s.nb);
  }
};

// The backward's workspace: the forward's (P holding Q K^T, U then Z), and
//   dOV (H, nb, bs, bs)    dO V^T
//   dM  (H, nb, bs, bs)    d(M)
//   dS  (H, nb + 1, Dv, Dk) slot b: dS'_b; slot nb: d(S_out)
//   dG  (T, H)             d(G)
template <typename T>
struct Mamba3BackwardWorkspace {
  Mamba3ForwardWorkspace<T> f;
  T *dOV, *dM, *dS, *dG;
  static int64_t Size(const Mamba3Shape& s) {
    return Mamba3ForwardWorkspace<T>::Size(s) + 2 * s.tiles() +
           s.states(s.nb + 1) + s.tokens();
  }
  Mamba3BackwardWorkspace(T* ws, const Mamba3Shape& s) : f(ws, s) {
    dOV = ws + Mamba3ForwardWorkspace<T>::Size(s);
    dM = dOV + s.tiles();
    dS = dM + s.tiles();
    dG = dS + s.states(s.nb + 1);
  }
};

// Decodes an (H, nb, X, Y) index.
struct Mamba3Index4 {
  int64_t h, b, x, y;
  SF_HD Mamba3Index4(int64_t i, int64_t nb, int64_t X, int64_t Y) {
    y = i % Y;
    x = (i / Y) % X;
    b = (i / (X * Y)) % nb;
    h = i / (X * Y * nb);
  }
};

// (h, b, i, c): U_b[i][c] = sum_s M_{L-1,s} v_s[i] k_s[c].
template <typename T>
struct Mamba3BlockUFn {
  T* U;                       // (H, nb, Dv, Dk)
  const T *k, *v, *G, *gamma, *beta;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const Mamba3Index4 x(idx, s.nb, s.Dv, s.Dk);
    const int64_t t0 = x.b * s.bs, L = s.L(x.b);
    T acc = 0;
    for (int64_t u = 0; u < L; ++u) {
      const T m = Mamba3Weight(G, gamma, beta, s, x.h, x.b, L - 1, u);
      acc += (m * v[s.Row(t0 + u, x.h, s.Dv) + x.x]) * k[s.Row(t0 + u, x.h, s.Dk) + x.y];
    }
    U[idx] = acc;
  }
};

// (h, i): row i of head h's state through blocks [b0, b1) in order (see
// the header): S'_b of each into `states`, from S'_{b-1} and U_{b-1} (block
// b0 > 0: the previous segment's, written by the ST of the blocks before it;
// block 0: S_in's row, or zeros); after the chunk's last block (b1 = nb),
// S_out's row unless nullptr. T = 0: S_out = S_in (or zeros). So the ST of
// blocks [b0, b1) reads Pre's U and G of blocks [b0 - 1, b1 - 1), and of
// block nb - 1 for S_out. The index is decoded by st (heads x tiles x B_V);
// a short last tile's spare indices do nothing.
template <typename T>
struct Mamba3STFn {
  T* states;        // (H, nb, Dv, Dk) S'_b
  T* S_out;         // (H, Dv, Dk) or nullptr
  const T *U, *k, *v, *G, *beta;
  const T *S_in, *k_in, *v_in;   // (H, Dv, Dk), (H, Dk), (H, Dv) or nullptr
  Mamba3Shape s;
  StTiles st;                    // the grid: heads x tiles of B_V rows
  int64_t b0 = 0, b1 = 0;        // the blocks [b0, b1)
  SF_HD void operator()(int64_t idx) const {
    int64_t h, i;
    if (!st.Decode(idx, s.Dv, &h, &i)) return;
    const T* in = S_in != nullptr ? S_in + (h * s.Dv + i) * s.Dk : nullptr;
    T* out = S_out != nullptr ? S_out + (h * s.Dv + i) * s.Dk : nullptr;
    if (s.nb == 0) {
      if (out != nullptr) {
        for (int64_t c = 0; c < s.Dk; ++c) out[c] = in != nullptr ? in[c] : T(0);
      }
      return;
    }
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * s.bs;
      T* Sb = states + s.State(h, b, i, s.nb);
      // The carry: the previous token's k, v (or the chunk's carry in).
      const T* kp = b > 0 ? k + s.Row(t0 - 1, h, s.Dk)
                          : (k_in != nullptr ? k_in + h * s.Dk : nullptr);
      const T vp = b > 0 ? v[s.Row(t0 - 1, h, s.Dv) + i]
                         : (v_in != nullptr ? v_in[h * s.Dv + i] : T(0));
      const T bv = beta[t0 * s.H + h] * vp;
      for (int64_t c = 0; c < s.Dk; ++c) {
        T prev;
        if (b == 0) {
          prev = in != nullptr ? in[c] : T(0);
        } else {
          const T* Sp = states + s.State(h, b - 1, i, s.nb);
          const T gl = Exp(G[(t0 - 1) * s.H + h]);
          prev = U[s.State(h, b - 1, i, s.nb) + c] + gl * Sp[c];
        }
        Sb[c] = prev + (kp != nullptr ? bv * kp[c] : T(0));
      }
    }
    if (out != nullptr && b1 == s.nb) {
      const int64_t b = s.nb - 1, tl = b * s.bs + s.L(b) - 1;
      const T gl = Exp(G[tl * s.H + h]);
      const T* Sb = states + s.State(h, b, i, s.nb);
      for (int64_t c = 0; c < s.Dk; ++c) out[c] = U[s.State(h, b, i, s.nb) + c] + gl * Sb[c];
    }
  }
};

// (h, b, r, s): tile = (X_r . Y_s) times M_rs (with_weight) or not, for
// s <= r < L; else 0.
template <typename T>
struct Mamba3GramFn {
  T* tile;                      // (H, nb, bs, bs)
  const T *X, *Y;               // (T, H, D)
  const T *G, *gamma, *beta;    // for the weight
  int64_t D;
  bool with_weight;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const Mamba3Index4 x(idx, s.nb, s.bs, s.bs);
    const int64_t L = s.L(x.b), t0 = x.b * s.bs;
    if (x.x >= L || x.y > x.x) {
      tile[idx] = T(0);
      return;
    }
    const T dot = Dot(X + s.Row(t0 + x.x, x.h, D), Y + s.Row(t0 + x.y, x.h, D), D);
    tile[idx] = with_weight ? dot * Mamba3Weight(G, gamma, beta, s, x.h, x.b, x.x, x.y)
                            : dot;
  }
};

// (t, h, j): o = exp(G_r) (S'_b[j] . q_r) + sum_{s<=r} P_rs v_s[j].
template <typename T>
struct Mamba3OutFn {
  T* o;                              // (T, H, Dv)
  const T *q, *v, *P, *states, *G;
  Mamba3Shape s;
  SF_HD void operator()(int64_t i) const {
    const int64_t j = i % s.Dv, h = (i / s.Dv) % s.H, t = i / (s.Dv * s.H);
    const int64_t b = t / s.bs, t0 = b * s.bs, r = t - t0;
    T acc = Dot(q + s.Row(t, h, s.Dk), states + s.State(h, b, j, s.nb), s.Dk) *
            Exp(G[t * s.H + h]);
    T intra = 0;
    for (int64_t c = 0; c <= r; ++c) {
      intra += P[s.Tile(h, b, r, c)] * v[s.Row(t0 + c, h, s.Dv) + j];
    }
    o[i] = acc + intra;
  }
};

// (h, e < Dk + Dv): k_out, v_out = the last token's k, v (T = 0: the carry
// in, or zeros); each skipped when nullptr.
template <typename T>
struct Mamba3CarryOutFn {
  T *k_out, *v_out;
  const T *k, *v, *k_in, *v_in;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t n = s.Dk + s.Dv, h = idx / n, e = idx % n;
    const bool is_k = e < s.Dk;
    T* out = is_k ? k_out : v_out;
    if (out == nullptr) return;
    const int64_t D = is_k ? s.Dk : s.Dv, c = is_k ? e : e - s.Dk;
    const T* x = is_k ? k : v;
    const T* in = is_k ? k_in : v_in;
    out[h * D + c] = s.T > 0 ? x[s.Row(s.T - 1, h, D) + c]
                             : (in != nullptr ? in[h * D + c] : T(0));
  }
};

// (h, b, i, c): Z_b[i][c] = sum_r exp(G_r) dO_r[i] q_r[c].
template <typename T>
struct Mamba3OutStateGradFn {
  T* Z;                  // (H, nb, Dv, Dk)
  const T *dO, *q, *G;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const Mamba3Index4 x(idx, s.nb, s.Dv, s.Dk);
    const int64_t t0 = x.b * s.bs, L = s.L(x.b);
    T acc = 0;
    for (int64_t r = 0; r < L; ++r) {
      acc += (Exp(G[(t0 + r) * s.H + x.h]) * dO[s.Row(t0 + r, x.h, s.Dv) + x.x]) *
             q[s.Row(t0 + r, x.h, s.Dk) + x.y];
    }
    Z[idx] = acc;
  }
};

// (h, i): row i of the state gradients through blocks [b0, b1) in reverse:
// slot nb = d(S_out) (or 0) when b1 = nb (otherwise slot b1 was written by
// the backward of the blocks after), slot b = exp(G_{L-1}) slot b+1 + Z_b;
// dS_in = slot 0 unless nullptr, when b0 = 0.
template <typename T>
struct Mamba3STGradFn {
  T* dS;                 // (H, nb + 1, Dv, Dk)
  T* dS_in;              // (H, Dv, Dk) or nullptr
  const T *dS_out, *Z, *G;
  Mamba3Shape s;
  StTiles st;              // the grid, as Mamba3STFn's
  int64_t b0 = 0, b1 = 0;  // the blocks [b0, b1), walked from b1 - 1 down
  SF_HD void operator()(int64_t idx) const {
    int64_t h, i;
    if (!st.Decode(idx, s.Dv, &h, &i)) return;
    const int64_t slots = s.nb + 1;
    if (b1 == s.nb) {
      T* last = dS + s.State(h, s.nb, i, slots);
      for (int64_t c = 0; c < s.Dk; ++c) {
        last[c] = dS_out != nullptr ? dS_out[(h * s.Dv + i) * s.Dk + c] : T(0);
      }
    }
    for (int64_t b = b1 - 1; b >= b0; --b) {
      const int64_t tl = b * s.bs + s.L(b) - 1;
      const T gl = Exp(G[tl * s.H + h]);
      const T* next = dS + s.State(h, b + 1, i, slots);
      T* cur = dS + s.State(h, b, i, slots);
      const T* z = Z + s.State(h, b, i, s.nb);
      for (int64_t c = 0; c < s.Dk; ++c) cur[c] = gl * next[c] + z[c];
    }
    if (dS_in != nullptr && b0 == 0) {
      const T* first = dS + s.State(h, 0, i, slots);
      for (int64_t c = 0; c < s.Dk; ++c) dS_in[(h * s.Dv + i) * s.Dk + c] = first[c];
    }
  }
};

// v^T D k for head h's (Dv, Dk) matrix D at `Dm`.
template <typename T>
SF_HD inline T Mamba3Bilinear(const T* v, const T* Dm, const T* k, int64_t Dv,
                              int64_t Dk) {
  T acc = 0;
  for (int64_t i = 0; i < Dv; ++i) acc += v[i] * Dot(Dm + i * Dk, k, Dk);
  return acc;
}

// (h, b, r, s): dM_rs = QK_rs dOV_rs + [r = L-1] v_s^T D k_s (s <= r < L),
// else 0.
template <typename T>
struct Mamba3WeightGradFn {
  T* dM;                     // (H, nb, bs, bs)
  const T *QK, *dOV, *dS, *k, *v;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const Mamba3Index4 x(idx, s.nb, s.bs, s.bs);
    const int64_t L = s.L(x.b), t0 = x.b * s.bs;
    if (x.x >= L || x.y > x.x) {
      dM[idx] = T(0);
      return;
    }
    T acc = QK[idx] * dOV[idx];
    if (x.x == L - 1) {
      acc += Mamba3Bilinear(v + s.Row(t0 + x.y, x.h, s.Dv),
                            dS + s.State(x.h, x.b + 1, 0, s.nb + 1),
                            k + s.Row(t0 + x.y, x.h, s.Dk), s.Dv, s.Dk);
    }
    dM[idx] = acc;
  }
};

// (t, h, c): dq = exp(G_r) sum_i S'_b[i][c] dO_r[i] + sum_{s<=r} M_rs
// dOV_rs k_s[c].
template <typename T>
struct Mamba3QueryGradFn {
  T* dq;                     // (T, H, Dk)
  const T *dO, *k, *dOV, *states, *G, *gamma, *beta;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t c = idx % s.Dk, h = (idx / s.Dk) % s.H, t = idx / (s.Dk * s.H);
    const int64_t b = t / s.bs, t0 = b * s.bs, r = t - t0;
    const T* Sb = states + s.State(h, b, 0, s.nb);
    const T* d = dO + s.Row(t, h, s.Dv);
    T inter = 0;
    for (int64_t i = 0; i < s.Dv; ++i) inter += Sb[i * s.Dk + c] * d[i];
    T intra = 0;
    for (int64_t u = 0; u <= r; ++u) {
      intra += (Mamba3Weight(G, gamma, beta, s, h, b, r, u) * dOV[s.Tile(h, b, r, u)]) *
               k[s.Row(t0 + u, h, s.Dk) + c];
    }
    dq[idx] = Exp(G[t * s.H + h]) * inter + intra;
  }
};

// (t, h, c): dk_s = sum_{r>=s} M_rs dOV_rs q_r[c] + m_s (D^T v_s)[c], plus
// the carry: the block's last token feeds the next block's S' (beta of the
// next token, dS'_{b+1}) or, the chunk's last, k_out (dk_out).
template <typename T>
struct Mamba3KeyGradFn {
  T* dk;                     // (T, H, Dk)
  const T *q, *v, *dOV, *dS, *G, *gamma, *beta, *dk_out;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t c = idx % s.Dk, h = (idx / s.Dk) % s.H, t = idx / (s.Dk * s.H);
    const int64_t b = t / s.bs, t0 = b * s.bs, u = t - t0, L = s.L(b);
    T acc = 0;
    for (int64_t r = u; r < L; ++r) {
      acc += (Mamba3Weight(G, gamma, beta, s, h, b, r, u) * dOV[s.Tile(h, b, r, u)]) *
             q[s.Row(t0 + r, h, s.Dk) + c];
    }
    const T* D = dS + s.State(h, b + 1, 0, s.nb + 1);
    const T* vs = v + s.Row(t, h, s.Dv);
    T st = 0;
    for (int64_t i = 0; i < s.Dv; ++i) st += D[i * s.Dk + c] * vs[i];
    acc += Mamba3Weight(G, gamma, beta, s, h, b, L - 1, u) * st;
    if (u == L - 1) {
      if (b + 1 < s.nb) {
        acc += beta[(t + 1) * s.H + h] * st;  // D is dS'_{b+1}
      } else if (dk_out != nullptr) {
        acc += dk_out[h * s.Dk + c];
      }
    }
    dk[idx] = acc;
  }
};

// (t, h, j): dv_s = sum_{r>=s} M_rs QK_rs dO_r[j] + m_s (D k_s)[j], plus
// the carry as for dk (dv_out for the chunk's last token).
template <typename T>
struct Mamba3ValueGradFn {
  T* dv;                     // (T, H, Dv)
  const T *dO, *k, *QK, *dS, *G, *gamma, *beta, *dv_out;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t j = idx % s.Dv, h = (idx / s.Dv) % s.H, t = idx / (s.Dv * s.H);
    const int64_t b = t / s.bs, t0 = b * s.bs, u = t - t0, L = s.L(b);
    T acc = 0;
    for (int64_t r = u; r < L; ++r) {
      acc += (Mamba3Weight(G, gamma, beta, s, h, b, r, u) * QK[s.Tile(h, b, r, u)]) *
             dO[s.Row(t0 + r, h, s.Dv) + j];
    }
    const T* D = dS + s.State(h, b + 1, j, s.nb + 1);
    const T st = Dot(D, k + s.Row(t, h, s.Dk), s.Dk);
    acc += Mamba3Weight(G, gamma, beta, s, h, b, L - 1, u) * st;
    if (u == L - 1) {
      if (b + 1 < s.nb) {
        acc += beta[(t + 1) * s.H + h] * st;
      } else if (dv_out != nullptr) {
        acc += dv_out[h * s.Dv + j];
      }
    }
    dv[idx] = acc;
  }
};

// (t, h): dG_r = exp(G_r) dO_r . S'_b q_r + [r = L-1] exp(G_{L-1}) <D,
// S'_b> + sum_{s<r} dM_rs M_rs - sum_{u>r} dM_ur M_ur.
template <typename T>
struct Mamba3DecayGradFn {
  T* dG;                     // (T, H)
  const T *q, *dO, *dM, *states, *dS, *G, *gamma, *beta;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t h = idx % s.H, t = idx / s.H;
    const int64_t b = t / s.bs, t0 = b * s.bs, r = t - t0, L = s.L(b);
    const T* Sb = states + s.State(h, b, 0, s.nb);
    const T* d = dO + s.Row(t, h, s.Dv);
    const T eg = Exp(G[idx]);
    T acc = eg * Mamba3Bilinear(d, Sb, q + s.Row(t, h, s.Dk), s.Dv, s.Dk);
    if (r == L - 1) {
      const T* D = dS + s.State(h, b + 1, 0, s.nb + 1);
      acc += eg * Dot(D, Sb, s.Dv * s.Dk);
    }
    for (int64_t u = 0; u < r; ++u) {
      acc += dM[s.Tile(h, b, r, u)] * Mamba3Weight(G, gamma, beta, s, h, b, r, u);
    }
    for (int64_t u = r + 1; u < L; ++u) {
      acc -= dM[s.Tile(h, b, u, r)] * Mamba3Weight(G, gamma, beta, s, h, b, u, r);
    }
    dG[idx] = acc;
  }
};

// (t, h): da_u = sum of dG over the block's tokens r >= u.
template <typename T>
struct Mamba3CumGradFn {
  T* da;                     // (T, H)
  const T* dG;               // (T, H)
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t h = idx % s.H, t = idx / s.H, b = t / s.bs;
    const int64_t tl = b * s.bs + s.L(b) - 1;
    T acc = 0;
    for (int64_t u = tl; u >= t; --u) acc += dG[u * s.H + h];
    da[idx] = acc;
  }
};

// dc_s = sum_{r>s} dM_rs exp(G_r - G_s) of head h's block b (s < L - 1).
template <typename T>
SF_HD inline T Mamba3CoefGrad(const T* dM, const T* G, const Mamba3Shape& sh,
                              int64_t h, int64_t b, int64_t s) {
  const int64_t t0 = b * sh.bs, L = sh.L(b);
  T acc = 0;
  for (int64_t r = s + 1; r < L; ++r) {
    acc += dM[sh.Tile(h, b, r, s)] * Exp(G[(t0 + r) * sh.H + h] - G[(t0 + s) * sh.H + h]);
  }
  return acc;
}

// (t, h): dgamma_s = dM_ss + dc_s; dbeta_s = dc_{s-1}, or for the block's
// first token the carry's vp^T dS'_b kp.
template <typename T>
struct Mamba3GateGradFn {
  T *dgamma, *dbeta;         // (T, H)
  const T *dM, *dS, *k, *v, *k_in, *v_in, *G;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t h = idx % s.H, t = idx / s.H;
    const int64_t b = t / s.bs, t0 = b * s.bs, u = t - t0, L = s.L(b);
    dgamma[idx] = dM[s.Tile(h, b, u, u)] + (u + 1 < L ? Mamba3CoefGrad(dM, G, s, h, b, u) : T(0));
    if (u > 0) {
      dbeta[idx] = Mamba3CoefGrad(dM, G, s, h, b, u - 1);
      return;
    }
    const T* kp = b > 0 ? k + s.Row(t0 - 1, h, s.Dk)
                        : (k_in != nullptr ? k_in + h * s.Dk : nullptr);
    const T* vp = b > 0 ? v + s.Row(t0 - 1, h, s.Dv)
                        : (v_in != nullptr ? v_in + h * s.Dv : nullptr);
    dbeta[idx] = kp != nullptr && vp != nullptr
                     ? Mamba3Bilinear(vp, dS + s.State(h, b, 0, s.nb + 1), kp, s.Dv, s.Dk)
                     : T(0);
  }
};

// (h, e < Dk + Dv): dk_in = beta_0 dS'_0^T v_in, dv_in = beta_0 dS'_0
// k_in (T = 0: d(k_out), d(v_out), or zeros); each skipped when nullptr.
template <typename T>
struct Mamba3CarryInGradFn {
  T *dk_in, *dv_in;
  const T *dS, *k_in, *v_in, *dk_out, *dv_out, *beta;
  Mamba3Shape s;
  SF_HD void operator()(int64_t idx) const {
    const int64_t n = s.Dk + s.Dv, h = idx / n, e = idx % n;
    const bool is_k = e < s.Dk;
    T* out = is_k ? dk_in : dv_in;
    if (out == nullptr) return;
    const int64_t D = is_k ? s.Dk : s.Dv, c = is_k ? e : e - s.Dk;
    if (s.T == 0) {
      const T* pass = is_k ? dk_out : dv_out;
      out[h * D + c] = pass != nullptr ? pass[h * D + c] : T(0);
      return;
    }
    const T* other = is_k ? v_in : k_in;  // the partner of the rank-one carry
    if (other == nullptr) {
      out[h * D + c] = T(0);
      return;
    }
    const T* S0 = dS + s.State(h, 0, 0, s.nb + 1);
    T acc = 0;
    if (is_k) {
      for (int64_t i = 0; i < s.Dv; ++i) acc += S0[i * s.Dk + c] * other[h * s.Dv + i];
    } else {
      acc = Dot(S0 + c * s.Dk, other + h * s.Dk, s.Dk);
    }
    out[h * D + c] = beta[h] * acc;
  }
};

}  // namespace stateflow::backend::grid

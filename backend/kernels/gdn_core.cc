// The chunkwise Gated DeltaNet core (see gdn_core.h and docs/gdn-kernel.md).
//
// Dimensions: T tokens, H heads, Dk, Dv head dims, L tokens in a block.
// Within a block (local token index r = 0..L-1, entering state S):
//   G_r = g_0 + ... + g_r,  gam_r = exp(G_r),  Gam_rs = exp(G_r - G_s) (s<=r)
//   A_rs = beta_r (k_r . k_s) Gam_rs  (s < r)
//   (I + A) U = diag(beta) V,  (I + A) W = diag(beta gam) K
//   V_new = U - W S^T                       (the true delta-rule updates u_r)
//   S_out = gam_{L-1} S + V_new^T diag(Gam_{L-1,.}) K
//   O     = diag(gam) Q S^T + ((Q K^T) o Gam) V_new
#include "backend/kernels/gdn_core.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/threading.h"

namespace stateflow::backend {

namespace {

// d (L) = exp(G_{L-1} - G_s): the decay from each token to the block's end.
template <typename T>
Vec<T> DecayToEnd(const Vec<T>& G) {
  const T last = G(G.size() - 1);
  return (-(G.array() - last)).exp().matrix();
}

// The unit-triangular systems of Pre and its backward, solved by row
// substitution on the right-hand sides X (L, n), n = d_k or d_v: at L = 64
// Eigen's blocked solver spends its time in scalar panels, while each step
// here is a row update vectorised over n. kRows rows are updated at once in
// tiles of kTile columns held in registers, so that every row they depend on
// is loaded once per group and the kRows x (kTile / vector) sums are
// independent chains. The order of each sum is fixed, so results depend on
// nothing but the inputs.
template <typename T>
inline constexpr int64_t kTile = 128 / sizeof(T);  // 2 x 512-bit vectors
inline constexpr int64_t kRows = 4;

// Rows r in [r0, r0 + R) of X (columns [j0, j0 + W)):
//   X_r -= sum over s in [s0, s1) of C[r * cr + s * cs] X_s.
// W = 0: a narrower tile of width w (the remainder of n).
template <typename T, int64_t R, int64_t W>
inline void UpdateRows(T* __restrict X, int64_t ldx, int64_t j0, int64_t w,
                       const T* __restrict C, int64_t cr, int64_t cs,
                       int64_t r0, int64_t s0, int64_t s1) {
  constexpr int64_t kW = W > 0 ? W : kTile<T>;
  const int64_t width = W > 0 ? W : w;
  T acc[R][kW];
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t j = 0; j < kW; ++j) {
      acc[i][j] = (W > 0 || j < width) ? X[(r0 + i) * ldx + j0 + j] : T(0);
    }
  }
  for (int64_t s = s0; s < s1; ++s) {
    const T* xs = X + s * ldx + j0;
    for (int64_t i = 0; i < R; ++i) {
      const T a = C[(r0 + i) * cr + s * cs];
      if constexpr (W > 0) {
        for (int64_t j = 0; j < W; ++j) acc[i][j] -= a * xs[j];
      } else {
        for (int64_t j = 0; j < width; ++j) acc[i][j] -= a * xs[j];
      }
    }
  }
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t j = 0; j < width; ++j) X[(r0 + i) * ldx + j0 + j] = acc[i][j];
  }
}

// UpdateRows over all of X's n columns, tile by tile.
template <typename T, int64_t R>
void UpdateRowsAllColumns(T* X, int64_t n, const T* C, int64_t cr,
                          int64_t cs, int64_t r0, int64_t s0, int64_t s1) {
  constexpr int64_t kW = kTile<T>;
  int64_t j0 = 0;
  for (; j0 + kW <= n; j0 += kW) {
    UpdateRows<T, R, kW>(X, n, j0, kW, C, cr, cs, r0, s0, s1);
  }
  if (j0 < n) UpdateRows<T, R, 0>(X, n, j0, n - j0, C, cr, cs, r0, s0, s1);
}

// X (L, n) := (I + A)^{-1} X for A (L, L) strictly lower triangular (its
// upper part is ignored): X_r -= sum_{s<r} A_rs X_s, rows ascending, kRows
// at a time (first from the rows before the group, then within it).
template <typename T>
void SolveUnitLowerInPlace(const RowMat<T>& A, RowMat<T>* X) {
  const int64_t L = X->rows(), n = X->cols();
  T* x = X->data();
  const T* a = A.data();
  int64_t r0 = 0;
  for (; r0 + kRows <= L; r0 += kRows) {
    UpdateRowsAllColumns<T, kRows>(x, n, a, L, 1, r0, 0, r0);
    for (int64_t i = 1; i < kRows; ++i) {
      UpdateRowsAllColumns<T, 1>(x, n, a, L, 1, r0 + i, r0, r0 + i);
    }
  }
  for (; r0 < L; ++r0) UpdateRowsAllColumns<T, 1>(x, n, a, L, 1, r0, 0, r0);
}

// X (L, n) := (I + A)^{-T} X for the same A: X_r -= sum_{s>r} A_sr X_s,
// rows descending, kRows at a time.
template <typename T>
void SolveUnitLowerTransposedInPlace(const RowMat<T>& A, RowMat<T>* X) {
  const int64_t L = X->rows(), n = X->cols();
  T* x = X->data();
  const T* a = A.data();
  int64_t end = L;  // rows [end, L) are solved
  for (; end - kRows >= 0; end -= kRows) {
    const int64_t r0 = end - kRows;
    UpdateRowsAllColumns<T, kRows>(x, n, a, 1, L, r0, end, L);
    for (int64_t i = kRows - 2; i >= 0; --i) {
      UpdateRowsAllColumns<T, 1>(x, n, a, 1, L, r0 + i, r0 + i + 1, end);
    }
  }
  for (int64_t r = end - 1; r >= 0; --r) {
    UpdateRowsAllColumns<T, 1>(x, n, a, 1, L, r, r + 1, L);
  }
}

}  // namespace

template <typename T>
void GdnBlockPre(GdnBlockOmega<T>* omega, CMatRef<T> K, CMatRef<T> V,
                 CVecRef<T> g, CVecRef<T> beta) {
  const Eigen::Index L = K.rows();
  Vec<T>& G = omega->G;            // (L)
  RowMat<T>& Gam = omega->Gam;     // (L, L)
  RowMat<T>& KG = omega->KG;       // (L, L)
  G.resize(L);
  T acc = 0;
  for (Eigen::Index r = 0; r < L; ++r) G(r) = acc += g(r);
  // Gam_rs = exp(G_r - G_s) for s <= r, else 0: one vectorised pass of exp
  // over the whole (L, L), its upper part first set to 0 so that no
  // exponential there can overflow.
  Gam.resize(L, L);
  Gam.noalias() = G.rowwise().replicate(L) - G.transpose().colwise().replicate(L);
  Gam.template triangularView<Eigen::StrictlyUpper>().setZero();
  Gam.array() = Gam.array().exp();
  Gam.template triangularView<Eigen::StrictlyUpper>().setZero();
  KG.noalias() = K * K.transpose();
  KG.array() *= Gam.array();
  KG.template triangularView<Eigen::Upper>().setZero();
  const RowMat<T> A = beta.asDiagonal() * KG;  // (L, L), strictly lower
  omega->U.noalias() = beta.asDiagonal() * V;
  omega->W.noalias() =
      (beta.array() * G.array().exp()).matrix().asDiagonal() * K;
  SolveUnitLowerInPlace(A, &omega->U);
  SolveUnitLowerInPlace(A, &omega->W);
}

template <typename T>
void GdnBlockST(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                const GdnBlockOmega<T>& omega, CMatRef<T> K) {
  const Vec<T> d = DecayToEnd(omega.G);                   // (L)
  const T gam_last = std::exp(omega.G(omega.G.size() - 1));
  V_new = omega.U;
  V_new.noalias() -= omega.W * S_in.transpose();
  const RowMat<T> Kd = d.asDiagonal() * K;                // (L, Dk)
  S_out.noalias() = V_new.transpose() * Kd;
  S_out += gam_last * S_in;
}

template <typename T>
void GdnBlockSTRows(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                    const GdnBlockOmega<T>& omega, CMatRef<T> K, int64_t j0,
                    int64_t n) {
  const Vec<T> d = DecayToEnd(omega.G);                   // (L)
  const T gam_last = std::exp(omega.G(omega.G.size() - 1));
  auto V = V_new.middleCols(j0, n);                       // (L, n)
  const auto Si = S_in.middleRows(j0, n);                 // (n, Dk)
  V = omega.U.middleCols(j0, n);
  V.noalias() -= omega.W * Si.transpose();
  const RowMat<T> Kd = d.asDiagonal() * K;                // (L, Dk)
  auto So = S_out.middleRows(j0, n);                      // (n, Dk)
  So.noalias() = V.transpose() * Kd;
  So += gam_last * Si;
}

namespace {

// GdnBlockST in tiles of `tile` state rows; untiled (GdnBlockST itself) when
// tile is 0 or covers Dv.
template <typename T>
void GdnBlockSTTiled(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                     const GdnBlockOmega<T>& omega, CMatRef<T> K, int64_t tile) {
  const int64_t Dv = S_in.rows();
  if (tile <= 0 || tile >= Dv) {
    GdnBlockST<T>(V_new, S_out, S_in, omega, K);
    return;
  }
  for (int64_t j0 = 0; j0 < Dv; j0 += tile) {
    GdnBlockSTRows<T>(V_new, S_out, S_in, omega, K, j0, std::min(tile, Dv - j0));
  }
}

}  // namespace

template <typename T>
void GdnBlockOut(MatRef<T> O, CMatRef<T> Q, CMatRef<T> K, CMatRef<T> V_new,
                 CMatRef<T> S_in, const GdnBlockOmega<T>& omega) {
  RowMat<T> P(Q.rows(), K.rows());                        // (L, L)
  P.noalias() = Q * K.transpose();
  P.array() *= omega.Gam.array();
  O.noalias() = Q * S_in.transpose();
  O.array().colwise() *= omega.G.array().exp();
  O.noalias() += P * V_new;
}

template <typename T>
void GdnBlockGrads<T>::SetZero(int64_t L, int64_t Dk, int64_t Dv) {
  dQ.setZero(L, Dk);
  dK.setZero(L, Dk);
  dV.setZero(L, Dv);
  dG.setZero(L);
  dbeta.setZero(L);
}

template <typename T>
void GdnBlockOutBackward(GdnBlockGrads<T>* grads, MatRef<T> dV_new,
                         MatRef<T> dS_in, CMatRef<T> dO, CMatRef<T> Q,
                         CMatRef<T> K, CMatRef<T> V_new, CMatRef<T> S_in,
                         const GdnBlockOmega<T>& omega) {
  const Eigen::Index L = Q.rows();
  // Intra-block part: O += P V_new, P = (Q K^T) o Gam.
  RowMat<T> P(L, L), dP(L, L);                            // (L, L) each
  P.noalias() = Q * K.transpose();
  P.array() *= omega.Gam.array();
  dV_new.noalias() = P.transpose() * dO;
  dP.noalias() = dO * V_new.transpose();
  P.array() *= dP.array();                                // E = dP o P
  grads->dG += P.rowwise().sum() - P.colwise().sum().transpose();
  dP.array() *= omega.Gam.array();                        // d(Q K^T)
  grads->dQ.noalias() += dP * K;
  grads->dK.noalias() += dP.transpose() * Q;
  // Inter-block part: O += diag(gam) Q S_in^T.
  const RowMat<T> dOg = dO.array().colwise() * omega.G.array().exp();  // (L, Dv)
  const RowMat<T> dOgS = dOg * S_in;                      // (L, Dk)
  grads->dQ += dOgS;
  grads->dG += (dOgS.array() * Q.array()).rowwise().sum().matrix();
  dS_in.noalias() += dOg.transpose() * Q;
}

template <typename T>
void GdnBlockSTBackward(GdnBlockGrads<T>* grads, MatRef<T> dW,
                        MatRef<T> dS_in, MatRef<T> dV_new,
                        CMatRef<T> dS_out, CMatRef<T> V_new, CMatRef<T> S_in,
                        const GdnBlockOmega<T>& omega, CMatRef<T> K,
                        int64_t st_tile) {
  const Eigen::Index L = K.rows(), Dv = dS_out.rows();
  const Vec<T> d = DecayToEnd(omega.G);                   // (L)
  const T gam_last = std::exp(omega.G(L - 1));
  const RowMat<T> Kd = d.asDiagonal() * K;                // (L, Dk)
  if (st_tile > 0 && st_tile < Dv) {
    // The chain, tile by tile of state rows: row j of dS_in needs only row j
    // of dS_out and column j of dV_new. The sums over rows follow.
    for (Eigen::Index j0 = 0; j0 < Dv; j0 += st_tile) {
      const Eigen::Index n = std::min<Eigen::Index>(st_tile, Dv - j0);
      auto dSi = dS_in.middleRows(j0, n);
      const auto dSo = dS_out.middleRows(j0, n);
      auto dVn = dV_new.middleCols(j0, n);
      dSi += gam_last * dSo;
      dVn.noalias() += Kd * dSo.transpose();
      dSi.noalias() -= dVn.transpose() * omega.W;
    }
    grads->dG(L - 1) += gam_last * (dS_out.array() * S_in.array()).sum();
    const RowMat<T> dKd = V_new * dS_out;                 // (L, Dk)
    grads->dK.noalias() += d.asDiagonal() * dKd;
    const Vec<T> e =
        ((dKd.array() * K.array()).rowwise().sum() * d.array()).matrix();
    grads->dG(L - 1) += e.sum();
    grads->dG -= e;
    dW.noalias() = -dV_new * S_in;
    return;
  }
  // S_out = gam_last S_in + V_new^T Kd, Kd = diag(d) K.
  dS_in += gam_last * dS_out;
  grads->dG(L - 1) += gam_last * (dS_out.array() * S_in.array()).sum();
  dV_new.noalias() += Kd * dS_out.transpose();
  const RowMat<T> dKd = V_new * dS_out;                   // (L, Dk)
  grads->dK.noalias() += d.asDiagonal() * dKd;
  const Vec<T> e =
      ((dKd.array() * K.array()).rowwise().sum() * d.array()).matrix();
  grads->dG(L - 1) += e.sum();
  grads->dG -= e;
  // V_new = U - W S_in^T (dU is dV_new itself).
  dW.noalias() = -dV_new * S_in;
  dS_in.noalias() -= dV_new.transpose() * omega.W;
}

template <typename T>
void GdnBlockPreBackward(GdnBlockGrads<T>* grads, CMatRef<T> dU,
                         CMatRef<T> dW, CMatRef<T> K, CMatRef<T> V,
                         CVecRef<T> beta, const GdnBlockOmega<T>& omega) {
  const Eigen::Index L = K.rows();
  const RowMat<T> A = beta.asDiagonal() * omega.KG;       // (L, L)
  // X = (I + A)^{-1} B  =>  dB = (I + A)^{-T} dX, dA = -dB X^T.
  RowMat<T> dVb = dU;                                     // (L, Dv) d(diag(beta) V)
  RowMat<T> dKb = dW;                                     // (L, Dk) d(diag(beta gam) K)
  SolveUnitLowerTransposedInPlace(A, &dVb);
  SolveUnitLowerTransposedInPlace(A, &dKb);
  RowMat<T> dA(L, L);                                     // (L, L)
  dA.noalias() = -dVb * omega.U.transpose();
  dA.noalias() -= dKb * omega.W.transpose();
  dA.template triangularView<Eigen::Upper>().setZero();
  // diag(beta) V and diag(beta gam) K.
  const Vec<T> gam = omega.G.array().exp();               // (L)
  grads->dV.noalias() += beta.asDiagonal() * dVb;
  grads->dbeta += (dVb.array() * V.array()).rowwise().sum().matrix();
  const Vec<T> c = (dKb.array() * K.array()).rowwise().sum();  // (L)
  grads->dK.noalias() +=
      (beta.array() * gam.array()).matrix().asDiagonal() * dKb;
  grads->dbeta += (gam.array() * c.array()).matrix();
  grads->dG += (beta.array() * gam.array() * c.array()).matrix();
  // A = diag(beta) KG, KG_rs = (k_r . k_s) Gam_rs.
  RowMat<T> B = dA.cwiseProduct(omega.KG);                // (L, L)
  const Vec<T> b_rows = B.rowwise().sum();                // (L)
  grads->dbeta += b_rows;
  B = beta.asDiagonal() * B;                              // E = dA o A
  grads->dG += B.rowwise().sum() - B.colwise().sum().transpose();
  dA.array() *= omega.Gam.array();
  dA = beta.asDiagonal() * dA;                            // d(K K^T)
  grads->dK.noalias() += dA * K;
  grads->dK.noalias() += dA.transpose() * K;
}

// ---- the core over a chunk -----------------------------------------------

namespace {

// Head h's rows [t0, t0 + L) of a (T, H, D) buffer, as an (L, D) view.
template <typename T>
CSMat<T> HeadRows(const T* x, int64_t t0, int64_t L, int64_t h, int64_t H,
                  int64_t D) {
  return CSMat<T>(x + (t0 * H + h) * D, L, D, Eigen::OuterStride<>(H * D));
}
template <typename T>
SMat<T> HeadRows(T* x, int64_t t0, int64_t L, int64_t h, int64_t H,
                 int64_t D) {
  return SMat<T>(x + (t0 * H + h) * D, L, D, Eigen::OuterStride<>(H * D));
}
// Head h's entries [t0, t0 + L) of a (T, H) buffer, as an (L) view.
template <typename T>
CSVec<T> HeadEntries(const T* x, int64_t t0, int64_t L, int64_t h,
                     int64_t H) {
  return CSVec<T>(x + t0 * H + h, L, Eigen::InnerStride<>(H));
}
template <typename T>
SVec<T> HeadEntries(T* x, int64_t t0, int64_t L, int64_t h, int64_t H) {
  return SVec<T>(x + t0 * H + h, L, Eigen::InnerStride<>(H));
}

// Head h's state in an (H, Dv, Dk) buffer, or zeros for nullptr.
template <typename T>
void LoadState(RowMat<T>* S, const T* states, int64_t h, int64_t Dk,
               int64_t Dv) {
  if (states != nullptr) {
    *S = CMat<T>(states + h * Dv * Dk, Dv, Dk);
  } else {
    S->setZero(Dv, Dk);
  }
}

}  // namespace

namespace {

// Head h of the forward: its blocks one after another from its entering
// state.
template <typename T>
void ForwardOneHead(T* o, T* S_out, const T* q, const T* k, const T* v,
                    const T* g, const T* beta, const T* S_in, int64_t T_len,
                    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size,
                    int64_t st_tile, int64_t h) {
  GdnBlockOmega<T> omega;
  RowMat<T> V_new;                                        // (L, Dv)
  RowMat<T> S(Dv, Dk), S_next(Dv, Dk);                    // (Dv, Dk) each
  LoadState(&S, S_in, h, Dk, Dv);
  for (int64_t t0 = 0; t0 < T_len; t0 += block_size) {
    const int64_t L = std::min(block_size, T_len - t0);
    const CSMat<T> K = HeadRows(k, t0, L, h, H, Dk);      // (L, Dk)
    SMat<T> O = HeadRows(o, t0, L, h, H, Dv);             // (L, Dv)
    GdnBlockPre<T>(&omega, K, HeadRows(v, t0, L, h, H, Dv),
                   HeadEntries(g, t0, L, h, H), HeadEntries(beta, t0, L, h, H));
    V_new.resize(L, Dv);
    GdnBlockSTTiled<T>(V_new, S_next, S, omega, K, st_tile);
    GdnBlockOut<T>(O, HeadRows(q, t0, L, h, H, Dk), K, V_new, S, omega);
    S.swap(S_next);
  }
  if (S_out != nullptr) Mat<T>(S_out + h * Dv * Dk, Dv, Dk) = S;
}

}  // namespace

int64_t GdnCoreLanes(int64_t H) { return LoopTeam(H); }

template <typename T>
void GdnCoreForward(T* o, T* S_out, const T* q, const T* k, const T* v,
                    const T* g, const T* beta, const T* S_in, int64_t T_len,
                    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size,
                    int64_t st_tile) {
  const int lanes = static_cast<int>(GdnCoreLanes(H));
  // Heads are independent: a static schedule hands each lane a fixed range.
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    ForwardOneHead<T>(o, S_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv,
                      block_size, st_tile, h);
  }
}

template <typename T>
void GdnCoreForwardOverlapped(T* o, T* S_out, const T* q, const T* k,
                              const T* v, const T* g, const T* beta,
                              const T* S_in, int64_t T_len, int64_t H,
                              int64_t Dk, int64_t Dv, int64_t block_size,
                              int64_t st_tile) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int64_t R = kGdnOverlapSlots;
  // ST's tiles of state rows: nt of them, the last `last` rows.
  const int64_t tile = st_tile > 0 && st_tile < Dv ? st_tile : std::max<int64_t>(Dv, 1);
  const int64_t nt = (Dv + tile - 1) / tile;
  // Per head R slots, block b in slot b % R: its Omega, its V_new (block_size
  // rows, the first L used) and the state entering it (the state leaving it
  // goes to slot (b + 1) % R).
  std::vector<GdnBlockOmega<T>> omega(H * R);
  std::vector<RowMat<T>> V_new(H * R, RowMat<T>(block_size, Dv));
  std::vector<RowMat<T>> S(H * R, RowMat<T>(Dv, Dk));
  for (int64_t h = 0; h < H; ++h) LoadState(&S[h * R], S_in, h, Dk, Dv);
  // Dependence tokens per slot and tile: its state rows, its V_new columns.
  std::vector<char> state_tiles(std::max<int64_t>(H * R * nt, 1));
  std::vector<char> vnew_tiles(std::max<int64_t>(H * R * nt, 1));
  GdnBlockOmega<T>* om = omega.data();
  RowMat<T>* vn = V_new.data();
  RowMat<T>* st = S.data();
  char* sx = state_tiles.data();
  char* vx = vnew_tiles.data();
  const int threads = std::max(1, KernelThreads());
  // One thread creates the tasks in program order (block by block, heads
  // inside), so OpenMP's dependences on the slots order each task after the
  // last earlier one that wrote what it reads or read what it writes.
#pragma omp parallel num_threads(threads) if (threads > 1)
#pragma omp single
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t t0 = b * block_size;
    const int64_t L = std::min(block_size, T_len - t0);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = h * R + b % R;             // this block's slot
      const int64_t n = h * R + (b + 1) % R;       // the next block's
#pragma omp task depend(out : om[i])
      GdnBlockPre<T>(&om[i], HeadRows(k, t0, L, h, H, Dk),
                     HeadRows(v, t0, L, h, H, Dv), HeadEntries(g, t0, L, h, H),
                     HeadEntries(beta, t0, L, h, H));
      for (int64_t j = 0; j < nt; ++j) {
        // Tile j: after Pre(b) and tile j of block b - 1 (its entering rows).
#pragma omp task depend(in : om[i], sx[i * nt + j]) depend(out : sx[n * nt + j], vx[i * nt + j])
        {
          auto V = vn[i].topRows(L);
          if (nt == 1) {
            GdnBlockST<T>(V, st[n], st[i], om[i], HeadRows(k, t0, L, h, H, Dk));
          } else {
            GdnBlockSTRows<T>(V, st[n], st[i], om[i], HeadRows(k, t0, L, h, H, Dk),
                              j * tile, std::min(tile, Dv - j * tile));
          }
        }
      }
#pragma omp task depend(in : om[i]) depend(iterator(j = 0 : nt), in : sx[i * nt + j], vx[i * nt + j])
      {
        SMat<T> O = HeadRows(o, t0, L, h, H, Dv);
        GdnBlockOut<T>(O, HeadRows(q, t0, L, h, H, Dk),
                       HeadRows(k, t0, L, h, H, Dk), vn[i].topRows(L), st[i], om[i]);
      }
    }
  }
  if (S_out != nullptr) {
    for (int64_t h = 0; h < H; ++h) {
      Mat<T>(S_out + h * Dv * Dk, Dv, Dk) = S[h * R + blocks % R];
    }
  }
}

int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                     int64_t Dv, int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return H * blocks * Dv * Dk;
}

namespace {

// The chunk's forward inputs and the backward's outputs, with their sizes.
template <typename T>
struct CoreArgs {
  T *dq, *dk, *dv, *dg, *dbeta;
  const T *dO, *q, *k, *v, *g, *beta;
  int64_t T_len, H, Dk, Dv, block_size;
  int64_t st_tile;  // B_V (GdnCoreBackward)
};

// Runs Pre and ST over head h's blocks from S (Dv, Dk), storing the state
// entering block b at states + b * Dv * Dk.
template <typename T>
void ReplayBlockStates(T* states, RowMat<T> S, const CoreArgs<T>& a,
                       int64_t h) {
  GdnBlockOmega<T> omega;
  RowMat<T> V_new, S_next(a.Dv, a.Dk);
  for (int64_t t0 = 0, b = 0; t0 < a.T_len; t0 += a.block_size, ++b) {
    const int64_t L = std::min(a.block_size, a.T_len - t0);
    Mat<T>(states + b * a.Dv * a.Dk, a.Dv, a.Dk) = S;
    if (t0 + L == a.T_len) break;  // the last block's exit state is not needed
    const CSMat<T> K = HeadRows(a.k, t0, L, h, a.H, a.Dk);  // (L, Dk)
    GdnBlockPre<T>(&omega, K, HeadRows(a.v, t0, L, h, a.H, a.Dv),
                   HeadEntries(a.g, t0, L, h, a.H),
                   HeadEntries(a.beta, t0, L, h, a.H));
    V_new.resize(L, a.Dv);
    GdnBlockSTTiled<T>(V_new, S_next, S, omega, K, a.st_tile);
    S.swap(S_next);
  }
}

// Scratch of one block's backward, reused across blocks.
template <typename T>
struct BlockBackwardScratch {
  GdnBlockOmega<T> omega;
  GdnBlockGrads<T> grads;
  RowMat<T> V_new, dV_new;  // (L, Dv) each
  RowMat<T> dW;             // (L, Dk)
  RowMat<T> dS_in;          // (Dv, Dk)
};

// Head h's block [t0, t0 + L) given the state S entering it: writes its
// dq, dk, dv, dg, dbeta and turns *dS (the gradient of the state leaving the
// block) into the gradient of S.
template <typename T>
void BackwardOneBlock(BlockBackwardScratch<T>* s, RowMat<T>* dS, CMat<T> S,
                      const CoreArgs<T>& a, int64_t h, int64_t t0, int64_t L) {
  const CSMat<T> Q = HeadRows(a.q, t0, L, h, a.H, a.Dk);   // (L, Dk)
  const CSMat<T> K = HeadRows(a.k, t0, L, h, a.H, a.Dk);   // (L, Dk)
  const CSMat<T> V = HeadRows(a.v, t0, L, h, a.H, a.Dv);   // (L, Dv)
  const CSVec<T> beta = HeadEntries(a.beta, t0, L, h, a.H);  // (L)
  GdnBlockPre<T>(&s->omega, K, V, HeadEntries(a.g, t0, L, h, a.H), beta);
  s->V_new = s->omega.U;
  s->V_new.noalias() -= s->omega.W * S.transpose();
  s->grads.SetZero(L, a.Dk, a.Dv);
  s->dS_in.setZero(a.Dv, a.Dk);
  s->dV_new.resize(L, a.Dv);
  s->dW.resize(L, a.Dk);
  GdnBlockOutBackward<T>(&s->grads, s->dV_new, s->dS_in,
                         HeadRows(a.dO, t0, L, h, a.H, a.Dv), Q, K, s->V_new,
                         S, s->omega);
  GdnBlockSTBackward<T>(&s->grads, s->dW, s->dS_in, s->dV_new, *dS, s->V_new,
                        S, s->omega, K, a.st_tile);
  GdnBlockPreBackward<T>(&s->grads, s->dV_new, s->dW, K, V, beta, s->omega);
  HeadRows(a.dq, t0, L, h, a.H, a.Dk) = s->grads.dQ;
  HeadRows(a.dk, t0, L, h, a.H, a.Dk) = s->grads.dK;
  HeadRows(a.dv, t0, L, h, a.H, a.Dv) = s->grads.dV;
  HeadEntries(a.dbeta, t0, L, h, a.H) = s->grads.dbeta;
  T acc = 0;  // dg_s = sum_{r >= s} dG_r (G is the cumulative sum of g)
  for (int64_t r = L - 1; r >= 0; --r) {
    a.dg[(t0 + r) * a.H + h] = acc += s->grads.dG(r);
  }
  dS->swap(s->dS_in);
}

}  // namespace

template <typename T>
void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                     T* workspace, const T* dO, const T* dS_out, const T* q,
                     const T* k, const T* v, const T* g, const T* beta,
                     const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                     int64_t Dv, int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a{dq, dk, dv, dg, dbeta, dO, q, k, v, g, beta,
                      T_len, H, Dk, Dv, block_size, st_tile};
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int lanes = static_cast<int>(GdnCoreLanes(H));
  // Heads are independent: a static schedule hands each lane a fixed range
  // of heads, and head h replays its states into its own slice of the
  // workspace (so the workspace, like a GPU kernel's, holds every head's
  // states, whatever the thread count: memory never depends on it).
#pragma omp parallel num_threads(lanes) if (lanes > 1)
  {
    BlockBackwardScratch<T> scratch;
    RowMat<T> S0, dS;  // (Dv, Dk) each
#pragma omp for schedule(static)
    for (int64_t h = 0; h < H; ++h) {
      T* states = workspace + h * blocks * Dv * Dk;
      LoadState(&S0, S_in, h, Dk, Dv);
      ReplayBlockStates<T>(states, S0, a, h);
      LoadState(&dS, dS_out, h, Dk, Dv);
      for (int64_t b = blocks - 1; b >= 0; --b) {
        const int64_t t0 = b * block_size;
        BackwardOneBlock<T>(&scratch, &dS,
                            CMat<T>(states + b * Dv * Dk, Dv, Dk), a, h, t0,
                            std::min(block_size, T_len - t0));
      }
      if (dS_in != nullptr) Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = dS;
    }
  }
}

namespace {

// Head h's block [t0, t0 + L), the half of its backward that needs no state
// gradient: Pre, V_new from the entering state S, and the Out backward (into
// s->grads, s->dV_new and s->dS_in). BackwardOneBlock's first steps.
template <typename T>
void BlockOutBackward(BlockBackwardScratch<T>* s, CMat<T> S, const CoreArgs<T>& a,
                      int64_t h, int64_t t0, int64_t L) {
  const CSMat<T> K = HeadRows(a.k, t0, L, h, a.H, a.Dk);   // (L, Dk)
  GdnBlockPre<T>(&s->omega, K, HeadRows(a.v, t0, L, h, a.H, a.Dv),
                 HeadEntries(a.g, t0, L, h, a.H), HeadEntries(a.beta, t0, L, h, a.H));
  s->V_new = s->omega.U;
  s->V_new.noalias() -= s->omega.W * S.transpose();
  s->grads.SetZero(L, a.Dk, a.Dv);
  s->dS_in.setZero(a.Dv, a.Dk);
  s->dV_new.resize(L, a.Dv);
  s->dW.resize(L, a.Dk);
  GdnBlockOutBackward<T>(&s->grads, s->dV_new, s->dS_in,
                         HeadRows(a.dO, t0, L, h, a.H, a.Dv),
                         HeadRows(a.q, t0, L, h, a.H, a.Dk), K, s->V_new, S, s->omega);
}

// The ST backward: *dS (the gradient of the state leaving the block) becomes
// the gradient of the state entering it.
template <typename T>
void BlockSTBackward(BlockBackwardScratch<T>* s, RowMat<T>* dS, CMat<T> S,
                     const CoreArgs<T>& a, int64_t h, int64_t t0, int64_t L) {
  GdnBlockSTBackward<T>(&s->grads, s->dW, s->dS_in, s->dV_new, *dS, s->V_new, S,
                        s->omega, HeadRows(a.k, t0, L, h, a.H, a.Dk), a.st_tile);
  dS->swap(s->dS_in);
}

// The Pre backward and the block's gradient rows.
template <typename T>
void BlockPreBackward(BlockBackwardScratch<T>* s, const CoreArgs<T>& a, int64_t h,
                      int64_t t0, int64_t L) {
  GdnBlockPreBackward<T>(&s->grads, s->dV_new, s->dW, HeadRows(a.k, t0, L, h, a.H, a.Dk),
                         HeadRows(a.v, t0, L, h, a.H, a.Dv),
                         HeadEntries(a.beta, t0, L, h, a.H), s->omega);
  HeadRows(a.dq, t0, L, h, a.H, a.Dk) = s->grads.dQ;
  HeadRows(a.dk, t0, L, h, a.H, a.Dk) = s->grads.dK;
  HeadRows(a.dv, t0, L, h, a.H, a.Dv) = s->grads.dV;
  HeadEntries(a.dbeta, t0, L, h, a.H) = s->grads.dbeta;
  T acc = 0;  // dg_s = sum_{r >= s} dG_r
  for (int64_t r = L - 1; r >= 0; --r) {
    a.dg[(t0 + r) * a.H + h] = acc += s->grads.dG(r);
  }
}

}  // namespace

template <typename T>
void GdnCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                               T* workspace, const T* dO, const T* dS_out,
                               const T* q, const T* k, const T* v, const T* g,
                               const T* beta, const T* S_in, int64_t T_len,
                               int64_t H, int64_t Dk, int64_t Dv,
                               int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a{dq, dk, dv, dg, dbeta, dO, q, k, v, g, beta,
                      T_len, H, Dk, Dv, block_size, st_tile};
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int64_t R = kGdnOverlapSlots;
  // Per head: R block scratches (block b in slot b % R) and the running
  // state gradient.
  std::vector<BlockBackwardScratch<T>> scratch(H * R);
  std::vector<RowMat<T>> dS(H);
  std::vector<char> replayed(H);  // dependence tokens: head h's states are in
  BlockBackwardScratch<T>* sc = scratch.data();
  RowMat<T>* ds = dS.data();
  char* rp = replayed.data();
  const int threads = std::max(1, KernelThreads());
  // One thread creates the tasks in program order (heads' replays, then the
  // blocks last to first, heads inside), so the dependences order each task
  // after the last earlier one that touched what it reads or writes.
#pragma omp parallel num_threads(threads) if (threads > 1)
#pragma omp single
  {
    for (int64_t h = 0; h < H; ++h) {
#pragma omp task depend(out : rp[h], ds[h])
      {
        RowMat<T> S0;  // (Dv, Dk)
        LoadState(&S0, S_in, h, Dk, Dv);
        ReplayBlockStates<T>(workspace + h * blocks * Dv * Dk, S0, a, h);
        LoadState(&ds[h], dS_out, h, Dk, Dv);
      }
    }
    for (int64_t b = blocks - 1; b >= 0; --b) {
      const int64_t t0 = b * block_size;
      const int64_t L = std::min(block_size, T_len - t0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t i = h * R + b % R;
        const T* S = workspace + (h * blocks + b) * Dv * Dk;
#pragma omp task depend(in : rp[h]) depend(out : sc[i])
        BlockOutBackward<T>(&sc[i], CMat<T>(S, Dv, Dk), a, h, t0, L);
#pragma omp task depend(inout : sc[i], ds[h])
        BlockSTBackward<T>(&sc[i], &ds[h], CMat<T>(S, Dv, Dk), a, h, t0, L);
#pragma omp task depend(inout : sc[i])
        BlockPreBackward<T>(&sc[i], a, h, t0, L);
      }
    }
  }
  if (dS_in != nullptr) {
    for (int64_t h = 0; h < H; ++h) Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = dS[h];
  }
}

namespace {

// Offsets in one (head, block) slot of the phase workspaces, for a block of
// up to bs tokens. Forward slots use G .. S; backward slots all of them
// (their entering states live in the states region before the slots).
struct PhaseSlot {
  int64_t G, Gam, KG, W, U, Vn, S, dVn, dW, dS, dQ, dK, dV, dG, dbeta, size;
  static PhaseSlot Make(int64_t bs, int64_t Dk, int64_t Dv, bool backward) {
    PhaseSlot p{};
    int64_t at = 0;
    auto take = [&at](int64_t n) { const int64_t o = at; at += n; return o; };
    p.G = take(bs);
    p.Gam = take(bs * bs);
    p.KG = take(bs * bs);
    p.W = take(bs * Dk);
    p.U = take(bs * Dv);
    p.Vn = take(bs * Dv);
    if (!backward) {
      p.S = take(Dv * Dk);
    } else {
      p.dVn = take(bs * Dv);
      p.dW = take(bs * Dk);
      p.dS = take(Dv * Dk);
      p.dQ = take(bs * Dk);
      p.dK = take(bs * Dk);
      p.dV = take(bs * Dv);
      p.dG = take(bs);
      p.dbeta = take(bs);
    }
    p.size = at;
    return p;
  }
};

// Exact copies between owning Eigen objects and a slot.
template <typename T, typename M>
void Save(T* dst, const M& m) {
  std::copy_n(m.data(), m.size(), dst);
}
template <typename T>
void Load(RowMat<T>* m, const T* src, int64_t rows, int64_t cols) {
  *m = CMat<T>(src, rows, cols);
}
template <typename T>
void Load(Vec<T>* v, const T* src, int64_t n) {
  *v = CVecMap<T>(src, n);
}

template <typename T>
void SaveOmega(T* slot, const PhaseSlot& p, const GdnBlockOmega<T>& om) {
  Save(slot + p.G, om.G);
  Save(slot + p.Gam, om.Gam);
  Save(slot + p.KG, om.KG);
  Save(slot + p.W, om.W);
  Save(slot + p.U, om.U);
}
// What the ST needs of Omega (G, W, U); with `all`, also Gam and KG.
template <typename T>
void LoadOmega(GdnBlockOmega<T>* om, const T* slot, const PhaseSlot& p,
               int64_t L, int64_t Dk, int64_t Dv, bool all) {
  Load(&om->G, slot + p.G, L);
  Load(&om->W, slot + p.W, L, Dk);
  Load(&om->U, slot + p.U, L, Dv);
  if (all) {
    Load(&om->Gam, slot + p.Gam, L, L);
    Load(&om->KG, slot + p.KG, L, L);
  }
}

}  // namespace

int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                         int64_t Dv, int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return H * blocks * PhaseSlot::Make(block_size, Dk, Dv, false).size;
}

template <typename T>
void GdnCoreForwardPhase(CorePhase phase, T* o, T* S_out, T* workspace,
                         const T* q, const T* k, const T* v, const T* g,
                         const T* beta, const T* S_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size, int64_t st_tile) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const PhaseSlot p = PhaseSlot::Make(block_size, Dk, Dv, false);
  const int lanes = static_cast<int>(GdnCoreLanes(H));
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    GdnBlockOmega<T> omega;
    RowMat<T> V_new;                                      // (L, Dv)
    RowMat<T> S(Dv, Dk), S_next(Dv, Dk);                  // (Dv, Dk) each
    if (phase == CorePhase::kST) LoadState(&S, S_in, h, Dk, Dv);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t t0 = b * block_size, L = std::min(block_size, T_len - t0);
      T* slot = workspace + (h * blocks + b) * p.size;
      const CSMat<T> K = HeadRows(k, t0, L, h, H, Dk);    // (L, Dk)
      switch (phase) {
        case CorePhase::kPre:
          GdnBlockPre<T>(&omega, K, HeadRows(v, t0, L, h, H, Dv),
                         HeadEntries(g, t0, L, h, H),
                         HeadEntries(beta, t0, L, h, H));
          SaveOmega(slot, p, omega);
          break;
        case CorePhase::kST:
          LoadOmega(&omega, slot, p, L, Dk, Dv, /*all=*/false);
          V_new.resize(L, Dv);
          GdnBlockSTTiled<T>(V_new, S_next, S, omega, K, st_tile);
          Save(slot + p.Vn, V_new);
          Save(slot + p.S, S);
          S.swap(S_next);
          break;
        case CorePhase::kOut: {
          Load(&omega.G, slot + p.G, L);
          Load(&omega.Gam, slot + p.Gam, L, L);
          Load(&V_new, slot + p.Vn, L, Dv);
          Load(&S, slot + p.S, Dv, Dk);
          SMat<T> O = HeadRows(o, t0, L, h, H, Dv);       // (L, Dv)
          GdnBlockOut<T>(O, HeadRows(q, t0, L, h, H, Dk), K, V_new, S, omega);
          break;
        }
      }
    }
    if (phase == CorePhase::kST && S_out != nullptr) {
      Mat<T>(S_out + h * Dv * Dk, Dv, Dk) = S;
    }
  }
}

int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                          int64_t Dk, int64_t Dv,
                                          int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size) +
         H * blocks * PhaseSlot::Make(block_size, Dk, Dv, true).size;
}

namespace {

// The block backward's scratch to and from its slot: `all` with Omega's Gam
// and KG, V_new and dQ, dV, dbeta (what the Pre backward needs beyond what
// the ST backward does).
template <typename T>
void SaveScratch(T* slot, const PhaseSlot& p, const BlockBackwardScratch<T>& s,
                 bool all) {
  if (all) {
    SaveOmega(slot, p, s.omega);
    Save(slot + p.Vn, s.V_new);
    Save(slot + p.dS, s.dS_in);
    Save(slot + p.dQ, s.grads.dQ);
    Save(slot + p.dV, s.grads.dV);
    Save(slot + p.dbeta, s.grads.dbeta);
  } else {
    Save(slot + p.dW, s.dW);
  }
  Save(slot + p.dVn, s.dV_new);
  Save(slot + p.dK, s.grads.dK);
  Save(slot + p.dG, s.grads.dG);
}

// For the ST backward (`pre_backward` false): Omega's G, W, U, V_new,
// dV_new, dS_in, dK, dG. For the Pre backward: Omega, dV_new, dW and every
// gradient row.
template <typename T>
void LoadScratch(BlockBackwardScratch<T>* s, const T* slot, const PhaseSlot& p,
                 int64_t L, int64_t Dk, int64_t Dv, bool pre_backward) {
  LoadOmega(&s->omega, slot, p, L, Dk, Dv, /*all=*/pre_backward);
  Load(&s->dV_new, slot + p.dVn, L, Dv);
  Load(&s->grads.dK, slot + p.dK, L, Dk);
  Load(&s->grads.dG, slot + p.dG, L);
  if (pre_backward) {
    Load(&s->dW, slot + p.dW, L, Dk);
    Load(&s->grads.dQ, slot + p.dQ, L, Dk);
    Load(&s->grads.dV, slot + p.dV, L, Dv);
    Load(&s->grads.dbeta, slot + p.dbeta, L);
  } else {
    Load(&s->V_new, slot + p.Vn, L, Dv);
    Load(&s->dS_in, slot + p.dS, Dv, Dk);
    s->dW.resize(L, Dk);
  }
}

}  // namespace

template <typename T>
void GdnCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                          T* dbeta, T* dS_in, T* workspace, const T* dO,
                          const T* dS_out, const T* q, const T* k, const T* v,
                          const T* g, const T* beta, const T* S_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a{dq, dk, dv, dg, dbeta, dO, q, k, v, g, beta,
                      T_len, H, Dk, Dv, block_size, st_tile};
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const PhaseSlot p = PhaseSlot::Make(block_size, Dk, Dv, true);
  T* slots = workspace + GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  const int lanes = static_cast<int>(GdnCoreLanes(H));
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    BlockBackwardScratch<T> scratch;
    RowMat<T> dS;                                         // (Dv, Dk)
    T* states = workspace + h * blocks * Dv * Dk;
    if (phase == CorePhase::kPre) {
      RowMat<T> S0;                                       // (Dv, Dk)
      LoadState(&S0, S_in, h, Dk, Dv);
      ReplayBlockStates<T>(states, S0, a, h);
    }
    if (phase == CorePhase::kST) LoadState(&dS, dS_out, h, Dk, Dv);
    for (int64_t b = blocks - 1; b >= 0; --b) {
      const int64_t t0 = b * block_size, L = std::min(block_size, T_len - t0);
      T* slot = slots + (h * blocks + b) * p.size;
      const CMat<T> S(states + b * Dv * Dk, Dv, Dk);      // entering block b
      switch (phase) {
        case CorePhase::kPre:
          BlockOutBackward<T>(&scratch, S, a, h, t0, L);
          SaveScratch(slot, p, scratch, /*all=*/true);
          break;
        case CorePhase::kST:
          LoadScratch(&scratch, slot, p, L, Dk, Dv, /*pre_backward=*/false);
          BlockSTBackward<T>(&scratch, &dS, S, a, h, t0, L);
          SaveScratch(slot, p, scratch, /*all=*/false);
          break;
        case CorePhase::kOut:
          LoadScratch(&scratch, slot, p, L, Dk, Dv, /*pre_backward=*/true);
          BlockPreBackward<T>(&scratch, a, h, t0, L);
          break;
      }
    }
    if (phase == CorePhase::kST && dS_in != nullptr) {
      Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = dS;
    }
  }
}

GdnCoreFlops CountGdnCoreFlops(int64_t T_len, int64_t H, int64_t Dk,
                               int64_t Dv, int64_t block_size) {
  GdnCoreFlops f;
  for (int64_t t0 = 0; t0 < T_len; t0 += block_size) {
    const double L = static_cast<double>(std::min(block_size, T_len - t0));
    const double dk = static_cast<double>(Dk), dv = static_cast<double>(Dv);
    const double pre = 2 * L * L * dk + L * (L - 1) * (dk + dv);
    const double st = 4 * L * dk * dv;
    const double out = 2 * L * dk * dv + 2 * L * L * dk + 2 * L * L * dv;
    f.forward += pre + st + out;
    f.backward += 2 * pre + st + 2 * L * dk * dv +
                  (6 * L * L * dk + 4 * L * L * dv + 4 * L * dk * dv) +
                  8 * L * dk * dv +
                  (L * (L - 1) * (dk + dv) + 2 * L * L * (dk + dv) +
                   4 * L * L * dk);
  }
  f.forward *= static_cast<double>(H);
  f.backward *= static_cast<double>(H);
  return f;
}

#define SF_INSTANTIATE(T)                                                    \
  template struct GdnBlockGrads<T>;                                          \
  template void GdnBlockPre<T>(GdnBlockOmega<T>*, CMatRef<T>, CMatRef<T>,    \
                               CVecRef<T>, CVecRef<T>);                      \
  template void GdnBlockST<T>(MatRef<T>, MatRef<T>, CMatRef<T>,              \
                              const GdnBlockOmega<T>&, CMatRef<T>);          \
  template void GdnBlockSTRows<T>(MatRef<T>, MatRef<T>, CMatRef<T>,          \
                                  const GdnBlockOmega<T>&, CMatRef<T>,       \
                                  int64_t, int64_t);                         \
  template void GdnBlockOut<T>(MatRef<T>, CMatRef<T>, CMatRef<T>,            \
                               CMatRef<T>, CMatRef<T>,                       \
                               const GdnBlockOmega<T>&);                     \
  template void GdnBlockOutBackward<T>(                                      \
      GdnBlockGrads<T>*, MatRef<T>, MatRef<T>, CMatRef<T>, CMatRef<T>,       \
      CMatRef<T>, CMatRef<T>, CMatRef<T>, const GdnBlockOmega<T>&);          \
  template void GdnBlockSTBackward<T>(                                       \
      GdnBlockGrads<T>*, MatRef<T>, MatRef<T>, MatRef<T>, CMatRef<T>,        \
      CMatRef<T>, CMatRef<T>, const GdnBlockOmega<T>&, CMatRef<T>, int64_t); \
  template void GdnBlockPreBackward<T>(GdnBlockGrads<T>*, CMatRef<T>,        \
                                       CMatRef<T>, CMatRef<T>, CMatRef<T>,   \
                                       CVecRef<T>, const GdnBlockOmega<T>&); \
  template void GdnCoreForward<T>(T*, T*, const T*, const T*, const T*,      \
                                  const T*, const T*, const T*, int64_t,     \
                                  int64_t, int64_t, int64_t, int64_t,        \
                                  int64_t);                                  \
  template void GdnCoreForwardOverlapped<T>(                                 \
      T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,    \
      int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);                 \
  template void GdnCoreBackward<T>(                                          \
      T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,    \
      const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,     \
      int64_t, int64_t, int64_t); \
  template void GdnCoreBackwardOverlapped<T>(                                          \
      T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,    \
      const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,     \
      int64_t, int64_t, int64_t);                                            \
  template void GdnCoreForwardPhase<T>(                                      \
      CorePhase, T*, T*, T*, const T*, const T*, const T*, const T*,          \
      const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t,       \
      int64_t);                                                              \
  template void GdnCoreBackwardPhase<T>(                                     \
      CorePhase, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*,    \
      const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,    \
      int64_t, int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

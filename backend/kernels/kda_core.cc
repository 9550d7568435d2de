// The chunkwise KDA core (see kda_core.h and docs/kda-kernel.md).
//
// Dimensions: T tokens, H heads, Dk, Dv head dims, L tokens in a block.
// Within a block (local token index r = 0..L-1, entering state S), per key
// channel c:
//   G_rc = g_0c + ... + g_rc,      e_rs = exp(G_r - G_s) in R^{Dk} (s <= r)
//   KK_rs = sum_c k_rc k_sc e_rsc (s < r),  P_rs = sum_c q_rc k_sc e_rsc (s <= r)
//   Kt_s = k_s o exp(G_{L-1} - G_s)
//   (I + A) U = diag(beta) V,  (I + A) W = diag(beta) (K o exp(G)),  A = diag(beta) KK
//   V_new = U - W S^T                       (the true delta-rule updates u_r)
//   S_out = S diag(exp(G_{L-1})) + V_new^T Kt
//   O     = (Q o exp(G)) S^T + P V_new
// Every exponent above is G_r - G_s with s <= r, G_r itself or G_{L-1} - G_s:
// each is a sum of the g of the tokens between, so nothing overflows that the
// recurrence itself does not.
#include "backend/kernels/kda_core.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/threading.h"

namespace stateflow::backend {

namespace {

// The pairwise decayed products of the block: for each token r and s <= r,
// ks = k_s o exp(G_r - G_s) (key s decayed to token r, one vectorised
// exponential of the difference per channel), then P_rs = ks . q_r and, for
// s < r, KK_rs = ks . k_r. KK (L, L) strictly lower, P (L, L) lower, zeros
// above.
template <typename T>
void PairProducts(RowMat<T>* KK, RowMat<T>* P, CMatRef<T> Q, CMatRef<T> K,
                  const RowMat<T>& G) {
  const Eigen::Index L = K.rows();
  KK->setZero(L, L);
  P->setZero(L, L);
  RowVec<T> ks(K.cols());  // (Dk)
  for (Eigen::Index r = 0; r < L; ++r) {
    for (Eigen::Index s = 0; s <= r; ++s) {
      ks.array() = K.row(s).array() * (G.row(r) - G.row(s)).array().exp();
      (*P)(r, s) = ks.dot(Q.row(r));
      if (s < r) (*KK)(r, s) = ks.dot(K.row(r));
    }
  }
}

// The backward of X_rs = sum_c a_rc b_sc exp(G_rc - G_sc) over s <= r
// (s < r when `strict`), given dX (L, L) (read there only), for the rows
// a_r of Row (q for P, k for KK) and b_s of Col (k):
//   dRow_r += sum_s dX_rs b_s o e_rs,     dCol_s += sum_r dX_rs a_r o e_rs,
//   dG_r += a_r o (dRow_r's share),       dG_s -= b_s o (dCol_s's share),
// since d e_rsc / dG_rc = e_rsc = -d e_rsc / dG_sc. The exponentials are
// recomputed pair by pair, as in PairProducts. dRow and dCol may be the same
// matrix.
template <typename T>
void PairProductsBackward(RowMat<T>* dRow, RowMat<T>* dCol, RowMat<T>* dG,
                          const RowMat<T>& dX, CMatRef<T> Row, CMatRef<T> Col,
                          const RowMat<T>& G, bool strict) {
  const Eigen::Index L = Col.rows(), Dk = Col.cols();
  RowMat<T> dC = RowMat<T>::Zero(L, Dk);   // (L, Dk) the column role's share
  RowVec<T> e(Dk), da(Dk);                 // (Dk) each
  for (Eigen::Index r = 0; r < L; ++r) {
    const Eigen::Index n = strict ? r : r + 1;
    da.setZero();
    for (Eigen::Index s = 0; s < n; ++s) {
      const T x = dX(r, s);
      e.array() = (G.row(r) - G.row(s)).array().exp();
      da.array() += x * (Col.row(s).array() * e.array());
      dC.row(s).array() += x * (Row.row(r).array() * e.array());
    }
    dRow->row(r) += da;
    dG->row(r).array() += da.array() * Row.row(r).array();
  }
  *dCol += dC;
  dG->array() -= dC.array() * Col.array();
}

// X (L, n) := (I + A)^{-1} X for A (L, L) strictly lower triangular (its
// upper part is ignored): row substitution, X_r -= sum_{s<r} A_rs X_s, rows
// ascending, each step a row update vectorised over n.
template <typename T>
void SolveUnitLowerInPlace(const RowMat<T>& A, RowMat<T>* X) {
  for (Eigen::Index r = 1; r < X->rows(); ++r) {
    X->row(r).noalias() -= A.row(r).head(r) * X->topRows(r);
  }
}

// X (L, n) := (I + A)^{-T} X for the same A: X_r -= sum_{s>r} A_sr X_s,
// rows descending.
template <typename T>
void SolveUnitLowerTransposedInPlace(const RowMat<T>& A, RowMat<T>* X) {
  const Eigen::Index L = X->rows();
  for (Eigen::Index r = L - 2; r >= 0; --r) {
    X->row(r).noalias() -=
        A.col(r).tail(L - 1 - r).transpose() * X->bottomRows(L - 1 - r);
  }
}

// exp(G_{L-1}) (Dk): the decay of each channel over the whole block.
template <typename T>
RowVec<T> DecayOverBlock(const RowMat<T>& G) {
  return G.row(G.rows() - 1).array().exp().matrix();
}

}  // namespace

template <typename T>
void KdaBlockPre(KdaBlockOmega<T>* omega, CMatRef<T> Q, CMatRef<T> K,
                 CMatRef<T> V, CMatRef<T> g, CVecRef<T> beta) {
  const Eigen::Index L = K.rows(), Dk = K.cols();
  RowMat<T>& G = omega->G;                                // (L, Dk)
  G = g;
  for (Eigen::Index r = 1; r < L; ++r) G.row(r) += G.row(r - 1);
  PairProducts(&omega->KK, &omega->P, Q, K, G);
  RowMat<T>& Kt = omega->Kt;                              // (L, Dk)
  Kt.resize(L, Dk);
  for (Eigen::Index s = 0; s < L; ++s) {
    Kt.row(s).array() =
        K.row(s).array() * (G.row(L - 1) - G.row(s)).array().exp();
  }
  const RowMat<T> A = beta.asDiagonal() * omega->KK;      // (L, L), strictly lower
  omega->U.noalias() = beta.asDiagonal() * V;
  omega->W = ((K.array() * G.array().exp()).colwise() * beta.array()).matrix();
  SolveUnitLowerInPlace(A, &omega->U);
  SolveUnitLowerInPlace(A, &omega->W);
}

template <typename T>
void KdaBlockSTRows(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                    const KdaBlockOmega<T>& omega, int64_t j0, int64_t n) {
  const RowVec<T> dL = DecayOverBlock(omega.G);           // (Dk)
  auto V = V_new.middleCols(j0, n);                       // (L, n)
  const auto Si = S_in.middleRows(j0, n);                 // (n, Dk)
  V = omega.U.middleCols(j0, n);
  V.noalias() -= omega.W * Si.transpose();
  auto So = S_out.middleRows(j0, n);                      // (n, Dk)
  So.noalias() = V.transpose() * omega.Kt;
  So.array() += Si.array().rowwise() * dL.array();
}

template <typename T>
void KdaBlockST(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                const KdaBlockOmega<T>& omega) {
  KdaBlockSTRows<T>(V_new, S_out, S_in, omega, 0, S_in.rows());
}

namespace {

// KdaBlockST in tiles of `tile` state rows; one tile when tile is 0 or
// covers Dv.
template <typename T>
void KdaBlockSTTiled(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                     const KdaBlockOmega<T>& omega, int64_t tile) {
  const int64_t Dv = S_in.rows();
  if (tile <= 0 || tile >= Dv) tile = std::max<int64_t>(Dv, 1);
  for (int64_t j0 = 0; j0 < Dv; j0 += tile) {
    KdaBlockSTRows<T>(V_new, S_out, S_in, omega, j0, std::min(tile, Dv - j0));
  }
}

}  // namespace

template <typename T>
void KdaBlockOut(MatRef<T> O, CMatRef<T> Q, CMatRef<T> V_new,
                 CMatRef<T> S_in, const KdaBlockOmega<T>& omega) {
  const RowMat<T> Qh = (Q.array() * omega.G.array().exp()).matrix();  // (L, Dk)
  O.noalias() = Qh * S_in.transpose();
  O.noalias() += omega.P * V_new;
}

template <typename T>
void KdaBlockGrads<T>::SetZero(int64_t L, int64_t Dk, int64_t Dv) {
  dQ.setZero(L, Dk);
  dK.setZero(L, Dk);
  dV.setZero(L, Dv);
  dG.setZero(L, Dk);
  dbeta.setZero(L);
}

template <typename T>
void KdaBlockOutBackward(KdaBlockGrads<T>* grads, MatRef<T> dV_new,
                         MatRef<T> dS_in, CMatRef<T> dO, CMatRef<T> Q,
                         CMatRef<T> K, CMatRef<T> V_new, CMatRef<T> S_in,
                         const KdaBlockOmega<T>& omega) {
  const Eigen::Index L = Q.rows();
  // Intra-block part: O += P V_new.
  dV_new.noalias() = omega.P.transpose() * dO;
  RowMat<T> dP(L, L);                                     // (L, L)
  dP.noalias() = dO * V_new.transpose();
  PairProductsBackward(&grads->dQ, &grads->dK, &grads->dG, dP, Q, K, omega.G,
                       /*strict=*/false);
  // Inter-block part: O += Qh S_in^T, Qh = Q o exp(G).
  const RowMat<T> E = omega.G.array().exp().matrix();     // (L, Dk)
  const RowMat<T> Qh = (Q.array() * E.array()).matrix();  // (L, Dk)
  dS_in.noalias() += dO.transpose() * Qh;
  RowMat<T> dQh(L, Q.cols());                             // (L, Dk)
  dQh.noalias() = dO * S_in;
  grads->dQ.array() += dQh.array() * E.array();
  grads->dG.array() += dQh.array() * Qh.array();
}

template <typename T>
void KdaBlockSTBackward(KdaBlockGrads<T>* grads, MatRef<T> dW,
                        MatRef<T> dS_in, MatRef<T> dV_new,
                        CMatRef<T> dS_out, CMatRef<T> V_new, CMatRef<T> S_in,
                        const KdaBlockOmega<T>& omega, CMatRef<T> K,
                        int64_t st_tile) {
  const Eigen::Index L = K.rows(), Dv = dS_out.rows();
  const RowVec<T> dL = DecayOverBlock(omega.G);           // (Dk)
  // S_out = S_in diag(dL) + V_new^T Kt, V_new = U - W S_in^T: the chain,
  // tile by tile of state rows (row j of dS_in needs only row j of dS_out
  // and column j of dV_new; one tile when untiled). The sums over rows
  // follow.
  const Eigen::Index tile = st_tile > 0 && st_tile < Dv ? st_tile : std::max<Eigen::Index>(Dv, 1);
  for (Eigen::Index j0 = 0; j0 < Dv; j0 += tile) {
    const Eigen::Index n = std::min<Eigen::Index>(tile, Dv - j0);
    auto dSi = dS_in.middleRows(j0, n);                   // (n, Dk)
    const auto dSo = dS_out.middleRows(j0, n);            // (n, Dk)
    auto dVn = dV_new.middleCols(j0, n);                  // (L, n)
    dSi.array() += dSo.array().rowwise() * dL.array();
    dVn.noalias() += omega.Kt * dSo.transpose();
    dSi.noalias() -= dVn.transpose() * omega.W;
  }
  grads->dG.row(L - 1).array() +=
      (dS_out.array() * S_in.array()).colwise().sum() * dL.array();
  RowMat<T> dKt(L, K.cols());                             // (L, Dk)
  dKt.noalias() = V_new * dS_out;
  // Kt_s = k_s o exp(G_{L-1} - G_s).
  for (Eigen::Index s = 0; s < L; ++s) {
    grads->dK.row(s).array() +=
        dKt.row(s).array() * (omega.G.row(L - 1) - omega.G.row(s)).array().exp();
  }
  dKt.array() *= omega.Kt.array();                        // e_s = dKt_s o Kt_s
  grads->dG.row(L - 1) += dKt.colwise().sum();
  grads->dG -= dKt;
  dW.noalias() = -dV_new * S_in;
}

template <typename T>
void KdaBlockPreBackward(KdaBlockGrads<T>* grads, CMatRef<T> dU,
                         CMatRef<T> dW, CMatRef<T> K, CMatRef<T> V,
                         CVecRef<T> beta, const KdaBlockOmega<T>& omega) {
  const Eigen::Index L = K.rows();
  const RowMat<T> A = beta.asDiagonal() * omega.KK;       // (L, L)
  // X = (I + A)^{-1} B  =>  dB = (I + A)^{-T} dX, dA = -dB X^T.
  RowMat<T> dVb = dU;                                     // (L, Dv) d(diag(beta) V)
  RowMat<T> dKb = dW;                                     // (L, Dk) d(diag(beta) Kh)
  SolveUnitLowerTransposedInPlace(A, &dVb);
  SolveUnitLowerTransposedInPlace(A, &dKb);
  RowMat<T> dA(L, L);                                     // (L, L)
  dA.noalias() = -dVb * omega.U.transpose();
  dA.noalias() -= dKb * omega.W.transpose();
  dA.template triangularView<Eigen::Upper>().setZero();
  // diag(beta) V.
  grads->dV.noalias() += beta.asDiagonal() * dVb;
  grads->dbeta += (dVb.array() * V.array()).rowwise().sum().matrix();
  // diag(beta) Kh, Kh = K o exp(G).
  const RowMat<T> E = omega.G.array().exp().matrix();     // (L, Dk)
  const RowMat<T> Kh = (K.array() * E.array()).matrix();  // (L, Dk)
  grads->dbeta += (dKb.array() * Kh.array()).rowwise().sum().matrix();
  dKb = beta.asDiagonal() * dKb;                          // d(Kh)
  grads->dK.array() += dKb.array() * E.array();
  grads->dG.array() += dKb.array() * Kh.array();
  // A = diag(beta) KK.
  grads->dbeta += (dA.array() * omega.KK.array()).rowwise().sum().matrix();
  dA = beta.asDiagonal() * dA;                            // d(KK)
  PairProductsBackward(&grads->dK, &grads->dK, &grads->dG, dA, K, K, omega.G,
                       /*strict=*/true);
}

// ---- the core over a chunk -----------------------------------------------
//
// The drivers copy each block's rows of the caller's buffers into owned
// (aligned) matrices before any arithmetic and write results through owned
// matrices too: Eigen's vectorised loops (exp, reductions, small products)
// peel scalar iterations up to the first aligned packet, so working on the
// caller's buffers in place would let the last bits of a result follow the
// addresses the caller happened to allocate. With the copies (exact), the
// bits depend on the inputs, the block size and the tile only.

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

// The chunk's forward inputs and the backward's outputs, with their sizes.
template <typename T>
struct CoreArgs {
  T *dq, *dk, *dv, *dg, *dbeta;
  const T *dO, *q, *k, *v, *g, *beta;
  int64_t T_len, H, Dk, Dv, block_size;
  int64_t st_tile;  // B_V
};

// One block's rows of the inputs, owned (see the note above).
template <typename T>
struct BlockInputs {
  RowMat<T> Q, K, g;  // (L, Dk) each
  RowMat<T> V, dO;    // (L, Dv) each (dO in the backward only)
  Vec<T> beta;        // (L)
  void Load(const CoreArgs<T>& a, int64_t h, int64_t t0, int64_t L) {
    Q = HeadRows(a.q, t0, L, h, a.H, a.Dk);
    K = HeadRows(a.k, t0, L, h, a.H, a.Dk);
    g = HeadRows(a.g, t0, L, h, a.H, a.Dk);
    V = HeadRows(a.v, t0, L, h, a.H, a.Dv);
    beta = HeadEntries(a.beta, t0, L, h, a.H);
    if (a.dO != nullptr) dO = HeadRows(a.dO, t0, L, h, a.H, a.Dv);
  }
};

// The forward's arguments as CoreArgs (no gradients).
template <typename T>
CoreArgs<T> ForwardArgs(const T* q, const T* k, const T* v, const T* g,
                        const T* beta, int64_t T_len, int64_t H, int64_t Dk,
                        int64_t Dv, int64_t block_size, int64_t st_tile) {
  return CoreArgs<T>{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                     q, k, v, g, beta, T_len, H, Dk, Dv, block_size, st_tile};
}

template <typename T>
void BlockPre(KdaBlockOmega<T>* omega, const BlockInputs<T>& in) {
  KdaBlockPre<T>(omega, in.Q, in.K, in.V, in.g, in.beta);
}

// Out of head h's block [t0, t0 + L) into o, through an owned (L, Dv).
template <typename T>
void BlockOut(T* o, const BlockInputs<T>& in, CMatRef<T> V_new,
              CMatRef<T> S, const KdaBlockOmega<T>& omega,
              const CoreArgs<T>& a, int64_t h, int64_t t0) {
  const int64_t L = in.Q.rows();
  RowMat<T> O(L, a.Dv);                                   // (L, Dv)
  KdaBlockOut<T>(O, in.Q, V_new, S, omega);
  HeadRows(o, t0, L, h, a.H, a.Dv) = O;
}

// Head h of the forward: its blocks one after another from its entering
// state.
template <typename T>
void ForwardOneHead(T* o, T* S_out, const T* S_in, const CoreArgs<T>& a,
                    int64_t h) {
  BlockInputs<T> in;
  KdaBlockOmega<T> omega;
  RowMat<T> V_new;                                        // (L, Dv)
  RowMat<T> S(a.Dv, a.Dk), S_next(a.Dv, a.Dk);            // (Dv, Dk) each
  LoadState(&S, S_in, h, a.Dk, a.Dv);
  for (int64_t t0 = 0; t0 < a.T_len; t0 += a.block_size) {
    const int64_t L = std::min(a.block_size, a.T_len - t0);
    in.Load(a, h, t0, L);
    BlockPre<T>(&omega, in);
    V_new.resize(L, a.Dv);
    KdaBlockSTTiled<T>(V_new, S_next, S, omega, a.st_tile);
    BlockOut<T>(o, in, V_new, S, omega, a, h, t0);
    S.swap(S_next);
  }
  if (S_out != nullptr) Mat<T>(S_out + h * a.Dv * a.Dk, a.Dv, a.Dk) = S;
}

}  // namespace

template <typename T>
void KdaCoreForward(T* o, T* S_out, const T* q, const T* k, const T* v,
                    const T* g, const T* beta, const T* S_in, int64_t T_len,
                    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size,
                    int64_t st_tile) {
  const CoreArgs<T> a =
      ForwardArgs(q, k, v, g, beta, T_len, H, Dk, Dv, block_size, st_tile);
  const int lanes = LoopTeam(H);
  // Heads are independent: a static schedule hands each lane a fixed range.
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) ForwardOneHead<T>(o, S_out, S_in, a, h);
}

template <typename T>
void KdaCoreForwardOverlapped(T* o, T* S_out, const T* q, const T* k,
                              const T* v, const T* g, const T* beta,
                              const T* S_in, int64_t T_len, int64_t H,
                              int64_t Dk, int64_t Dv, int64_t block_size,
                              int64_t st_tile) {
  const CoreArgs<T> a =
      ForwardArgs(q, k, v, g, beta, T_len, H, Dk, Dv, block_size, st_tile);
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int64_t R = kKdaOverlapSlots;
  // ST's tiles of state rows: nt of them.
  const int64_t tile = st_tile > 0 && st_tile < Dv ? st_tile : std::max<int64_t>(Dv, 1);
  const int64_t nt = (Dv + tile - 1) / tile;
  // Per head R slots, block b in slot b % R: its inputs and Omega (one
  // dependence token), its V_new (block_size rows, the first L used) and the
  // state entering it (the state leaving it goes to slot (b + 1) % R).
  std::vector<BlockInputs<T>> inputs(H * R);
  std::vector<KdaBlockOmega<T>> omega(H * R);
  std::vector<RowMat<T>> V_new(H * R, RowMat<T>(block_size, Dv));
  std::vector<RowMat<T>> S(H * R, RowMat<T>(Dv, Dk));
  for (int64_t h = 0; h < H; ++h) LoadState(&S[h * R], S_in, h, Dk, Dv);
  // Dependence tokens per slot and tile: its state rows, its V_new columns.
  std::vector<char> state_tiles(std::max<int64_t>(H * R * nt, 1));
  std::vector<char> vnew_tiles(std::max<int64_t>(H * R * nt, 1));
  BlockInputs<T>* ins = inputs.data();
  KdaBlockOmega<T>* om = omega.data();
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
      {
        ins[i].Load(a, h, t0, L);
        BlockPre<T>(&om[i], ins[i]);
      }
      for (int64_t j = 0; j < nt; ++j) {
        // Tile j: after Pre(b) and tile j of block b - 1 (its entering rows).
#pragma omp task depend(in : om[i], sx[i * nt + j]) depend(out : sx[n * nt + j], vx[i * nt + j])
        KdaBlockSTRows<T>(vn[i].topRows(L), st[n], st[i], om[i], j * tile,
                          std::min(tile, Dv - j * tile));
      }
#pragma omp task depend(in : om[i]) depend(iterator(j = 0 : nt), in : sx[i * nt + j], vx[i * nt + j])
      BlockOut<T>(o, ins[i], vn[i].topRows(L), st[i], om[i], a, h, t0);
    }
  }
  if (S_out != nullptr) {
    for (int64_t h = 0; h < H; ++h) {
      Mat<T>(S_out + h * Dv * Dk, Dv, Dk) = S[h * R + blocks % R];
    }
  }
}

int64_t KdaCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                     int64_t Dv, int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return H * blocks * Dv * Dk;
}

namespace {

// Runs Pre and ST over head h's blocks from S (Dv, Dk), storing the state
// entering block b at states + b * Dv * Dk.
template <typename T>
void ReplayBlockStates(T* states, RowMat<T> S, const CoreArgs<T>& a,
                       int64_t h) {
  BlockInputs<T> in;
  KdaBlockOmega<T> omega;
  RowMat<T> V_new, S_next(a.Dv, a.Dk);
  const CoreArgs<T> fa = ForwardArgs(a.q, a.k, a.v, a.g, a.beta, a.T_len, a.H,
                                     a.Dk, a.Dv, a.block_size, a.st_tile);
  for (int64_t t0 = 0, b = 0; t0 < a.T_len; t0 += a.block_size, ++b) {
    const int64_t L = std::min(a.block_size, a.T_len - t0);
    Mat<T>(states + b * a.Dv * a.Dk, a.Dv, a.Dk) = S;
    if (t0 + L == a.T_len) break;  // the last block's exit state is not needed
    in.Load(fa, h, t0, L);
    BlockPre<T>(&omega, in);
    V_new.resize(L, a.Dv);
    KdaBlockSTTiled<T>(V_new, S_next, S, omega, a.st_tile);
    S.swap(S_next);
  }
}

// Scratch of one block's backward, reused across blocks.
template <typename T>
struct BlockBackwardScratch {
  BlockInputs<T> in;
  KdaBlockOmega<T> omega;
  KdaBlockGrads<T> grads;
  RowMat<T> V_new, dV_new;  // (L, Dv) each
  RowMat<T> dW;             // (L, Dk)
  RowMat<T> S, dS_in;       // (Dv, Dk) each: the entering state (owned), its gradient
};

// Head h's block [t0, t0 + L), the part of its backward that needs no state
// gradient: its inputs, Pre, V_new from the entering state S, and the Out
// backward (into s->grads, s->dV_new and s->dS_in).
template <typename T>
void BlockOutBackward(BlockBackwardScratch<T>* s, CMat<T> S,
                      const CoreArgs<T>& a, int64_t h, int64_t t0, int64_t L) {
  s->in.Load(a, h, t0, L);
  s->S = S;
  BlockPre<T>(&s->omega, s->in);
  s->V_new = s->omega.U;
  s->V_new.noalias() -= s->omega.W * s->S.transpose();
  s->grads.SetZero(L, a.Dk, a.Dv);
  s->dS_in.setZero(a.Dv, a.Dk);
  s->dV_new.resize(L, a.Dv);
  s->dW.resize(L, a.Dk);
  KdaBlockOutBackward<T>(&s->grads, s->dV_new, s->dS_in, s->in.dO, s->in.Q,
                         s->in.K, s->V_new, s->S, s->omega);
}

// The ST backward: *dS (the gradient of the state leaving the block) becomes
// the gradient of the state entering it.
template <typename T>
void BlockSTBackward(BlockBackwardScratch<T>* s, RowMat<T>* dS,
                     const CoreArgs<T>& a) {
  KdaBlockSTBackward<T>(&s->grads, s->dW, s->dS_in, s->dV_new, *dS, s->V_new,
                        s->S, s->omega, s->in.K, a.st_tile);
  dS->swap(s->dS_in);
}

// The Pre backward and the block's gradient rows.
template <typename T>
void BlockPreBackward(BlockBackwardScratch<T>* s, const CoreArgs<T>& a,
                      int64_t h, int64_t t0, int64_t L) {
  KdaBlockPreBackward<T>(&s->grads, s->dV_new, s->dW, s->in.K, s->in.V,
                         s->in.beta, s->omega);
  HeadRows(a.dq, t0, L, h, a.H, a.Dk) = s->grads.dQ;
  HeadRows(a.dk, t0, L, h, a.H, a.Dk) = s->grads.dK;
  HeadRows(a.dv, t0, L, h, a.H, a.Dv) = s->grads.dV;
  HeadEntries(a.dbeta, t0, L, h, a.H) = s->grads.dbeta;
  // dg_s = sum_{r >= s} dG_r per channel (G is the cumulative sum of g).
  RowMat<T>& dG = s->grads.dG;                            // (L, Dk)
  for (int64_t r = L - 2; r >= 0; --r) dG.row(r) += dG.row(r + 1);
  HeadRows(a.dg, t0, L, h, a.H, a.Dk) = dG;
}

}  // namespace

template <typename T>
void KdaCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                     T* workspace, const T* dO, const T* dS_out, const T* q,
                     const T* k, const T* v, const T* g, const T* beta,
                     const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                     int64_t Dv, int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a{dq, dk, dv, dg, dbeta, dO, q, k, v, g, beta,
                      T_len, H, Dk, Dv, block_size, st_tile};
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int lanes = LoopTeam(H);
  // Heads are independent: a static schedule hands each lane a fixed range
  // of heads, and head h replays its states into its own slice of the
  // workspace (so the workspace holds every head's states whatever the
  // thread count).
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
        const int64_t L = std::min(block_size, T_len - t0);
        const CMat<T> S(states + b * Dv * Dk, Dv, Dk);    // entering block b
        BlockOutBackward<T>(&scratch, S, a, h, t0, L);
        BlockSTBackward<T>(&scratch, &dS, a);
        BlockPreBackward<T>(&scratch, a, h, t0, L);
      }
      if (dS_in != nullptr) Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = dS;
    }
  }
}

template <typename T>
void KdaCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                               T* workspace, const T* dO, const T* dS_out,
                               const T* q, const T* k, const T* v, const T* g,
                               const T* beta, const T* S_in, int64_t T_len,
                               int64_t H, int64_t Dk, int64_t Dv,
                               int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a{dq, dk, dv, dg, dbeta, dO, q, k, v, g, beta,
                      T_len, H, Dk, Dv, block_size, st_tile};
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int64_t R = kKdaOverlapSlots;
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
        BlockSTBackward<T>(&sc[i], &ds[h], a);
#pragma omp task depend(inout : sc[i])
        BlockPreBackward<T>(&sc[i], a, h, t0, L);
      }
    }
  }
  if (dS_in != nullptr) {
    for (int64_t h = 0; h < H; ++h) Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = dS[h];
  }
}

// ---- phase by phase ---------------------------------------------------------

namespace {

// Offsets in one (head, block) slot of the phase workspaces, for a block of
// up to bs tokens. Forward slots use G .. S; backward slots all but S
// (their entering states live in the states region before the slots).
struct PhaseSlot {
  int64_t G, KK, P, Kt, W, U, Vn, S, dVn, dW, dS, dQ, dK, dV, dG, dbeta, size;
  static PhaseSlot Make(int64_t bs, int64_t Dk, int64_t Dv, bool backward) {
    PhaseSlot p{};
    int64_t at = 0;
    auto take = [&at](int64_t n) { const int64_t o = at; at += n; return o; };
    p.G = take(bs * Dk);
    p.KK = take(bs * bs);
    p.P = take(bs * bs);
    p.Kt = take(bs * Dk);
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
      p.dG = take(bs * Dk);
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
void SaveOmega(T* slot, const PhaseSlot& p, const KdaBlockOmega<T>& om) {
  Save(slot + p.G, om.G);
  Save(slot + p.KK, om.KK);
  Save(slot + p.P, om.P);
  Save(slot + p.Kt, om.Kt);
  Save(slot + p.W, om.W);
  Save(slot + p.U, om.U);
}
// All of Omega.
template <typename T>
void LoadOmega(KdaBlockOmega<T>* om, const T* slot, const PhaseSlot& p,
               int64_t L, int64_t Dk, int64_t Dv) {
  Load(&om->G, slot + p.G, L, Dk);
  Load(&om->KK, slot + p.KK, L, L);
  Load(&om->P, slot + p.P, L, L);
  Load(&om->Kt, slot + p.Kt, L, Dk);
  Load(&om->W, slot + p.W, L, Dk);
  Load(&om->U, slot + p.U, L, Dv);
}

}  // namespace

int64_t KdaCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                         int64_t Dv, int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return H * blocks * PhaseSlot::Make(block_size, Dk, Dv, false).size;
}

template <typename T>
void KdaCoreForwardPhase(CorePhase phase, T* o, T* S_out, T* workspace,
                         const T* q, const T* k, const T* v, const T* g,
                         const T* beta, const T* S_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a =
      ForwardArgs(q, k, v, g, beta, T_len, H, Dk, Dv, block_size, st_tile);
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const PhaseSlot p = PhaseSlot::Make(block_size, Dk, Dv, false);
  const int lanes = LoopTeam(H);
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    BlockInputs<T> in;
    KdaBlockOmega<T> omega;
    RowMat<T> V_new;                                      // (L, Dv)
    RowMat<T> S(Dv, Dk), S_next(Dv, Dk);                  // (Dv, Dk) each
    if (phase == CorePhase::kST) LoadState(&S, S_in, h, Dk, Dv);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t t0 = b * block_size, L = std::min(block_size, T_len - t0);
      T* slot = workspace + (h * blocks + b) * p.size;
      switch (phase) {
        case CorePhase::kPre:
          in.Load(a, h, t0, L);
          BlockPre<T>(&omega, in);
          SaveOmega(slot, p, omega);
          break;
        case CorePhase::kST:
          Load(&omega.G, slot + p.G, L, Dk);
          Load(&omega.Kt, slot + p.Kt, L, Dk);
          Load(&omega.W, slot + p.W, L, Dk);
          Load(&omega.U, slot + p.U, L, Dv);
          V_new.resize(L, Dv);
          KdaBlockSTTiled<T>(V_new, S_next, S, omega, st_tile);
          Save(slot + p.Vn, V_new);
          Save(slot + p.S, S);
          S.swap(S_next);
          break;
        case CorePhase::kOut:
          in.Load(a, h, t0, L);
          Load(&omega.G, slot + p.G, L, Dk);
          Load(&omega.P, slot + p.P, L, L);
          Load(&V_new, slot + p.Vn, L, Dv);
          Load(&S, slot + p.S, Dv, Dk);
          BlockOut<T>(o, in, V_new, S, omega, a, h, t0);
          break;
      }
    }
    if (phase == CorePhase::kST && S_out != nullptr) {
      Mat<T>(S_out + h * Dv * Dk, Dv, Dk) = S;
    }
  }
}

int64_t KdaCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                          int64_t Dk, int64_t Dv,
                                          int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return KdaCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size) +
         H * blocks * PhaseSlot::Make(block_size, Dk, Dv, true).size;
}

namespace {

// The block backward's scratch to its slot: after the Out backward (`all`),
// Omega, V_new, dS_in and every gradient row; after the ST backward, what it
// changed (dW, dV_new, dK, dG).
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

// For the ST backward (`pre_backward` false): Omega, V_new, dV_new, dS_in,
// dK, dG and the entering state S. For the Pre backward: Omega, dV_new, dW
// and every gradient row. Both reload the block's inputs from the caller's
// buffers.
template <typename T>
void LoadScratch(BlockBackwardScratch<T>* s, const T* slot, const PhaseSlot& p,
                 CMat<T> S, const CoreArgs<T>& a, int64_t h, int64_t t0,
                 int64_t L, bool pre_backward) {
  const int64_t Dk = a.Dk, Dv = a.Dv;
  s->in.Load(a, h, t0, L);
  LoadOmega(&s->omega, slot, p, L, Dk, Dv);
  Load(&s->dV_new, slot + p.dVn, L, Dv);
  Load(&s->grads.dK, slot + p.dK, L, Dk);
  Load(&s->grads.dG, slot + p.dG, L, Dk);
  if (pre_backward) {
    Load(&s->dW, slot + p.dW, L, Dk);
    Load(&s->grads.dQ, slot + p.dQ, L, Dk);
    Load(&s->grads.dV, slot + p.dV, L, Dv);
    Load(&s->grads.dbeta, slot + p.dbeta, L);
  } else {
    Load(&s->V_new, slot + p.Vn, L, Dv);
    Load(&s->dS_in, slot + p.dS, Dv, Dk);
    s->S = S;
    s->dW.resize(L, Dk);
  }
}

}  // namespace

template <typename T>
void KdaCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                          T* dbeta, T* dS_in, T* workspace, const T* dO,
                          const T* dS_out, const T* q, const T* k, const T* v,
                          const T* g, const T* beta, const T* S_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size, int64_t st_tile) {
  const CoreArgs<T> a{dq, dk, dv, dg, dbeta, dO, q, k, v, g, beta,
                      T_len, H, Dk, Dv, block_size, st_tile};
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const PhaseSlot p = PhaseSlot::Make(block_size, Dk, Dv, true);
  T* slots = workspace + KdaCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  const int lanes = LoopTeam(H);
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
          LoadScratch(&scratch, slot, p, S, a, h, t0, L, /*pre_backward=*/false);
          BlockSTBackward<T>(&scratch, &dS, a);
          SaveScratch(slot, p, scratch, /*all=*/false);
          break;
        case CorePhase::kOut:
          LoadScratch(&scratch, slot, p, S, a, h, t0, L, /*pre_backward=*/true);
          BlockPreBackward<T>(&scratch, a, h, t0, L);
          break;
      }
    }
    if (phase == CorePhase::kST && dS_in != nullptr) {
      Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = dS;
    }
  }
}

KdaCoreFlops CountKdaCoreFlops(int64_t T_len, int64_t H, int64_t Dk,
                               int64_t Dv, int64_t block_size) {
  KdaCoreFlops f;
  const double dk = static_cast<double>(Dk), dv = static_cast<double>(Dv);
  for (int64_t t0 = 0; t0 < T_len; t0 += block_size) {
    const double L = static_cast<double>(std::min(block_size, T_len - t0));
    const double pre = 2 * L * L * dk + L * (L - 1) * (dk + dv);
    const double st = 4 * L * dk * dv;
    const double out = 2 * L * dk * dv + 2 * L * L * dv;
    const bool last = t0 + block_size >= T_len;
    f.forward += pre + st + out;
    f.backward += pre + 2 * L * dk * dv +
                  (4 * L * L * dv + 4 * L * dk * dv + 2 * L * (L + 1) * dk) +
                  8 * L * dk * dv +
                  (L * (L - 1) * (dk + dv) + 2 * L * L * (dk + dv) +
                   2 * L * (L - 1) * dk) +
                  (last ? 0.0 : pre + st);
  }
  f.forward *= static_cast<double>(H);
  f.backward *= static_cast<double>(H);
  return f;
}

#define SF_INSTANTIATE(T)                                                    \
  template struct KdaBlockGrads<T>;                                          \
  template void KdaBlockPre<T>(KdaBlockOmega<T>*, CMatRef<T>, CMatRef<T>,    \
                               CMatRef<T>, CMatRef<T>, CVecRef<T>);          \
  template void KdaBlockST<T>(MatRef<T>, MatRef<T>, CMatRef<T>,              \
                              const KdaBlockOmega<T>&);                      \
  template void KdaBlockSTRows<T>(MatRef<T>, MatRef<T>, CMatRef<T>,          \
                                  const KdaBlockOmega<T>&, int64_t, int64_t); \
  template void KdaBlockOut<T>(MatRef<T>, CMatRef<T>, CMatRef<T>,            \
                               CMatRef<T>, const KdaBlockOmega<T>&);         \
  template void KdaBlockOutBackward<T>(                                      \
      KdaBlockGrads<T>*, MatRef<T>, MatRef<T>, CMatRef<T>, CMatRef<T>,       \
      CMatRef<T>, CMatRef<T>, CMatRef<T>, const KdaBlockOmega<T>&);          \
  template void KdaBlockSTBackward<T>(                                       \
      KdaBlockGrads<T>*, MatRef<T>, MatRef<T>, MatRef<T>, CMatRef<T>,        \
      CMatRef<T>, CMatRef<T>, const KdaBlockOmega<T>&, CMatRef<T>, int64_t); \
  template void KdaBlockPreBackward<T>(KdaBlockGrads<T>*, CMatRef<T>,        \
                                       CMatRef<T>, CMatRef<T>, CMatRef<T>,   \
                                       CVecRef<T>, const KdaBlockOmega<T>&); \
  template void KdaCoreForward<T>(T*, T*, const T*, const T*, const T*,      \
                                  const T*, const T*, const T*, int64_t,     \
                                  int64_t, int64_t, int64_t, int64_t,        \
                                  int64_t);                                  \
  template void KdaCoreForwardOverlapped<T>(                                 \
      T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,    \
      int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);                 \
  template void KdaCoreBackward<T>(                                          \
      T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,    \
      const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,     \
      int64_t, int64_t, int64_t);                                            \
  template void KdaCoreBackwardOverlapped<T>(                                \
      T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,    \
      const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,     \
      int64_t, int64_t, int64_t);                                            \
  template void KdaCoreForwardPhase<T>(                                      \
      CorePhase, T*, T*, T*, const T*, const T*, const T*, const T*,          \
      const T*, const T*, int64_t, int64_t, int64_t, int64_t, int64_t,       \
      int64_t);                                                              \
  template void KdaCoreBackwardPhase<T>(                                     \
      CorePhase, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*,    \
      const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,    \
      int64_t, int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

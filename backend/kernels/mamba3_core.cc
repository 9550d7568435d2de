// The chunkwise Mamba-3 core (see mamba3_core.h for the math and the
// Pre / ST / Out split).
//
// Dimensions: T tokens, H heads, Dk state dim, Dv SSM head dim, L tokens in a
// block. Per block (local tokens r, s; entering state S, carry kp, vp):
//   G_r = a_0 + ... + a_r,  Gam_rs = exp(G_r - G_s) (s <= r, else 0)
//   M = Gam o (1 c^T) strictly below the diagonal, gamma on it
//   S' = S + beta_0 vp kp^T
//   O = diag(exp(G)) Q S'^T + ((Q K^T) o M) V
//   S_next = exp(G_{L-1}) S' + V^T diag(m) K,  m = M_{L-1,.}
#include "backend/kernels/mamba3_core.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/kernels/eigen_types.h"
#include "backend/threading.h"

namespace stateflow::backend {

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

// Head h's (D) slice of an (H, D) buffer, or zeros for nullptr.
template <typename T>
Vec<T> LoadCarry(const T* x, int64_t h, int64_t D) {
  if (x == nullptr) return Vec<T>::Zero(D);
  return CVecMap<T>(x + h * D, D);
}
template <typename T>
void StoreCarry(T* x, const Vec<T>& value, int64_t h) {
  if (x != nullptr) VecMap<T>(x + h * value.size(), value.size()) = value;
}
// Head h's (Dv, Dk) state of an (H, Dv, Dk) buffer, or zeros for nullptr.
template <typename T>
RowMat<T> LoadState(const T* S, int64_t h, int64_t Dk, int64_t Dv) {
  if (S == nullptr) return RowMat<T>::Zero(Dv, Dk);
  return CMat<T>(S + h * Dv * Dk, Dv, Dk);
}

// One head's chunk: its inputs, the carry entering it and the sizes.
template <typename T>
struct HeadArgs {
  const T *q, *k, *v, *a, *gamma, *beta, *k_in, *v_in;
  int64_t T_len, H, Dk, Dv, block_size, h;
  int64_t st_tile;  // B_V: ST's tile of state rows (Tiles)
};

// ST's tiles of state rows: `count` tiles of `size` rows (the last may be
// short); one tile of Dv rows when st_tile is 0 or covers Dv (untiled).
struct Tiles {
  int64_t size, count;
  static Tiles Make(int64_t Dv, int64_t st_tile) {
    const int64_t t = st_tile > 0 && st_tile < Dv ? st_tile : std::max<int64_t>(Dv, 1);
    return {t, std::max<int64_t>(1, (Dv + t - 1) / t)};
  }
  bool tiled() const { return count > 1; }
  int64_t rows(int64_t j, int64_t Dv) const { return std::min(size, Dv - j * size); }
};

// The carry before token t0 of head x.h: k and v of token t0 - 1, or the
// boundary state's (k_in, v_in; zeros for nullptr) at t0 = 0.
template <typename T>
Vec<T> CarryK(const HeadArgs<T>& x, int64_t t0) {
  if (t0 == 0) return LoadCarry(x.k_in, x.h, x.Dk);
  return HeadRows(x.k, t0 - 1, 1, x.h, x.H, x.Dk).transpose();
}
template <typename T>
Vec<T> CarryV(const HeadArgs<T>& x, int64_t t0) {
  if (t0 == 0) return LoadCarry(x.v_in, x.h, x.Dv);
  return HeadRows(x.v, t0 - 1, 1, x.h, x.H, x.Dv).transpose();
}

// Pre's decay weights of one block: G (L) and M (L, L) as in the header, and
// Gam (L, L) (the backward needs both); U only in the forward and the replay.
template <typename T>
struct BlockWeights {
  Vec<T> G;       // (L)
  RowMat<T> Gam;  // (L, L) exp(G_r - G_s), s <= r, else 0
  RowMat<T> M;    // (L, L)
  RowMat<T> U;    // (Dv, Dk) V^T diag(m) K, m = M_{L-1,.}
};

// Pre without U: G, Gam, M of head x.h's block [t0, t0 + L).
template <typename T>
void BlockPre(BlockWeights<T>* w, const HeadArgs<T>& x, int64_t t0,
              int64_t L) {
  const CSVec<T> a = HeadEntries(x.a, t0, L, x.h, x.H);
  const CSVec<T> gamma = HeadEntries(x.gamma, t0, L, x.h, x.H);
  const CSVec<T> beta = HeadEntries(x.beta, t0, L, x.h, x.H);
  w->G.resize(L);
  T acc = 0;
  for (int64_t r = 0; r < L; ++r) w->G(r) = acc += a(r);
  // The upper part is zeroed before the exp so that nothing there overflows.
  w->Gam.noalias() = w->G.rowwise().replicate(L) -
                     w->G.transpose().colwise().replicate(L);
  w->Gam.template triangularView<Eigen::StrictlyUpper>().setZero();
  w->Gam.array() = w->Gam.array().exp();
  w->Gam.template triangularView<Eigen::StrictlyUpper>().setZero();
  RowVec<T> c(L);  // c_s = gamma_s + beta_{s+1}; c_{L-1} never used
  for (int64_t s = 0; s + 1 < L; ++s) c(s) = gamma(s) + beta(s + 1);
  c(L - 1) = 0;
  w->M.noalias() = w->Gam * c.asDiagonal();
  w->M.diagonal() = gamma;
}

// The whole Pre of the forward (and of the backward's replay): G, Gam, M and
// the block's own state contribution U = V^T diag(m) K.
template <typename T>
void BlockPreWithU(BlockWeights<T>* w, const HeadArgs<T>& x, int64_t t0,
                   int64_t L) {
  BlockPre<T>(w, x, t0, L);
  const CSMat<T> K = HeadRows(x.k, t0, L, x.h, x.H, x.Dk);  // (L, Dk)
  const CSMat<T> V = HeadRows(x.v, t0, L, x.h, x.H, x.Dv);  // (L, Dv)
  const RowMat<T> Km = w->M.row(L - 1).transpose().asDiagonal() * K;  // (L, Dk)
  w->U.noalias() = V.transpose() * Km;
}

// S' = S + beta_0 vp kp^T.
template <typename T>
void CarriedState(RowMat<T>* S1, CMatRef<T> S, T beta0, const Vec<T>& kp,
                  const Vec<T>& vp) {
  *S1 = S;
  S1->noalias() += (beta0 * vp) * kp.transpose();
}

// ST of head x.h's block at t0, given its Pre: S' (into *S1) and
// S_next = exp(G_{L-1}) S' + U. O(Dk Dv): the only sequential part.
template <typename T>
void BlockST(RowMat<T>* S_next, RowMat<T>* S1, CMatRef<T> S,
             const BlockWeights<T>& w, const HeadArgs<T>& x, int64_t t0) {
  CarriedState<T>(S1, S, x.beta[t0 * x.H + x.h], CarryK(x, t0), CarryV(x, t0));
  *S_next = w.U;
  *S_next += std::exp(w.G(w.G.size() - 1)) * *S1;
}

// BlockST's rows [j0, j0 + n) of S' and S_next (each already (Dv, Dk)):
// row i of both needs only row i of S and of U, so tiles of rows are
// independent; per element the same arithmetic as BlockST.
template <typename T>
void BlockSTRows(RowMat<T>* S_next, RowMat<T>* S1, CMatRef<T> S,
                 const BlockWeights<T>& w, const HeadArgs<T>& x, int64_t t0,
                 int64_t j0, int64_t n) {
  const T beta0 = x.beta[t0 * x.H + x.h];
  const Vec<T> kp = CarryK(x, t0), vp = CarryV(x, t0);
  auto s1 = S1->middleRows(j0, n);
  s1 = S.middleRows(j0, n);
  s1.noalias() += (beta0 * vp.segment(j0, n)) * kp.transpose();
  auto next = S_next->middleRows(j0, n);
  next = w.U.middleRows(j0, n);
  next += std::exp(w.G(w.G.size() - 1)) * s1;
}

// BlockST tile by tile of x.st_tile state rows (BlockST itself untiled).
template <typename T>
void BlockSTTiled(RowMat<T>* S_next, RowMat<T>* S1, CMatRef<T> S,
                  const BlockWeights<T>& w, const HeadArgs<T>& x, int64_t t0) {
  const Tiles tiles = Tiles::Make(x.Dv, x.st_tile);
  if (!tiles.tiled()) {
    BlockST<T>(S_next, S1, S, w, x, t0);
    return;
  }
  S1->resize(x.Dv, x.Dk);
  S_next->resize(x.Dv, x.Dk);
  for (int64_t j = 0; j < tiles.count; ++j) {
    BlockSTRows<T>(S_next, S1, S, w, x, t0, j * tiles.size, tiles.rows(j, x.Dv));
  }
}

// Out: O = diag(exp(G)) Q S'^T + ((Q K^T) o M) V.
template <typename T>
void BlockOut(T* o, const RowMat<T>& S1, const BlockWeights<T>& w,
              const HeadArgs<T>& x, int64_t t0, int64_t L) {
  const CSMat<T> Q = HeadRows(x.q, t0, L, x.h, x.H, x.Dk);  // (L, Dk)
  const CSMat<T> K = HeadRows(x.k, t0, L, x.h, x.H, x.Dk);  // (L, Dk)
  const CSMat<T> V = HeadRows(x.v, t0, L, x.h, x.H, x.Dv);  // (L, Dv)
  SMat<T> O = HeadRows(o, t0, L, x.h, x.H, x.Dv);           // (L, Dv)
  RowMat<T> P(L, L);
  P.noalias() = Q * K.transpose();
  P.array() *= w.M.array();
  O.noalias() = Q * S1.transpose();
  O.array().colwise() *= w.G.array().exp();
  O.noalias() += P * V;
}

// The leaving state and carry of head x.h (each nullptr skips it); S is the
// state leaving the last block (S_in for an empty chunk).
template <typename T>
void StoreLeaving(T* S_out, T* k_out, T* v_out, const RowMat<T>& S,
                  const HeadArgs<T>& x) {
  if (S_out != nullptr) Mat<T>(S_out + x.h * x.Dv * x.Dk, x.Dv, x.Dk) = S;
  StoreCarry(k_out, CarryK(x, x.T_len), x.h);
  StoreCarry(v_out, CarryV(x, x.T_len), x.h);
}

template <typename T>
void ForwardOneHead(T* o, T* S_out, T* k_out, T* v_out, const T* S_in,
                    const HeadArgs<T>& x) {
  RowMat<T> S = LoadState(S_in, x.h, x.Dk, x.Dv), S1, S_next;  // (Dv, Dk)
  BlockWeights<T> w;
  for (int64_t t0 = 0; t0 < x.T_len; t0 += x.block_size) {
    const int64_t L = std::min(x.block_size, x.T_len - t0);
    BlockPreWithU<T>(&w, x, t0, L);
    BlockSTTiled<T>(&S_next, &S1, S, w, x, t0);
    BlockOut<T>(o, S1, w, x, t0, L);
    S.swap(S_next);
  }
  StoreLeaving<T>(S_out, k_out, v_out, S, x);
}

int Lanes(int64_t H) { return LoopTeam(H); }

int64_t Blocks(int64_t T_len, int64_t block_size) {
  return (T_len + block_size - 1) / block_size;
}

}  // namespace

template <typename T>
void Mamba3CoreForward(T* o, T* S_out, T* k_out, T* v_out, const T* q,
                       const T* k, const T* v, const T* a, const T* gamma,
                       const T* beta, const T* S_in, const T* k_in,
                       const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
    int64_t st_tile) {
  const int lanes = Lanes(H);
  // Heads are independent: a static schedule hands each lane a fixed range.
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    const HeadArgs<T> x{q, k, v, a, gamma, beta, k_in, v_in,
                        T_len, H, Dk, Dv, block_size, h, st_tile};
    ForwardOneHead<T>(o, S_out, k_out, v_out, S_in, x);
  }
}

template <typename T>
void Mamba3CoreForwardOverlapped(T* o, T* S_out, T* k_out, T* v_out,
                                 const T* q, const T* k, const T* v,
                                 const T* a, const T* gamma, const T* beta,
                                 const T* S_in, const T* k_in, const T* v_in,
                                 int64_t T_len, int64_t H, int64_t Dk,
                                 int64_t Dv, int64_t block_size,
    int64_t st_tile) {
  const int64_t blocks = Blocks(T_len, block_size);
  const int64_t R = kMamba3OverlapSlots;
  // Per head R slots, block b in slot b % R: its Pre, its S' and the state
  // entering it (the state leaving it goes to slot (b + 1) % R).
  // ST's tiles of state rows: with more than one, each tile of a block's ST
  // is its own task (the slots' states are then sized up front).
  const Tiles tiles = Tiles::Make(Dv, st_tile);
  const int64_t nt = tiles.count;
  std::vector<HeadArgs<T>> args;
  std::vector<BlockWeights<T>> weights(H * R);
  std::vector<RowMat<T>> states(H * R), carried(H * R);
  for (int64_t h = 0; h < H; ++h) {
    args.push_back({q, k, v, a, gamma, beta, k_in, v_in, T_len, H, Dk, Dv, block_size, h, st_tile});
    states[h * R] = LoadState(S_in, h, Dk, Dv);
    for (int64_t r = 0; r < R && tiles.tiled(); ++r) {
      if (r > 0) states[h * R + r].resize(Dv, Dk);
      carried[h * R + r].resize(Dv, Dk);
    }
  }
  // Dependence tokens per slot and tile: its entering state's rows, its S'
  // rows.
  std::vector<char> state_tiles(H * R * nt), carried_tiles(H * R * nt);
  const HeadArgs<T>* xs = args.data();
  BlockWeights<T>* w = weights.data();
  RowMat<T>* st = states.data();
  RowMat<T>* s1 = carried.data();
  char* sx = state_tiles.data();
  char* cx = carried_tiles.data();
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
      const int64_t i = h * R + b % R;        // this block's slot
      const int64_t n = h * R + (b + 1) % R;  // the next block's
#pragma omp task depend(out : w[i])
      BlockPreWithU<T>(&w[i], xs[h], t0, L);
      for (int64_t j = 0; j < nt; ++j) {
        // Tile j: after Pre(b) and tile j of block b - 1 (its entering rows).
#pragma omp task depend(in : w[i], sx[i * nt + j]) depend(out : sx[n * nt + j], cx[i * nt + j])
        {
          if (nt == 1) {
            BlockST<T>(&st[n], &s1[i], st[i], w[i], xs[h], t0);
          } else {
            BlockSTRows<T>(&st[n], &s1[i], st[i], w[i], xs[h], t0, j * tiles.size,
                           tiles.rows(j, Dv));
          }
        }
      }
#pragma omp task depend(in : w[i]) depend(iterator(j = 0 : nt), in : cx[i * nt + j])
      BlockOut<T>(o, s1[i], w[i], xs[h], t0, L);
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    StoreLeaving<T>(S_out, k_out, v_out, states[h * R + blocks % R], args[h]);
  }
}

int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                        int64_t Dv, int64_t block_size) {
  return H * Blocks(T_len, block_size) * Dv * Dk;
}

namespace {

// The gradients flowing backward between blocks of one head: of the state
// leaving the block and of the carry (k, v of the block's last token).
template <typename T>
struct Flow {
  RowMat<T> dS;   // (Dv, Dk)
  Vec<T> dk, dv;  // (Dk), (Dv)
};

// Scratch of one block's backward, reused across blocks.
template <typename T>
struct BlockScratch {
  BlockWeights<T> w;          // Pre again (no U)
  RowMat<T> S1;               // (Dv, Dk) S'
  RowMat<T> dS1;              // (Dv, Dk) the gradient of S'
  RowMat<T> dS_next;          // (Dv, Dk) of the state leaving the block
  Vec<T> dk_next, dv_next;    // (Dk), (Dv) of the carry leaving the block
  T dbeta0 = 0;               // beta_0's share through S'
  RowMat<T> dQ, dK, dV;       // (L, Dk), (L, Dk), (L, Dv)
  RowMat<T> QK, dM, dP;       // (L, L) each
  RowMat<T> dOg;              // (L, Dv) diag(exp(G)) dO
  Vec<T> dG;                  // (L)
};

// The backward's first part, needing neither the replayed state nor any
// gradient from later blocks: Pre again; Out's intra-block backward (into
// s->dQ, dK, dV, dM) and OutAG, Out's gradient of S' (s->dS1 = dOg^T Q), the
// one share of Out's backward that the chain of state gradients waits for.
template <typename T>
void BlockOutBackward(BlockScratch<T>* s, const T* dO, const HeadArgs<T>& x,
                      int64_t t0, int64_t L) {
  const CSMat<T> Q = HeadRows(x.q, t0, L, x.h, x.H, x.Dk);     // (L, Dk)
  const CSMat<T> K = HeadRows(x.k, t0, L, x.h, x.H, x.Dk);     // (L, Dk)
  const CSMat<T> V = HeadRows(x.v, t0, L, x.h, x.H, x.Dv);     // (L, Dv)
  const CSMat<T> dOb = HeadRows(dO, t0, L, x.h, x.H, x.Dv);    // (L, Dv)
  BlockPre<T>(&s->w, x, t0, L);
  const BlockWeights<T>& w = s->w;
  // O += P V, P = QK o M.
  s->QK.noalias() = Q * K.transpose();
  s->dP.noalias() = dOb * V.transpose();
  s->dM = s->dP.cwiseProduct(s->QK);
  s->QK.array() *= w.M.array();                                // P
  s->dV.noalias() = s->QK.transpose() * dOb;
  s->dP.array() *= w.M.array();                                // d(QK)
  s->dQ.noalias() = s->dP * K;
  s->dK.noalias() = s->dP.transpose() * Q;
  // O += diag(exp(G)) Q S'^T: OutAG.
  s->dOg = dOb.array().colwise() * w.G.array().exp();
  s->dS1.noalias() = s->dOg.transpose() * Q;
}

// The ST backward, the sequential chain, O(Dk Dv): given *flow (the
// gradients of the state and carry leaving the block), s->dS1 becomes the
// whole gradient of S' = S + beta_0 vp kp^T, which is that of the entering
// state, and the carry (kp, vp) takes its share. *flow then holds the
// entering state's and carry's gradients; the leaving ones move to
// s->dS_next, dk_next, dv_next for BlockWeightBackward.
template <typename T>
void BlockSTBackward(BlockScratch<T>* s, Flow<T>* flow, const HeadArgs<T>& x,
                     int64_t t0) {
  const T beta0 = x.beta[t0 * x.H + x.h];
  const T decay = std::exp(s->w.G(s->w.G.size() - 1));
  const Vec<T> kp = CarryK(x, t0), vp = CarryV(x, t0);
  Vec<T> dS1_kp;                                               // (Dv)
  const Tiles tiles = Tiles::Make(x.Dv, x.st_tile);
  if (!tiles.tiled()) {
    s->dS1 += decay * flow->dS;
    dS1_kp.noalias() = s->dS1 * kp;
  } else {
    // The chain tile by tile of state rows (row i of dS' needs only row i of
    // the leaving gradient), then the sums over all rows below.
    dS1_kp.resize(x.Dv);
    for (int64_t j = 0; j < tiles.count; ++j) {
      const int64_t j0 = j * tiles.size, n = tiles.rows(j, x.Dv);
      auto rows = s->dS1.middleRows(j0, n);
      rows += decay * flow->dS.middleRows(j0, n);
      dS1_kp.segment(j0, n).noalias() = rows * kp;
    }
  }
  s->dbeta0 = vp.dot(dS1_kp);
  s->dk_next.swap(flow->dk);
  s->dv_next.swap(flow->dv);
  flow->dv = beta0 * dS1_kp;
  flow->dk.noalias() = beta0 * (s->dS1.transpose() * vp);
  s->dS_next.swap(flow->dS);
  flow->dS.swap(s->dS1);
}

// Pre's backward: dM into dG, dgamma, dbeta (written for the block's rows).
template <typename T>
void PreBackward(BlockScratch<T>* s, T* dgamma, T* dbeta, int64_t t0,
                 int64_t H, int64_t h) {
  const BlockWeights<T>& w = s->w;
  const Eigen::Index L = w.G.size();
  // M_rs = Gam_rs c_s below the diagonal: dc_s = sum_r dM_rs Gam_rs; the
  // log-decay part E = dM o M adds row sums to dG_r and takes column sums
  // from dG_s.
  RowMat<T> E = s->dM.cwiseProduct(w.M);
  E.diagonal().setZero();
  s->dG += E.rowwise().sum() - E.colwise().sum().transpose();
  RowMat<T>& dMG = E;
  dMG = s->dM.cwiseProduct(w.Gam);
  dMG.diagonal().setZero();
  const RowVec<T> dc = dMG.colwise().sum();                      // (L)
  for (Eigen::Index r = 0; r < L; ++r) {
    T dg = s->dM(r, r);
    if (r + 1 < L) dg += dc(r);
    dgamma[(t0 + r) * H + h] = dg;
    dbeta[(t0 + r) * H + h] = r > 0 ? dc(r - 1) : T(0);
  }
}

// The backward's last part, the weight-gradient side nobody in the chain
// waits for (OutWG with the ST's and Pre's): given the state S entering the
// block and what BlockSTBackward left in *s, the rest of Out's backward (its
// inter-block term), the ST's gradients of K, V and the decays, the carry
// leaving the block, Pre's backward, and the block's rows of every gradient.
template <typename T>
void BlockWeightBackward(BlockScratch<T>* s, CMatRef<T> S, T* dq, T* dk, T* dv,
                         T* da, T* dgamma, T* dbeta, const HeadArgs<T>& x,
                         int64_t t0, int64_t L) {
  const int64_t H = x.H, h = x.h;
  const CSMat<T> Q = HeadRows(x.q, t0, L, h, H, x.Dk);   // (L, Dk)
  const CSMat<T> K = HeadRows(x.k, t0, L, h, H, x.Dk);   // (L, Dk)
  const CSMat<T> V = HeadRows(x.v, t0, L, h, H, x.Dv);   // (L, Dv)
  const BlockWeights<T>& w = s->w;
  CarriedState<T>(&s->S1, S, x.beta[t0 * H + h], CarryK(x, t0), CarryV(x, t0));
  // ST: S_next = exp(G_{L-1}) S' + V^T diag(m) K.
  const RowMat<T>& dS = s->dS_next;
  s->dG.setZero(L);
  s->dG(L - 1) = std::exp(w.G(L - 1)) * (dS.array() * s->S1.array()).sum();
  const Vec<T> m = w.M.row(L - 1).transpose();                  // (L)
  const RowMat<T> KdS = K * dS.transpose();                      // (L, Dv)
  s->dV.noalias() += m.asDiagonal() * KdS;
  const RowMat<T> VdS = V * dS;                                  // (L, Dk)
  s->dK.noalias() += m.asDiagonal() * VdS;
  s->dM.row(L - 1) += (VdS.array() * K.array()).rowwise().sum().transpose().matrix();
  // Out, inter-block: O += diag(exp(G)) Q S'^T.
  const RowMat<T> dOgS = s->dOg * s->S1;                         // (L, Dk)
  s->dQ += dOgS;
  s->dG += (dOgS.array() * Q.array()).rowwise().sum().matrix();
  s->dK.row(L - 1) += s->dk_next.transpose();  // the carry leaving the block
  s->dV.row(L - 1) += s->dv_next.transpose();
  PreBackward<T>(s, dgamma, dbeta, t0, H, h);
  dbeta[t0 * H + h] += s->dbeta0;
  HeadRows(dq, t0, L, h, H, x.Dk) = s->dQ;
  HeadRows(dk, t0, L, h, H, x.Dk) = s->dK;
  HeadRows(dv, t0, L, h, H, x.Dv) = s->dV;
  T acc = 0;  // da_s = sum_{r >= s} dG_r (G is the cumulative sum of a)
  for (int64_t r = L - 1; r >= 0; --r) da[(t0 + r) * H + h] = acc += s->dG(r);
}

// The replay's ST of head x.h's block at t0: the state entering the next
// block (at S_next) from the one entering this block (at S) and its Pre.
template <typename T>
void ReplayST(T* S_next, const T* S, const BlockWeights<T>& w,
              const HeadArgs<T>& x, int64_t t0) {
  RowMat<T> S1, next;  // (Dv, Dk) each
  BlockSTTiled<T>(&next, &S1, CMat<T>(S, x.Dv, x.Dk), w, x, t0);
  Mat<T>(S_next, x.Dv, x.Dk) = next;
}

// The gradients of head x.h's entering state and carry (each nullptr skips it).
template <typename T>
void StoreEntering(T* dS_in, T* dk_in, T* dv_in, const Flow<T>& flow,
                   const HeadArgs<T>& x) {
  if (dS_in != nullptr) Mat<T>(dS_in + x.h * x.Dv * x.Dk, x.Dv, x.Dk) = flow.dS;
  StoreCarry(dk_in, flow.dk, x.h);
  StoreCarry(dv_in, flow.dv, x.h);
}

template <typename T>
void LoadLeaving(Flow<T>* flow, const T* dS_out, const T* dk_out,
                 const T* dv_out, const HeadArgs<T>& x) {
  flow->dS = LoadState(dS_out, x.h, x.Dk, x.Dv);
  flow->dk = LoadCarry(dk_out, x.h, x.Dk);
  flow->dv = LoadCarry(dv_out, x.h, x.Dv);
}

}  // namespace

template <typename T>
void Mamba3CoreBackward(T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                        T* dS_in, T* dk_in, T* dv_in, T* workspace,
                        const T* dO, const T* dS_out, const T* dk_out,
                        const T* dv_out, const T* q, const T* k, const T* v,
                        const T* a, const T* gamma, const T* beta,
                        const T* S_in, const T* k_in, const T* v_in,
                        int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                        int64_t block_size,
    int64_t st_tile) {
  const int64_t blocks = Blocks(T_len, block_size);
  const int lanes = Lanes(H);
  // Heads are independent: a static schedule hands each lane a fixed range of
  // heads; head h replays its states into its own slice of the workspace.
#pragma omp parallel num_threads(lanes) if (lanes > 1)
  {
    BlockWeights<T> w;
    BlockScratch<T> scratch;
    Flow<T> flow;
#pragma omp for schedule(static)
    for (int64_t h = 0; h < H; ++h) {
      const HeadArgs<T> x{q, k, v, a, gamma, beta, k_in, v_in,
                          T_len, H, Dk, Dv, block_size, h, st_tile};
      T* states = workspace + h * blocks * Dv * Dk;  // (blocks, Dv, Dk)
      if (blocks > 0) Mat<T>(states, Dv, Dk) = LoadState(S_in, h, Dk, Dv);
      for (int64_t b = 0; b + 1 < blocks; ++b) {  // the replay
        const int64_t t0 = b * block_size;
        BlockPreWithU<T>(&w, x, t0, block_size);
        ReplayST<T>(states + (b + 1) * Dv * Dk, states + b * Dv * Dk, w, x, t0);
      }
      LoadLeaving<T>(&flow, dS_out, dk_out, dv_out, x);
      for (int64_t b = blocks - 1; b >= 0; --b) {
        const int64_t t0 = b * block_size;
        const int64_t L = std::min(block_size, T_len - t0);
        BlockOutBackward<T>(&scratch, dO, x, t0, L);
        BlockSTBackward<T>(&scratch, &flow, x, t0);
        BlockWeightBackward<T>(&scratch, CMat<T>(states + b * Dv * Dk, Dv, Dk),
                               dq, dk, dv, da, dgamma, dbeta, x, t0, L);
      }
      StoreEntering<T>(dS_in, dk_in, dv_in, flow, x);
    }
  }
}

template <typename T>
void Mamba3CoreBackwardOverlapped(T* dq, T* dk, T* dv, T* da, T* dgamma,
                                  T* dbeta, T* dS_in, T* dk_in, T* dv_in,
                                  T* workspace, const T* dO, const T* dS_out,
                                  const T* dk_out, const T* dv_out, const T* q,
                                  const T* k, const T* v, const T* a,
                                  const T* gamma, const T* beta, const T* S_in,
                                  const T* k_in, const T* v_in, int64_t T_len,
                                  int64_t H, int64_t Dk, int64_t Dv,
                                  int64_t block_size,
    int64_t st_tile) {
  const int64_t blocks = Blocks(T_len, block_size);
  const int64_t R = kMamba3OverlapSlots;
  // Per head R slots of the replay's Pre and R of the backward's scratch
  // (block b in slot b % R), the running gradient flow, and one dependence
  // token per block: "the state entering block b is in the workspace".
  std::vector<HeadArgs<T>> args;
  std::vector<BlockWeights<T>> replay(H * R);
  std::vector<BlockScratch<T>> scratch(H * R);
  std::vector<Flow<T>> flows(H);
  std::vector<char> entered(H * blocks + 1);
  for (int64_t h = 0; h < H; ++h) {
    args.push_back({q, k, v, a, gamma, beta, k_in, v_in, T_len, H, Dk, Dv, block_size, h, st_tile});
    if (blocks > 0) {
      Mat<T>(workspace + h * blocks * Dv * Dk, Dv, Dk) = LoadState(S_in, h, Dk, Dv);
    }
    LoadLeaving<T>(&flows[h], dS_out, dk_out, dv_out, args[h]);
  }
  const HeadArgs<T>* xs = args.data();
  BlockWeights<T>* rw = replay.data();
  BlockScratch<T>* sc = scratch.data();
  Flow<T>* fl = flows.data();
  char* ready = entered.data();
  const int threads = std::max(1, KernelThreads());
  // One thread creates the tasks in program order (the replay's blocks first
  // to last, then the backward's last to first, heads inside), so the
  // dependences order each task after the last earlier one that touched what
  // it reads or writes.
#pragma omp parallel num_threads(threads) if (threads > 1)
#pragma omp single
  {
    for (int64_t b = 0; b + 1 < blocks; ++b) {  // the replay: Pre || ST chain
      const int64_t t0 = b * block_size;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t i = h * R + b % R, e = h * blocks + b;
        T* S = workspace + e * Dv * Dk;
#pragma omp task depend(out : rw[i])
        BlockPreWithU<T>(&rw[i], xs[h], t0, block_size);
#pragma omp task depend(in : rw[i], ready[e]) depend(out : ready[e + 1])
        ReplayST<T>(S + Dv * Dk, S, rw[i], xs[h], t0);
      }
    }
    for (int64_t b = blocks - 1; b >= 0; --b) {  // OutAG -> (ST chain || OutWG)
      const int64_t t0 = b * block_size;
      const int64_t L = std::min(block_size, T_len - t0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t i = h * R + b % R, e = h * blocks + b;
        const T* S = workspace + e * Dv * Dk;
#pragma omp task depend(out : sc[i])
        BlockOutBackward<T>(&sc[i], dO, xs[h], t0, L);
#pragma omp task depend(inout : sc[i], fl[h])
        BlockSTBackward<T>(&sc[i], &fl[h], xs[h], t0);
#pragma omp task depend(in : ready[e]) depend(inout : sc[i])
        BlockWeightBackward<T>(&sc[i], CMat<T>(S, Dv, Dk), dq, dk, dv, da,
                               dgamma, dbeta, xs[h], t0, L);
      }
    }
  }
  for (int64_t h = 0; h < H; ++h) StoreEntering<T>(dS_in, dk_in, dv_in, flows[h], args[h]);
}

// ---- the core phase by phase ---------------------------------------------

namespace {

// Offsets in one (head, block) slot of the phase workspaces, for a block of
// up to bs tokens. Forward slots: G, M, U, S1. Backward slots: G, Gam, M and
// the rest (the entering states live in the states region before them).
struct PhaseSlot {
  int64_t G, Gam, M, U, S1, dM, dQ, dK, dV, dOg, dS1, dS_next, dk_next,
      dv_next, dbeta0, size;
  static PhaseSlot Make(int64_t bs, int64_t Dk, int64_t Dv, bool backward) {
    PhaseSlot p{};
    int64_t at = 0;
    auto take = [&at](int64_t n) { const int64_t o = at; at += n; return o; };
    p.G = take(bs);
    if (!backward) {
      p.M = take(bs * bs);
      p.U = take(Dv * Dk);
      p.S1 = take(Dv * Dk);
    } else {
      p.Gam = take(bs * bs);
      p.M = take(bs * bs);
      p.dM = take(bs * bs);
      p.dQ = take(bs * Dk);
      p.dK = take(bs * Dk);
      p.dV = take(bs * Dv);
      p.dOg = take(bs * Dv);
      p.dS1 = take(Dv * Dk);
      p.dS_next = take(Dv * Dk);
      p.dk_next = take(Dk);
      p.dv_next = take(Dv);
      p.dbeta0 = take(1);
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

// What OutAG leaves for the chain and for OutWG, to and from its slot.
template <typename T>
void SaveOutAG(T* slot, const PhaseSlot& p, const BlockScratch<T>& s) {
  Save(slot + p.G, s.w.G);
  Save(slot + p.Gam, s.w.Gam);
  Save(slot + p.M, s.w.M);
  Save(slot + p.dM, s.dM);
  Save(slot + p.dQ, s.dQ);
  Save(slot + p.dK, s.dK);
  Save(slot + p.dV, s.dV);
  Save(slot + p.dOg, s.dOg);
  Save(slot + p.dS1, s.dS1);
}
// What the chain leaves for OutWG.
template <typename T>
void SaveChain(T* slot, const PhaseSlot& p, const BlockScratch<T>& s) {
  Save(slot + p.dS_next, s.dS_next);
  Save(slot + p.dk_next, s.dk_next);
  Save(slot + p.dv_next, s.dv_next);
  slot[p.dbeta0] = s.dbeta0;
}
// For OutWG: all of it but dS1 (the chain's, consumed).
template <typename T>
void LoadForWeights(BlockScratch<T>* s, const T* slot, const PhaseSlot& p,
                    int64_t L, int64_t Dk, int64_t Dv) {
  Load(&s->w.G, slot + p.G, L);
  Load(&s->w.Gam, slot + p.Gam, L, L);
  Load(&s->w.M, slot + p.M, L, L);
  Load(&s->dM, slot + p.dM, L, L);
  Load(&s->dQ, slot + p.dQ, L, Dk);
  Load(&s->dK, slot + p.dK, L, Dk);
  Load(&s->dV, slot + p.dV, L, Dv);
  Load(&s->dOg, slot + p.dOg, L, Dv);
  Load(&s->dS_next, slot + p.dS_next, Dv, Dk);
  Load(&s->dk_next, slot + p.dk_next, Dk);
  Load(&s->dv_next, slot + p.dv_next, Dv);
  s->dbeta0 = slot[p.dbeta0];
}

}  // namespace

int64_t Mamba3CoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                            int64_t Dk, int64_t Dv,
                                            int64_t block_size) {
  return H * Blocks(T_len, block_size) *
         PhaseSlot::Make(block_size, Dk, Dv, false).size;
}

template <typename T>
void Mamba3CoreForwardPhase(CorePhase phase, T* o, T* S_out, T* k_out,
                            T* v_out, T* workspace, const T* q, const T* k,
                            const T* v, const T* a, const T* gamma,
                            const T* beta, const T* S_in, const T* k_in,
                            const T* v_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv, int64_t block_size,
    int64_t st_tile) {
  const int64_t blocks = Blocks(T_len, block_size);
  const PhaseSlot p = PhaseSlot::Make(block_size, Dk, Dv, false);
  const int lanes = Lanes(H);
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    const HeadArgs<T> x{q, k, v, a, gamma, beta, k_in, v_in,
                        T_len, H, Dk, Dv, block_size, h, st_tile};
    BlockWeights<T> w;
    RowMat<T> S, S1, S_next;  // (Dv, Dk) each
    if (phase == CorePhase::kST) S = LoadState(S_in, h, Dk, Dv);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t t0 = b * block_size, L = std::min(block_size, T_len - t0);
      T* slot = workspace + (h * blocks + b) * p.size;
      switch (phase) {
        case CorePhase::kPre:
          BlockPreWithU<T>(&w, x, t0, L);
          Save(slot + p.G, w.G);
          Save(slot + p.M, w.M);
          Save(slot + p.U, w.U);
          break;
        case CorePhase::kST:
          Load(&w.G, slot + p.G, L);
          Load(&w.U, slot + p.U, Dv, Dk);
          BlockSTTiled<T>(&S_next, &S1, S, w, x, t0);
          Save(slot + p.S1, S1);
          S.swap(S_next);
          break;
        case CorePhase::kOut:
          Load(&w.G, slot + p.G, L);
          Load(&w.M, slot + p.M, L, L);
          Load(&S1, slot + p.S1, Dv, Dk);
          BlockOut<T>(o, S1, w, x, t0, L);
          break;
      }
    }
    if (phase == CorePhase::kST) StoreLeaving<T>(S_out, k_out, v_out, S, x);
  }
}

int64_t Mamba3CoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                             int64_t Dk, int64_t Dv,
                                             int64_t block_size) {
  return Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size) +
         H * Blocks(T_len, block_size) *
             PhaseSlot::Make(block_size, Dk, Dv, true).size;
}

template <typename T>
void Mamba3CoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* da,
                             T* dgamma, T* dbeta, T* dS_in, T* dk_in,
                             T* dv_in, T* workspace, const T* dO,
                             const T* dS_out, const T* dk_out,
                             const T* dv_out, const T* q, const T* k,
                             const T* v, const T* a, const T* gamma,
                             const T* beta, const T* S_in, const T* k_in,
                             const T* v_in, int64_t T_len, int64_t H,
                             int64_t Dk, int64_t Dv, int64_t block_size,
    int64_t st_tile) {
  const int64_t blocks = Blocks(T_len, block_size);
  const PhaseSlot p = PhaseSlot::Make(block_size, Dk, Dv, true);
  T* slots = workspace + Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  const int lanes = Lanes(H);
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    const HeadArgs<T> x{q, k, v, a, gamma, beta, k_in, v_in,
                        T_len, H, Dk, Dv, block_size, h, st_tile};
    T* states = workspace + h * blocks * Dv * Dk;  // (blocks, Dv, Dk)
    BlockScratch<T> scratch;
    Flow<T> flow;
    if (phase == CorePhase::kPre) {  // the replay, as Mamba3CoreBackward's
      BlockWeights<T> w;
      if (blocks > 0) Mat<T>(states, Dv, Dk) = LoadState(S_in, h, Dk, Dv);
      for (int64_t b = 0; b + 1 < blocks; ++b) {
        const int64_t t0 = b * block_size;
        BlockPreWithU<T>(&w, x, t0, block_size);
        ReplayST<T>(states + (b + 1) * Dv * Dk, states + b * Dv * Dk, w, x, t0);
      }
    }
    if (phase == CorePhase::kST) LoadLeaving<T>(&flow, dS_out, dk_out, dv_out, x);
    for (int64_t b = blocks - 1; b >= 0; --b) {
      const int64_t t0 = b * block_size, L = std::min(block_size, T_len - t0);
      T* slot = slots + (h * blocks + b) * p.size;
      switch (phase) {
        case CorePhase::kPre:  // OutAG
          BlockOutBackward<T>(&scratch, dO, x, t0, L);
          SaveOutAG(slot, p, scratch);
          break;
        case CorePhase::kST:  // the chain
          Load(&scratch.w.G, slot + p.G, L);
          Load(&scratch.dS1, slot + p.dS1, Dv, Dk);
          BlockSTBackward<T>(&scratch, &flow, x, t0);
          SaveChain(slot, p, scratch);
          break;
        case CorePhase::kOut:  // OutWG
          LoadForWeights(&scratch, slot, p, L, Dk, Dv);
          BlockWeightBackward<T>(&scratch, CMat<T>(states + b * Dv * Dk, Dv, Dk),
                                 dq, dk, dv, da, dgamma, dbeta, x, t0, L);
          break;
      }
    }
    if (phase == CorePhase::kST) StoreEntering<T>(dS_in, dk_in, dv_in, flow, x);
  }
}

Mamba3CoreFlops CountMamba3CoreFlops(int64_t T_len, int64_t H, int64_t Dk,
                                     int64_t Dv, int64_t block_size) {
  Mamba3CoreFlops f;
  const double dk = static_cast<double>(Dk), dv = static_cast<double>(Dv);
  for (int64_t t0 = 0; t0 < T_len; t0 += block_size) {
    const double L = static_cast<double>(std::min(block_size, T_len - t0));
    const double pre = 2 * L * dk * dv, st = 4 * dk * dv;
    const double out = 2 * L * L * dk + 2 * L * dk * dv + 2 * L * L * dv;
    f.forward += pre + st + out;
    const bool last = t0 + block_size >= T_len;
    f.backward += (last ? 0.0 : pre + st) + 2 * L * L * dk + 2 * dk * dv +
                  4 * L * dk * dv + 4 * L * L * (dk + dv) + 4 * L * dk * dv +
                  6 * dk * dv;
  }
  f.forward *= static_cast<double>(H);
  f.backward *= static_cast<double>(H);
  return f;
}

#define SF_INSTANTIATE(T)                                                     \
  template void Mamba3CoreForward<T>(T*, T*, T*, T*, const T*, const T*,      \
                                     const T*, const T*, const T*, const T*,  \
                                     const T*, const T*, const T*, int64_t,   \
                                     int64_t, int64_t, int64_t, int64_t,      \
                                     int64_t);                                \
  template void Mamba3CoreForwardOverlapped<T>(                               \
      T*, T*, T*, T*, const T*, const T*, const T*, const T*, const T*,       \
      const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,      \
      int64_t, int64_t, int64_t);                                             \
  template void Mamba3CoreBackward<T>(                                        \
      T*, T*, T*, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, const T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,       \
      int64_t, int64_t);                                                      \
  template void Mamba3CoreBackwardOverlapped<T>(                              \
      T*, T*, T*, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, const T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,       \
      int64_t, int64_t);                                                      \
  template void Mamba3CoreForwardPhase<T>(                                    \
      CorePhase, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, const T*, const T*, int64_t, int64_t,     \
      int64_t, int64_t, int64_t, int64_t);                                    \
  template void Mamba3CoreBackwardPhase<T>(                                   \
      CorePhase, T*, T*, T*, T*, T*, T*, T*, T*, T*, T*, const T*, const T*,   \
      const T*, const T*, const T*, const T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,      \
      int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

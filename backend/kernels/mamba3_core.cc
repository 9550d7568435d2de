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

// One head's chunk: its inputs and sizes.
template <typename T>
struct HeadArgs {
  const T *q, *k, *v, *a, *gamma, *beta;
  int64_t T_len, H, Dk, Dv, block_size, h;
};

// Pre's decay weights of one block: G (L) and M (L, L) as in the header, and
// Gam (L, L) (the backward needs both).
template <typename T>
struct BlockWeights {
  Vec<T> G;       // (L)
  RowMat<T> Gam;  // (L, L) exp(G_r - G_s), s <= r, else 0
  RowMat<T> M;    // (L, L)
};

template <typename T>
void BlockPre(BlockWeights<T>* w, CSVec<T> a, CSVec<T> gamma,
              CSVec<T> beta) {
  const Eigen::Index L = a.size();
  w->G.resize(L);
  T acc = 0;
  for (Eigen::Index r = 0; r < L; ++r) w->G(r) = acc += a(r);
  // The upper part is zeroed before the exp so that nothing there overflows.
  w->Gam.noalias() = w->G.rowwise().replicate(L) -
                     w->G.transpose().colwise().replicate(L);
  w->Gam.template triangularView<Eigen::StrictlyUpper>().setZero();
  w->Gam.array() = w->Gam.array().exp();
  w->Gam.template triangularView<Eigen::StrictlyUpper>().setZero();
  RowVec<T> c(L);  // c_s = gamma_s + beta_{s+1}; c_{L-1} never used
  for (Eigen::Index s = 0; s + 1 < L; ++s) c(s) = gamma(s) + beta(s + 1);
  c(L - 1) = 0;
  w->M.noalias() = w->Gam * c.asDiagonal();
  w->M.diagonal() = gamma;
}

// S' = S + beta_0 vp kp^T.
template <typename T>
void CarriedState(RowMat<T>* S1, const RowMat<T>& S, T beta0, const Vec<T>& kp,
                  const Vec<T>& vp) {
  *S1 = S;
  S1->noalias() += (beta0 * vp) * kp.transpose();
}

// ST: S_next = exp(G_{L-1}) S' + V^T diag(m) K.
template <typename T>
void BlockST(RowMat<T>* S_next, const RowMat<T>& S1, const BlockWeights<T>& w,
             CSMat<T> K, CSMat<T> V) {
  const Eigen::Index L = K.rows();
  const RowMat<T> Km = w.M.row(L - 1).transpose().asDiagonal() * K;  // (L, Dk)
  S_next->noalias() = V.transpose() * Km;
  *S_next += std::exp(w.G(L - 1)) * S1;
}

// Out: O = diag(exp(G)) Q S'^T + ((Q K^T) o M) V.
template <typename T>
void BlockOut(SMat<T> O, const RowMat<T>& S1, const BlockWeights<T>& w,
              CSMat<T> Q, CSMat<T> K, CSMat<T> V) {
  RowMat<T> P(Q.rows(), K.rows());  // (L, L)
  P.noalias() = Q * K.transpose();
  P.array() *= w.M.array();
  O.noalias() = Q * S1.transpose();
  O.array().colwise() *= w.G.array().exp();
  O.noalias() += P * V;
}

template <typename T>
void ForwardOneHead(T* o, T* S_out, T* k_out, T* v_out, const T* S_in,
                    const T* k_in, const T* v_in, const HeadArgs<T>& x) {
  const int64_t H = x.H, h = x.h;
  RowMat<T> S = LoadState(S_in, h, x.Dk, x.Dv), S1, S_next;  // (Dv, Dk)
  Vec<T> kp = LoadCarry(k_in, h, x.Dk), vp = LoadCarry(v_in, h, x.Dv);
  BlockWeights<T> w;
  for (int64_t t0 = 0; t0 < x.T_len; t0 += x.block_size) {
    const int64_t L = std::min(x.block_size, x.T_len - t0);
    const CSMat<T> Q = HeadRows(x.q, t0, L, h, H, x.Dk);  // (L, Dk)
    const CSMat<T> K = HeadRows(x.k, t0, L, h, H, x.Dk);  // (L, Dk)
    const CSMat<T> V = HeadRows(x.v, t0, L, h, H, x.Dv);  // (L, Dv)
    BlockPre<T>(&w, HeadEntries(x.a, t0, L, h, H),
                HeadEntries(x.gamma, t0, L, h, H), HeadEntries(x.beta, t0, L, h, H));
    CarriedState<T>(&S1, S, x.beta[t0 * H + h], kp, vp);
    BlockST<T>(&S_next, S1, w, K, V);
    BlockOut<T>(HeadRows(o, t0, L, h, H, x.Dv), S1, w, Q, K, V);
    S.swap(S_next);
    kp = K.row(L - 1).transpose();
    vp = V.row(L - 1).transpose();
  }
  if (S_out != nullptr) Mat<T>(S_out + h * x.Dv * x.Dk, x.Dv, x.Dk) = S;
  StoreCarry(k_out, kp, h);
  StoreCarry(v_out, vp, h);
}

int Lanes(int64_t H) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(H, KernelThreads())));
}

}  // namespace

template <typename T>
void Mamba3CoreForward(T* o, T* S_out, T* k_out, T* v_out, const T* q,
                       const T* k, const T* v, const T* a, const T* gamma,
                       const T* beta, const T* S_in, const T* k_in,
                       const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size) {
  const int lanes = Lanes(H);
  // Heads are independent: a static schedule hands each lane a fixed range.
#pragma omp parallel for schedule(static) num_threads(lanes) if (lanes > 1)
  for (int64_t h = 0; h < H; ++h) {
    const HeadArgs<T> x{q, k, v, a, gamma, beta, T_len, H, Dk, Dv, block_size, h};
    ForwardOneHead<T>(o, S_out, k_out, v_out, S_in, k_in, v_in, x);
  }
}

int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                        int64_t Dv, int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  return H * blocks * Dv * Dk;
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
  BlockWeights<T> w;
  RowMat<T> S1, dS1;          // (Dv, Dk) S' and its gradient
  RowMat<T> dQ, dK, dV;       // (L, Dk), (L, Dk), (L, Dv)
  RowMat<T> QK, dM, dP;       // (L, L) each
  Vec<T> dG;                  // (L)
};

// The gradients out of one block's Out and ST (into s->dQ, dK, dV, dM, dG,
// dS1), given dO and the gradient dS of the state leaving the block.
template <typename T>
void OutSTBackward(BlockScratch<T>* s, CSMat<T> dO, const RowMat<T>& dS,
                   CSMat<T> Q, CSMat<T> K, CSMat<T> V) {
  const BlockWeights<T>& w = s->w;
  const Eigen::Index L = Q.rows();
  // ST: S_next = exp(G_{L-1}) S' + V^T diag(m) K.
  const T e_last = std::exp(w.G(L - 1));
  s->dS1 = e_last * dS;
  s->dG.setZero(L);
  s->dG(L - 1) = e_last * (dS.array() * s->S1.array()).sum();
  const Vec<T> m = w.M.row(L - 1).transpose();                  // (L)
  s->dV.noalias() = K * dS.transpose();                          // (L, Dv)
  s->dV = m.asDiagonal() * s->dV;
  const RowMat<T> VdS = V * dS;                                  // (L, Dk)
  s->dK.noalias() = m.asDiagonal() * VdS;
  s->dM.setZero(L, L);
  s->dM.row(L - 1) = (VdS.array() * K.array()).rowwise().sum().transpose();
  // Out, intra-block: O += P V, P = QK o M.
  s->QK.noalias() = Q * K.transpose();
  s->dP.noalias() = dO * V.transpose();                          // (L, L)
  s->dM.array() += s->dP.array() * s->QK.array();
  s->QK.array() *= w.M.array();                                  // P
  s->dV.noalias() += s->QK.transpose() * dO;
  s->dP.array() *= w.M.array();                                  // d(QK)
  s->dQ.noalias() = s->dP * K;
  s->dK.noalias() += s->dP.transpose() * Q;
  // Out, inter-block: O += diag(exp(G)) Q S'^T.
  const RowMat<T> dOg = dO.array().colwise() * w.G.array().exp();  // (L, Dv)
  const RowMat<T> dOgS = dOg * s->S1;                               // (L, Dk)
  s->dQ += dOgS;
  s->dG += (dOgS.array() * Q.array()).rowwise().sum().matrix();
  s->dS1.noalias() += dOg.transpose() * Q;
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

// Head h's block [t0, t0 + L) given the state S entering it and the carry
// (kp, vp) before it: writes its rows of every gradient and turns *flow (of
// the state and carry leaving the block) into that of S and (kp, vp).
template <typename T>
void BackwardOneBlock(BlockScratch<T>* s, Flow<T>* flow, CMat<T> S,
                      const Vec<T>& kp, const Vec<T>& vp, const T* dO,
                      T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                      const HeadArgs<T>& x, int64_t t0, int64_t L) {
  const int64_t H = x.H, h = x.h;
  const CSMat<T> Q = HeadRows(x.q, t0, L, h, H, x.Dk);   // (L, Dk)
  const CSMat<T> K = HeadRows(x.k, t0, L, h, H, x.Dk);   // (L, Dk)
  const CSMat<T> V = HeadRows(x.v, t0, L, h, H, x.Dv);   // (L, Dv)
  BlockPre<T>(&s->w, HeadEntries(x.a, t0, L, h, H),
              HeadEntries(x.gamma, t0, L, h, H), HeadEntries(x.beta, t0, L, h, H));
  const T beta0 = x.beta[t0 * H + h];
  CarriedState<T>(&s->S1, RowMat<T>(S), beta0, kp, vp);
  OutSTBackward<T>(s, HeadRows(dO, t0, L, h, H, x.Dv), flow->dS, Q, K, V);
  s->dK.row(L - 1) += flow->dk.transpose();  // the carry leaving the block
  s->dV.row(L - 1) += flow->dv.transpose();
  PreBackward<T>(s, dgamma, dbeta, t0, H, h);
  // S' = S + beta_0 vp kp^T.
  const Vec<T> dS1_kp = s->dS1 * kp;                             // (Dv)
  dbeta[t0 * H + h] += vp.dot(dS1_kp);
  flow->dv = beta0 * dS1_kp;
  flow->dk.noalias() = beta0 * (s->dS1.transpose() * vp);
  flow->dS.swap(s->dS1);
  HeadRows(dq, t0, L, h, H, x.Dk) = s->dQ;
  HeadRows(dk, t0, L, h, H, x.Dk) = s->dK;
  HeadRows(dv, t0, L, h, H, x.Dv) = s->dV;
  T acc = 0;  // da_s = sum_{r >= s} dG_r (G is the cumulative sum of a)
  for (int64_t r = L - 1; r >= 0; --r) da[(t0 + r) * H + h] = acc += s->dG(r);
}

// Runs ST over head h's blocks from (S, kp, vp), storing the state entering
// block b at states + b Dv Dk.
template <typename T>
void ReplayBlockStates(T* states, RowMat<T> S, Vec<T> kp, Vec<T> vp,
                       const HeadArgs<T>& x) {
  BlockWeights<T> w;
  RowMat<T> S1, S_next;
  for (int64_t t0 = 0, b = 0; t0 < x.T_len; t0 += x.block_size, ++b) {
    const int64_t L = std::min(x.block_size, x.T_len - t0);
    Mat<T>(states + b * x.Dv * x.Dk, x.Dv, x.Dk) = S;
    if (t0 + L == x.T_len) break;  // the last block's exit state is not needed
    const CSMat<T> K = HeadRows(x.k, t0, L, x.h, x.H, x.Dk);
    const CSMat<T> V = HeadRows(x.v, t0, L, x.h, x.H, x.Dv);
    BlockPre<T>(&w, HeadEntries(x.a, t0, L, x.h, x.H),
                HeadEntries(x.gamma, t0, L, x.h, x.H),
                HeadEntries(x.beta, t0, L, x.h, x.H));
    CarriedState<T>(&S1, S, x.beta[t0 * x.H + x.h], kp, vp);
    BlockST<T>(&S_next, S1, w, K, V);
    S.swap(S_next);
    kp = K.row(L - 1).transpose();
    vp = V.row(L - 1).transpose();
  }
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
                        int64_t block_size) {
  const int64_t blocks = (T_len + block_size - 1) / block_size;
  const int lanes = Lanes(H);
  // Heads are independent: a static schedule hands each lane a fixed range of
  // heads; head h replays its states into its own slice of the workspace.
#pragma omp parallel num_threads(lanes) if (lanes > 1)
  {
    BlockScratch<T> scratch;
    Flow<T> flow;
#pragma omp for schedule(static)
    for (int64_t h = 0; h < H; ++h) {
      const HeadArgs<T> x{q, k, v, a, gamma, beta, T_len, H, Dk, Dv, block_size, h};
      T* states = workspace + h * blocks * Dv * Dk;
      const Vec<T> k0 = LoadCarry(k_in, h, Dk), v0 = LoadCarry(v_in, h, Dv);
      ReplayBlockStates<T>(states, LoadState(S_in, h, Dk, Dv), k0, v0, x);
      flow.dS = LoadState(dS_out, h, Dk, Dv);
      flow.dk = LoadCarry(dk_out, h, Dk);
      flow.dv = LoadCarry(dv_out, h, Dv);
      for (int64_t b = blocks - 1; b >= 0; --b) {
        const int64_t t0 = b * block_size;
        const Vec<T> kp = t0 == 0 ? k0 : Vec<T>(HeadRows(k, t0 - 1, 1, h, H, Dk).transpose());
        const Vec<T> vp = t0 == 0 ? v0 : Vec<T>(HeadRows(v, t0 - 1, 1, h, H, Dv).transpose());
        BackwardOneBlock<T>(&scratch, &flow, CMat<T>(states + b * Dv * Dk, Dv, Dk),
                            kp, vp, dO, dq, dk, dv, da, dgamma, dbeta, x, t0,
                            std::min(block_size, T_len - t0));
      }
      if (dS_in != nullptr) Mat<T>(dS_in + h * Dv * Dk, Dv, Dk) = flow.dS;
      StoreCarry(dk_in, flow.dk, h);
      StoreCarry(dv_in, flow.dv, h);
    }
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
                                     int64_t, int64_t, int64_t, int64_t);     \
  template void Mamba3CoreBackward<T>(                                        \
      T*, T*, T*, T*, T*, T*, T*, T*, T*, T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, const T*, const T*, const T*, const T*,   \
      const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t,       \
      int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

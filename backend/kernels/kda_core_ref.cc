// The float64 reference of the KDA core: the recurrence token by token, and
// its backward by reverse mode through time over the stored states. Slow
// (O(T Dk Dv) per head with no blocking) and plain on purpose: it shares no
// code with the chunkwise kernel (kda_core.cc).
//
// Dimensions: T tokens, H heads, Dk, Dv head dims.
// Per token, with P = S_{t-1} D_t (D_t = diag(exp(g_t))) and u = P k_t:
//   S_t = P + beta_t (v_t - u) k_t^T,   o_t = S_t q_t.
#include <Eigen/Core>
#include <cmath>
#include <vector>

#include "backend/kernels/kda_core.h"

namespace stateflow::backend {

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// Token t of head h of a (T, H, D) buffer.
VectorXd Row(const double* x, int64_t t, int64_t h, int64_t H, int64_t D) {
  return Eigen::Map<const VectorXd>(x + (t * H + h) * D, D);
}

void StoreRow(double* x, const VectorXd& value, int64_t t, int64_t h,
              int64_t H, int64_t D) {
  for (int64_t i = 0; i < D; ++i) x[(t * H + h) * D + i] = value(i);
}

// S (Dv, Dk) of head h of an (H, Dv, Dk) buffer, zeros for nullptr.
MatrixXd State(const double* S, int64_t h, int64_t Dk, int64_t Dv) {
  if (S == nullptr) return MatrixXd::Zero(Dv, Dk);
  MatrixXd out(Dv, Dk);
  for (int64_t i = 0; i < Dv; ++i) {
    for (int64_t j = 0; j < Dk; ++j) out(i, j) = S[(h * Dv + i) * Dk + j];
  }
  return out;
}

void StoreState(double* S, const MatrixXd& value, int64_t h, int64_t Dk,
                int64_t Dv) {
  for (int64_t i = 0; i < Dv; ++i) {
    for (int64_t j = 0; j < Dk; ++j) S[(h * Dv + i) * Dk + j] = value(i, j);
  }
}

// P = S D: column c of S scaled by exp(g_c).
MatrixXd Decay(const MatrixXd& S, const VectorXd& g) {
  return S * g.array().exp().matrix().asDiagonal();
}

// S_t from S_{t-1}.
MatrixXd Step(const MatrixXd& S, const VectorXd& k, const VectorXd& v,
              const VectorXd& g, double beta) {
  const MatrixXd P = Decay(S, g);  // (Dv, Dk)
  const VectorXd u = P * k;        // (Dv)
  return P + beta * (v - u) * k.transpose();
}

}  // namespace

void KdaCoreForwardRef(double* o, double* S_out, const double* q,
                       const double* k, const double* v, const double* g,
                       const double* beta, const double* S_in, int64_t T_len,
                       int64_t H, int64_t Dk, int64_t Dv) {
  for (int64_t h = 0; h < H; ++h) {
    MatrixXd S = State(S_in, h, Dk, Dv);  // (Dv, Dk)
    for (int64_t t = 0; t < T_len; ++t) {
      S = Step(S, Row(k, t, h, H, Dk), Row(v, t, h, H, Dv),
               Row(g, t, h, H, Dk), beta[t * H + h]);
      StoreRow(o, S * Row(q, t, h, H, Dk), t, h, H, Dv);
    }
    if (S_out != nullptr) StoreState(S_out, S, h, Dk, Dv);
  }
}

// With P = S_{t-1} D, u = P k, S_t = P (I - beta k k^T) + beta v k^T and
// dS = dL/dS_t (including o_t's share dO_t q_t^T):
//   dq_t  = S_t^T dO_t
//   dv_t  = beta dS k
//   dbeta = (dS k) . (v - u)
//   dk_t  = beta dS^T (v - u) - beta P^T (dS k)
//   dP    = dS - beta (dS k) k^T
//   dg_c  = sum_j dP_jc P_jc           (P_jc = S_{t-1,jc} exp(g_c))
//   dS_{t-1} = dP D
void KdaCoreBackwardRef(double* dq, double* dk, double* dv, double* dg,
                        double* dbeta, double* dS_in, double* /*workspace*/,
                        const double* dO, const double* dS_out,
                        const double* q, const double* k, const double* v,
                        const double* g, const double* beta,
                        const double* S_in, int64_t T_len, int64_t H,
                        int64_t Dk, int64_t Dv) {
  for (int64_t h = 0; h < H; ++h) {
    std::vector<MatrixXd> states(T_len + 1);  // states[t + 1] = S_t
    states[0] = State(S_in, h, Dk, Dv);
    for (int64_t t = 0; t < T_len; ++t) {
      states[t + 1] = Step(states[t], Row(k, t, h, H, Dk), Row(v, t, h, H, Dv),
                           Row(g, t, h, H, Dk), beta[t * H + h]);
    }
    MatrixXd dS = State(dS_out, h, Dk, Dv);  // (Dv, Dk)
    for (int64_t t = T_len - 1; t >= 0; --t) {
      const VectorXd qt = Row(q, t, h, H, Dk), kt = Row(k, t, h, H, Dk);
      const VectorXd vt = Row(v, t, h, H, Dv), dot = Row(dO, t, h, H, Dv);
      const VectorXd gt = Row(g, t, h, H, Dk);
      const double bt = beta[t * H + h];
      const MatrixXd P = Decay(states[t], gt);                // (Dv, Dk)
      StoreRow(dq, states[t + 1].transpose() * dot, t, h, H, Dk);
      dS += dot * qt.transpose();
      const VectorXd u = P * kt, dSk = dS * kt;                // (Dv) each
      StoreRow(dv, bt * dSk, t, h, H, Dv);
      dbeta[t * H + h] = dSk.dot(vt - u);
      StoreRow(dk, bt * (dS.transpose() * (vt - u)) - bt * (P.transpose() * dSk),
               t, h, H, Dk);
      const MatrixXd dP = dS - bt * dSk * kt.transpose();     // (Dv, Dk)
      StoreRow(dg, (dP.array() * P.array()).colwise().sum().transpose(), t, h,
               H, Dk);
      dS = Decay(dP, gt);
    }
    if (dS_in != nullptr) StoreState(dS_in, dS, h, Dk, Dv);
  }
}

}  // namespace stateflow::backend

// The float64 reference of the Gated DeltaNet core: the recurrence token by
// token, and its backward by reverse mode through time over the stored
// states. Slow (O(T Dk Dv) per head with no blocking) and plain on purpose.
//
// Dimensions: T tokens, H heads, Dk, Dv head dims.
#include <Eigen/Core>
#include <vector>

#include "backend/kernels/gdn_core.h"

namespace stateflow::backend {

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// Token t of head h of a (T, H, D) buffer.
VectorXd Row(const double* x, int64_t t, int64_t h, int64_t H, int64_t D) {
  return Eigen::Map<const VectorXd>(x + (t * H + h) * D, D);
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

// S_t from S_{t-1}: alpha (S - beta (S k) k^T) + beta v k^T.
MatrixXd Step(const MatrixXd& S, const VectorXd& k, const VectorXd& v,
              double g, double beta) {
  const double alpha = std::exp(g);
  const VectorXd u = S * k;  // (Dv)
  return alpha * (S - beta * u * k.transpose()) + beta * v * k.transpose();
}

}  // namespace

void GdnCoreForwardRef(double* o, double* S_out, const double* q,
                       const double* k, const double* v, const double* g,
                       const double* beta, const double* S_in, int64_t T_len,
                       int64_t H, int64_t Dk, int64_t Dv) {
  for (int64_t h = 0; h < H; ++h) {
    MatrixXd S = State(S_in, h, Dk, Dv);  // (Dv, Dk)
    for (int64_t t = 0; t < T_len; ++t) {
      S = Step(S, Row(k, t, h, H, Dk), Row(v, t, h, H, Dv), g[t * H + h],
               beta[t * H + h]);
      const VectorXd ot = S * Row(q, t, h, H, Dk);  // (Dv)
      for (int64_t i = 0; i < Dv; ++i) o[(t * H + h) * Dv + i] = ot(i);
    }
    if (S_out != nullptr) StoreState(S_out, S, h, Dk, Dv);
  }
}

// With P = S_{t-1}, u = P k, alpha = exp(g):
//   S_t = alpha P - alpha beta u k^T + beta v k^T,   o_t = S_t q_t.
// Given dS = dL/dS_t (including o_t's share dO_t q_t^T):
//   dq_t = S_t^T do_t
//   dP   = alpha dS - alpha beta (dS k) k^T
//   dg   = alpha <dS, P - beta u k^T>
//   dbeta = (dS k) . (v - alpha u)
//   dv   = beta dS k
//   dk   = -alpha beta (P^T (dS k) + dS^T u) + beta dS^T v
void GdnCoreBackwardRef(double* dq, double* dk, double* dv, double* dg,
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
                           g[t * H + h], beta[t * H + h]);
    }
    MatrixXd dS = State(dS_out, h, Dk, Dv);  // (Dv, Dk)
    for (int64_t t = T_len - 1; t >= 0; --t) {
      const VectorXd qt = Row(q, t, h, H, Dk), kt = Row(k, t, h, H, Dk);
      const VectorXd vt = Row(v, t, h, H, Dv), dot = Row(dO, t, h, H, Dv);
      const double alpha = std::exp(g[t * H + h]), bt = beta[t * H + h];
      const MatrixXd& P = states[t];
      const VectorXd dqt = states[t + 1].transpose() * dot;  // (Dk)
      dS += dot * qt.transpose();
      const VectorXd u = P * kt, dSk = dS * kt;              // (Dv), (Dv)
      const VectorXd dkt = -alpha * bt * (P.transpose() * dSk + dS.transpose() * u) +
                           bt * dS.transpose() * vt;         // (Dk)
      dg[t * H + h] = alpha * (dS.array() * (P - bt * u * kt.transpose()).array()).sum();
      dbeta[t * H + h] = dSk.dot(vt - alpha * u);
      const VectorXd dvt = bt * dSk;                         // (Dv)
      for (int64_t i = 0; i < Dk; ++i) {
        dq[(t * H + h) * Dk + i] = dqt(i);
        dk[(t * H + h) * Dk + i] = dkt(i);
      }
      for (int64_t i = 0; i < Dv; ++i) dv[(t * H + h) * Dv + i] = dvt(i);
      dS = alpha * dS - alpha * bt * dSk * kt.transpose();
    }
    if (dS_in != nullptr) StoreState(dS_in, dS, h, Dk, Dv);
  }
}

}  // namespace stateflow::backend

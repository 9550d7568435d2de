// The float64 reference of the Mamba-3 core: the trapezoidal recurrence token
// by token, and its backward by reverse mode through time over the stored
// states. Slow and plain on purpose.
//
// Dimensions: T tokens, H heads, Dk state dim, Dv SSM head dim.
#include <Eigen/Core>
#include <cmath>
#include <vector>

#include "backend/kernels/mamba3_core.h"

namespace stateflow::backend {

namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// Token t of head h of a (T, H, D) buffer.
VectorXd Row(const double* x, int64_t t, int64_t h, int64_t H, int64_t D) {
  return Eigen::Map<const VectorXd>(x + (t * H + h) * D, D);
}
void AddRow(double* x, const VectorXd& value, int64_t t, int64_t h, int64_t H,
            int64_t D) {
  Eigen::Map<VectorXd>(x + (t * H + h) * D, D) += value;
}

// Head h's (D) vector of an (H, D) buffer, zeros for nullptr.
VectorXd Carry(const double* x, int64_t h, int64_t D) {
  if (x == nullptr) return VectorXd::Zero(D);
  return Eigen::Map<const VectorXd>(x + h * D, D);
}
void StoreCarry(double* x, const VectorXd& value, int64_t h) {
  if (x != nullptr) Eigen::Map<VectorXd>(x + h * value.size(), value.size()) = value;
}

// S (Dv, Dk) of head h of an (H, Dv, Dk) buffer (row-major), zeros for nullptr.
MatrixXd State(const double* S, int64_t h, int64_t Dk, int64_t Dv) {
  MatrixXd out = MatrixXd::Zero(Dv, Dk);
  if (S == nullptr) return out;
  for (int64_t i = 0; i < Dv; ++i) {
    for (int64_t j = 0; j < Dk; ++j) out(i, j) = S[(h * Dv + i) * Dk + j];
  }
  return out;
}
void StoreState(double* S, const MatrixXd& value, int64_t h) {
  if (S == nullptr) return;
  const int64_t Dv = value.rows(), Dk = value.cols();
  for (int64_t i = 0; i < Dv; ++i) {
    for (int64_t j = 0; j < Dk; ++j) S[(h * Dv + i) * Dk + j] = value(i, j);
  }
}

}  // namespace

void Mamba3CoreForwardRef(double* o, double* S_out, double* k_out,
                          double* v_out, const double* q, const double* k,
                          const double* v, const double* a,
                          const double* gamma, const double* beta,
                          const double* S_in, const double* k_in,
                          const double* v_in, int64_t T_len, int64_t H,
                          int64_t Dk, int64_t Dv) {
  for (int64_t h = 0; h < H; ++h) {
    MatrixXd S = State(S_in, h, Dk, Dv);
    VectorXd kp = Carry(k_in, h, Dk), vp = Carry(v_in, h, Dv);
    for (int64_t t = 0; t < T_len; ++t) {
      const int64_t i = t * H + h;
      const VectorXd kt = Row(k, t, h, H, Dk), vt = Row(v, t, h, H, Dv);
      S = std::exp(a[i]) * (S + beta[i] * vp * kp.transpose()) +
          gamma[i] * vt * kt.transpose();
      Eigen::Map<VectorXd>(o + i * Dv, Dv) = S * Row(q, t, h, H, Dk);
      kp = kt;
      vp = vt;
    }
    StoreState(S_out, S, h);
    StoreCarry(k_out, kp, h);
    StoreCarry(v_out, vp, h);
  }
}

void Mamba3CoreBackwardRef(double* dq, double* dk, double* dv, double* da,
                           double* dgamma, double* dbeta, double* dS_in,
                           double* dk_in, double* dv_in, double* /*workspace*/,
                           const double* dO, const double* dS_out,
                           const double* dk_out, const double* dv_out,
                           const double* q, const double* k, const double* v,
                           const double* a, const double* gamma,
                           const double* beta, const double* S_in,
                           const double* k_in, const double* v_in,
                           int64_t T_len, int64_t H, int64_t Dk, int64_t Dv) {
  for (int64_t i = 0; i < T_len * H * Dk; ++i) dq[i] = dk[i] = 0.0;
  for (int64_t i = 0; i < T_len * H * Dv; ++i) dv[i] = 0.0;
  for (int64_t h = 0; h < H; ++h) {
    // states[t + 1] = S_t, states[0] = S_in.
    std::vector<MatrixXd> states(T_len + 1);
    states[0] = State(S_in, h, Dk, Dv);
    const VectorXd k0 = Carry(k_in, h, Dk), v0 = Carry(v_in, h, Dv);
    auto k_prev = [&](int64_t t) { return t == 0 ? k0 : Row(k, t - 1, h, H, Dk); };
    auto v_prev = [&](int64_t t) { return t == 0 ? v0 : Row(v, t - 1, h, H, Dv); };
    for (int64_t t = 0; t < T_len; ++t) {
      const int64_t i = t * H + h;
      states[t + 1] =
          std::exp(a[i]) * (states[t] + beta[i] * v_prev(t) * k_prev(t).transpose()) +
          gamma[i] * Row(v, t, h, H, Dv) * Row(k, t, h, H, Dk).transpose();
    }
    MatrixXd dS = State(dS_out, h, Dk, Dv);
    VectorXd dkp = Carry(dk_out, h, Dk), dvp = Carry(dv_out, h, Dv);
    for (int64_t t = T_len - 1; t >= 0; --t) {
      const int64_t i = t * H + h;
      const VectorXd kt = Row(k, t, h, H, Dk), vt = Row(v, t, h, H, Dv);
      const VectorXd kp = k_prev(t), vp = v_prev(t);
      // The carry after token t is (k_t, v_t).
      AddRow(dk, dkp, t, h, H, Dk);
      AddRow(dv, dvp, t, h, H, Dv);
      // o_t = S_t q_t.
      const VectorXd dot = Row(dO, t, h, H, Dv);
      AddRow(dq, states[t + 1].transpose() * dot, t, h, H, Dk);
      dS += dot * Row(q, t, h, H, Dk).transpose();
      // S_t = exp(a_t) X + gamma_t v_t k_t^T, X = S_{t-1} + beta_t vp kp^T.
      dgamma[i] = vt.dot(dS * kt);
      AddRow(dv, gamma[i] * (dS * kt), t, h, H, Dv);
      AddRow(dk, gamma[i] * (dS.transpose() * vt), t, h, H, Dk);
      const MatrixXd X = states[t] + beta[i] * vp * kp.transpose();
      const double e = std::exp(a[i]);
      da[i] = e * (dS.array() * X.array()).sum();
      const MatrixXd dX = e * dS;
      dbeta[i] = vp.dot(dX * kp);
      dvp = beta[i] * (dX * kp);
      dkp = beta[i] * (dX.transpose() * vp);
      dS = dX;
    }
    StoreState(dS_in, dS, h);
    StoreCarry(dk_in, dkp, h);
    StoreCarry(dv_in, dvp, h);
  }
}

}  // namespace stateflow::backend

#include "backend/kernels/output_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

template <typename T>
double OutputLossForward(T* losses, T* lse, T* logits, const T* x, const T* w,
                         const int32_t* targets, int64_t R, int64_t C,
                         int64_t V, int64_t Vs) {
  CMat<T> X(x, R, C);                                   // (R, C)
  Vec<T> m = Vec<T>::Constant(R, -std::numeric_limits<T>::infinity());  // (R)
  Vec<T> s = Vec<T>::Zero(R);                           // (R) sum exp(z - m)
  Vec<T> zt = Vec<T>::Zero(R);                          // (R) target logit
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = std::min(Vs, V - v0);
    Mat<T> Z(logits, R, vs);                            // (R, vs)
    Z.noalias() = X * CMat<T>(w + v0 * C, vs, C).transpose();
    for (int64_t n = 0; n < R; ++n) {
      const T m_new = std::max(m(n), Z.row(n).maxCoeff());
      s(n) = s(n) * std::exp(m(n) - m_new) +
             (Z.row(n).array() - m_new).exp().sum();
      m(n) = m_new;
      const int64_t t = targets[n] - v0;
      if (t >= 0 && t < vs) zt(n) = Z(n, t);
    }
  }
  double total = 0.0;
  for (int64_t n = 0; n < R; ++n) {
    lse[n] = m(n) + std::log(s(n));
    const T loss = lse[n] - zt(n);
    if (losses != nullptr) losses[n] = loss;
    total += static_cast<double>(loss);
  }
  return R > 0 ? total / static_cast<double>(R) : 0.0;
}

// Per slice: dZ = dlosses_n * (softmax - onehot(target)), then
// dx += dZ w_slice, dw_slice += dZ^T x.
template <typename T>
void OutputLossBackward(T* dx, T* dw, T* logits, const T* dlosses,
                        const T* lse, const T* x, const T* w,
                        const int32_t* targets, int64_t R, int64_t C,
                        int64_t V, int64_t Vs) {
  CMat<T> X(x, R, C);                                   // (R, C)
  CVecMap<T> L(lse, R), dL(dlosses, R);                 // (R), (R)
  if (dx != nullptr) Mat<T>(dx, R, C).setZero();
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = std::min(Vs, V - v0);
    CMat<T> Ws(w + v0 * C, vs, C);                      // (vs, C)
    Mat<T> dZ(logits, R, vs);                           // (R, vs)
    dZ.noalias() = X * Ws.transpose();
    dZ.array() = (dZ.array().colwise() - L.array()).exp().colwise() *
                 dL.array();
    for (int64_t n = 0; n < R; ++n) {
      const int64_t t = targets[n] - v0;
      if (t >= 0 && t < vs) dZ(n, t) -= dL(n);
    }
    if (dx != nullptr) Mat<T>(dx, R, C).noalias() += dZ * Ws;
    Mat<T>(dw + v0 * C, vs, C).noalias() += dZ.transpose() * X;
  }
}

#define SF_INSTANTIATE(T)                                                    \
  template double OutputLossForward<T>(T*, T*, T*, const T*, const T*,       \
                                       const int32_t*, int64_t, int64_t,     \
                                       int64_t, int64_t);                    \
  template void OutputLossBackward<T>(T*, T*, T*, const T*, const T*,        \
                                      const T*, const T*, const int32_t*,    \
                                      int64_t, int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

namespace {

// z (V) = the logits of token n.
std::vector<double> LogitsRef(const double* x, const double* w, int64_t n,
                              int64_t C, int64_t V) {
  std::vector<double> z(V, 0.0);
  for (int64_t v = 0; v < V; ++v) {
    for (int64_t c = 0; c < C; ++c) z[v] += x[n * C + c] * w[v * C + c];
  }
  return z;
}

}  // namespace

double OutputLossForwardRef(double* losses, double* lse, double* /*logits*/,
                            const double* x, const double* w,
                            const int32_t* targets, int64_t R, int64_t C,
                            int64_t V, int64_t /*Vs*/) {
  double total = 0.0;
  for (int64_t n = 0; n < R; ++n) {
    const std::vector<double> z = LogitsRef(x, w, n, C, V);
    const double m = *std::max_element(z.begin(), z.end());
    double s = 0.0;
    for (double zv : z) s += std::exp(zv - m);
    lse[n] = m + std::log(s);
    const double loss = lse[n] - z[targets[n]];
    if (losses != nullptr) losses[n] = loss;
    total += loss;
  }
  return R > 0 ? total / static_cast<double>(R) : 0.0;
}

void OutputLossBackwardRef(double* dx, double* dw, double* /*logits*/,
                           const double* dlosses, const double* lse,
                           const double* x, const double* w,
                           const int32_t* targets, int64_t R, int64_t C,
                           int64_t V, int64_t /*Vs*/) {
  for (int64_t n = 0; n < R; ++n) {
    const std::vector<double> z = LogitsRef(x, w, n, C, V);
    if (dx != nullptr) std::fill(dx + n * C, dx + (n + 1) * C, 0.0);
    for (int64_t v = 0; v < V; ++v) {
      const double dz =
          dlosses[n] * (std::exp(z[v] - lse[n]) - (v == targets[n] ? 1 : 0));
      for (int64_t c = 0; c < C; ++c) {
        if (dx != nullptr) dx[n * C + c] += dz * w[v * C + c];
        dw[v * C + c] += dz * x[n * C + c];
      }
    }
  }
}

}  // namespace stateflow::backend

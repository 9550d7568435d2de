#include "backend/kernels/layer_norm.h"

#include <cmath>

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

template <typename T>
void LayerNormForward(T* y, T* mean, T* rstd, const T* x, const T* w,
                      const T* b, int64_t R, int64_t C, T eps) {
  Mat<T> Y(y, R, C);                // (R, C): x - mean, then the output
  CMat<T> X(x, R, C);               // (R, C)
  const auto W = CVecMap<T>(w, C).transpose().array();  // (1, C)
  VecMap<T> M(mean, R);             // (R)
  VecMap<T> Rs(rstd, R);            // (R)
  M = X.rowwise().mean();
  Y.array() = X.array().colwise() - M.array();
  Rs = ((Y.array().square().rowwise().sum() / T(C)) + eps).rsqrt();
  Y.array() = (Y.array().colwise() * Rs.array()).rowwise() * W;
  if (b != nullptr) {
    Y.array().rowwise() += CVecMap<T>(b, C).transpose().array();
  }
}

// With xhat = (x - mean) * rstd and g = dy * w:
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
template <typename T>
void LayerNormBackward(T* dx, T* dw, T* db, const T* dy, const T* x,
                       const T* w, const T* mean, const T* rstd, int64_t R,
                       int64_t C) {
  Mat<T> dX(dx, R, C);              // (R, C)
  CMat<T> dY(dy, R, C);             // (R, C)
  CMat<T> X(x, R, C);               // (R, C)
  const auto W = CVecMap<T>(w, C).transpose().array();  // (1, C)
  CVecMap<T> M(mean, R);            // (R)
  CVecMap<T> Rs(rstd, R);           // (R)
  const RowMat<T> xhat =
      (X.array().colwise() - M.array()).colwise() * Rs.array();  // (R, C)
  VecMap<T>(dw, C) +=
      (dY.array() * xhat.array()).colwise().sum().transpose().matrix();
  if (db != nullptr) VecMap<T>(db, C) += dY.colwise().sum().transpose();
  const RowMat<T> g = dY.array().rowwise() * W;                        // (R, C)
  const Vec<T> mg = g.rowwise().mean();                                // (R)
  const Vec<T> mgx = (g.array() * xhat.array()).rowwise().sum() / T(C);  // (R)
  dX.array() = ((g.array().colwise() - mg.array()) -
                xhat.array().colwise() * mgx.array()).colwise() *
               Rs.array();
}

#define SF_INSTANTIATE(T)                                                     \
  template void LayerNormForward<T>(T*, T*, T*, const T*, const T*, const T*, \
                                    int64_t, int64_t, T);                     \
  template void LayerNormBackward<T>(T*, T*, T*, const T*, const T*,          \
                                     const T*, const T*, const T*, int64_t,   \
                                     int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

void LayerNormForwardRef(double* y, double* mean, double* rstd,
                         const double* x, const double* w, const double* b,
                         int64_t R, int64_t C, double eps) {
  for (int64_t n = 0; n < R; ++n) {
    double s = 0.0;
    for (int64_t c = 0; c < C; ++c) s += x[n * C + c];
    mean[n] = s / static_cast<double>(C);
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      ss += (x[n * C + c] - mean[n]) * (x[n * C + c] - mean[n]);
    }
    rstd[n] = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) {
      y[n * C + c] = (x[n * C + c] - mean[n]) * rstd[n] * w[c] +
                     (b != nullptr ? b[c] : 0.0);
    }
  }
}

void LayerNormBackwardRef(double* dx, double* dw, double* db,
                          const double* dy, const double* x, const double* w,
                          const double* mean, const double* rstd, int64_t R,
                          int64_t C) {
  for (int64_t n = 0; n < R; ++n) {
    const double mu = mean[n], r = rstd[n];
    // y_c = (x_c - mu) r w_c + b_c with mu = mean x, dmu/dx_i = 1/C, and
    // r = (mean (x - mu)^2 + eps)^(-1/2), dr/dx_i = -r^3 (x_i - mu) / C.
    double sum_g = 0.0;  // sum_c dy_c w_c
    double dot = 0.0;    // sum_c dy_c w_c (x_c - mu)
    for (int64_t c = 0; c < C; ++c) {
      const double g = dy[n * C + c] * w[c];
      sum_g += g;
      dot += g * (x[n * C + c] - mu);
      dw[c] += dy[n * C + c] * (x[n * C + c] - mu) * r;
      if (db != nullptr) db[c] += dy[n * C + c];
    }
    const double inv_c = 1.0 / static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) {
      dx[n * C + c] = (dy[n * C + c] * w[c] - sum_g * inv_c) * r -
                      dot * r * r * r * (x[n * C + c] - mu) * inv_c;
    }
  }
}

}  // namespace stateflow::backend

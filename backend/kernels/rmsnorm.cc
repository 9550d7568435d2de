#include "backend/kernels/rmsnorm.h"

#include <cmath>

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

template <typename T>
void RmsNormForward(T* y, T* rstd, const T* x, const T* w, int64_t R,
                    int64_t C, T eps) {
  Mat<T> Y(y, R, C);                // (R, C)
  CMat<T> X(x, R, C);               // (R, C)
  const auto W = CVecMap<T>(w, C).transpose().array();  // (1, C)
  VecMap<T> Rs(rstd, R);             // (R)
  Rs = ((X.array().square().rowwise().sum() / T(C)) + eps).rsqrt();
  Y.array() = (X.array().colwise() * Rs.array()).rowwise() * W;
}

// With xhat = x * rstd and g = dy * w:
//   dx = rstd * (g - xhat * mean_c(g * xhat)).
template <typename T>
void RmsNormBackward(T* dx, T* dw, const T* dy, const T* x, const T* w,
                     const T* rstd, int64_t R, int64_t C) {
  Mat<T> dX(dx, R, C);              // (R, C)
  CMat<T> dY(dy, R, C);             // (R, C)
  CMat<T> X(x, R, C);               // (R, C)
  const auto W = CVecMap<T>(w, C).transpose().array();  // (1, C)
  CVecMap<T> Rs(rstd, R);            // (R)
  const RowMat<T> xhat = X.array().colwise() * Rs.array();  // (R, C)
  VecMap<T>(dw, C) +=
      (dY.array() * xhat.array()).colwise().sum().transpose().matrix();
  const RowMat<T> g = dY.array().rowwise() * W;            // (R, C)
  const Vec<T> m = (g.array() * xhat.array()).rowwise().sum() / T(C);  // (R)
  dX.array() = (g.array() - xhat.array().colwise() * m.array()).colwise() *
               Rs.array();
}

#define SF_INSTANTIATE(T)                                                   \
  template void RmsNormForward<T>(T*, T*, const T*, const T*, int64_t,      \
                                  int64_t, T);                              \
  template void RmsNormBackward<T>(T*, T*, const T*, const T*, const T*,    \
                                   const T*, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

void RmsNormForwardRef(double* y, double* rstd, const double* x,
                       const double* w, int64_t R, int64_t C, double eps) {
  for (int64_t n = 0; n < R; ++n) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    rstd[n] = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] * rstd[n] * w[c];
  }
}

void RmsNormBackwardRef(double* dx, double* dw, const double* dy,
                        const double* x, const double* w, const double* rstd,
                        int64_t R, int64_t C) {
  for (int64_t n = 0; n < R; ++n) {
    const double r = rstd[n];
    // y_c = x_c r w_c, r = (mean x^2 + eps)^(-1/2), dr/dx_c = -r^3 x_c / C.
    double dot = 0.0;  // sum_c dy_c w_c x_c
    for (int64_t c = 0; c < C; ++c) {
      dot += dy[n * C + c] * w[c] * x[n * C + c];
      dw[c] += dy[n * C + c] * x[n * C + c] * r;
    }
    for (int64_t c = 0; c < C; ++c) {
      dx[n * C + c] = dy[n * C + c] * w[c] * r -
                      dot * r * r * r * x[n * C + c] / static_cast<double>(C);
    }
  }
}

}  // namespace stateflow::backend

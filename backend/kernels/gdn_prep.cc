#include "backend/kernels/gdn_prep.h"

#include <cmath>

#include "backend/kernels/eigen_types.h"
#include "backend/kernels/silu.h"

namespace stateflow::backend {

template <typename T>
void GdnGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                    int64_t T_len, int64_t H) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      g[t * H + h] = -std::exp(A_log[h]) * StableSoftplus(a[t * H + h] + dt_bias[h]);
    }
  }
}

// dg/da = -exp(A_log) * sigmoid(a + dt_bias) = dg/d(dt_bias); dg/dA_log = g.
template <typename T>
void GdnGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg, const T* a,
                     const T* A_log, const T* dt_bias, int64_t T_len,
                     int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    const T decay_rate = std::exp(A_log[h]);
    T sum_da = 0, sum_dalog = 0;
    for (int64_t t = 0; t < T_len; ++t) {
      const T u = a[t * H + h] + dt_bias[h];
      const T d = -dg[t * H + h] * decay_rate * StableSigmoid(u);
      da[t * H + h] = d;
      sum_da += d;
      sum_dalog += -dg[t * H + h] * decay_rate * StableSoftplus(u);
    }
    ddt_bias[h] += sum_da;
    dA_log[h] += sum_dalog;
  }
}

template <typename T>
void SigmoidForward(T* beta, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) beta[i] = StableSigmoid(b[i]);
}

template <typename T>
void SigmoidBackward(T* db, const T* dbeta, const T* beta, int64_t n) {
  for (int64_t i = 0; i < n; ++i) db[i] = dbeta[i] * beta[i] * (T(1) - beta[i]);
}

template <typename T>
void L2NormForward(T* y, T* rnorm, const T* x, int64_t R, int64_t D, T scale,
                   T eps) {
  Mat<T> Y(y, R, D);        // (R, D)
  CMat<T> X(x, R, D);       // (R, D)
  VecMap<T> rn(rnorm, R);   // (R)
  rn = (X.rowwise().squaredNorm().array() + eps).rsqrt();
  Y = (X.array().colwise() * (rn.array() * scale)).matrix();
}

template <typename T>
void L2NormBackward(T* dx, const T* dy, const T* x, const T* rnorm, int64_t R,
                    int64_t D, T scale) {
  Mat<T> dX(dx, R, D);      // (R, D)
  CMat<T> dY(dy, R, D);     // (R, D)
  CMat<T> X(x, R, D);       // (R, D)
  CVecMap<T> rn(rnorm, R);  // (R)
  const Vec<T> xdy = (X.array() * dY.array()).rowwise().sum();   // (R)
  const Vec<T> c = rn.array().square() * xdy.array();             // (R)
  dX = ((dY.array() - X.array().colwise() * c.array()).colwise() *
        (rn.array() * scale)).matrix();
}

#define SF_INSTANTIATE(T)                                                   \
  template void GdnGateForward<T>(T*, const T*, const T*, const T*,         \
                                  int64_t, int64_t);                        \
  template void GdnGateBackward<T>(T*, T*, T*, const T*, const T*,          \
                                   const T*, const T*, int64_t, int64_t);   \
  template void SigmoidForward<T>(T*, const T*, int64_t);                   \
  template void SigmoidBackward<T>(T*, const T*, const T*, int64_t);        \
  template void L2NormForward<T>(T*, T*, const T*, int64_t, int64_t, T, T); \
  template void L2NormBackward<T>(T*, const T*, const T*, const T*,         \
                                  int64_t, int64_t, T);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

void GdnGateForwardRef(double* g, const double* a, const double* A_log,
                       const double* dt_bias, int64_t T_len, int64_t H) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const double u = a[t * H + h] + dt_bias[h];
      g[t * H + h] = -std::exp(A_log[h]) * std::log(1.0 + std::exp(u));
    }
  }
}

void GdnGateBackwardRef(double* da, double* dA_log, double* ddt_bias,
                        const double* dg, const double* a,
                        const double* A_log, const double* dt_bias,
                        int64_t T_len, int64_t H) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const double u = a[t * H + h] + dt_bias[h];
      const double e = std::exp(u);
      // d softplus(u)/du = e^u / (1 + e^u).
      da[t * H + h] = -dg[t * H + h] * std::exp(A_log[h]) * e / (1.0 + e);
      ddt_bias[h] += da[t * H + h];
      dA_log[h] += -dg[t * H + h] * std::exp(A_log[h]) * std::log(1.0 + e);
    }
  }
}

void SigmoidForwardRef(double* beta, const double* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) beta[i] = 1.0 / (1.0 + std::exp(-b[i]));
}

void SigmoidBackwardRef(double* db, const double* dbeta, const double* beta,
                        int64_t n) {
  for (int64_t i = 0; i < n; ++i) db[i] = dbeta[i] * beta[i] * (1.0 - beta[i]);
}

void L2NormForwardRef(double* y, double* rnorm, const double* x, int64_t R,
                      int64_t D, double scale, double eps) {
  for (int64_t r = 0; r < R; ++r) {
    double ss = eps;
    for (int64_t d = 0; d < D; ++d) ss += x[r * D + d] * x[r * D + d];
    rnorm[r] = 1.0 / std::sqrt(ss);
    for (int64_t d = 0; d < D; ++d) y[r * D + d] = scale * x[r * D + d] * rnorm[r];
  }
}

void L2NormBackwardRef(double* dx, const double* dy, const double* x,
                       const double* rnorm, int64_t R, int64_t D,
                       double scale) {
  for (int64_t r = 0; r < R; ++r) {
    // y_i = s x_i n, n = (|x|^2 + eps)^(-1/2), dn/dx_j = -n^3 x_j.
    const double n = rnorm[r];
    double xdy = 0.0;
    for (int64_t d = 0; d < D; ++d) xdy += x[r * D + d] * dy[r * D + d];
    for (int64_t d = 0; d < D; ++d) {
      dx[r * D + d] = scale * (n * dy[r * D + d] - n * n * n * x[r * D + d] * xdy);
    }
  }
}

}  // namespace stateflow::backend

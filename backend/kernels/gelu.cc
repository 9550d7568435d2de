#include "backend/kernels/gelu.h"

#include <cmath>
#include <cstdint>

#include "backend/kernels/silu.h"  // kParallelElements

namespace stateflow::backend {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;      // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)

// Phi(x), the standard normal CDF.
template <typename T>
T NormalCdf(T x) {
  return T(0.5) * std::erfc(-x * T(kInvSqrt2));
}

// phi(x), the standard normal density.
template <typename T>
T NormalPdf(T x) {
  return T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
}

}  // namespace

template <typename T>
void GeluForward(T* y, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    y[i] = v * NormalCdf(v);
  }
}

template <typename T>
void GeluBackward(T* dx, const T* dy, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    dx[i] = dy[i] * (NormalCdf(v) + v * NormalPdf(v));
  }
}

template void GeluForward<float>(float*, const float*, int64_t);
template void GeluForward<double>(double*, const double*, int64_t);
template void GeluBackward<float>(float*, const float*, const float*, int64_t);
template void GeluBackward<double>(double*, const double*, const double*,
                                   int64_t);

void GeluForwardRef(double* y, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = x[i] * 0.5 * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
  }
}

void GeluBackwardRef(double* dx, const double* dy, const double* x,
                     int64_t n) {
  const double pi = std::acos(-1.0);
  for (int64_t i = 0; i < n; ++i) {
    // d/dx [x Phi(x)] = Phi(x) + x Phi'(x), Phi' = exp(-x^2/2) / sqrt(2 pi).
    const double cdf = 0.5 * (1.0 + std::erf(x[i] / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * x[i] * x[i]) / std::sqrt(2.0 * pi);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

}  // namespace stateflow::backend

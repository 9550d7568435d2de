#include "backend/kernels/silu.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

template <typename T>
void StableSigmoidSpan(T* s, const T* x, int64_t n) {
  assert(reinterpret_cast<std::uintptr_t>(s) % kSigmoidSpanAlignBytes == 0);
  // e = exp(-|x|) in (0, 1], vectorised; then 1 / (1 + e) for x >= 0 and
  // e / (1 + e) below, as StableSigmoid (a loop the compiler vectorises).
  VecMap<T>(s, n).array() = (-CVecMap<T>(x, n).array().abs()).exp();
  for (int64_t i = 0; i < n; ++i) {
    const T e = s[i];
    const T r = T(1) / (T(1) + e);
    s[i] = x[i] >= T(0) ? r : e * r;
  }
}

template <typename T>
void SiluForward(T* y, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i0 = 0; i0 < n; i0 += kSigmoidSpan) {
    alignas(kSigmoidSpanAlignBytes) T s[kSigmoidSpan];
    const int64_t m = std::min(kSigmoidSpan, n - i0);
    StableSigmoidSpan(s, x + i0, m);
    for (int64_t j = 0; j < m; ++j) y[i0 + j] = x[i0 + j] * s[j];
  }
}

template <typename T>
void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i0 = 0; i0 < n; i0 += kSigmoidSpan) {
    alignas(kSigmoidSpanAlignBytes) T s[kSigmoidSpan];
    const int64_t m = std::min(kSigmoidSpan, n - i0);
    StableSigmoidSpan(s, x + i0, m);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = i0 + j;
      dx[i] = dy[i] * s[j] * (T(1) + x[i] * (T(1) - s[j]));
    }
  }
}

template void StableSigmoidSpan<float>(float*, const float*, int64_t);
template void StableSigmoidSpan<double>(double*, const double*, int64_t);

template void SiluForward<float>(float*, const float*, int64_t);
template void SiluForward<double>(double*, const double*, int64_t);
template void SiluBackward<float>(float*, const float*, const float*, int64_t);
template void SiluBackward<double>(double*, const double*, const double*,
                                   int64_t);

void SiluForwardRef(double* y, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0 + std::exp(-x[i]));
}

void SiluBackwardRef(double* dx, const double* dy, const double* x,
                     int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // d/dx [x / (1 + e^-x)] = 1/(1+e^-x) + x e^-x / (1+e^-x)^2.
    const double e = std::exp(-x[i]);
    dx[i] = dy[i] * (1.0 / (1.0 + e) + x[i] * e / ((1.0 + e) * (1.0 + e)));
  }
}

}  // namespace stateflow::backend

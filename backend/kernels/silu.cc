#include "backend/kernels/silu.h"

#include <cmath>

namespace stateflow::backend {

template <typename T>
void SiluForward(T* y, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * StableSigmoid(x[i]);
}

template <typename T>
void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T s = StableSigmoid(x[i]);
    dx[i] = dy[i] * s * (T(1) + x[i] * (T(1) - s));
  }
}

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

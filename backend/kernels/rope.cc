// Rotary position embedding (rope.h). Dimensions: R rows, H heads, d head
// dim, half = d / 2.
#include "backend/kernels/rope.h"

#include <cmath>
#include <vector>

namespace stateflow::backend {
namespace {

// cos and sin of pos * base^(-2 i / d), i < half, rounded to T.
template <typename T>
void Angles(std::vector<T>* cos_a, std::vector<T>* sin_a, int64_t pos,
            int64_t d, double base) {
  const int64_t half = d / 2;
  cos_a->resize(half);
  sin_a->resize(half);
  for (int64_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(pos) *
                     std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    (*cos_a)[i] = static_cast<T>(std::cos(a));
    (*sin_a)[i] = static_cast<T>(std::sin(a));
  }
}

// Rotates every head of every row by +angle (sign = 1) or -angle (-1).
template <typename T>
void Rotate(T* x, int64_t R, int64_t H, int64_t d, int64_t pos0, double base,
            T sign) {
  const int64_t half = d / 2;
  std::vector<T> c, s;
  for (int64_t n = 0; n < R; ++n) {
    Angles(&c, &s, pos0 + n, d, base);
    for (T& e : s) e *= sign;
    for (int64_t h = 0; h < H; ++h) {
      T* a = x + (n * H + h) * d;  // first half of the head
      T* b = a + half;             // second half
      for (int64_t i = 0; i < half; ++i) {
        const T ai = a[i], bi = b[i];
        a[i] = ai * c[i] - bi * s[i];
        b[i] = bi * c[i] + ai * s[i];
      }
    }
  }
}

}  // namespace

template <typename T>
void RopeForward(T* x, int64_t R, int64_t H, int64_t d, int64_t pos0,
                 double base) {
  Rotate<T>(x, R, H, d, pos0, base, T(1));
}

template <typename T>
void RopeBackward(T* dx, int64_t R, int64_t H, int64_t d, int64_t pos0,
                  double base) {
  Rotate<T>(dx, R, H, d, pos0, base, T(-1));
}

void RopeForwardRef(double* y, const double* x, int64_t R, int64_t H,
                    int64_t d, int64_t pos0, double base) {
  const int64_t half = d / 2;
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const double* xr = x + (n * H + h) * d;
      double* yr = y + (n * H + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(pos0 + n) *
                         std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        yr[i] = xr[i] * std::cos(a) - xr[i + half] * std::sin(a);
        yr[i + half] = xr[i + half] * std::cos(a) + xr[i] * std::sin(a);
      }
    }
  }
}

// The transpose of the rotation: dx_i = dy_i cos + dy_{i+half} sin,
// dx_{i+half} = dy_{i+half} cos - dy_i sin.
void RopeBackwardRef(double* dx, const double* dy, int64_t R, int64_t H,
                     int64_t d, int64_t pos0, double base) {
  const int64_t half = d / 2;
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      const double* g = dy + (n * H + h) * d;
      double* out = dx + (n * H + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(pos0 + n) *
                         std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        out[i] = g[i] * std::cos(a) + g[i + half] * std::sin(a);
        out[i + half] = g[i + half] * std::cos(a) - g[i] * std::sin(a);
      }
    }
  }
}

#define SF_INSTANTIATE(T)                                                   \
  template void RopeForward<T>(T*, int64_t, int64_t, int64_t, int64_t,      \
                               double);                                     \
  template void RopeBackward<T>(T*, int64_t, int64_t, int64_t, int64_t,     \
                                double);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

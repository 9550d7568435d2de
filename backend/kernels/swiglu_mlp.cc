#include "backend/kernels/swiglu_mlp.h"

#include <algorithm>

#include "backend/kernels/eigen_types.h"
#include "backend/kernels/linear.h"
#include "backend/kernels/silu.h"

namespace stateflow::backend {

namespace {

// h (n) = silu(gate) * up.
template <typename T>
void SwigluHidden(T* h, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t i0 = 0; i0 < n; i0 += kSigmoidSpan) {
    alignas(kSigmoidSpanAlignBytes) T s[kSigmoidSpan];
    const int64_t m = std::min(kSigmoidSpan, n - i0);
    StableSigmoidSpan(s, gate + i0, m);
    for (int64_t j = 0; j < m; ++j) h[i0 + j] = gate[i0 + j] * s[j] * up[i0 + j];
  }
}

}  // namespace

template <typename T>
void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x, const T* wg,
                      const T* wu, const T* wd, int64_t R, int64_t C,
                      int64_t F) {
  LinearForward<T>(gate, x, wg, nullptr, R, C, F);
  LinearForward<T>(up, x, wu, nullptr, R, C, F);
  SwigluHidden<T>(h, gate, up, R * F);
  LinearForward<T>(y, h, wd, nullptr, R, F, C);
}

template <typename T>
void SwigluMlpBackward(T* dx, T* dwg, T* dwu, T* dwd, T* workspace,
                       const T* dy, const T* gate, const T* up, const T* x,
                       const T* wg, const T* wu, const T* wd, int64_t R,
                       int64_t C, int64_t F) {
  T* hd = workspace;              // (R, F): h, then d(up)
  T* dgate = workspace + R * F;   // (R, F): dh, then d(gate)
  SwigluHidden<T>(hd, gate, up, R * F);
  // dwd += dy^T h, dh = dy wd.
  LinearBackward<T>(dgate, dwd, nullptr, dy, hd, wd, R, F, C);
#pragma omp parallel for schedule(static) if (R * F >= kParallelElements)
  for (int64_t i0 = 0; i0 < R * F; i0 += kSigmoidSpan) {
    alignas(kSigmoidSpanAlignBytes) T s[kSigmoidSpan];
    const int64_t m = std::min(kSigmoidSpan, R * F - i0);
    StableSigmoidSpan(s, gate + i0, m);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = i0 + j;
      const T dh = dgate[i];
      dgate[i] = dh * up[i] * s[j] * (T(1) + gate[i] * (T(1) - s[j]));
      hd[i] = dh * gate[i] * s[j];
    }
  }
  // dx = d(gate) wg + d(up) wu; dwg += d(gate)^T x; dwu += d(up)^T x.
  LinearBackward<T>(dx, dwg, nullptr, dgate, x, wg, R, C, F);
  LinearBackward<T>(nullptr, dwu, nullptr, hd, x, wu, R, C, F);
  if (dx != nullptr) {
    Mat<T>(dx, R, C).noalias() += CMat<T>(hd, R, F) * CMat<T>(wu, F, C);
  }
}

#define SF_INSTANTIATE(T)                                                   \
  template void SwigluMlpForward<T>(T*, T*, T*, T*, const T*, const T*,     \
                                    const T*, const T*, int64_t, int64_t,   \
                                    int64_t);                               \
  template void SwigluMlpBackward<T>(T*, T*, T*, T*, T*, const T*,          \
                                     const T*, const T*, const T*,          \
                                     const T*, const T*, const T*, int64_t, \
                                     int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

// The reference spells the chain rule out with the reference linear layers.
void SwigluMlpForwardRef(double* y, double* gate, double* up, double* h,
                         const double* x, const double* wg, const double* wu,
                         const double* wd, int64_t R, int64_t C, int64_t F) {
  LinearForwardRef(gate, x, wg, nullptr, R, C, F);
  LinearForwardRef(up, x, wu, nullptr, R, C, F);
  SiluForwardRef(h, gate, R * F);
  for (int64_t i = 0; i < R * F; ++i) h[i] *= up[i];
  LinearForwardRef(y, h, wd, nullptr, R, F, C);
}

void SwigluMlpBackwardRef(double* dx, double* dwg, double* dwu, double* dwd,
                          double* workspace, const double* dy,
                          const double* gate, const double* up,
                          const double* x, const double* wg, const double* wu,
                          const double* wd, int64_t R, int64_t C, int64_t F) {
  double* a = workspace;          // (R, F): silu(gate), then d(gate)
  double* b = workspace + R * F;  // (R, F): d(up)
  SiluForwardRef(a, gate, R * F);
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const int64_t i = n * F + f;
      double dh = 0.0;  // dh = sum_c dy[n, c] wd[c, f]
      for (int64_t c = 0; c < C; ++c) {
        dh += dy[n * C + c] * wd[c * F + f];
        dwd[c * F + f] += dy[n * C + c] * a[i] * up[i];
      }
      b[i] = dh * a[i];
      a[i] = dh * up[i];  // d(silu(gate))
    }
  }
  SiluBackwardRef(a, a, gate, R * F);
  LinearBackwardRef(dx, dwg, nullptr, a, x, wg, R, C, F);
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      for (int64_t c = 0; c < C; ++c) {
        dwu[f * C + c] += b[n * F + f] * x[n * C + c];
        if (dx != nullptr) dx[n * C + c] += b[n * F + f] * wu[f * C + c];
      }
    }
  }
}

}  // namespace stateflow::backend

#include "backend/kernels/kda_prep.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/kernels/silu.h"

namespace stateflow::backend {

template <typename T>
void KdaGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                    int64_t T_len, int64_t H, int64_t Dk) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const T decay_rate = std::exp(A_log[h]);
      for (int64_t c = 0; c < Dk; ++c) {
        const int64_t i = (t * H + h) * Dk + c;
        g[i] = -decay_rate * StableSoftplus(a[i] + dt_bias[h * Dk + c]);
      }
    }
  }
}

// dg/da = -exp(A_log) * sigmoid(a + dt_bias) = dg/d(dt_bias); dg/dA_log = g.
template <typename T>
void KdaGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg, const T* a,
                     const T* A_log, const T* dt_bias, int64_t T_len,
                     int64_t H, int64_t Dk) {
  std::vector<T> sum_da(Dk);  // (Dk) one head's d(dt_bias)
  for (int64_t h = 0; h < H; ++h) {
    const T decay_rate = std::exp(A_log[h]);
    std::fill(sum_da.begin(), sum_da.end(), T(0));
    T sum_dalog = 0;
    for (int64_t t = 0; t < T_len; ++t) {
      for (int64_t c = 0; c < Dk; ++c) {
        const int64_t i = (t * H + h) * Dk + c;
        const T u = a[i] + dt_bias[h * Dk + c];
        const T d = -dg[i] * decay_rate * StableSigmoid(u);
        da[i] = d;
        sum_da[c] += d;
        sum_dalog += -dg[i] * decay_rate * StableSoftplus(u);
      }
    }
    for (int64_t c = 0; c < Dk; ++c) ddt_bias[h * Dk + c] += sum_da[c];
    dA_log[h] += sum_dalog;
  }
}

#define SF_INSTANTIATE(T)                                                   \
  template void KdaGateForward<T>(T*, const T*, const T*, const T*,         \
                                  int64_t, int64_t, int64_t);               \
  template void KdaGateBackward<T>(T*, T*, T*, const T*, const T*,          \
                                   const T*, const T*, int64_t, int64_t,    \
                                   int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

void KdaGateForwardRef(double* g, const double* a, const double* A_log,
                       const double* dt_bias, int64_t T_len, int64_t H,
                       int64_t Dk) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < Dk; ++c) {
        const int64_t i = (t * H + h) * Dk + c;
        const double u = a[i] + dt_bias[h * Dk + c];
        g[i] = -std::exp(A_log[h]) * std::log(1.0 + std::exp(u));
      }
    }
  }
}

void KdaGateBackwardRef(double* da, double* dA_log, double* ddt_bias,
                        const double* dg, const double* a,
                        const double* A_log, const double* dt_bias,
                        int64_t T_len, int64_t H, int64_t Dk) {
  for (int64_t t = 0; t < T_len; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < Dk; ++c) {
        const int64_t i = (t * H + h) * Dk + c;
        const double u = a[i] + dt_bias[h * Dk + c];
        const double e = std::exp(u);
        // d softplus(u)/du = e^u / (1 + e^u).
        da[i] = -dg[i] * std::exp(A_log[h]) * e / (1.0 + e);
        ddt_bias[h * Dk + c] += da[i];
        dA_log[h] += -dg[i] * std::exp(A_log[h]) * std::log(1.0 + e);
      }
    }
  }
}

}  // namespace stateflow::backend

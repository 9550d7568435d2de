// RMSNorm with a weight, y = x / sqrt(mean(x^2) + eps) * w per row, as a
// forward/backward kernel pair with the plain float64 reference beside it.
// Conventions as in linear.h (outputs first; dx written, dw accumulated).
// Not LayerNorm: no mean subtraction, no bias.
//
//   RmsNormForward<float>(y, rstd, x, w, R, C, 1e-6f);
//   RmsNormBackward<float>(dx, dw, dy, x, w, rstd, R, C);
//
// Dimensions: R rows (tokens), C features.
#pragma once

#include <cstdint>

namespace stateflow::backend {

// y (R, C) = x * rstd * w; saves rstd (R) = 1 / sqrt(mean_c x^2 + eps) for
// the backward.
template <typename T>
void RmsNormForward(T* y, T* rstd, const T* x, const T* w, int64_t R,
                    int64_t C, T eps);

// dx (R, C) written; dw (C) += sum_n dy * x * rstd.
template <typename T>
void RmsNormBackward(T* dx, T* dw, const T* dy, const T* x, const T* w,
                     const T* rstd, int64_t R, int64_t C);

void RmsNormForwardRef(double* y, double* rstd, const double* x,
                       const double* w, int64_t R, int64_t C, double eps);
void RmsNormBackwardRef(double* dx, double* dw, const double* dy,
                        const double* x, const double* w, const double* rstd,
                        int64_t R, int64_t C);

}  // namespace stateflow::backend

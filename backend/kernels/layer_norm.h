// LayerNorm with a weight and a bias, y = (x - mean) / sqrt(var + eps) * w + b
// per row (torch.nn.LayerNorm over the last dimension: var the biased
// variance), as a forward/backward kernel pair with the plain float64
// reference beside it. Conventions as in linear.h (outputs first; dx
// written, dw and db accumulated). Not RMSNorm (rmsnorm.h): that one
// subtracts no mean and has no bias.
//
//   LayerNormForward<float>(y, mean, rstd, x, w, b, R, C, 1e-5f);
//   LayerNormBackward<float>(dx, dw, db, dy, x, w, mean, rstd, R, C);
//
// Dimensions: R rows (tokens), C features.
#pragma once

#include <cstdint>

namespace stateflow::backend {

// y (R, C) = (x - mean) * rstd * w + b; saves mean (R) = mean_c x and
// rstd (R) = 1 / sqrt(mean_c (x - mean)^2 + eps) for the backward. The
// variance is taken about the mean (two passes over the row), never as
// E[x^2] - mean^2, so rows far from zero keep it. b may be nullptr (no bias).
template <typename T>
void LayerNormForward(T* y, T* mean, T* rstd, const T* x, const T* w,
                      const T* b, int64_t R, int64_t C, T eps);

// dx (R, C) written; dw (C) += sum_n dy * xhat, db (C) += sum_n dy (nullptr
// skips it), xhat = (x - mean) * rstd. REQUIRES: dx does not alias dy.
template <typename T>
void LayerNormBackward(T* dx, T* dw, T* db, const T* dy, const T* x,
                       const T* w, const T* mean, const T* rstd, int64_t R,
                       int64_t C);

void LayerNormForwardRef(double* y, double* mean, double* rstd,
                         const double* x, const double* w, const double* b,
                         int64_t R, int64_t C, double eps);
void LayerNormBackwardRef(double* dx, double* dw, double* db,
                          const double* dy, const double* x, const double* w,
                          const double* mean, const double* rstd, int64_t R,
                          int64_t C);

}  // namespace stateflow::backend

// Rotary position embedding (RoPE), the rotate-half form of GPT-NeoX and
// Llama, applied in place to rows of heads by absolute position, with its
// backward (the inverse rotation) and the plain float64 reference beside it.
// For a head vector x of even dim d, half = d / 2, and i < half:
//   theta_i = base^(-2 i / d),  a = pos theta_i,
//   y_i        = x_i cos a - x_{i+half} sin a,
//   y_{i+half} = x_{i+half} cos a + x_i sin a.
// The angle depends on the absolute position only, so a sequence rotated
// chunk by chunk gets the same bits as rotated whole. cos and sin are
// computed in double and rounded to T.
//
// Not the attention (attention.h), not Mamba-3's data-dependent rotation.
//
//   RopeForward<float>(q, S, Hq, d, /*pos0=*/start);   // q (S, Hq, d)
//   RopeBackward<float>(dq, S, Hq, d, start);          // dq: d(rotated) -> d(x)
//
// Dimensions: R rows at positions pos0..pos0+R-1, H heads, d head dim (even).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// The base of the rotary frequencies (docs/models.md).
inline constexpr double kRopeTheta = 10000.0;

// x (R, H, d) rotated in place. REQUIRES: d even, pos0 >= 0.
template <typename T>
void RopeForward(T* x, int64_t R, int64_t H, int64_t d, int64_t pos0,
                 double base = kRopeTheta);

// dx (R, H, d): in place, the gradient of the rotated rows becomes the
// gradient of the rows before the rotation (the inverse rotation).
template <typename T>
void RopeBackward(T* dx, int64_t R, int64_t H, int64_t d, int64_t pos0,
                  double base = kRopeTheta);

// Plain references: y (R, H, d) = RoPE(x) (not in place).
void RopeForwardRef(double* y, const double* x, int64_t R, int64_t H,
                    int64_t d, int64_t pos0, double base = kRopeTheta);
void RopeBackwardRef(double* dx, const double* dy, int64_t R, int64_t H,
                     int64_t d, int64_t pos0, double base = kRopeTheta);

}  // namespace stateflow::backend

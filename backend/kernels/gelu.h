// GELU in its exact form, y = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 with
// Phi the standard normal CDF (torch.nn.GELU(), approximate='none'),
// elementwise, as a forward/backward kernel pair with the plain float64
// reference beside it. Conventions as in linear.h. Not the tanh
// approximation.
//
//   GeluForward<float>(y, x, n);
//   GeluBackward<float>(dx, dy, x, n);
//
// Dimensions: n elements (any shape, flattened).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// y (n) = x Phi(x), Phi taken as erfc(-x / sqrt 2) / 2 (no cancellation in
// 1 + erf for x << 0). y may alias x.
template <typename T>
void GeluForward(T* y, const T* x, int64_t n);

// dx (n) = dy (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi) the
// standard normal density. dx may alias dy.
template <typename T>
void GeluBackward(T* dx, const T* dy, const T* x, int64_t n);

void GeluForwardRef(double* y, const double* x, int64_t n);
void GeluBackwardRef(double* dx, const double* dy, const double* x,
                     int64_t n);

}  // namespace stateflow::backend

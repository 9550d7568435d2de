// SiLU, y = x * sigmoid(x), elementwise, as a forward/backward kernel pair
// with the plain float64 reference beside it. Conventions as in linear.h.
//
//   SiluForward<float>(y, x, n);
//   SiluBackward<float>(dx, dy, x, n);
//
// Dimensions: n elements (any shape, flattened).
#pragma once

#include <cmath>
#include <cstdint>

namespace stateflow::backend {

// A sigmoid that does not overflow for large |x| (shared with the other
// kernels that need one).
template <typename T>
inline T StableSigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// log(1 + e^x) without overflow (for x > 20 it equals x in float and double
// to within rounding of log1p(e^-x)); the gates' softplus (GDN, KDA,
// Mamba-3).
template <typename T>
inline T StableSoftplus(T x) {
  return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// s (n) = sigmoid(x), as StableSigmoid, with the exponentials vectorised
// (Eigen's exp): the form the elementwise kernels use. s must not alias x.
// Callers go over long buffers in spans of kSigmoidSpan elements kept on
// the stack, aligned to kSigmoidSpanAlignBytes: Eigen's vectorised exp runs
// scalar on the elements before the destination's first aligned packet, so
// with an unaligned span the bits of an element depended on where the stack
// happened to put the buffer (found by the sanitizer build, whose stack
// layout differs: recompute full and none then disagreed in the last bits).
inline constexpr int64_t kSigmoidSpan = 256;
inline constexpr int kSigmoidSpanAlignBytes = 64;
template <typename T>
// REQUIRES: s aligned to kSigmoidSpanAlignBytes.
void StableSigmoidSpan(T* s, const T* x, int64_t n);

// The elementwise loops built on it (SiLU, SwiGLU) split their spans over
// the kernel threads (backend/threading.h, static schedule: each element is
// computed alike whichever thread computes it) from this many elements on.
inline constexpr int64_t kParallelElements = 1 << 14;

// y (n) = x * sigmoid(x). y may alias x.
template <typename T>
void SiluForward(T* y, const T* x, int64_t n);

// dx (n) = dy * sigmoid(x) * (1 + x * (1 - sigmoid(x))). dx may alias dy.
template <typename T>
void SiluBackward(T* dx, const T* dy, const T* x, int64_t n);

void SiluForwardRef(double* y, const double* x, int64_t n);
void SiluBackwardRef(double* dx, const double* dy, const double* x,
                     int64_t n);

}  // namespace stateflow::backend

// The scalar math of the grid kernels, callable on both sides of the device
// seam (hd.h): one overload per element type, each calling the C math
// function that both the host compiler (<cmath>) and nvcc's device library
// provide under the same name (expf / exp, ...). No std:: calls, so that the
// same line compiles as device code.
//
// Not a math library: only what the kernels in this folder use.
//
//   SF_HD inline float Swish(float x) { return x * grid::Sigmoid(x); }
#pragma once

#include <math.h>

#include <cstdint>

#include "backend/device/bf16.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

SF_HD inline float Exp(float x) { return expf(x); }
SF_HD inline double Exp(double x) { return exp(x); }
SF_HD inline float Log(float x) { return logf(x); }
SF_HD inline double Log(double x) { return log(x); }
SF_HD inline float Log1p(float x) { return log1pf(x); }
SF_HD inline double Log1p(double x) { return log1p(x); }
SF_HD inline float Sqrt(float x) { return sqrtf(x); }
SF_HD inline double Sqrt(double x) { return sqrt(x); }
SF_HD inline float Expm1(float x) { return expm1f(x); }
SF_HD inline double Expm1(double x) { return expm1(x); }
SF_HD inline float Tanh(float x) { return tanhf(x); }
SF_HD inline double Tanh(double x) { return tanh(x); }
SF_HD inline float Floor(float x) { return floorf(x); }
SF_HD inline double Floor(double x) { return floor(x); }
SF_HD inline float Cos(float x) { return cosf(x); }
SF_HD inline double Cos(double x) { return cos(x); }
SF_HD inline float Sin(float x) { return sinf(x); }
SF_HD inline double Sin(double x) { return sin(x); }
SF_HD inline float Erfc(float x) { return erfcf(x); }
SF_HD inline double Erfc(double x) { return erfc(x); }
// Double only: RoPE's angles are computed in double on every device.
SF_HD inline double PowD(double x, double y) { return pow(x, y); }
SF_HD inline double CosD(double x) { return cos(x); }
SF_HD inline double SinD(double x) { return sin(x); }

template <typename T>
SF_HD inline T Max(T a, T b) {
  return a > b ? a : b;
}
template <typename T>
SF_HD inline T Min(T a, T b) {
  return a < b ? a : b;
}

// a . b over n elements.
template <typename T>
SF_HD inline T Dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// 1 / (1 + e^-x) without overflow for large |x| (StableSigmoid, silu.h).
template <typename T>
SF_HD inline T Sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + Exp(-x));
  const T e = Exp(x);
  return e / (T(1) + e);
}

// log(1 + e^x) without overflow (gdn_prep.cc's Softplus).
template <typename T>
SF_HD inline T Softplus(T x) {
  return x > T(0) ? x + Log1p(Exp(-x)) : Log1p(Exp(x));
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2, the standard normal CDF, as
// erfc(-x / sqrt 2) / 2 (no cancellation for x << 0), and phi(x) =
// exp(-x^2 / 2) / sqrt(2 pi) its density (GELU: gelu.h).
template <typename T>
SF_HD inline T NormalCdf(T x) {
  return T(0.5) * Erfc(-x * T(0.70710678118654752440));
}
template <typename T>
SF_HD inline T NormalPdf(T x) {
  return T(0.39894228040143267794) * Exp(T(-0.5) * x * x);
}

// bf16 arguments compute in float and return float (bf16.h: a kernel rounds
// only when it stores), rather than deducing T = bf16 above.
SF_HD inline float Sigmoid(bf16 x) { return Sigmoid(static_cast<float>(x)); }
SF_HD inline float Softplus(bf16 x) { return Softplus(static_cast<float>(x)); }
SF_HD inline float Dot(const bf16* a, const bf16* b, int64_t n) {
  float acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  }
  return acc;
}

// -infinity of T, for running maxima (no <limits> in device code).
template <typename T>
SF_HD inline T NegInf() {
  return -T(INFINITY);
}

}  // namespace stateflow::backend::grid

// The small per-token preprocessing of a Gated DeltaNet layer that turns
// projections into the inputs of the recurrence core (gdn_core.h), each as a
// forward/backward pair with the plain float64 reference beside it:
//   gate:  g_t = -exp(A_log) * softplus(a_t + dt_bias)   (log decay; alpha_t = exp(g_t))
//   beta:  beta_t = sigmoid(b_t)
//   norm:  y = scale * x / sqrt(|x|^2 + eps)   (q: scale = d_k^{-1/2}; k: scale = 1)
// Conventions as in linear.h (outputs first; input gradients written,
// parameter gradients dA_log, ddt_bias accumulated).
// Not the projections, the short convolution or the output gate.
//
//   GdnGateForward<float>(g, a, A_log, dt_bias, T, H);
//   GdnGateBackward<float>(da, dA_log, ddt_bias, dg, a, A_log, dt_bias, T, H);
//
// Dimensions: T tokens, H heads, R rows (vectors to normalise, e.g. T*H),
// D vector length (d_k).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// g (T, H) = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]);
// a (T, H); A_log (H); dt_bias (H).
template <typename T>
void GdnGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                    int64_t T_len, int64_t H);
// da (T, H) written; dA_log (H), ddt_bias (H) accumulated; dg (T, H).
template <typename T>
void GdnGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg, const T* a,
                     const T* A_log, const T* dt_bias, int64_t T_len,
                     int64_t H);

// y (n) = sigmoid(x (n)): GDN's beta = sigmoid(b) (and KDA's beta and
// output gate).
template <typename T>
void SigmoidForward(T* y, const T* x, int64_t n);
// dx (n) = dy y (1 - y), from dy (n) and the forward's output y (n).
template <typename T>
void SigmoidBackward(T* dx, const T* dy, const T* y, int64_t n);

// y (R, D) = scale * x / sqrt(|x_r|^2 + eps); saves rnorm (R) =
// 1 / sqrt(|x_r|^2 + eps).
template <typename T>
void L2NormForward(T* y, T* rnorm, const T* x, int64_t R, int64_t D, T scale,
                   T eps);
// dx (R, D) written = scale * rnorm * (dy - rnorm^2 * x * (x . dy)).
template <typename T>
void L2NormBackward(T* dx, const T* dy, const T* x, const T* rnorm, int64_t R,
                    int64_t D, T scale);

void GdnGateForwardRef(double* g, const double* a, const double* A_log,
                       const double* dt_bias, int64_t T_len, int64_t H);
void GdnGateBackwardRef(double* da, double* dA_log, double* ddt_bias,
                        const double* dg, const double* a,
                        const double* A_log, const double* dt_bias,
                        int64_t T_len, int64_t H);
void SigmoidForwardRef(double* beta, const double* b, int64_t n);
void SigmoidBackwardRef(double* db, const double* dbeta, const double* beta,
                        int64_t n);
void L2NormForwardRef(double* y, double* rnorm, const double* x, int64_t R,
                      int64_t D, double scale, double eps);
void L2NormBackwardRef(double* dx, const double* dy, const double* x,
                       const double* rnorm, int64_t R, int64_t D,
                       double scale);

}  // namespace stateflow::backend

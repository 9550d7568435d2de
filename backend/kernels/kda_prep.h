// The KDA gate: the per-channel log decay g of the KDA recurrence core
// (kda_core.h) from its projection, as a forward/backward pair with the
// plain float64 reference beside it:
//   g[t, h, c] = -exp(A_log[h]) * softplus(a[t, h, c] + dt_bias[h, c])
// (log decay per key channel, <= 0; D_t = diag(exp(g_t))). The arithmetic
// (softplus form, order of operations) is GDN's gate (gdn_prep.h) with a
// bias per channel. beta and the L2 norms of q, k are GDN's (gdn_prep.h).
// Conventions as in linear.h (outputs first; input gradients written,
// parameter gradients dA_log, ddt_bias accumulated).
// Not the projections, the short convolution or the output gate.
//
//   KdaGateForward<float>(g, a, A_log, dt_bias, T, H, Dk);
//   KdaGateBackward<float>(da, dA_log, ddt_bias, dg, a, A_log, dt_bias, T, H, Dk);
//
// Dimensions: T tokens, H heads, Dk key channels per head (d_k).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// g (T, H, Dk) = -exp(A_log[h]) * softplus(a[t, h, c] + dt_bias[h, c]);
// a (T, H, Dk); A_log (H); dt_bias (H, Dk).
template <typename T>
void KdaGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                    int64_t T_len, int64_t H, int64_t Dk);
// da (T, H, Dk) written; dA_log (H), ddt_bias (H, Dk) accumulated (added
// to); dg (T, H, Dk). The sums over tokens run in token order per channel.
template <typename T>
void KdaGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg, const T* a,
                     const T* A_log, const T* dt_bias, int64_t T_len,
                     int64_t H, int64_t Dk);

// The same in float64, written from the formula (softplus as log(1 + e^u)).
void KdaGateForwardRef(double* g, const double* a, const double* A_log,
                       const double* dt_bias, int64_t T_len, int64_t H,
                       int64_t Dk);
void KdaGateBackwardRef(double* da, double* dA_log, double* ddt_bias,
                        const double* dg, const double* a,
                        const double* A_log, const double* dt_bias,
                        int64_t T_len, int64_t H, int64_t Dk);

}  // namespace stateflow::backend

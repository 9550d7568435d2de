// The small per-token arithmetic of a Mamba-3 layer (mamba3_layer.h) around
// its recurrence core (mamba3_core.h), as forward/backward pairs: the gates
// (softplus dt, sigmoid trapezoid gate, pi tanh angle rates), the running
// rotary angles, the rotation of B and C with their biases, the core's
// coefficients a, gamma, beta, and the D skip with the z gate. These are the
// CPU device's kernels of the Ops<T> entry points of the same names
// (backend/device/ops.h, where the contracts are written); the host-grid and
// CUDA devices run grid_kernels/mamba3_prep.h instead. The loops are those the
// layer ran inline before the device seam, in the same arithmetic order.
//
// Not the projections, norms, SiLU or MLP (their own kernels), not the core.
//
//   Mamba3GatesForward<float>(dt, lam, theta, dt_bias, S, H, Na);
//   Mamba3AnglesForward<float>(phi, angle_out, theta, dt, angle_in, B, Ts, H, Na);
//
// Dimensions (mamba3_layer.h): S rows = B sequences of Ts tokens, H heads,
// Dv SSM head dim, Dk state dim, Na rotary angles.
#pragma once

#include <cstdint>

namespace stateflow::backend {

// The official heavy-tail activation f(u) = 1 + u (u >= 0), 1 / (1 - u)
// (u < 0), its derivative, and the decay rate A = -max(f(u), floor).
template <typename T>
T Mamba3HeavyTail(T u);
template <typename T>
T Mamba3HeavyTailGrad(T u);
template <typename T>
T Mamba3DecayRate(T u, double floor);

template <typename T>
void Mamba3GatesForward(T* dt, T* lam, T* theta, const T* dt_bias, int64_t S,
                        int64_t H, int64_t Na);
template <typename T>
void Mamba3GatesBackward(T* ddA, T* dtrap, T* ddt, T* ddt_bias, const T* da,
                         const T* dgamma, const T* dbeta, const T* A_proj,
                         const T* dt, const T* lam, int64_t S, int64_t H,
                         T a_floor);
template <typename T>
void Mamba3AnglesForward(T* phi, T* angle_out, const T* theta, const T* dt,
                         const T* angle_in, int64_t B, int64_t Ts, int64_t H,
                         int64_t Na);
// dphi is read only here (the Ops contract lets a device overwrite it).
template <typename T>
void Mamba3AnglesBackward(T* dtheta, T* ddt, T* dangle_in, const T* dphi,
                          const T* theta, const T* dt, const T* dangle_out,
                          int64_t B, int64_t Ts, int64_t H, int64_t Na);
template <typename T>
void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                         const T* C_bias, const T* B_bias, const T* phi,
                         int64_t S, int64_t H, int64_t Dk, int64_t Na);
template <typename T>
void Mamba3RotaryBackward(T* dphi, T* dCn, T* dBn, T* dC_bias, T* dB_bias,
                          T* dq, T* dk, const T* q, const T* k, const T* phi,
                          int64_t S, int64_t H, int64_t Dk, int64_t Na);
template <typename T>
void Mamba3CoefficientsForward(T* a, T* gamma, T* beta, const T* A_proj,
                               const T* dt, const T* lam, int64_t n,
                               T a_floor);
template <typename T>
void Mamba3CoefficientsBackward(T* ddt, const T* da, const T* dgamma,
                                const T* dbeta, const T* A_proj, const T* lam,
                                int64_t n, T a_floor);
template <typename T>
void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                             const T* silu_z, const T* D, int64_t S, int64_t H,
                             int64_t Dv);
template <typename T>
void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, T* dD, const T* dgated,
                              const T* o, const T* xv, const T* silu_z,
                              const T* D, int64_t S, int64_t H, int64_t Dv);

}  // namespace stateflow::backend

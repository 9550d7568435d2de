// The Mamba-3 family's kernels behind the device seam: the gates, the angle
// scan, the rotary embedding of q and k, the coefficients, the gated output
// and the chunkwise core (whole, split-and-overlapped, and phase by phase),
// with exactly the contracts of backend/kernels/mamba3_prep.h and
// mamba3_core.h. Implemented by the CPU (cpu_mamba3_ops.cc) and the grid
// devices (grid_mamba3_ops.h), found by Mamba3OpsOf; the layer is
// backend/layers/mamba3_layer.h.
//
//   Mamba3Ops<float>* m3 = Mamba3OpsOf<float>(alloc.device());
//   m3->Mamba3GatesForward(dt, lam, theta, dt_bias, S, H, Na);
#pragma once

#include <cstdint>
#include <memory>

#include "backend/device/family_ops.h"
#include "backend/device/precision.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

class Device;

template <typename T>
class Mamba3Ops : public FamilyOpsBase {
 public:
  // ---- Mamba-3 (mamba3_prep.h, mamba3_core.h; legend of mamba3_layer.h:
  // S rows = B sequences of Ts tokens, H heads, Dv = Dp, Dk = Ds, Na angles) ----
  // In place: dt (S, H) = softplus(dt + dt_bias_h), lam (S, H) =
  // sigmoid(lam), theta (S, Na) = pi tanh(theta).
  virtual void Mamba3GatesForward(T* dt, T* lam, T* theta, const T* dt_bias,
                                  int64_t S, int64_t H, int64_t Na) = 0;
  // ddA, dtrap (S, H) written; ddt (S, H) turned in place from d(dt) into
  // the gradient of dt's projection; ddt_bias (H) accumulated. da, dgamma,
  // dbeta (S, H) the core's input gradients; A_proj = the forward's ddA
  // projection (S, H); dt, lam (S, H) the gated values.
  virtual void Mamba3GatesBackward(T* ddA, T* dtrap, T* ddt, GradOf<T>* ddt_bias,
                                   const T* da, const T* dgamma,
                                   const T* dbeta, const T* A_proj,
                                   const T* dt, const T* lam, int64_t S,
                                   int64_t H, ComputeOf<T> a_floor) = 0;
  // phi (B Ts, H, Na): phi_t = (phi_{t-1} + theta_t dt_t) mod 2 pi from
  // angle_in (B, H, Na); the last into angle_out (B, H, Na) unless nullptr.
  virtual void Mamba3AnglesForward(StatOf<T>* phi, StatOf<T>* angle_out,
                                   const T* theta, const T* dt,
                                   const StatOf<T>* angle_in, int64_t B,
                                   int64_t Ts, int64_t H, int64_t Na) = 0;
  // The scan's backward: dtheta (B Ts, Na) written (the gradient of theta's
  // projection, through pi tanh); ddt (B Ts, H) added to; dangle_in (B, H,
  // Na) written unless nullptr; dangle_out nullptr means zeros. dphi (B Ts,
  // H, Na) is scratch: the device may overwrite it.
  virtual void Mamba3AnglesBackward(T* dtheta, T* ddt, StatOf<T>* dangle_in,
                                    StatOf<T>* dphi, const T* theta,
                                    const T* dt, const StatOf<T>* dangle_out,
                                    int64_t B,
                                    int64_t Ts, int64_t H, int64_t Na) = 0;
  // k (S, H, Dk) = rot(Bn_t + B_bias_h, phi_th), q likewise from Cn, C_bias:
  // the pairs (2j, 2j+1), j < Na, turned by phi; Bn, Cn (S, Dk); biases
  // (H, Dk); phi (S, H, Na).
  virtual void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                                   const T* C_bias, const T* B_bias,
                                   const StatOf<T>* phi, int64_t S,
                                   int64_t H, int64_t Dk, int64_t Na) = 0;
  // dphi (S, H, Na), dCn, dBn (S, Dk) written; dC_bias, dB_bias (H, Dk)
  // accumulated; dq, dk (S, H, Dk) turned in place into the gradients of the
  // unrotated vectors; q, k the forward's outputs.
  virtual void Mamba3RotaryBackward(StatOf<T>* dphi, T* dCn, T* dBn,
                                    GradOf<T>* dC_bias, GradOf<T>* dB_bias,
                                    T* dq, T* dk, const T* q, const T* k,
                                    const StatOf<T>* phi, int64_t S,
                                    int64_t H, int64_t Dk, int64_t Na) = 0;
  // n = S H: a = -max(f(A_proj), a_floor) dt, gamma = lam dt, beta = (1 -
  // lam) dt.
  virtual void Mamba3CoefficientsForward(T* a, T* gamma, T* beta,
                                         const T* A_proj, const T* dt,
                                         const T* lam, int64_t n,
                                         ComputeOf<T> a_floor) = 0;
  // ddt (n) written: the coefficients' share of d(dt).
  virtual void Mamba3CoefficientsBackward(T* ddt, const T* da,
                                          const T* dgamma, const T* dbeta,
                                          const T* A_proj, const T* lam,
                                          int64_t n, ComputeOf<T> a_floor) = 0;
  // gated (S, H, Dv) = (o + D_h xv) silu_z.
  virtual void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                                       const T* silu_z, const T* D, int64_t S,
                                       int64_t H, int64_t Dv) = 0;
  // From dgated (S, H, Dv): dz = dgated (o + D_h xv) (before SiLU's
  // backward), d_o = dgated silu_z, dxv = D_h d_o (written); dD (H)
  // accumulated.
  virtual void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, GradOf<T>* dD,
                                        const T* dgated, const T* o,
                                        const T* xv, const T* silu_z,
                                        const T* D, int64_t S, int64_t H,
                                        int64_t Dv) = 0;

  // The chunkwise Mamba-3 recurrence (mamba3_core.h) over one sequence's
  // T_len tokens: the kernel's arguments, plus (forward) the device's
  // `workspace` of Mamba3CoreForwardWorkspaceSize elements (0 on the CPU).
  // st_tile: B_V (schedule.st_tile), ST's tile of value rows, as the GDN
  // core's: 0 or >= Dv untiled; every device gives the untiled results
  // (the grid bit for bit, the CPU within rounding).
  virtual int64_t Mamba3CoreForwardWorkspaceSize(int64_t T_len, int64_t H,
                                                 int64_t Dk, int64_t Dv,
                                                 int64_t block_size) = 0;
  virtual void Mamba3CoreForward(T* o, StatOf<T>* S_out, T* k_out, T* v_out,
                                 StatOf<T>* workspace, const T* q, const T* k,
                                 const T* v, const T* a, const T* gamma,
                                 const T* beta, const StatOf<T>* S_in, const T* k_in,
                                 const T* v_in, int64_t T_len, int64_t H,
                                 int64_t Dk, int64_t Dv,
                                 int64_t block_size, int64_t st_tile = 0) = 0;
  // Mamba3CoreForward split into Pre / ST / Out and overlapped (as
  // GdnCoreForwardOverlapped): the same contract and workspace; a device
  // without an overlapped kernel runs its ordinary forward (this default).
  virtual void Mamba3CoreForwardOverlapped(
      T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace,
      const T* q, const T* k, const T* v, const T* a, const T* gamma,
      const T* beta, const StatOf<T>* S_in, const T* k_in, const T* v_in,
      int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) {
    Mamba3CoreForward(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma,
                      beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
  virtual int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H,
                                                  int64_t Dk, int64_t Dv,
                                                  int64_t block_size) = 0;
  virtual void Mamba3CoreBackward(
      T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in,
      T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO,
      const StatOf<T>* dS_out, const T* dk_out, const T* dv_out, const T* q,
      const T* k, const T* v, const T* a, const T* gamma, const T* beta,
      const StatOf<T>* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
      int64_t block_size, int64_t st_tile = 0) = 0;
  // The backward split and overlapped: the same contract and workspace; by
  // default the ordinary backward.
  virtual void Mamba3CoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in,
      T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO,
      const StatOf<T>* dS_out, const T* dk_out, const T* dv_out, const T* q,
      const T* k, const T* v, const T* a, const T* gamma, const T* beta,
      const StatOf<T>* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
      int64_t block_size, int64_t st_tile = 0) {
    Mamba3CoreBackward(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in,
                       workspace, dO, dS_out, dk_out, dv_out, q, k, v, a,
                       gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv,
                       block_size, st_tile);
  }

  // The Mamba-3 core one phase at a time, for timing (core_phase.h), as the
  // GDN core's: kPre, kST, kOut in order on the same arguments and a
  // workspace of the *PhaseWorkspaceSize elements give Mamba3CoreForward's
  // (Mamba3CoreBackward's) outputs bit for bit. The CPU device runs
  // mamba3_core.h's Mamba3Core*Phase (the per-block functions, intermediates
  // copied through the workspace; the backward split as the overlapped one:
  // kPre = the replay and OutAG, kST = the state-gradient chain, kOut =
  // OutWG); GridOps its passes in three groups.
  virtual int64_t Mamba3CoreForwardPhaseWorkspaceSize(int64_t T_len,
                                                      int64_t H, int64_t Dk,
                                                      int64_t Dv,
                                                      int64_t block_size) = 0;
  virtual void Mamba3CoreForwardPhase(
      CorePhase phase, T* o, StatOf<T>* S_out, T* k_out, T* v_out,
      StatOf<T>* workspace, const T* q, const T* k, const T* v, const T* a,
      const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
      const T* v_in,
      int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
      int64_t block_size, int64_t st_tile = 0) = 0;
  virtual int64_t Mamba3CoreBackwardPhaseWorkspaceSize(int64_t T_len,
                                                       int64_t H, int64_t Dk,
                                                       int64_t Dv,
                                                       int64_t block_size) = 0;
  virtual void Mamba3CoreBackwardPhase(
      CorePhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
      StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace,
      const T* dO, const StatOf<T>* dS_out, const T* dk_out,
      const T* dv_out, const T* q, const T* k, const T* v, const T* a,
      const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) = 0;
};

// The Mamba-3 kernels of `device` in element type T (as GdnOpsOf).
template <typename T>
Mamba3Ops<T>* Mamba3OpsOf(Device& device);

// The CPU device's (cpu_mamba3_ops.cc; nullptr for bf16), one of the
// implementations Mamba3OpsOf chooses from; the grid devices' are
// GridMamba3Ops (grid_mamba3_ops.h).
template <typename T>
std::unique_ptr<Mamba3Ops<T>> MakeCpuMamba3Ops();

}  // namespace stateflow::backend

// The kernels of the real backend as one interface per element type: the
// device seam. Layers, stage modules and the trainer call a Device's Ops<T>
// (device.h) and never a kernel directly, so the same layer code runs on the
// CPU (Eigen: cpu_device.h, bit-identical to calling the kernels), on the
// host-grid device (the CUDA kernels' per-element/per-row/per-tile arithmetic
// run by host loops: host_grid_device.h) and on a GPU (the same arithmetic launched
// as CUDA kernels, GEMMs in cuBLAS: cuda/).
//
// Contracts: every kernel entry point has exactly the contract of the CPU
// kernel of the same name in backend/kernels/*.h (shapes, what is written,
// what is accumulated, nullptr meaning "skip"); the pointers point into the
// device's memory (MemoryResource), token ids included. The elementwise maps
// are the small pieces of arithmetic the layers used to do inline.
//
// The recurrent cores' scratch: a device may need workspace beyond the CPU
// kernels' (the CPU forward keeps its per-block temporaries on the stack; a
// GPU runs every block's Pre at once). The *WorkspaceSize queries say how many
// elements; the caller allocates them (BufferClass::kWorkspace) so every byte
// stays counted. On the CPU they are the CPU kernels' own sizes.
//
// Not streams or events (Device::Synchronize; the grid devices' overlapped
// GDN cores use a side stream inside one call: grid_ops.h), not
// communication (comm/comm.h).
//
//   Ops<float>& ops = alloc.device().ops<float>();
//   ops.RmsNormForward(y, rstd, x, w, N, C, 1e-6f);
//   ops.Add(h, x, N * C);   // h += x
//
// Dimension legends: as in the kernels' headers.
#pragma once

#include <cstdint>

#include "backend/device/precision.h"
#include "backend/kernels/gdn_phase.h"

namespace stateflow::backend {

// AdamW's per-step coefficients (adamw.h computes them once per step).
template <typename T>
struct AdamWCoefficients {
  T beta1 = 0, one_minus_beta1 = 0;
  T beta2 = 0, one_minus_beta2 = 0;
  T step_size = 0;     // lr / (1 - beta1^t)
  T inv_sqrt_c2 = 0;   // 1 / sqrt(1 - beta2^t)
  T eps = 0;
  T lr_decay = 0;      // lr * weight decay (0 for vectors)
};

template <typename T>
class Ops {
 public:
  virtual ~Ops() = default;

  // ---- elementwise maps and reductions (n elements) ----
  virtual void Fill(T* x, T value, int64_t n) = 0;
  virtual void Copy(T* y, const T* x, int64_t n) = 0;   // y = x
  virtual void Add(T* y, const T* x, int64_t n) = 0;    // y += x
  // y = a * b elementwise; y may alias a or b.
  virtual void Mul(T* y, const T* a, const T* b, int64_t n) = 0;
  // y = x widened (Widen) or rounded to nearest even (Narrow) between the
  // storage type and StatOf<T> (precision.h): copies for float and double.
  virtual void Widen(StatOf<T>* y, const T* x, int64_t n) = 0;
  virtual void Narrow(T* y, const StatOf<T>* x, int64_t n) = 0;
  // sum_i x_i in double (on the CPU in index order).
  virtual double Sum(const T* x, int64_t n) = 0;
  // y (N, C) = x (N, C) * rstd (N) per row * w (C) per column, that is
  // (x_nc rstd_n) w_c: an RMSNorm re-applied with its saved rstd.
  virtual void RmsNormApply(T* y, const T* x, const StatOf<T>* rstd, const T* w,
                            int64_t N, int64_t C) = 0;
  // One AdamW update of n elements: m, v, w in place from g.
  virtual void AdamWUpdate(T* w, T* m, T* v, const T* g, int64_t n,
                           const AdamWCoefficients<T>& c) = 0;

  // ---- kernels: the contracts of backend/kernels/*.h ----
  virtual void LinearForward(T* y, const T* x, const T* w, const T* b,
                             int64_t N, int64_t C, int64_t D) = 0;
  virtual void LinearBackward(T* dx, GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x,
                              const T* w, int64_t N, int64_t C,
                              int64_t D) = 0;
  virtual void RmsNormForward(T* y, StatOf<T>* rstd, const T* x, const T* w,
                              int64_t N, int64_t C, ComputeOf<T> eps) = 0;
  virtual void RmsNormBackward(T* dx, GradOf<T>* dw, const T* dy, const T* x,
                               const T* w, const StatOf<T>* rstd, int64_t N,
                               int64_t C) = 0;
  virtual void SiluForward(T* y, const T* x, int64_t n) = 0;
  virtual void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) = 0;
  virtual void ShortConvForward(T* y, T* tail_out, const T* x, const T* w,
                                const T* tail_in, int64_t T_len, int64_t C,
                                int64_t W) = 0;
  virtual void ShortConvBackward(T* dx, T* dtail_in, GradOf<T>* dw, const T* dy,
                                 const T* dtail_out, const T* x, const T* w,
                                 const T* tail_in, int64_t T_len, int64_t C,
                                 int64_t W) = 0;
  virtual void L2NormForward(T* y, StatOf<T>* rnorm, const T* x, int64_t R,
                             int64_t D, ComputeOf<T> scale,
                             ComputeOf<T> eps) = 0;
  virtual void L2NormBackward(T* dx, const T* dy, const T* x,
                              const StatOf<T>* rnorm, int64_t R, int64_t D,
                              ComputeOf<T> scale) = 0;
  virtual void GdnGateForward(T* g, const T* a, const T* A_log,
                              const T* dt_bias, int64_t T_len, int64_t H) = 0;
  virtual void GdnGateBackward(T* da, GradOf<T>* dA_log, GradOf<T>* ddt_bias, const T* dg,
                               const T* a, const T* A_log, const T* dt_bias,
                               int64_t T_len, int64_t H) = 0;
  virtual void GdnBetaForward(T* beta, const T* b, int64_t n) = 0;
  virtual void GdnBetaBackward(T* db, const T* dbeta, const T* beta,
                               int64_t n) = 0;

  // The chunkwise GDN recurrence (gdn_core.h) over one sequence's T_len
  // tokens, with `workspace` of GdnCore*WorkspaceSize elements. st_tile:
  // B_V (schedule.st_tile), the tile of value rows into which ST splits the
  // (Dv, Dk) state of a head -- its rows never mix in ST, so the tiles are
  // independent chains (a device runs them in parallel); 0 means the
  // device's default (one tile of Dv rows). Any tile gives the untiled
  // results (bit for bit on the grid devices; on the CPU within rounding,
  // < 1e-12 relative in float64, as its products are split).
  virtual int64_t GdnCoreForwardWorkspaceSize(int64_t T_len, int64_t H,
                                              int64_t Dk, int64_t Dv,
                                              int64_t block_size) = 0;
  virtual void GdnCoreForward(T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                              const T* q, const T* k, const T* v, const T* g,
                              const T* beta, const StatOf<T>* S_in, int64_t T_len,
                              int64_t H, int64_t Dk, int64_t Dv,
                              int64_t block_size, int64_t st_tile = 0) = 0;
  // GdnCoreForward with the recurrence split into Pre / ST / Out and the ST
  // of one block overlapping the Pre and Out of others (schedule.st_overlap):
  // the same contract and workspace. The CPU device runs
  // GdnCoreForwardOverlapped (gdn_core.h) on its kernel threads: the same
  // bits as GdnCoreForward where the blocks take the same products; the grid
  // devices (grid_ops.h) split the blocks into segments on two streams. A
  // device without an overlapped forward runs its GdnCoreForward: this
  // default.
  virtual void GdnCoreForwardOverlapped(T* o, StatOf<T>* S_out,
                                        StatOf<T>* workspace,
                                        const T* q, const T* k, const T* v,
                                        const T* g, const T* beta,
                                        const StatOf<T>* S_in, int64_t T_len,
                                        int64_t H, int64_t Dk, int64_t Dv,
                                        int64_t block_size,
                                        int64_t st_tile = 0) {
    GdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk,
                   Dv, block_size, st_tile);
  }
  virtual int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H,
                                               int64_t Dk, int64_t Dv,
                                               int64_t block_size) = 0;
  virtual void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta,
                               StatOf<T>* dS_in, StatOf<T>* workspace,
                               const T* dO, const StatOf<T>* dS_out,
                               const T* q, const T* k, const T* v,
                               const T* g, const T* beta,
                               const StatOf<T>* S_in, int64_t T_len, int64_t H,
                               int64_t Dk, int64_t Dv, int64_t block_size,
                               int64_t st_tile = 0) = 0;
  // GdnCoreBackward split and overlapped (schedule.st_overlap), the same
  // contract and workspace: the CPU device runs GdnCoreBackwardOverlapped
  // (gdn_core.h); a device without one runs its GdnCoreBackward (this
  // default), as for the forward.
  virtual void GdnCoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
      StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q,
      const T* k, const T* v, const T* g, const T* beta,
      const StatOf<T>* S_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) {
    GdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k,
                    v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }

  // The GDN core one phase at a time, for timing (gdn_phase.h): calling
  // the phases kPre, kST, kOut in order on the same arguments and a
  // workspace of the *PhaseWorkspaceSize elements gives GdnCoreForward's
  // (GdnCoreBackward's) outputs bit for bit; an output is final once the
  // last phase has run. The CPU device runs gdn_core.h's
  // GdnCore*Phase (the per-block functions, intermediates copied through
  // the workspace); GridOps its passes in three groups (the backward's
  // kPre includes the replay of the entering states, as on the CPU).
  virtual int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                                   int64_t Dk, int64_t Dv,
                                                   int64_t block_size) = 0;
  virtual void GdnCoreForwardPhase(GdnPhase phase, T* o, StatOf<T>* S_out,
                                   StatOf<T>* workspace, const T* q,
                                   const T* k, const T* v, const T* g,
                                   const T* beta, const StatOf<T>* S_in,
                                   int64_t T_len, int64_t H,
                                   int64_t Dk, int64_t Dv,
                                   int64_t block_size, int64_t st_tile = 0) = 0;
  virtual int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                                    int64_t Dk, int64_t Dv,
                                                    int64_t block_size) = 0;
  virtual void GdnCoreBackwardPhase(GdnPhase phase, T* dq, T* dk, T* dv,
                                    T* dg, T* dbeta, StatOf<T>* dS_in,
                                    StatOf<T>* workspace, const T* dO,
                                    const StatOf<T>* dS_out, const T* q,
                                    const T* k, const T* v, const T* g,
                                    const T* beta, const StatOf<T>* S_in,
                                    int64_t T_len, int64_t H, int64_t Dk,
                                    int64_t Dv, int64_t block_size, int64_t st_tile = 0) = 0;

  // ---- Mamba-3 (mamba3_prep.h, mamba3_core.h; legend of mamba3_layer.h:
  // S rows = B sequences of Ts tokens, H heads, P = Dp, N = Ds, Na angles) ----
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
  // k (S, H, N) = rot(Bn_t + B_bias_h, phi_th), q likewise from Cn, C_bias:
  // the pairs (2j, 2j+1), j < Na, turned by phi; Bn, Cn (S, N); biases
  // (H, N); phi (S, H, Na).
  virtual void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                                   const T* C_bias, const T* B_bias,
                                   const StatOf<T>* phi, int64_t S,
                                   int64_t H, int64_t N, int64_t Na) = 0;
  // dphi (S, H, Na), dCn, dBn (S, N) written; dC_bias, dB_bias (H, N)
  // accumulated; dq, dk (S, H, N) turned in place into the gradients of the
  // unrotated vectors; q, k the forward's outputs.
  virtual void Mamba3RotaryBackward(StatOf<T>* dphi, T* dCn, T* dBn,
                                    GradOf<T>* dC_bias, GradOf<T>* dB_bias,
                                    T* dq, T* dk, const T* q, const T* k,
                                    const StatOf<T>* phi, int64_t S,
                                    int64_t H, int64_t N, int64_t Na) = 0;
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
  // gated (S, H, P) = (o + D_h xv) silu_z.
  virtual void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                                       const T* silu_z, const T* D, int64_t S,
                                       int64_t H, int64_t P) = 0;
  // From dgated (S, H, P): dz = dgated (o + D_h xv) (before SiLU's
  // backward), d_o = dgated silu_z, dxv = D_h d_o (written); dD (H)
  // accumulated.
  virtual void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, GradOf<T>* dD,
                                        const T* dgated, const T* o,
                                        const T* xv, const T* silu_z,
                                        const T* D, int64_t S, int64_t H,
                                        int64_t P) = 0;

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

  // The Mamba-3 core one phase at a time, for timing (gdn_phase.h), as the
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
      GdnPhase phase, T* o, StatOf<T>* S_out, T* k_out, T* v_out,
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
      GdnPhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
      StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace,
      const T* dO, const StatOf<T>* dS_out, const T* dk_out,
      const T* dv_out, const T* q, const T* k, const T* v, const T* a,
      const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) = 0;

  virtual void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x,
                                const T* wg, const T* wu, const T* wd,
                                int64_t N, int64_t C, int64_t F) = 0;
  virtual void SwigluMlpBackward(T* dx, GradOf<T>* dwg, GradOf<T>* dwu,
                                 GradOf<T>* dwd, T* workspace,
                                 const T* dy, const T* gate, const T* up,
                                 const T* x, const T* wg, const T* wu,
                                 const T* wd, int64_t N, int64_t C,
                                 int64_t F) = 0;
  virtual void EmbeddingForward(T* y, const int32_t* ids, const T* table,
                                int64_t N, int64_t C, int64_t V) = 0;
  virtual void EmbeddingBackward(GradOf<T>* dtable, const T* dy, const int32_t* ids,
                                 int64_t N, int64_t C, int64_t V) = 0;
  // Returns the mean loss as the CPU kernel does (host value).
  virtual double OutputLossForward(StatOf<T>* losses, StatOf<T>* lse,
                                   StatOf<T>* logits, const T* x,
                                   const T* w, const int32_t* targets,
                                   int64_t N, int64_t C, int64_t V,
                                   int64_t Vs) = 0;
  virtual void OutputLossBackward(T* dx, GradOf<T>* dw, StatOf<T>* logits,
                                  const StatOf<T>* dlosses,
                                  const StatOf<T>* lse, const T* x, const T* w,
                                  const int32_t* targets, int64_t N,
                                  int64_t C, int64_t V, int64_t Vs,
                                  T* workspace = nullptr) = 0;
  // OutputLossBackward's workspace: 0 where StatOf<T> is T; for bf16 one
  // vocabulary slice of d(logits) rounded to bf16 (N min(V, Vs) elements),
  // which the GEMMs read.
  virtual int64_t OutputLossBackwardWorkspaceSize(int64_t /*N*/,
                                                  int64_t /*V*/,
                                                  int64_t /*Vs*/) {
    return 0;
  }
};

// Softmax attention with RoPE (attention.h, rope.h): a separate interface, so
// that a device names honestly which families it runs (Device::attention_ops
// is nullptr on a device that has none yet).
template <typename T>
class AttentionOps {
 public:
  virtual ~AttentionOps() = default;
  virtual void AttentionForward(T* o, StatOf<T>* lse, const T* q, const T* k,
                                const T* v, int64_t s, int64_t start,
                                int64_t Hq, int64_t Hkv, int64_t d,
                                int64_t q_tile, int64_t k_tile) = 0;
  // dk, dv: the K/V gradient accumulator, StatOf<T> (fp32 in bf16, as the
  // memory model's kv_buffers count it), added to.
  virtual void AttentionBackward(T* dq, StatOf<T>* dk, StatOf<T>* dv, StatOf<T>* D,
                                 const T* dO, const T* o,
                                 const StatOf<T>* lse, const T* q,
                                 const T* k, const T* v, int64_t s,
                                 int64_t start, int64_t Hq, int64_t Hkv,
                                 int64_t d, int64_t q_tile,
                                 int64_t k_tile) = 0;
  virtual void RopeForward(T* x, int64_t N, int64_t H, int64_t d,
                           int64_t pos0, double base) = 0;
  virtual void RopeBackward(T* dx, int64_t N, int64_t H, int64_t d,
                            int64_t pos0, double base) = 0;
};

}  // namespace stateflow::backend

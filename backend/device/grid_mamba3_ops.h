// GridMamba3Ops<T, Exec>: the Mamba-3 family's kernels (Mamba3Ops<T>,
// mamba3_ops.h) as grid passes over the SF_HD functors of grid_kernels/
// mamba3_prep.h and mamba3_core.h: the gates, angles, rotary, coefficients
// and gated output, and the chunkwise core whole, on two streams and phase
// by phase. The executor and the two-stream schedule: grid_ops.h; what the
// recurrent cores share: grid_recurrent.h.
//
//   GridMamba3Ops<double, HostExec> m3{HostExec{}};
//   m3.Mamba3CoreForward(o, S_out, k_out, v_out, ws, q, k, v, a, gamma, beta, ...);
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

#include "backend/device/grid_kernels/gdn_forward.h"  // GdnCumDecayFn
#include "backend/device/grid_kernels/mamba3_core.h"
#include "backend/device/grid_kernels/mamba3_prep.h"
#include "backend/device/mamba3_ops.h"
#include "backend/device/grid_recurrent.h"

namespace stateflow::backend {

template <typename T, typename Exec>
class GridMamba3Ops final : public Mamba3Ops<T>, public GridRecurrentCore<T, Exec> {
 public:
  explicit GridMamba3Ops(Exec exec) : GridRecurrentCore<T, Exec>(exec) {}

  // ---- Mamba-3 (grid_kernels/mamba3_prep.h, mamba3_core.h) ----
  void Mamba3GatesForward(T* dt, T* lam, T* theta, const T* dt_bias,
                          int64_t S, int64_t H, int64_t Na) override {
    exec_.ForEach(S * H, grid::Mamba3GatesFn<T>{dt, lam, dt_bias, H});
    exec_.ForEach(S * Na, grid::Mamba3ThetaFn<T>{theta});
  }
  void Mamba3GatesBackward(T* ddA, T* dtrap, T* ddt, GradOf<T>* ddt_bias, const T* da,
                           const T* dgamma, const T* dbeta, const T* A_proj,
                           const T* dt, const T* lam, int64_t S, int64_t H,
                           ComputeOf<T> a_floor) override {
    exec_.ForEach(S * H, grid::Mamba3GatesGradFn<T>{ddA, dtrap, ddt, da, dgamma,
                                                    dbeta, A_proj, dt, lam,
                                                    a_floor});
    exec_.ForEach(H, grid::Mamba3DtBiasGradFn<T>{ddt_bias, ddt, S, H});
  }
  void Mamba3AnglesForward(StatOf<T>* phi, StatOf<T>* angle_out, const T* theta, const T* dt,
                           const StatOf<T>* angle_in, int64_t B, int64_t Ts, int64_t H,
                           int64_t Na) override {
    exec_.ForEach(B * H * Na, grid::Mamba3AnglesFn<T>{phi, angle_out, theta, dt,
                                                      angle_in, Ts, H, Na});
  }
  // dphi becomes the scan's running sums.
  void Mamba3AnglesBackward(T* dtheta, T* ddt, StatOf<T>* dangle_in, StatOf<T>* dphi,
                            const T* theta, const T* dt, const StatOf<T>* dangle_out,
                            int64_t B, int64_t Ts, int64_t H,
                            int64_t Na) override {
    exec_.ForEach(B * H * Na, grid::Mamba3AnglesScanGradFn<T>{
                                  dphi, dangle_in, dangle_out, Ts, H, Na});
    exec_.ForEach(B * Ts * Na,
                  grid::Mamba3ThetaGradFn<T>{dtheta, dphi, theta, dt, H, Na});
    exec_.ForEach(B * Ts * H, grid::Mamba3AngleDtGradFn<T>{ddt, dphi, theta, H, Na});
  }
  void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                           const T* C_bias, const T* B_bias, const StatOf<T>* phi,
                           int64_t S, int64_t H, int64_t Dk,
                           int64_t Na) override {
    exec_.ForEach(S * H * Dk, grid::Mamba3RotateFn<T>{k, Bn, B_bias, phi, H, Dk, Na});
    exec_.ForEach(S * H * Dk, grid::Mamba3RotateFn<T>{q, Cn, C_bias, phi, H, Dk, Na});
  }
  void Mamba3RotaryBackward(StatOf<T>* dphi, T* dCn, T* dBn, GradOf<T>* dC_bias, GradOf<T>* dB_bias,
                            T* dq, T* dk, const T* q, const T* k, const StatOf<T>* phi,
                            int64_t S, int64_t H, int64_t Dk,
                            int64_t Na) override {
    exec_.ForEach(S * H * Na,
                  grid::Mamba3RotaryPairGradFn<T>{dphi, dq, dk, q, k, phi, Dk, Na});
    exec_.ForEach(S * Dk, grid::Mamba3HeadSumFn<T>{dBn, dk, H, Dk});
    exec_.ForEach(S * Dk, grid::Mamba3HeadSumFn<T>{dCn, dq, H, Dk});
    exec_.ForEach(H * Dk, grid::Mamba3BiasGradFn<T>{dB_bias, dk, S, H, Dk});
    exec_.ForEach(H * Dk, grid::Mamba3BiasGradFn<T>{dC_bias, dq, S, H, Dk});
  }
  void Mamba3CoefficientsForward(T* a, T* gamma, T* beta, const T* A_proj,
                                 const T* dt, const T* lam, int64_t n,
                                 ComputeOf<T> a_floor) override {
    exec_.ForEach(n, grid::Mamba3CoefficientsFn<T>{a, gamma, beta, A_proj, dt,
                                                   lam, a_floor});
  }
  void Mamba3CoefficientsBackward(T* ddt, const T* da, const T* dgamma,
                                  const T* dbeta, const T* A_proj,
                                  const T* lam, int64_t n,
                                  ComputeOf<T> a_floor) override {
    exec_.ForEach(n, grid::Mamba3CoefficientsGradFn<T>{ddt, da, dgamma, dbeta,
                                                       A_proj, lam, a_floor});
  }
  void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                               const T* silu_z, const T* D, int64_t S,
                               int64_t H, int64_t Dv) override {
    exec_.ForEach(S * H * Dv,
                  grid::Mamba3GateOutputFn<T>{gated, o, xv, silu_z, D, H, Dv});
  }
  void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, GradOf<T>* dD, const T* dgated,
                                const T* o, const T* xv, const T* silu_z,
                                const T* D, int64_t S, int64_t H,
                                int64_t Dv) override {
    exec_.ForEach(H, grid::Mamba3SkipGradFn<T>{dD, dgated, xv, silu_z, S, H, Dv});
    exec_.ForEach(S * H * Dv, grid::Mamba3GateOutputGradFn<T>{
                                 dz, d_o, dxv, dgated, o, xv, silu_z, D, H, Dv});
  }
  // H T + H nb T_C^2 + 2 H nb Dv Dk (grid_kernels/mamba3_core.h); the CPU
  // forward needs none.
  int64_t Mamba3CoreForwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                         int64_t Dv,
                                         int64_t block_size) override {
    return grid::Mamba3ForwardWorkspace<T>::Size(
               grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size)) +
           (kWide ? WideMamba3ForwardSize(T_len, H, Dk, Dv) : 0);
  }
  void Mamba3CoreForward(T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace,
                         const T* q, const T* k, const T* v, const T* a,
                         const T* gamma, const T* beta, const StatOf<T>* S_in,
                         const T* k_in, const T* v_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideMamba3CoreForward(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    } else {
      Mamba3CoreForwardNative(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void Mamba3CoreForwardNative(T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace,
                         const T* q, const T* k, const T* v, const T* a,
                         const T* gamma, const T* beta, const StatOf<T>* S_in,
                         const T* k_in, const T* v_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size, int64_t st_tile);
  // 2 H T + 3 H nb T_C^2 + H (3 nb + 1) Dv Dk, where the CPU kernel keeps
  // only the H nb Dv Dk entering states.
  int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                          int64_t Dv,
                                          int64_t block_size) override {
    return grid::Mamba3BackwardWorkspace<T>::Size(
               grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size)) +
           (kWide ? WideMamba3BackwardSize(T_len, H, Dk, Dv) : 0);
  }
  void Mamba3CoreBackward(T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                          StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace,
                          const T* dO, const StatOf<T>* dS_out, const T* dk_out,
                          const T* dv_out, const T* q, const T* k, const T* v,
                          const T* a, const T* gamma, const T* beta,
                          const StatOf<T>* S_in, const T* k_in, const T* v_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideMamba3CoreBackward(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, workspace, dO, dS_out, dk_out, dv_out, q, k, v, a, gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    } else {
      Mamba3CoreBackwardNative(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, workspace, dO, dS_out, dk_out, dv_out, q, k, v, a, gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void Mamba3CoreBackwardNative(T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                          StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace,
                          const T* dO, const StatOf<T>* dS_out, const T* dk_out,
                          const T* dv_out, const T* q, const T* k, const T* v,
                          const T* a, const T* gamma, const T* beta,
                          const StatOf<T>* S_in, const T* k_in, const T* v_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size, int64_t st_tile);
  // The Mamba-3 core on two streams, as the GDN cores: the blocks in
  // StreamSegments(nb) segments, Pre and Out on stream 1, ST on stream 0,
  //   Pre_0 -> (ST_0 || Pre_1) -> (ST_1 || Out_0, Pre_2) -> ... -> Out_last.
  // ST of a segment reads U and G of the blocks before each of its own
  // (Mamba3STFn), so it waits for the Pre of the segment holding the last
  // block it reads: none for a first segment of one block, the previous
  // segment's Pre (already waited for) for a later one. The same workspace
  // and bits as Mamba3CoreForward. Under 2 blocks: Mamba3CoreForward.
  void Mamba3CoreForwardOverlapped(T* o, StatOf<T>* S_out, T* k_out, T* v_out,
                                   StatOf<T>* workspace, const T* q, const T* k,
                                   const T* v, const T* a, const T* gamma,
                                   const T* beta, const StatOf<T>* S_in,
                                   const T* k_in, const T* v_in, int64_t T_len,
                                   int64_t H, int64_t Dk, int64_t Dv,
                                   int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideMamba3CoreForward(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma, beta, S_in,
                            k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Overlapped());
    } else {
      Mamba3CoreForwardOverlappedNative(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma,
                                        beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void Mamba3CoreForwardOverlappedNative(T* o, StatOf<T>* S_out, T* k_out, T* v_out,
                                         StatOf<T>* workspace, const T* q, const T* k,
                                         const T* v, const T* a, const T* gamma,
                                         const T* beta, const StatOf<T>* S_in,
                                         const T* k_in, const T* v_in, int64_t T_len,
                                         int64_t H, int64_t Dk, int64_t Dv,
                                         int64_t block_size, int64_t st_tile);
  // The backward on two streams (the CPU's OutAG -> (ST chain || OutWG)):
  // the replay as the overlapped forward with Out's backward that needs no
  // state gradient (Q K^T, dO V^T, dq) of segment k on stream 1 after the
  // replayed ST_k, and Z_{k-1} (Out's share of the state gradient, written
  // over U) after ST_k too, the last reader of U of segment k - 1; then the
  // ST backward on stream 0, segments last to first, and the rest of segment
  // k's backward (dM, dk, dv, dG, da, dgamma, dbeta) on stream 1 after ST_k's
  // backward, while stream 0 runs ST_{k-1}'s; the carry's gradients last.
  // The same workspace and bits as Mamba3CoreBackward. Under 2 blocks:
  // Mamba3CoreBackward.
  void Mamba3CoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in, T* dk_in,
      T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* dk_out,
      const T* dv_out, const T* q, const T* k, const T* v, const T* a,
      const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
      int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideMamba3CoreBackward(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, workspace, dO,
                             dS_out, dk_out, dv_out, q, k, v, a, gamma, beta, S_in, k_in, v_in,
                             T_len, H, Dk, Dv, block_size, st_tile, WideMode::Overlapped());
    } else {
      Mamba3CoreBackwardOverlappedNative(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in,
                                         workspace, dO, dS_out, dk_out, dv_out, q, k, v, a,
                                         gamma, beta, S_in, k_in, v_in, T_len, H, Dk, Dv,
                                         block_size, st_tile);
    }
  }
  void Mamba3CoreBackwardOverlappedNative(
      T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in, T* dk_in,
      T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* dk_out,
      const T* dv_out, const T* q, const T* k, const T* v, const T* a,
      const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
      const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
      int64_t block_size, int64_t st_tile);

  // The core phase by phase (ops.h): the passes of Mamba3CoreForward /
  // Mamba3CoreBackward in three groups, on their own workspaces.
  int64_t Mamba3CoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                              int64_t Dk, int64_t Dv,
                                              int64_t block_size) override {
    return Mamba3CoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  // Forward: kPre every block's Pre; kST the state chain, S_out and the
  // carry (k_out, v_out); kOut every block's Out (o).
  void Mamba3CoreForwardPhase(CorePhase phase, T* o, StatOf<T>* S_out, T* k_out,
                              T* v_out, StatOf<T>* workspace, const T* q, const T* k,
                              const T* v, const T* a, const T* gamma,
                              const T* beta, const StatOf<T>* S_in, const T* k_in,
                              const T* v_in, int64_t T_len, int64_t H,
                              int64_t Dk, int64_t Dv,
                              int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideMamba3CoreForward(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma,
                                 beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Of(phase));
    } else {
      Mamba3CoreForwardPhaseNative(phase, o, S_out, k_out, v_out, workspace, q, k, v, a, gamma,
                                   beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void Mamba3CoreForwardPhaseNative(CorePhase phase, T* o, StatOf<T>* S_out, T* k_out,
                                    T* v_out, StatOf<T>* workspace, const T* q, const T* k,
                                    const T* v, const T* a, const T* gamma,
                                    const T* beta, const StatOf<T>* S_in, const T* k_in,
                                    const T* v_in, int64_t T_len, int64_t H,
                                    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile);
  int64_t Mamba3CoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                               int64_t Dk, int64_t Dv,
                                               int64_t block_size) override {
    return Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  // Backward, as the overlapped core splits it: kPre the replay of the
  // entering states and Out's backward that needs no state gradient (Q K^T,
  // dO V^T, dq; Z); kST the state-gradient chain (dS_in) and the carry's
  // gradients (dk_in, dv_in); kOut the rest (dk, dv, da, dgamma, dbeta).
  void Mamba3CoreBackwardPhase(
      CorePhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
      StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO,
      const StatOf<T>* dS_out, const T* dk_out, const T* dv_out, const T* q,
      const T* k, const T* v, const T* a, const T* gamma, const T* beta,
      const StatOf<T>* S_in, const T* k_in, const T* v_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideMamba3CoreBackward(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in,
                                  workspace, dO, dS_out, dk_out, dv_out, q, k, v, a, gamma,
                                  beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Of(phase));
    } else {
      Mamba3CoreBackwardPhaseNative(phase, dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in,
                                    workspace, dO, dS_out, dk_out, dv_out, q, k, v, a, gamma,
                                    beta, S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void Mamba3CoreBackwardPhaseNative(
      CorePhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
      StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO,
      const StatOf<T>* dS_out, const T* dk_out, const T* dv_out, const T* q,
      const T* k, const T* v, const T* a, const T* gamma, const T* beta,
      const StatOf<T>* S_in, const T* k_in, const T* v_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile);

 private:
  using Base = GridRecurrentCore<T, Exec>;
  using Base::exec_;
  using Base::kWide;
  using typename Base::F;
  using typename Base::WideMode;
  using typename Base::WideArgs;
  using Base::kEvEntry;
  using Base::kEvSideDone;
  using Base::kEvOutDone;
  using Base::EvPre;
  using Base::EvST;
  using Base::EvSTBack;
  using Base::ForBlocks;
  using Base::ForTokens;
  using Base::BlockGram;

  // The float copies' extra workspace elements (bf16).
  static int64_t WideMamba3ForwardSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv) {
    // q, k, v, a, gamma, beta; k_in, v_in; o; k_out, v_out
    return T_len * H * (2 * Dk + 2 * Dv + 3) + 2 * H * (Dk + Dv);
  }
  static int64_t WideMamba3BackwardSize(int64_t T_len, int64_t H, int64_t Dk,
                                        int64_t Dv) {
    // dO, q, k, v, a, gamma, beta; dk_out, dv_out, k_in, v_in;
    // dq, dk, dv, da, dgamma, dbeta; dk_in, dv_in
    return T_len * H * (3 * Dv + 2 * Dk + 3) + 2 * H * (Dk + Dv) +
           T_len * H * (2 * Dk + Dv + 3) + H * (Dk + Dv);
  }
  void WideMamba3CoreForward(T* o, F* S_out, T* k_out, T* v_out, F* workspace,
                             const T* q, const T* k, const T* v, const T* a,
                             const T* gamma, const T* beta, const F* S_in,
                             const T* k_in, const T* v_in, int64_t T_len,
                             int64_t H, int64_t Dk, int64_t Dv,
                             int64_t block_size, int64_t st_tile, WideMode mode = {});
  void WideMamba3CoreBackward(T* dq, T* dk, T* dv, T* da, T* dgamma,
                              T* dbeta, F* dS_in, T* dk_in, T* dv_in,
                              F* workspace, const T* dO, const F* dS_out,
                              const T* dk_out, const T* dv_out, const T* q,
                              const T* k, const T* v, const T* a,
                              const T* gamma, const T* beta, const F* S_in,
                              const T* k_in, const T* v_in, int64_t T_len,
                              int64_t H, int64_t Dk, int64_t Dv,
                              int64_t block_size, int64_t st_tile, WideMode mode = {});
  // The inputs of one Mamba-3 core call.
  struct Mamba3Args {
    const T *q, *k, *v, *a, *gamma, *beta, *S_in, *k_in, *v_in;
    grid::Mamba3Shape s;
    grid::StTiles st;  // the ST passes' grid (schedule.st_tile)
  };
  // The Mamba-3 forward's passes over blocks [b0, b1), each on executor e.
  // Pre: G, U.
  void Mamba3Pre(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                 const Mamba3Args& a, int64_t b0, int64_t b1);
  // ST: the entering states S'; with the last block, S_out unless nullptr.
  void Mamba3ST(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws, T* S_out,
                const Mamba3Args& a, int64_t b0, int64_t b1);
  // Out: P, o.
  void Mamba3Out(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws, T* o,
                 const Mamba3Args& a, int64_t b0, int64_t b1);
  // The overlapped forward's and backward's wait before the ST of segment
  // seg (of segs, blocks [bound(seg), bound(seg + 1)) of nb): for the Pre of
  // the segment holding the last block that ST reads (with_exit: S_out too),
  // unless stream 0 already waited for it (*pre_waited, the latest).
  static void Mamba3WaitPre(Exec& main, int seg, int segs, int64_t nb,
                            bool with_exit, int* pre_waited);
  // The overlapped backward's wait before the rest of segment seg: for the
  // ST backward of the segment that wrote the first state-gradient slot it
  // reads (slot b0, or slot 1 when b0 = 0 unless `carry_in`: the carry's
  // gradients read slot 0), unless stream 1 already waited for it
  // (*back_waited, the latest: segments go last to first).
  static void Mamba3WaitSTBack(Exec& side, int seg, int segs, int64_t nb,
                               bool carry_in, int* back_waited);
  // The backward's passes over blocks [b0, b1) (Mamba3CoreBackward's order):
  // Out's backward before ST's (Q K^T into P, dO V^T, dq); Out's share of
  // the state gradient (Z over U); ST's backward (dS; dS_in with block 0);
  // the rest (dM, dk, dv, dG, da, dgamma, dbeta).
  void Mamba3OutBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                     T* dq, const T* dO, const Mamba3Args& a, int64_t b0,
                     int64_t b1);
  void Mamba3OutStateGrad(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                          const T* dO, const Mamba3Args& a, int64_t b0,
                          int64_t b1);
  void Mamba3STBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                    T* dS_in, const T* dS_out, const Mamba3Args& a, int64_t b0,
                    int64_t b1);
  void Mamba3RestBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                      T* dk, T* dv, T* da, T* dgamma, T* dbeta, const T* dO,
                      const T* dk_out, const T* dv_out, const Mamba3Args& a,
                      int64_t b0, int64_t b1);
};

// ---- out-of-line members ----------------------------------------------------

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3Pre(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                                 const Mamba3Args& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const Mamba3Shape& s = a.s;
  ForTokens(e, s.H, b0, b1, s, GdnCumDecayFn<T>{ws.G, a.a, s});
  ForBlocks(e, s.H, s.Dv * s.Dk, b0, b1, s,
            Mamba3BlockUFn<T>{ws.U, a.k, a.v, ws.G, a.gamma, a.beta, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3ST(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                                T* S_out, const Mamba3Args& a, int64_t b0,
                                int64_t b1) {
  // Heads x tiles of state rows, blocks in order.
  e.ForEachTile(a.st.tiles(a.s.H), a.st.tile,
                grid::Mamba3STFn<T>{ws.S, S_out, ws.U, a.k, a.v, ws.G, a.beta, a.S_in,
                                    a.k_in, a.v_in, a.s, a.st, b0, b1});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3Out(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                                 T* o, const Mamba3Args& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const Mamba3Shape& s = a.s;
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            Mamba3GramFn<T>{ws.P, a.q, a.k, ws.G, a.gamma, a.beta, s.Dk, true, s});
  ForTokens(e, s.H * s.Dv, b0, b1, s, Mamba3OutFn<T>{o, a.q, a.v, ws.P, ws.S, ws.G, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3WaitPre(Exec& main, int seg, int segs, int64_t nb,
                                     bool with_exit, int* pre_waited) {
  auto bound = [&](int k) { return k * nb / segs; };
  // Mamba3STFn: blocks [b0, b1) read U, G of blocks b0 - 1 .. b1 - 2, and
  // of block nb - 1 for S_out.
  const int64_t last = with_exit && seg + 1 == segs ? nb - 1 : bound(seg + 1) - 2;
  if (last < 0) return;
  const int need = last >= bound(seg) ? seg : seg - 1;
  if (need <= *pre_waited) return;
  main.Wait(EvPre(need));
  *pre_waited = need;
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3WaitSTBack(Exec& side, int seg, int segs, int64_t nb,
                                        bool carry_in, int* back_waited) {
  auto bound = [&](int k) { return k * nb / segs; };
  // Mamba3RestBack of blocks [b0, b1) reads slots b0 + 1 .. b1 (dM, dk, dv,
  // dG) and slot b0 (dbeta of the block's first token) unless b0 = 0 without
  // a carry in; the carry's gradients read slot 0.
  const int64_t first = bound(seg) > 0 || carry_in ? bound(seg) : 1;
  const int need = first < bound(seg + 1) ? seg : seg + 1;
  if (need >= *back_waited) return;
  side.Wait(EvSTBack(need));
  *back_waited = need;
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3CoreForwardNative(
    T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace, const T* q, const T* k,
    const T* v, const T* a, const T* gamma, const T* beta, const StatOf<T>* S_in,
    const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3ForwardWorkspace<T> ws(workspace, s);
  Mamba3Pre(exec_, ws, m, 0, s.nb);
  Mamba3ST(exec_, ws, S_out, m, 0, s.nb);
  Mamba3Out(exec_, ws, o, m, 0, s.nb);
  exec_.ForEach(H * (Dk + Dv),
                grid::Mamba3CarryOutFn<T>{k_out, v_out, k, v, k_in, v_in, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3CoreForwardOverlappedNative(
    T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace, const T* q, const T* k,
    const T* v, const T* a, const T* gamma, const T* beta, const StatOf<T>* S_in,
    const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = StreamSegments(s.nb);
  if (segs < 2) {
    Mamba3CoreForward(o, S_out, k_out, v_out, workspace, q, k, v, a, gamma, beta,
                      S_in, k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    return;
  }
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3ForwardWorkspace<T> ws(workspace, s);
  auto bound = [&](int seg) { return seg * s.nb / segs; };
  Exec& main = exec_;
  Exec side = exec_.Stream(1);
  main.Record(kEvEntry);  // the inputs, made on stream 0 before this call
  side.Wait(kEvEntry);
  Mamba3Pre(side, ws, m, bound(0), bound(1));
  side.Record(EvPre(0));
  int pre_waited = -1;
  for (int seg = 0; seg < segs; ++seg) {
    Mamba3WaitPre(main, seg, segs, s.nb, S_out != nullptr, &pre_waited);
    Mamba3ST(main, ws, S_out, m, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      Mamba3Pre(side, ws, m, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    Mamba3Out(side, ws, o, m, bound(seg), bound(seg + 1));
  }
  // The carry out reads only the inputs.
  main.ForEach(H * (Dk + Dv),
               grid::Mamba3CarryOutFn<T>{k_out, v_out, k, v, k_in, v_in, s});
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);  // stream 0's later work sees o
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3OutBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                                     T* dq, const T* dO, const Mamba3Args& a,
                                     int64_t b0, int64_t b1) {
  using namespace grid;
  const Mamba3Shape& s = a.s;
  const Mamba3ForwardWorkspace<T>& f = ws.f;
  const int64_t tile = s.bs * s.bs;
  // Out's tiles: Q K^T (into P) and dO V^T.
  ForBlocks(e, s.H, tile, b0, b1, s,
            Mamba3GramFn<T>{f.P, a.q, a.k, f.G, a.gamma, a.beta, s.Dk, false, s});
  ForBlocks(e, s.H, tile, b0, b1, s,
            Mamba3GramFn<T>{ws.dOV, dO, a.v, f.G, a.gamma, a.beta, s.Dv, false, s});
  ForTokens(e, s.H * s.Dk, b0, b1, s,
            Mamba3QueryGradFn<T>{dq, dO, a.k, ws.dOV, f.S, f.G, a.gamma, a.beta, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3OutStateGrad(Exec& e,
                                          const grid::Mamba3BackwardWorkspace<T>& ws,
                                          const T* dO, const Mamba3Args& a, int64_t b0,
                                          int64_t b1) {
  const grid::Mamba3Shape& s = a.s;
  ForBlocks(e, s.H, s.Dv * s.Dk, b0, b1, s,
            grid::Mamba3OutStateGradFn<T>{ws.f.U, dO, a.q, ws.f.G, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3STBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                                    T* dS_in, const T* dS_out, const Mamba3Args& a,
                                    int64_t b0, int64_t b1) {
  // Heads x tiles of state rows, blocks in reverse.
  e.ForEachTile(a.st.tiles(a.s.H), a.st.tile,
                grid::Mamba3STGradFn<T>{ws.dS, dS_in, dS_out, ws.f.U, ws.f.G, a.s, a.st, b0,
                                        b1});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3RestBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                                      T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                                      const T* dO, const T* dk_out, const T* dv_out,
                                      const Mamba3Args& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const Mamba3Shape& s = a.s;
  const Mamba3ForwardWorkspace<T>& f = ws.f;
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            Mamba3WeightGradFn<T>{ws.dM, f.P, ws.dOV, ws.dS, a.k, a.v, s});
  ForTokens(e, s.H * s.Dk, b0, b1, s,
            Mamba3KeyGradFn<T>{dk, a.q, a.v, ws.dOV, ws.dS, f.G, a.gamma, a.beta,
                               dk_out, s});
  ForTokens(e, s.H * s.Dv, b0, b1, s,
            Mamba3ValueGradFn<T>{dv, dO, a.k, f.P, ws.dS, f.G, a.gamma, a.beta,
                                 dv_out, s});
  ForTokens(e, s.H, b0, b1, s,
            Mamba3DecayGradFn<T>{ws.dG, a.q, dO, ws.dM, f.S, ws.dS, f.G, a.gamma,
                                 a.beta, s});
  ForTokens(e, s.H, b0, b1, s, Mamba3CumGradFn<T>{da, ws.dG, s});
  ForTokens(e, s.H, b0, b1, s,
            Mamba3GateGradFn<T>{dgamma, dbeta, ws.dM, ws.dS, a.k, a.v, a.k_in, a.v_in,
                                f.G, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3CoreBackwardNative(
    T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in, T* dk_in,
    T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* dk_out,
    const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
    const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3BackwardWorkspace<T> ws(workspace, s);
  // The replay of Pre and ST, then every pass over every block.
  Mamba3Pre(exec_, ws.f, m, 0, s.nb);
  Mamba3ST(exec_, ws.f, /*S_out=*/nullptr, m, 0, s.nb);
  Mamba3OutBack(exec_, ws, dq, dO, m, 0, s.nb);
  Mamba3OutStateGrad(exec_, ws, dO, m, 0, s.nb);
  Mamba3STBack(exec_, ws, dS_in, dS_out, m, 0, s.nb);
  Mamba3RestBack(exec_, ws, dk, dv, da, dgamma, dbeta, dO, dk_out, dv_out, m, 0, s.nb);
  exec_.ForEach(H * (Dk + Dv),
                grid::Mamba3CarryInGradFn<T>{dk_in, dv_in, ws.dS, k_in, v_in, dk_out,
                                             dv_out, beta, s});
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3CoreBackwardOverlappedNative(
    T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in, T* dk_in,
    T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* dk_out,
    const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
    const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = StreamSegments(s.nb);
  if (segs < 2) {
    Mamba3CoreBackward(dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in, workspace,
                       dO, dS_out, dk_out, dv_out, q, k, v, a, gamma, beta, S_in,
                       k_in, v_in, T_len, H, Dk, Dv, block_size, st_tile);
    return;
  }
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3BackwardWorkspace<T> ws(workspace, s);
  auto bound = [&](int seg) { return seg * s.nb / segs; };
  Exec& main = exec_;
  Exec side = exec_.Stream(1);
  main.Record(kEvEntry);
  side.Wait(kEvEntry);
  // The replay, with Out's backward of a segment after its ST, and Z of the
  // segment before after this one's ST (which reads U of that segment's
  // last block).
  Mamba3Pre(side, ws.f, m, bound(0), bound(1));
  side.Record(EvPre(0));
  int pre_waited = -1;
  for (int seg = 0; seg < segs; ++seg) {
    Mamba3WaitPre(main, seg, segs, s.nb, /*with_exit=*/false, &pre_waited);
    Mamba3ST(main, ws.f, /*S_out=*/nullptr, m, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      Mamba3Pre(side, ws.f, m, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    Mamba3OutBack(side, ws, dq, dO, m, bound(seg), bound(seg + 1));
    if (seg > 0) Mamba3OutStateGrad(side, ws, dO, m, bound(seg - 1), bound(seg));
  }
  Mamba3OutStateGrad(side, ws, dO, m, bound(segs - 1), bound(segs));
  side.Record(kEvOutDone);
  main.Wait(kEvOutDone);
  // ST's backward, segments last to first; the rest of each behind it.
  // Slot 0 is read on stream 1 only for the carry in (Mamba3GateGradFn's
  // dbeta of the first token, Mamba3CarryInGradFn).
  const bool carry_in = (k_in != nullptr && v_in != nullptr) ||
                        (dk_in != nullptr && v_in != nullptr) ||
                        (dv_in != nullptr && k_in != nullptr);
  int back_waited = segs;
  for (int seg = segs - 1; seg >= 0; --seg) {
    Mamba3STBack(main, ws, dS_in, dS_out, m, bound(seg), bound(seg + 1));
    main.Record(EvSTBack(seg));
    Mamba3WaitSTBack(side, seg, segs, s.nb, carry_in, &back_waited);
    Mamba3RestBack(side, ws, dk, dv, da, dgamma, dbeta, dO, dk_out, dv_out, m, bound(seg),
                   bound(seg + 1));
  }
  side.ForEach(H * (Dk + Dv),
               grid::Mamba3CarryInGradFn<T>{dk_in, dv_in, ws.dS, k_in, v_in, dk_out,
                                            dv_out, beta, s});
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3CoreForwardPhaseNative(
    CorePhase phase, T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace,
    const T* q, const T* k, const T* v, const T* a, const T* gamma, const T* beta,
    const StatOf<T>* S_in, const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3ForwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case CorePhase::kPre:
      Mamba3Pre(exec_, ws, m, 0, s.nb);
      break;
    case CorePhase::kST:
      Mamba3ST(exec_, ws, S_out, m, 0, s.nb);
      exec_.ForEach(H * (Dk + Dv), grid::Mamba3CarryOutFn<T>{k_out, v_out, k, v, k_in, v_in, s});
      break;
    case CorePhase::kOut:
      Mamba3Out(exec_, ws, o, m, 0, s.nb);
      break;
  }
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::Mamba3CoreBackwardPhaseNative(
    CorePhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in,
    T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out,
    const T* dk_out, const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in, const T* v_in,
    int64_t T_len, int64_t H, int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3BackwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case CorePhase::kPre:
      Mamba3Pre(exec_, ws.f, m, 0, s.nb);
      Mamba3ST(exec_, ws.f, /*S_out=*/nullptr, m, 0, s.nb);
      Mamba3OutBack(exec_, ws, dq, dO, m, 0, s.nb);
      Mamba3OutStateGrad(exec_, ws, dO, m, 0, s.nb);
      break;
    case CorePhase::kST:
      Mamba3STBack(exec_, ws, dS_in, dS_out, m, 0, s.nb);
      exec_.ForEach(H * (Dk + Dv),
                    grid::Mamba3CarryInGradFn<T>{dk_in, dv_in, ws.dS, k_in, v_in, dk_out,
                                                 dv_out, beta, s});
      break;
    case CorePhase::kOut:
      Mamba3RestBack(exec_, ws, dk, dv, da, dgamma, dbeta, dO, dk_out, dv_out, m, 0, s.nb);
      break;
  }
}

// ---- bf16: the core on float copies (kWide) ---------------------------------

// Each call names its arguments to WideArgs in one fixed order whatever the
// mode, so the whole core, the overlapped one and the three phases (which
// find the copies an earlier phase made) share one layout.

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::WideMamba3CoreForward(
    T* o, F* S_out, T* k_out, T* v_out, F* workspace, const T* q, const T* k,
    const T* v, const T* a, const T* gamma, const T* beta, const F* S_in,
    const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile, WideMode mode) {
  GridMamba3Ops<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(exec_, workspace + f.Mamba3CoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
             mode);
  const F* qf = w.In(q, n * Dk);
  const F* kf = w.In(k, n * Dk);
  const F* vf = w.In(v, n * Dv);
  const F* af = w.In(a, n);
  const F* gmf = w.In(gamma, n);
  const F* bf = w.In(beta, n);
  const F* kif = w.In(k_in, H * Dk);
  const F* vif = w.In(v_in, H * Dv);
  F* of = w.Out(o, n * Dv);
  F* kof = w.Out(k_out, H * Dk);
  F* vof = w.Out(v_out, H * Dv);
  if (mode.phase) {
    f.Mamba3CoreForwardPhase(*mode.phase, of, S_out, kof, vof, workspace, qf, kf, vf, af, gmf, bf,
                             S_in, kif, vif, T_len, H, Dk, Dv, block_size, st_tile);
  } else if (mode.overlapped) {
    f.Mamba3CoreForwardOverlapped(of, S_out, kof, vof, workspace, qf, kf, vf, af, gmf, bf, S_in,
                                  kif, vif, T_len, H, Dk, Dv, block_size, st_tile);
  } else {
    f.Mamba3CoreForward(of, S_out, kof, vof, workspace, qf, kf, vf, af, gmf, bf, S_in, kif, vif,
                        T_len, H, Dk, Dv, block_size, st_tile);
  }
  w.Narrow();
}

template <typename T, typename Exec>
void GridMamba3Ops<T, Exec>::WideMamba3CoreBackward(
    T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, F* dS_in, T* dk_in,
    T* dv_in, F* workspace, const T* dO, const F* dS_out, const T* dk_out,
    const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const F* S_in, const T* k_in,
    const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size, int64_t st_tile, WideMode mode) {
  GridMamba3Ops<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(exec_, workspace + f.Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
             mode);
  const F* dOf = w.In(dO, n * Dv);
  const F* qf = w.In(q, n * Dk);
  const F* kf = w.In(k, n * Dk);
  const F* vf = w.In(v, n * Dv);
  const F* af = w.In(a, n);
  const F* gmf = w.In(gamma, n);
  const F* bf = w.In(beta, n);
  const F* dkof = w.In(dk_out, H * Dk);
  const F* dvof = w.In(dv_out, H * Dv);
  const F* kif = w.In(k_in, H * Dk);
  const F* vif = w.In(v_in, H * Dv);
  F* dqf = w.Out(dq, n * Dk);
  F* dkf = w.Out(dk, n * Dk);
  F* dvf = w.Out(dv, n * Dv);
  F* daf = w.Out(da, n);
  F* dgmf = w.Out(dgamma, n);
  F* dbf = w.Out(dbeta, n);
  F* dkif = w.Out(dk_in, H * Dk);
  F* dvif = w.Out(dv_in, H * Dv);
  if (mode.phase) {
    f.Mamba3CoreBackwardPhase(*mode.phase, dqf, dkf, dvf, daf, dgmf, dbf, dS_in, dkif, dvif,
                              workspace, dOf, dS_out, dkof, dvof, qf, kf, vf, af, gmf, bf, S_in,
                              kif, vif, T_len, H, Dk, Dv, block_size, st_tile);
  } else if (mode.overlapped) {
    f.Mamba3CoreBackwardOverlapped(dqf, dkf, dvf, daf, dgmf, dbf, dS_in, dkif, dvif, workspace,
                                   dOf, dS_out, dkof, dvof, qf, kf, vf, af, gmf, bf, S_in, kif,
                                   vif, T_len, H, Dk, Dv, block_size, st_tile);
  } else {
    f.Mamba3CoreBackward(dqf, dkf, dvf, daf, dgmf, dbf, dS_in, dkif, dvif, workspace, dOf,
                         dS_out, dkof, dvof, qf, kf, vf, af, gmf, bf, S_in, kif, vif, T_len, H,
                         Dk, Dv, block_size, st_tile);
  }
  w.Narrow();
}

}  // namespace stateflow::backend

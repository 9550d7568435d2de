// The Kimi Delta Attention family's kernels behind the device seam: the
// per-channel gate and the chunkwise recurrence core (whole,
// split-and-overlapped, and phase by phase), with exactly the contracts of
// backend/kernels/kda_prep.h and kda_core.h: GDN's (gdn_ops.h) with the log
// decay g per key channel, (T, H, Dk), instead of per head. Implemented by
// the CPU (cpu_kda_ops.cc) and the grid devices (grid_kda_ops.h), found by
// KdaOpsOf; the layer is backend/layers/kda_layer.h. beta, the L2 norms and
// the output gate's sigmoid are shared ops (ops.h).
//
//   KdaOps<float>* kda = KdaOpsOf<float>(alloc.device());
//   kda->KdaGateForward(g, a, A_log, dt_bias, S, H, Dk);
#pragma once

#include <cstdint>
#include <memory>

#include "backend/device/family_ops.h"
#include "backend/device/precision.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

class Device;

template <typename T>
class KdaOps : public FamilyOpsBase {
 public:
  // g (T, H, Dk) = -exp(A_log_h) softplus(a + dt_bias_hc); a (T, H, Dk),
  // A_log (H), dt_bias (H Dk). Backward: da written, dA_log and ddt_bias
  // accumulated. REQUIRES: da does not alias dg.
  virtual void KdaGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                              int64_t T_len, int64_t H, int64_t Dk) = 0;
  virtual void KdaGateBackward(T* da, GradOf<T>* dA_log, GradOf<T>* ddt_bias, const T* dg,
                               const T* a, const T* A_log, const T* dt_bias, int64_t T_len,
                               int64_t H, int64_t Dk) = 0;

  // The chunkwise KDA recurrence (kda_core.h) over one sequence's T_len
  // tokens, with `workspace` of KdaCore*WorkspaceSize elements. st_tile:
  // B_V (schedule.st_tile), the tile of value rows into which ST splits the
  // (Dv, Dk) state of a head -- its rows never mix in ST, so the tiles are
  // independent chains (a device runs them in parallel); 0 means the
  // device's default (one tile of Dv rows). Any tile gives the untiled
  // results (bit for bit on the grid devices; on the CPU within rounding,
  // < 1e-12 relative in float64, as its products are split).
  virtual int64_t KdaCoreForwardWorkspaceSize(int64_t T_len, int64_t H,
                                              int64_t Dk, int64_t Dv,
                                              int64_t block_size) = 0;
  virtual void KdaCoreForward(T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                              const T* q, const T* k, const T* v, const T* g,
                              const T* beta, const StatOf<T>* S_in, int64_t T_len,
                              int64_t H, int64_t Dk, int64_t Dv,
                              int64_t block_size, int64_t st_tile = 0) = 0;
  // KdaCoreForward with the recurrence split into Pre / ST / Out and the ST
  // of one block overlapping the Pre and Out of others (schedule.st_overlap):
  // the same contract and workspace. The CPU device runs
  // KdaCoreForwardOverlapped (kda_core.h) on its kernel threads: the same
  // bits as KdaCoreForward where the blocks take the same products; the grid
  // devices (grid_kda_ops.h) split the blocks into segments on two streams. A
  // device without an overlapped forward runs its KdaCoreForward: this
  // default.
  virtual void KdaCoreForwardOverlapped(T* o, StatOf<T>* S_out,
                                        StatOf<T>* workspace,
                                        const T* q, const T* k, const T* v,
                                        const T* g, const T* beta,
                                        const StatOf<T>* S_in, int64_t T_len,
                                        int64_t H, int64_t Dk, int64_t Dv,
                                        int64_t block_size,
                                        int64_t st_tile = 0) {
    KdaCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk,
                   Dv, block_size, st_tile);
  }
  virtual int64_t KdaCoreBackwardWorkspaceSize(int64_t T_len, int64_t H,
                                               int64_t Dk, int64_t Dv,
                                               int64_t block_size) = 0;
  virtual void KdaCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta,
                               StatOf<T>* dS_in, StatOf<T>* workspace,
                               const T* dO, const StatOf<T>* dS_out,
                               const T* q, const T* k, const T* v,
                               const T* g, const T* beta,
                               const StatOf<T>* S_in, int64_t T_len, int64_t H,
                               int64_t Dk, int64_t Dv, int64_t block_size,
                               int64_t st_tile = 0) = 0;
  // KdaCoreBackward split and overlapped (schedule.st_overlap), the same
  // contract and workspace: the CPU device runs KdaCoreBackwardOverlapped
  // (kda_core.h); a device without one runs its KdaCoreBackward (this
  // default), as for the forward.
  virtual void KdaCoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
      StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q,
      const T* k, const T* v, const T* g, const T* beta,
      const StatOf<T>* S_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) {
    KdaCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k,
                    v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }

  // The KDA core one phase at a time, for timing (core_phase.h): calling
  // the phases kPre, kST, kOut in order on the same arguments and a
  // workspace of the *PhaseWorkspaceSize elements gives KdaCoreForward's
  // (KdaCoreBackward's) outputs bit for bit; an output is final once the
  // last phase has run. The CPU device runs kda_core.h's
  // KdaCore*Phase (the per-block functions, intermediates copied through
  // the workspace); GridOps its passes in three groups (the backward's
  // kPre includes the replay of the entering states, as on the CPU).
  virtual int64_t KdaCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                                   int64_t Dk, int64_t Dv,
                                                   int64_t block_size) = 0;
  virtual void KdaCoreForwardPhase(CorePhase phase, T* o, StatOf<T>* S_out,
                                   StatOf<T>* workspace, const T* q,
                                   const T* k, const T* v, const T* g,
                                   const T* beta, const StatOf<T>* S_in,
                                   int64_t T_len, int64_t H,
                                   int64_t Dk, int64_t Dv,
                                   int64_t block_size, int64_t st_tile = 0) = 0;
  virtual int64_t KdaCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                                    int64_t Dk, int64_t Dv,
                                                    int64_t block_size) = 0;
  virtual void KdaCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv,
                                    T* dg, T* dbeta, StatOf<T>* dS_in,
                                    StatOf<T>* workspace, const T* dO,
                                    const StatOf<T>* dS_out, const T* q,
                                    const T* k, const T* v, const T* g,
                                    const T* beta, const StatOf<T>* S_in,
                                    int64_t T_len, int64_t H, int64_t Dk,
                                    int64_t Dv, int64_t block_size, int64_t st_tile = 0) = 0;
};

// The KDA kernels of `device` in element type T (as GdnOpsOf).
template <typename T>
KdaOps<T>* KdaOpsOf(Device& device);

// The CPU device's (cpu_kda_ops.cc; nullptr for bf16), one of the
// implementations KdaOpsOf chooses from; the grid devices' are GridKdaOps
// (grid_kda_ops.h).
template <typename T>
std::unique_ptr<KdaOps<T>> MakeCpuKdaOps();

}  // namespace stateflow::backend

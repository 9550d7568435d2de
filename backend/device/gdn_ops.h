// The Gated DeltaNet family's kernels behind the device seam: the gate, beta
// and the chunkwise recurrence core (whole, split-and-overlapped, and phase
// by phase), with exactly the contracts of backend/kernels/gdn_prep.h and
// gdn_core.h. A device runs them through its own implementation: the CPU's
// (cpu_gdn_ops.cc: the Eigen kernels), the grid devices' (grid_gdn_ops.h:
// host-grid, and CUDA in backend/cuda/), found by GdnOpsOf. The ops every
// family shares (projections, norms, convolutions, the MLP) are Ops<T>
// (ops.h); the layer that calls both is backend/layers/gdn_layer.h.
//
//   GdnOps<float>* gdn = GdnOpsOf<float>(alloc.device());
//   gdn->GdnGateForward(g, a, A_log, dt_bias, S, H);
//
// Dimension legends: as in the kernels' headers.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/device/family_ops.h"
#include "backend/device/precision.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

class Device;

template <typename T>
class GdnOps : public FamilyOpsBase {
 public:
  virtual void GdnGateForward(T* g, const T* a, const T* A_log,
                              const T* dt_bias, int64_t T_len, int64_t H) = 0;
  virtual void GdnGateBackward(T* da, GradOf<T>* dA_log, GradOf<T>* ddt_bias, const T* dg,
                               const T* a, const T* A_log, const T* dt_bias,
                               int64_t T_len, int64_t H) = 0;

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

  // The GDN core one phase at a time, for timing (core_phase.h): calling
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
  virtual void GdnCoreForwardPhase(CorePhase phase, T* o, StatOf<T>* S_out,
                                   StatOf<T>* workspace, const T* q,
                                   const T* k, const T* v, const T* g,
                                   const T* beta, const StatOf<T>* S_in,
                                   int64_t T_len, int64_t H,
                                   int64_t Dk, int64_t Dv,
                                   int64_t block_size, int64_t st_tile = 0) = 0;
  virtual int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                                    int64_t Dk, int64_t Dv,
                                                    int64_t block_size) = 0;
  virtual void GdnCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv,
                                    T* dg, T* dbeta, StatOf<T>* dS_in,
                                    StatOf<T>* workspace, const T* dO,
                                    const StatOf<T>* dS_out, const T* q,
                                    const T* k, const T* v, const T* g,
                                    const T* beta, const StatOf<T>* S_in,
                                    int64_t T_len, int64_t H, int64_t Dk,
                                    int64_t Dv, int64_t block_size, int64_t st_tile = 0) = 0;
};

// The GDN kernels of `device` in element type T, made on first use and kept
// with the device; nullptr where it has none (bf16 on the CPU device, whose
// Eigen kernels are float and double; cuda in a program without the CUDA
// backend).
template <typename T>
GdnOps<T>* GdnOpsOf(Device& device);

// The CPU device's (cpu_gdn_ops.cc; nullptr for bf16), one of the
// implementations GdnOpsOf chooses from; the grid devices' are
// GridGdnOps (grid_gdn_ops.h).
template <typename T>
std::unique_ptr<GdnOps<T>> MakeCpuGdnOps();

}  // namespace stateflow::backend

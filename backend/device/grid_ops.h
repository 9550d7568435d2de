// GridOps<T, Exec>: every kernel of Ops<T> (ops.h) as grid passes over the
// SF_HD functors of grid_kernels/ -- the CUDA kernels' arithmetic -- run by an
// executor. The host-grid device runs them with HostExec (host loops,
// host_grid_device.h); the CUDA device with CudaExec (one thread per index,
// GEMMs in cuBLAS: backend/cuda/grid_exec.cuh). One definition of every
// kernel's arithmetic, tested on the CPU (tests/backend/grid_ops_test.cc).
//
// The executor (a small value type, copied into GridOps):
//   template <class F> void ForEach(int64_t n, F f);
//       calls f(i) for every i in [0, n), in any order, possibly in
//       parallel (every functor here writes disjoint elements per i);
//   template <typename T> void Gemm(bool trans_a, bool trans_b, int64_t M,
//       int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
//       int64_t ldb, T beta, T* C, int64_t ldc);
//       row-major C (M, N) = alpha op(A) op(B) + beta C (C not read when
//       beta == 0), op(A) (M, K), op(B) (K, N);
//   template <typename T> void GemmStridedBatched(..., same as Gemm but
//       with a stride after each of A, B, C ..., int64_t batch);
//   template <typename T> double Sum(const T* x, int64_t n);
//       sum of n device elements in double, returned to the host, in an
//       order that depends only on n.
//   template <class F> void ForEachTile(int64_t tiles, int64_t tile, F f);
//       ForEach over tiles * tile indices, where the indices of one tile
//       (i / tile) belong together: on a GPU one thread block of `tile`
//       threads (the ST passes' B_V, a launch parameter);
//   Exec Stream(int i);
//       an executor like this one that issues on stream i (0: this
//       executor's stream; 1: the side stream). Work issued on one stream
//       runs in issue order (FIFO); work on different streams is unordered
//       except by events;
//   void Record(int e);
//       event e (0 <= e < kGridEvents) completes when everything issued on
//       this executor's stream so far has completed;
//   void Wait(int e);
//       work issued on this executor's stream after this call starts only
//       after the latest Record(e) issued before it has completed.
// HostExec runs everything at once in issue order (streams and events are
// no-ops, the order already satisfies them); CudaExec maps streams to
// cudaStream_t and events to cudaEvent_t (cudaEventRecord,
// cudaStreamWaitEvent); tests/backend/grid_streams_test.cc runs the passes
// in adversarial orders allowed by FIFO and the waits.
//
// Two streams (the paper's split-and-overlap, section 3.4): the overlapped
// GDN cores cut a chunk's nb blocks into GdnStreamSegments(nb) segments and
// issue the Pre and Out passes of a segment on stream 1 and its ST on
// stream 0, so the sequential ST of segment k runs beside the Pre of k + 1
// and the Out of k - 1:
//   stream 1:  Pre_0 Pre_1 [wait ST_0] Out_0 Pre_2 [wait ST_1] Out_1 ...
//   stream 0:  [wait Pre_0] ST_0 [wait Pre_1] ST_1 [wait Pre_2] ST_2 ...
// bracketed by stream 1 waiting for stream 0's earlier work on entry and
// stream 0 waiting for stream 1's last pass on exit, so to the caller the
// call is ordered on stream 0 like any other. The overlapped Mamba-3 cores
// use the same segments and events, each wait for exactly the data a pass
// reads (Mamba3CoreForwardOverlapped, Mamba3CoreBackwardOverlapped).
//
// Not the CPU device's kernels (cpu_device.cc: Eigen, backend/kernels/) and not
// attention (grid_attention_ops.h).
//
//   GridOps<double, HostExec> ops{HostExec{}};
//   ops.RmsNormForward(y, rstd, x, w, N, C, 1e-6);
//
// Dimension legends: as in ops.h and the kernels' headers.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "backend/device/grid_kernels/elementwise.h"
#include "backend/device/grid_kernels/gdn_backward.h"
#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/grid_kernels/gdn_forward.h"
#include "backend/device/grid_kernels/mamba3_core.h"
#include "backend/device/grid_kernels/mamba3_prep.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/grid_kernels/rows.h"
#include "backend/device/ops.h"

namespace stateflow::backend {

// Segments of the overlapped GDN and Mamba-3 cores: min(nb,
// kGdnMaxSegments); segment j is blocks [j nb / S, (j + 1) nb / S). The
// event ids they use are below kGridEvents.
inline constexpr int kGdnMaxSegments = 4;
inline constexpr int kGridEvents = 3 + 3 * kGdnMaxSegments;
inline int GdnStreamSegments(int64_t nb) {
  return nb < kGdnMaxSegments ? static_cast<int>(nb) : kGdnMaxSegments;
}

template <typename T, typename Exec>
class GridOps final : public Ops<T> {
 public:
  explicit GridOps(Exec exec) : exec_(exec) {}

  Exec& exec() { return exec_; }

  // ---- elementwise maps and reductions ----
  void Fill(T* x, T value, int64_t n) override {
    exec_.ForEach(n, grid::FillFn<T>{x, value});
  }
  void Copy(T* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::CopyFn<T>{y, x});
  }
  void Add(T* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::AddFn<T>{y, x});
  }
  void Mul(T* y, const T* a, const T* b, int64_t n) override {
    exec_.ForEach(n, grid::MulFn<T>{y, a, b});
  }
  double Sum(const T* x, int64_t n) override { return exec_.Sum(x, n); }
  void Widen(StatOf<T>* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::ConvertFn<StatOf<T>, T>{y, x});
  }
  void Narrow(T* y, const StatOf<T>* x, int64_t n) override {
    exec_.ForEach(n, grid::ConvertFn<T, StatOf<T>>{y, x});
  }
  void RmsNormApply(T* y, const T* x, const StatOf<T>* rstd, const T* w, int64_t N,
                    int64_t C) override {
    exec_.ForEach(N * C, grid::RmsNormApplyFn<T>{y, x, rstd, w, C});
  }
  void AdamWUpdate(T* w, T* m, T* v, const T* g, int64_t n,
                   const AdamWCoefficients<T>& c) override {
    exec_.ForEach(n, grid::AdamWFn<T>{w, m, v, g, c.beta1, c.one_minus_beta1,
                                      c.beta2, c.one_minus_beta2, c.step_size,
                                      c.inv_sqrt_c2, c.eps, c.lr_decay});
  }

  // ---- dense kernels ----
  void LinearForward(T* y, const T* x, const T* w, const T* b, int64_t N,
                     int64_t C, int64_t D) override {
    Mm(exec_, false, true, N, D, C, x, C, w, C, 0, y, D);
    if (b != nullptr) exec_.ForEach(N * D, grid::AddBiasFn<T>{y, b, D});
  }
  void LinearBackward(T* dx, GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x,
                      const T* w, int64_t N, int64_t C, int64_t D) override {
    if (dx != nullptr) {
      Mm(exec_, false, false, N, C, D, dy, D, w, C, 0, dx, C);
    }
    Mm(exec_, true, false, D, C, N, dy, D, x, C, 1, dw, C);
    if (db != nullptr) exec_.ForEach(D, grid::ColumnSumAddFn<T>{db, dy, N, D});
  }
  void RmsNormForward(T* y, StatOf<T>* rstd, const T* x, const T* w, int64_t N,
                      int64_t C, ComputeOf<T> eps) override {
    exec_.ForEach(N, grid::RmsNormRstdFn<T>{rstd, x, C, eps});
    exec_.ForEach(N * C, grid::RmsNormApplyFn<T>{y, x, rstd, w, C});
  }
  void RmsNormBackward(T* dx, GradOf<T>* dw, const T* dy, const T* x, const T* w,
                       const StatOf<T>* rstd, int64_t N, int64_t C) override {
    exec_.ForEach(C, grid::RmsNormWeightGradFn<T>{dw, dy, x, rstd, N, C});
    exec_.ForEach(N, grid::RmsNormInputGradFn<T>{dx, dy, x, w, rstd, C});
  }
  void SiluForward(T* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::SiluForwardFn<T>{y, x});
  }
  void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::SiluBackwardFn<T>{dx, dy, x});
  }
  void ShortConvForward(T* y, T* tail_out, const T* x, const T* w,
                        const T* tail_in, int64_t T_len, int64_t C,
                        int64_t W) override {
    exec_.ForEach(T_len * C, grid::ShortConvForwardFn<T>{y, x, w, tail_in, C, W});
    if (tail_out != nullptr) {
      exec_.ForEach((W - 1) * C,
                    grid::ShortConvTailFn<T>{tail_out, x, tail_in, T_len, C, W});
    }
  }
  void ShortConvBackward(T* dx, T* dtail_in, GradOf<T>* dw, const T* dy,
                         const T* dtail_out, const T* x, const T* w,
                         const T* tail_in, int64_t T_len, int64_t C,
                         int64_t W) override {
    exec_.ForEach((W - 1 + T_len) * C,
                  grid::ShortConvInputGradFn<T>{dx, dtail_in, dy, dtail_out, w,
                                                T_len, C, W});
    exec_.ForEach(W * C, grid::ShortConvWeightGradFn<T>{dw, dy, x, tail_in,
                                                         T_len, C, W});
  }
  void L2NormForward(T* y, StatOf<T>* rnorm, const T* x, int64_t R, int64_t D,
                     ComputeOf<T> scale, ComputeOf<T> eps) override {
    exec_.ForEach(R, grid::L2NormForwardFn<T>{y, rnorm, x, D, scale, eps});
  }
  void L2NormBackward(T* dx, const T* dy, const T* x, const StatOf<T>* rnorm,
                      int64_t R, int64_t D, ComputeOf<T> scale) override {
    exec_.ForEach(R, grid::L2NormBackwardFn<T>{dx, dy, x, rnorm, D, scale});
  }
  void GdnGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                      int64_t T_len, int64_t H) override {
    exec_.ForEach(T_len * H, grid::GdnGateForwardFn<T>{g, a, A_log, dt_bias, H});
  }
  // REQUIRES: da does not alias dg (as the CPU kernel).
  void GdnGateBackward(T* da, GradOf<T>* dA_log, GradOf<T>* ddt_bias, const T* dg,
                       const T* a, const T* A_log, const T* dt_bias,
                       int64_t T_len, int64_t H) override {
    exec_.ForEach(T_len * H,
                  grid::GdnGateInputGradFn<T>{da, dg, a, A_log, dt_bias, H});
    exec_.ForEach(H, grid::GdnGateParamGradFn<T>{dA_log, ddt_bias, da, dg, a,
                                                 A_log, dt_bias, T_len, H});
  }
  void GdnBetaForward(T* beta, const T* b, int64_t n) override {
    exec_.ForEach(n, grid::GdnBetaForwardFn<T>{beta, b});
  }
  void GdnBetaBackward(T* db, const T* dbeta, const T* beta,
                       int64_t n) override {
    exec_.ForEach(n, grid::GdnBetaBackwardFn<T>{db, dbeta, beta});
  }

  // ---- the GDN core (grid_kernels/gdn_*.h) ----
  // st_tile: B_V, the ST passes' tile of value rows (StTiles; 0: Dv). Every
  // tile size gives the same bits: a row's arithmetic does not depend on it.
  int64_t GdnCoreForwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                      int64_t Dv,
                                      int64_t block_size) override {
    return grid::GdnForwardWorkspace<T>::Size(
               grid::GdnShape::Make(T_len, H, Dk, Dv, block_size)) +
           (kWide ? WideGdnForwardSize(T_len * H, Dk, Dv) : 0);
  }
  void GdnCoreForward(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q, const T* k,
                      const T* v, const T* g, const T* beta, const StatOf<T>* S_in,
                      int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                      int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, {});
    } else {
      GdnCoreForwardNative(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreForwardNative(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q, const T* k,
                      const T* v, const T* g, const T* beta, const StatOf<T>* S_in,
                      int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                      int64_t block_size, int64_t st_tile);
  // The forward on two streams (the class comment): the blocks in
  // GdnStreamSegments(nb) segments, Pre and Out on stream 1, ST on stream 0,
  //   Pre_0 -> (ST_0 || Pre_1) -> (ST_1 || Out_0, Pre_2) -> ... -> Out_last,
  // the same workspace and the same bits as GdnCoreForward (every pass the
  // same functor on the same elements). Under 2 blocks: GdnCoreForward.
  void GdnCoreForwardOverlapped(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q,
                                const T* k, const T* v, const T* g,
                                const T* beta, const StatOf<T>* S_in, int64_t T_len,
                                int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size,
                                int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Overlapped());
    } else {
      GdnCoreForwardOverlappedNative(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreForwardOverlappedNative(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q,
                                const T* k, const T* v, const T* g,
                                const T* beta, const StatOf<T>* S_in, int64_t T_len,
                                int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size,
                                int64_t st_tile);
  // Larger than the CPU kernel's (H nb Dv Dk): see GdnBackwardWorkspace
  // (grid_kernels/gdn_common.h) -- every block's intermediate results of a
  // pass exist at once, where the CPU walks the blocks with small scratch.
  int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv,
                                       int64_t block_size) override {
    return grid::GdnBackwardWorkspace<T>::Size(
               grid::GdnShape::Make(T_len, H, Dk, Dv, block_size)) +
           (kWide ? WideGdnBackwardSize(T_len * H, Dk, Dv) : 0);
  }
  void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
                       StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const StatOf<T>* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
                       int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    } else {
      GdnCoreBackwardNative(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreBackwardNative(T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
                       StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const StatOf<T>* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
                       int64_t st_tile);
  // The backward on two streams: the replay as the overlapped forward with
  // Out's backward of segment k on stream 1 after the replayed ST_k; then the
  // ST backward on stream 0, segments last to first, and the rest of
  // segment k's backward (ST's row and decay gradients, Pre's backward) on
  // stream 1 after ST_k's backward, while stream 0 runs ST_{k-1}'s. The same
  // workspace and bits as GdnCoreBackward. Under 2 blocks: GdnCoreBackward.
  void GdnCoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
      const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
      const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size,
      int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Overlapped());
    } else {
      GdnCoreBackwardOverlappedNative(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreBackwardOverlappedNative(
      T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
      const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
      const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size,
      int64_t st_tile);

  // The core phase by phase (ops.h): the passes of GdnCoreForward /
  // GdnCoreBackward in three groups, on their own workspaces.
  int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size) override {
    return GdnCoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  void GdnCoreForwardPhase(GdnPhase phase, T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const StatOf<T>* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Of(phase));
    } else {
      GdnCoreForwardPhaseNative(phase, o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreForwardPhaseNative(GdnPhase phase, T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const StatOf<T>* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile);
  int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                            int64_t Dk, int64_t Dv,
                                            int64_t block_size) override {
    return GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  void GdnCoreBackwardPhase(GdnPhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace, const T* dO,
                            const StatOf<T>* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const StatOf<T>* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Of(phase));
    } else {
      GdnCoreBackwardPhaseNative(phase, dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreBackwardPhaseNative(GdnPhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace, const T* dO,
                            const StatOf<T>* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const StatOf<T>* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile);

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
                           int64_t S, int64_t H, int64_t N,
                           int64_t Na) override {
    exec_.ForEach(S * H * N, grid::Mamba3RotateFn<T>{k, Bn, B_bias, phi, H, N, Na});
    exec_.ForEach(S * H * N, grid::Mamba3RotateFn<T>{q, Cn, C_bias, phi, H, N, Na});
  }
  void Mamba3RotaryBackward(StatOf<T>* dphi, T* dCn, T* dBn, GradOf<T>* dC_bias, GradOf<T>* dB_bias,
                            T* dq, T* dk, const T* q, const T* k, const StatOf<T>* phi,
                            int64_t S, int64_t H, int64_t N,
                            int64_t Na) override {
    exec_.ForEach(S * H * Na,
                  grid::Mamba3RotaryPairGradFn<T>{dphi, dq, dk, q, k, phi, N, Na});
    exec_.ForEach(S * N, grid::Mamba3HeadSumFn<T>{dBn, dk, H, N});
    exec_.ForEach(S * N, grid::Mamba3HeadSumFn<T>{dCn, dq, H, N});
    exec_.ForEach(H * N, grid::Mamba3BiasGradFn<T>{dB_bias, dk, S, H, N});
    exec_.ForEach(H * N, grid::Mamba3BiasGradFn<T>{dC_bias, dq, S, H, N});
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
                               int64_t H, int64_t P) override {
    exec_.ForEach(S * H * P,
                  grid::Mamba3GateOutputFn<T>{gated, o, xv, silu_z, D, H, P});
  }
  void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, GradOf<T>* dD, const T* dgated,
                                const T* o, const T* xv, const T* silu_z,
                                const T* D, int64_t S, int64_t H,
                                int64_t P) override {
    exec_.ForEach(H, grid::Mamba3SkipGradFn<T>{dD, dgated, xv, silu_z, S, H, P});
    exec_.ForEach(S * H * P, grid::Mamba3GateOutputGradFn<T>{
                                 dz, d_o, dxv, dgated, o, xv, silu_z, D, H, P});
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
  // GdnStreamSegments(nb) segments, Pre and Out on stream 1, ST on stream 0,
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
  void Mamba3CoreForwardPhase(GdnPhase phase, T* o, StatOf<T>* S_out, T* k_out,
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
  void Mamba3CoreForwardPhaseNative(GdnPhase phase, T* o, StatOf<T>* S_out, T* k_out,
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
      GdnPhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
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
      GdnPhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
      StatOf<T>* dS_in, T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO,
      const StatOf<T>* dS_out, const T* dk_out, const T* dv_out, const T* q,
      const T* k, const T* v, const T* a, const T* gamma, const T* beta,
      const StatOf<T>* S_in, const T* k_in, const T* v_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile);

  // ---- MLP, embedding, output loss ----
  void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x, const T* wg,
                        const T* wu, const T* wd, int64_t N, int64_t C,
                        int64_t F) override {
    LinearForward(gate, x, wg, nullptr, N, C, F);
    LinearForward(up, x, wu, nullptr, N, C, F);
    exec_.ForEach(N * F, grid::SwigluHiddenFn<T>{h, gate, up});
    LinearForward(y, h, wd, nullptr, N, F, C);
  }
  void SwigluMlpBackward(T* dx, GradOf<T>* dwg, GradOf<T>* dwu, GradOf<T>* dwd,
                         T* workspace,
                         const T* dy, const T* gate, const T* up, const T* x,
                         const T* wg, const T* wu, const T* wd, int64_t N,
                         int64_t C, int64_t F) override {
    T* hd = workspace;             // (N, F): h, then d(up)
    T* dgate = workspace + N * F;  // (N, F): dh, then d(gate)
    exec_.ForEach(N * F, grid::SwigluHiddenFn<T>{hd, gate, up});
    LinearBackward(dgate, dwd, nullptr, dy, hd, wd, N, F, C);
    exec_.ForEach(N * F, grid::SwigluBackwardFn<T>{dgate, hd, gate, up});
    LinearBackward(dx, dwg, nullptr, dgate, x, wg, N, C, F);
    LinearBackward(nullptr, dwu, nullptr, hd, x, wu, N, C, F);
    if (dx != nullptr) {
      Mm(exec_, false, false, N, C, F, hd, F, wu, C, 1, dx, C);
    }
  }
  void EmbeddingForward(T* y, const int32_t* ids, const T* table, int64_t N,
                        int64_t C, int64_t /*V*/) override {
    exec_.ForEach(N * C, grid::EmbeddingGatherFn<T>{y, ids, table, C});
  }
  void EmbeddingBackward(GradOf<T>* dtable, const T* dy, const int32_t* ids,
                         int64_t N, int64_t C, int64_t /*V*/) override {
    exec_.ForEach(C, grid::EmbeddingScatterAddFn<T>{dtable, dy, ids, N, C});
  }
  double OutputLossForward(StatOf<T>* losses, StatOf<T>* lse, StatOf<T>* logits, const T* x,
                           const T* w, const int32_t* targets, int64_t N,
                           int64_t C, int64_t V, int64_t Vs) override;
  void OutputLossBackward(T* dx, GradOf<T>* dw, StatOf<T>* logits, const StatOf<T>* dlosses,
                          const StatOf<T>* lse, const T* x, const T* w,
                          const int32_t* targets, int64_t N, int64_t C,
                          int64_t V, int64_t Vs, T* workspace = nullptr) override;
  int64_t OutputLossBackwardWorkspaceSize(int64_t N, int64_t V,
                                          int64_t Vs) override {
    return kWide ? N * (V < Vs ? V : Vs) : 0;
  }

 private:
  // bf16 (StatOf<T> wider than T): the recurrent cores run their float
  // passes on float copies of their inputs, made in the workspace after the
  // float core's own, and round their outputs once at the end ("bf16" in
  // docs/backend.md). The *Size functions are those extra elements.
  static constexpr bool kWide = !std::is_same_v<StatOf<T>, T>;
  using F = StatOf<T>;
  static int64_t WideGdnForwardSize(int64_t n, int64_t Dk, int64_t Dv) {
    return n * (2 * Dk + 2 * Dv + 2);  // q, k, v, g, beta; o
  }
  static int64_t WideGdnBackwardSize(int64_t n, int64_t Dk, int64_t Dv) {
    // dO, q, k, v, g, beta; dq, dk, dv, dg, dbeta
    return n * (2 * Dk + 2 * Dv + 2) + n * (2 * Dk + Dv + 2);
  }
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
  // How a bf16 core call runs: the whole core, sequential or overlapped,
  // or one of its phases (kPre widens the inputs, kOut rounds the outputs;
  // the copies stay in the workspace between the calls, as the float core's
  // intermediates do).
  struct WideMode {
    bool overlapped = false;
    std::optional<GdnPhase> phase;
    static WideMode Overlapped() { return {true, std::nullopt}; }
    static WideMode Of(GdnPhase p) { return {false, p}; }
    bool widens() const { return !phase || *phase == GdnPhase::kPre; }
    bool narrows() const { return !phase || *phase == GdnPhase::kOut; }
  };
  // The float copies of one bf16 core call's arguments, carved from `at` in
  // the order the call names them, a nullptr argument's too (a fixed layout:
  // a later phase finds what an earlier one made). In: the copy of an input,
  // widened if the mode widens; Out: the copy of an output, rounded into it
  // by Narrow() if the mode narrows. A nullptr argument gives nullptr.
  class WideArgs {
   public:
    WideArgs(GridOps& ops, F* at, WideMode mode) : ops_(ops), at_(at), mode_(mode) {}
    const F* In(const T* x, int64_t n) {
      F* y = Take(n);
      if (x == nullptr) return nullptr;
      if (mode_.widens()) ops_.Widen(y, x, n);
      return y;
    }
    F* Out(T* x, int64_t n) {
      F* y = Take(n);
      if (x == nullptr) return nullptr;
      outs_[count_++] = {x, y, n};
      return y;
    }
    void Narrow() {
      if (!mode_.narrows()) return;
      for (int i = 0; i < count_; ++i) ops_.Narrow(outs_[i].x, outs_[i].y, outs_[i].n);
    }

   private:
    struct Output {
      T* x;
      F* y;
      int64_t n;
    };
    F* Take(int64_t n) {
      F* r = at_;
      at_ += n;
      return r;
    }
    GridOps& ops_;
    F* at_;
    WideMode mode_;
    std::array<Output, 8> outs_{};  // the most a core names: Mamba-3's backward
    int count_ = 0;
  };
  void WideGdnCoreForward(T* o, F* S_out, F* workspace, const T* q,
                          const T* k, const T* v, const T* g, const T* beta,
                          const F* S_in, int64_t T_len, int64_t H, int64_t Dk,
                          int64_t Dv, int64_t block_size, int64_t st_tile,
                          WideMode mode = {});
  void WideGdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in,
                           F* workspace, const T* dO, const F* dS_out,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const F* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile, WideMode mode = {});
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
  // Row-major C = op(A) op(B) + beta C: exec_.Gemm for float and double;
  // for bf16 operands exec_.GemmBf16 (float accumulation; C float or bf16).
  template <typename TC>
  void Mm(Exec& e, bool trans_a, bool trans_b, int64_t M, int64_t N,
          int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
          double beta, TC* C, int64_t ldc) {
    if constexpr (std::is_same_v<T, bf16>) {
      e.GemmBf16(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb,
                 static_cast<float>(beta), C, ldc);
    } else {
      static_assert(std::is_same_v<TC, T>);
      e.Gemm(trans_a, trans_b, M, N, K, T(1), A, lda, B, ldb, T(beta), C,
             ldc);
    }
  }

  // The inputs of one GDN core call, and its blocks [b0, b1) (a segment).
  struct GdnArgs {
    const T *q, *k, *v, *g, *beta, *S_in;
    grid::GdnShape s;
    grid::StTiles st;
  };
  // Events of the overlapped cores (grid_ops.h's executor comment), one id
  // per use within a call: entry, side done, and per segment.
  static constexpr int kEvEntry = 0, kEvSideDone = 1, kEvOutDone = 2;
  static int EvPre(int seg) { return 3 + seg; }
  static int EvST(int seg) { return 3 + kGdnMaxSegments + seg; }
  static int EvSTBack(int seg) { return 3 + 2 * kGdnMaxSegments + seg; }

  // f over blocks [b0, b1) of an (outer, nb, per_block) index space, or of
  // a (T, H, D) one (Tokens: per_token = H D).
  template <class F>
  void ForBlocks(Exec& e, int64_t outer, int64_t per_block, int64_t b0,
                 int64_t b1, const grid::GdnShape& s, F f) {
    const int64_t n_in = (b1 - b0) * per_block;
    e.ForEach(outer * n_in, grid::BlockRangeFn<F>{f, per_block, s.nb, b0, n_in});
  }
  template <class F>
  void ForTokens(Exec& e, int64_t per_token, int64_t b0, int64_t b1,
                 const grid::GdnShape& s, F f) {
    const int64_t t0 = b0 * s.bs, t1 = b1 * s.bs < s.T ? b1 * s.bs : s.T;
    const int64_t n = (t1 - t0) * per_token;
    e.ForEach(n, grid::BlockRangeFn<F>{f, s.bs * per_token, s.nb, b0, n});
  }
  // tile[h, b] (L, L) = X_b Y_b^T for every head and block b in [b0, b1) of
  // (T, H, D) buffers X, Y: one strided-batched GEMM per head over its full
  // blocks, one GEMM for a partial last block.
  void BlockGram(Exec& e, T* tile, const T* X, const T* Y, int64_t D,
                 const grid::GdnShape& s, int64_t b0, int64_t b1);
  // The forward's passes over blocks [b0, b1), each on executor e.
  // Pre: G, KG, W, U.
  void GdnPre(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
              const GdnArgs& a, int64_t b0, int64_t b1);
  // ST: V_new into Vn, the entering states; the last block's exit state
  // into S_out unless nullptr.
  void GdnST(Exec& e, const grid::GdnForwardWorkspace<T>& ws, T* Vn, StatOf<T>* S_out,
             const GdnArgs& a, int64_t b0, int64_t b1);
  // Out: o; P over KG (no longer needed by then).
  void GdnOut(Exec& e, const grid::GdnForwardWorkspace<T>& ws, T* o,
              const GdnArgs& a, int64_t b0, int64_t b1);
  // The backward's passes over blocks [b0, b1) (GdnCoreBackward's order):
  // Out's backward (dq, dk, dg written, d(V_new) from Out, each block's own
  // share of dS); ST's backward; the rest (ST's row and decay gradients, dW,
  // Pre's backward: dv, dbeta written, dk, dg completed).
  void GdnOutBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws, T* dq,
                  T* dk, T* dg, const T* dO, const GdnArgs& a, int64_t b0,
                  int64_t b1);
  void GdnSTBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws, StatOf<T>* dS_in,
                 const StatOf<T>* dS_out, const GdnArgs& a, int64_t b0, int64_t b1);
  void GdnRestBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws, T* dk,
                   T* dv, T* dg, T* dbeta, const GdnArgs& a, int64_t b0,
                   int64_t b1);

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

  Exec exec_;
};

// ---- out-of-line members ----------------------------------------------------

template <typename T, typename Exec>
void GridOps<T, Exec>::BlockGram(Exec& e, T* tile, const T* X, const T* Y,
                                 int64_t D, const grid::GdnShape& s,
                                 int64_t b0, int64_t b1) {
  const int64_t full_end = s.T / s.bs < b1 ? s.T / s.bs : b1;  // full blocks end
  const int64_t ld = s.H * D;
  for (int64_t h = 0; h < s.H; ++h) {
    if (full_end > b0) {
      const int64_t off = s.Row(b0 * s.bs, h, D);
      e.GemmStridedBatched(false, true, s.bs, s.bs, D, T(1), X + off, ld,
                           s.bs * ld, Y + off, ld, s.bs * ld, T(0),
                           tile + s.Tile(h, b0, 0, 0), s.bs, s.bs * s.bs,
                           full_end - b0);
    }
    if (full_end < b1) {  // the partial last block
      const int64_t L = s.L(full_end), off = s.Row(full_end * s.bs, h, D);
      e.Gemm(false, true, L, L, D, T(1), X + off, ld, Y + off, ld, T(0),
             tile + s.Tile(h, full_end, 0, 0), s.bs);
    }
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnPre(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
                              const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  ForTokens(e, s.H, b0, b1, s, GdnCumDecayFn<T>{ws.G, a.g, s});
  BlockGram(e, ws.KG, a.k, a.k, s.Dk, s, b0, b1);
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s, GdnMaskDecayFn<T>{ws.KG, ws.G, s, true});
  ForBlocks(e, s.H, s.Dv + s.Dk, b0, b1, s,
            GdnPreSolveFn<T>{ws.U, ws.W, ws.KG, a.k, a.v, a.beta, ws.G, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnST(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
                             T* Vn, StatOf<T>* S_out, const GdnArgs& a, int64_t b0,
                             int64_t b1) {
  // Heads x tiles of value rows, blocks in order.
  e.ForEachTile(a.st.tiles(a.s.H), a.st.tile,
                grid::GdnSTFn<T>{ws.S, Vn, S_out, ws.U, ws.W, a.k, ws.G, a.S_in,
                                 a.s, a.st, b0, b1});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnOut(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
                              T* o, const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  BlockGram(e, ws.KG, a.q, a.k, s.Dk, s, b0, b1);
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s, GdnMaskDecayFn<T>{ws.KG, ws.G, s, false});
  ForTokens(e, s.H * s.Dv, b0, b1, s, GdnOutFn<T>{o, a.q, ws.KG, ws.U, ws.S, ws.G, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreForwardNative(T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                                      const T* q, const T* k, const T* v,
                                      const T* g, const T* beta,
                                      const StatOf<T>* S_in, int64_t T_len, int64_t H,
                                      int64_t Dk, int64_t Dv,
                                      int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s, grid::StTiles::Make(Dv, st_tile)};
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  GdnPre(exec_, ws, a, 0, s.nb);
  GdnST(exec_, ws, /*Vn=*/ws.U, S_out, a, 0, s.nb);
  GdnOut(exec_, ws, o, a, 0, s.nb);
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreForwardOverlappedNative(
    T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = GdnStreamSegments(s.nb);
  if (segs < 2) {
    GdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk,
                   Dv, block_size, st_tile);
    return;
  }
  const GdnArgs a{q, k, v, g, beta, S_in, s, grid::StTiles::Make(Dv, st_tile)};
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  auto bound = [&](int seg) { return seg * s.nb / segs; };
  Exec& main = exec_;
  Exec side = exec_.Stream(1);
  main.Record(kEvEntry);  // the inputs, made on stream 0 before this call
  side.Wait(kEvEntry);
  GdnPre(side, ws, a, bound(0), bound(1));
  side.Record(EvPre(0));
  for (int seg = 0; seg < segs; ++seg) {
    main.Wait(EvPre(seg));
    GdnST(main, ws, /*Vn=*/ws.U, S_out, a, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      GdnPre(side, ws, a, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    GdnOut(side, ws, o, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);  // stream 0's later work sees o
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnOutBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws,
                                  T* dq, T* dk, T* dg, const T* dO,
                                  const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  const GdnForwardWorkspace<T>& f = ws.f;
  const int64_t Dk = s.Dk, Dv = s.Dv, tile = s.bs * s.bs;
  BlockGram(e, ws.P, a.q, a.k, Dk, s, b0, b1);
  ForBlocks(e, s.H, tile, b0, b1, s, GdnMaskDecayFn<T>{ws.P, f.G, s, false});
  BlockGram(e, ws.dP, dO, ws.Vn, Dv, s, b0, b1);
  ForBlocks(e, s.H, tile, b0, b1, s, GdnMaskBlockFn<T>{ws.dP, s});
  ForTokens(e, s.H, b0, b1, s,
            GdnOutDecayGradFn<T>{dg, ws.P, ws.dP, a.q, dO, f.S, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s,
            GdnOutQueryGradFn<T>{dq, ws.dP, a.k, dO, f.S, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s, GdnOutKeyGradFn<T>{dk, ws.dP, a.q, f.G, s});
  ForTokens(e, s.H * Dv, b0, b1, s, GdnOutValueGradFn<T>{ws.dVn, ws.P, dO, s});
  ForBlocks(e, s.H, Dv * Dk, b0, b1, s,
            GdnStateShareFn<T>{ws.dS, dO, a.q, ws.dVn, f.W, f.G, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnSTBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws,
                                 StatOf<T>* dS_in, const StatOf<T>* dS_out, const GdnArgs& a,
                                 int64_t b0, int64_t b1) {
  // Heads x tiles of value rows, blocks in reverse.
  e.ForEachTile(a.st.tiles(a.s.H), a.st.tile,
                grid::GdnSTBackwardFn<T>{ws.dS, ws.Z, dS_in, dS_out, a.k, ws.f.W,
                                         ws.f.G, a.s, a.st, b0, b1});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnRestBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws,
                                   T* dk, T* dv, T* dg, T* dbeta,
                                   const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  const GdnForwardWorkspace<T>& f = ws.f;
  const int64_t Dk = s.Dk, Dv = s.Dv;
  ForTokens(e, s.H * Dv, b0, b1, s, AddFn<T>{ws.dVn, ws.Z});
  ForTokens(e, s.H, b0, b1, s, GdnSTRowGradFn<T>{dk, ws.e, ws.Vn, ws.dS, a.k, f.G, s});
  ForBlocks(e, s.H, 1, b0, b1, s, GdnSTDecayGradFn<T>{dg, ws.e, ws.dS, f.S, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s, GdnWGradFn<T>{ws.dW, ws.dVn, f.S, s});
  // Pre's backward.
  ForBlocks(e, s.H, Dv + Dk, b0, b1, s,
            GdnPreBackSolveFn<T>{ws.dVn, ws.dW, f.KG, a.beta, s});
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            GdnDAFn<T>{ws.dP, ws.dVn, ws.dW, f.U, f.W, s});
  ForTokens(e, s.H * Dv, b0, b1, s, GdnScaleByBetaFn<T>{dv, ws.dVn, a.beta, Dv});
  ForTokens(e, s.H, b0, b1, s,
            GdnPreRowGradFn<T>{dbeta, dg, ws.dVn, ws.dW, ws.dP, f.KG, a.k, a.v,
                               a.beta, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s,
            GdnPreKeyGradFn<T>{dk, ws.dW, ws.dP, a.k, a.beta, f.G, s});
  ForBlocks(e, s.H, 1, b0, b1, s, GdnDecayCumsumFn<T>{dg, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreBackwardNative(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
    const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s, grid::StTiles::Make(Dv, st_tile)};
  const grid::GdnBackwardWorkspace<T> ws(workspace, s);
  // The replay of Pre and ST (U and V_new kept apart: Pre's backward needs U).
  GdnPre(exec_, ws.f, a, 0, s.nb);
  GdnST(exec_, ws.f, ws.Vn, /*S_out=*/nullptr, a, 0, s.nb);
  GdnOutBack(exec_, ws, dq, dk, dg, dO, a, 0, s.nb);
  GdnSTBack(exec_, ws, dS_in, dS_out, a, 0, s.nb);
  GdnRestBack(exec_, ws, dk, dv, dg, dbeta, a, 0, s.nb);
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreBackwardOverlappedNative(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
    const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = GdnStreamSegments(s.nb);
  if (segs < 2) {
    GdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k,
                    v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    return;
  }
  const GdnArgs a{q, k, v, g, beta, S_in, s, grid::StTiles::Make(Dv, st_tile)};
  const grid::GdnBackwardWorkspace<T> ws(workspace, s);
  auto bound = [&](int seg) { return seg * s.nb / segs; };
  Exec& main = exec_;
  Exec side = exec_.Stream(1);
  main.Record(kEvEntry);
  side.Wait(kEvEntry);
  // The replay, with Out's backward of a segment after its ST.
  GdnPre(side, ws.f, a, bound(0), bound(1));
  side.Record(EvPre(0));
  for (int seg = 0; seg < segs; ++seg) {
    main.Wait(EvPre(seg));
    GdnST(main, ws.f, ws.Vn, /*S_out=*/nullptr, a, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      GdnPre(side, ws.f, a, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    GdnOutBack(side, ws, dq, dk, dg, dO, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvOutDone);
  main.Wait(kEvOutDone);
  // ST's backward, segments last to first; the rest of each behind it.
  for (int seg = segs - 1; seg >= 0; --seg) {
    GdnSTBack(main, ws, dS_in, dS_out, a, bound(seg), bound(seg + 1));
    main.Record(EvSTBack(seg));
    side.Wait(EvSTBack(seg));
    GdnRestBack(side, ws, dk, dv, dg, dbeta, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);
}

// The phases are GdnCoreForward's and GdnCoreBackward's passes, cut where
// the profiler times them (tests/backend/gdn_phase_test.cc checks that the
// three phases in order give the whole core's bits).
template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreForwardPhaseNative(GdnPhase phase, T* o, StatOf<T>* S_out,
                                           StatOf<T>* workspace, const T* q,
                                           const T* k, const T* v, const T* g,
                                           const T* beta, const StatOf<T>* S_in,
                                           int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s, grid::StTiles::Make(Dv, st_tile)};
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case GdnPhase::kPre: GdnPre(exec_, ws, a, 0, s.nb); break;
    case GdnPhase::kST: GdnST(exec_, ws, /*Vn=*/ws.U, S_out, a, 0, s.nb); break;
    case GdnPhase::kOut: GdnOut(exec_, ws, o, a, 0, s.nb); break;
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreBackwardPhaseNative(
    GdnPhase phase, T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
    StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q, const T* k,
    const T* v, const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len,
    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s, grid::StTiles::Make(Dv, st_tile)};
  const grid::GdnBackwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case GdnPhase::kPre:  // the replay and Out's backward
      GdnPre(exec_, ws.f, a, 0, s.nb);
      GdnST(exec_, ws.f, ws.Vn, /*S_out=*/nullptr, a, 0, s.nb);
      GdnOutBack(exec_, ws, dq, dk, dg, dO, a, 0, s.nb);
      break;
    case GdnPhase::kST:  // the state-gradient chain
      GdnSTBack(exec_, ws, dS_in, dS_out, a, 0, s.nb);
      break;
    case GdnPhase::kOut:  // the ST's rows and Pre's backward
      GdnRestBack(exec_, ws, dk, dv, dg, dbeta, a, 0, s.nb);
      break;
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3Pre(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                                 const Mamba3Args& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const Mamba3Shape& s = a.s;
  ForTokens(e, s.H, b0, b1, s, GdnCumDecayFn<T>{ws.G, a.a, s});
  ForBlocks(e, s.H, s.Dv * s.Dk, b0, b1, s,
            Mamba3BlockUFn<T>{ws.U, a.k, a.v, ws.G, a.gamma, a.beta, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3ST(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                                T* S_out, const Mamba3Args& a, int64_t b0,
                                int64_t b1) {
  // Heads x tiles of state rows, blocks in order.
  e.ForEachTile(a.st.tiles(a.s.H), a.st.tile,
                grid::Mamba3STFn<T>{ws.S, S_out, ws.U, a.k, a.v, ws.G, a.beta, a.S_in,
                                    a.k_in, a.v_in, a.s, a.st, b0, b1});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3Out(Exec& e, const grid::Mamba3ForwardWorkspace<T>& ws,
                                 T* o, const Mamba3Args& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const Mamba3Shape& s = a.s;
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            Mamba3GramFn<T>{ws.P, a.q, a.k, ws.G, a.gamma, a.beta, s.Dk, true, s});
  ForTokens(e, s.H * s.Dv, b0, b1, s, Mamba3OutFn<T>{o, a.q, a.v, ws.P, ws.S, ws.G, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3WaitPre(Exec& main, int seg, int segs, int64_t nb,
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
void GridOps<T, Exec>::Mamba3WaitSTBack(Exec& side, int seg, int segs, int64_t nb,
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
void GridOps<T, Exec>::Mamba3CoreForwardNative(
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
void GridOps<T, Exec>::Mamba3CoreForwardOverlappedNative(
    T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace, const T* q, const T* k,
    const T* v, const T* a, const T* gamma, const T* beta, const StatOf<T>* S_in,
    const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = GdnStreamSegments(s.nb);
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
void GridOps<T, Exec>::Mamba3OutBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
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
void GridOps<T, Exec>::Mamba3OutStateGrad(Exec& e,
                                          const grid::Mamba3BackwardWorkspace<T>& ws,
                                          const T* dO, const Mamba3Args& a, int64_t b0,
                                          int64_t b1) {
  const grid::Mamba3Shape& s = a.s;
  ForBlocks(e, s.H, s.Dv * s.Dk, b0, b1, s,
            grid::Mamba3OutStateGradFn<T>{ws.f.U, dO, a.q, ws.f.G, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3STBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
                                    T* dS_in, const T* dS_out, const Mamba3Args& a,
                                    int64_t b0, int64_t b1) {
  // Heads x tiles of state rows, blocks in reverse.
  e.ForEachTile(a.st.tiles(a.s.H), a.st.tile,
                grid::Mamba3STGradFn<T>{ws.dS, dS_in, dS_out, ws.f.U, ws.f.G, a.s, a.st, b0,
                                        b1});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3RestBack(Exec& e, const grid::Mamba3BackwardWorkspace<T>& ws,
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
void GridOps<T, Exec>::Mamba3CoreBackwardNative(
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
void GridOps<T, Exec>::Mamba3CoreBackwardOverlappedNative(
    T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in, T* dk_in,
    T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* dk_out,
    const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in,
    const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = GdnStreamSegments(s.nb);
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
double GridOps<T, Exec>::OutputLossForward(StatOf<T>* losses, StatOf<T>* lse, StatOf<T>* logits,
                                           const T* x, const T* w,
                                           const int32_t* targets, int64_t N,
                                           int64_t C, int64_t V, int64_t Vs) {
  if (N == 0) return 0.0;
  exec_.ForEach(N, grid::FillFn<F>{lse, grid::NegInf<F>()});
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = V - v0 < Vs ? V - v0 : Vs;
    Mm(exec_, false, true, N, vs, C, x, C, w + v0 * C, C, 0, logits, vs);
    exec_.ForEach(N, grid::OnlineLogsumexpFn<T>{lse, logits, vs});
  }
  // The per-token losses into the (now free) logits workspace, summed there.
  exec_.ForEach(N, grid::TokenLossFn<T>{logits, losses, lse, x, w, targets, C});
  return exec_.Sum(logits, N) / static_cast<double>(N);
}

template <typename T, typename Exec>
void GridOps<T, Exec>::OutputLossBackward(T* dx, GradOf<T>* dw, StatOf<T>* logits,
                                          const StatOf<T>* dlosses, const StatOf<T>* lse,
                                          const T* x, const T* w,
                                          const int32_t* targets, int64_t N,
                                          int64_t C, int64_t V, int64_t Vs,
                                          T* workspace) {
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = V - v0 < Vs ? V - v0 : Vs;
    const T* ws = w + v0 * C;  // (vs, C)
    Mm(exec_, false, true, N, vs, C, x, C, ws, C, 0, logits, vs);
    exec_.ForEach(N * vs,
                  grid::SoftmaxGradFn<T>{logits, lse, dlosses, targets, vs, v0});
    // d(logits): in bf16, rounded into the workspace for the two GEMMs (as
    // a bf16 framework casts the float gradient back); else the logits.
    const T* dl = nullptr;
    if constexpr (kWide) {
      Narrow(workspace, logits, N * vs);
      dl = workspace;
    } else {
      dl = logits;
    }
    if (dx != nullptr) {
      Mm(exec_, false, false, N, C, vs, dl, vs, ws, C, v0 == 0 ? 0 : 1, dx, C);
    }
    Mm(exec_, true, false, vs, C, N, dl, vs, x, C, 1, dw + v0 * C, C);
  }
  if (dx != nullptr && V == 0) exec_.ForEach(N * C, grid::FillFn<T>{dx, T(0)});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3CoreForwardPhaseNative(
    GdnPhase phase, T* o, StatOf<T>* S_out, T* k_out, T* v_out, StatOf<T>* workspace,
    const T* q, const T* k, const T* v, const T* a, const T* gamma, const T* beta,
    const StatOf<T>* S_in, const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3ForwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case GdnPhase::kPre:
      Mamba3Pre(exec_, ws, m, 0, s.nb);
      break;
    case GdnPhase::kST:
      Mamba3ST(exec_, ws, S_out, m, 0, s.nb);
      exec_.ForEach(H * (Dk + Dv), grid::Mamba3CarryOutFn<T>{k_out, v_out, k, v, k_in, v_in, s});
      break;
    case GdnPhase::kOut:
      Mamba3Out(exec_, ws, o, m, 0, s.nb);
      break;
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3CoreBackwardPhaseNative(
    GdnPhase phase, T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, StatOf<T>* dS_in,
    T* dk_in, T* dv_in, StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out,
    const T* dk_out, const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const StatOf<T>* S_in, const T* k_in, const T* v_in,
    int64_t T_len, int64_t H, int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3Args m{q, k, v, a, gamma, beta, S_in, k_in, v_in, s,
                     grid::StTiles::Make(Dv, st_tile)};
  const grid::Mamba3BackwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case GdnPhase::kPre:
      Mamba3Pre(exec_, ws.f, m, 0, s.nb);
      Mamba3ST(exec_, ws.f, /*S_out=*/nullptr, m, 0, s.nb);
      Mamba3OutBack(exec_, ws, dq, dO, m, 0, s.nb);
      Mamba3OutStateGrad(exec_, ws, dO, m, 0, s.nb);
      break;
    case GdnPhase::kST:
      Mamba3STBack(exec_, ws, dS_in, dS_out, m, 0, s.nb);
      exec_.ForEach(H * (Dk + Dv),
                    grid::Mamba3CarryInGradFn<T>{dk_in, dv_in, ws.dS, k_in, v_in, dk_out,
                                                 dv_out, beta, s});
      break;
    case GdnPhase::kOut:
      Mamba3RestBack(exec_, ws, dk, dv, da, dgamma, dbeta, dO, dk_out, dv_out, m, 0, s.nb);
      break;
  }
}

// ---- bf16: the recurrent cores on float copies (kWide) ------------------------

// Each call names its arguments to WideArgs in one fixed order whatever the
// mode, so the whole core, the overlapped one and the three phases (which
// find the copies an earlier phase made) share one layout.

template <typename T, typename Exec>
void GridOps<T, Exec>::WideGdnCoreForward(
    T* o, F* S_out, F* workspace, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const F* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile,
    WideMode mode) {
  GridOps<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(*this, workspace + f.GdnCoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
             mode);
  const F* qf = w.In(q, n * Dk);
  const F* kf = w.In(k, n * Dk);
  const F* vf = w.In(v, n * Dv);
  const F* gf = w.In(g, n);
  const F* bf = w.In(beta, n);
  F* of = w.Out(o, n * Dv);
  if (mode.phase) {
    f.GdnCoreForwardPhase(*mode.phase, of, S_out, workspace, qf, kf, vf, gf, bf, S_in, T_len, H,
                          Dk, Dv, block_size, st_tile);
  } else if (mode.overlapped) {
    f.GdnCoreForwardOverlapped(of, S_out, workspace, qf, kf, vf, gf, bf, S_in, T_len, H, Dk,
                               Dv, block_size, st_tile);
  } else {
    f.GdnCoreForward(of, S_out, workspace, qf, kf, vf, gf, bf, S_in, T_len, H, Dk, Dv,
                     block_size, st_tile);
  }
  w.Narrow();
}

template <typename T, typename Exec>
void GridOps<T, Exec>::WideGdnCoreBackward(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in, F* workspace, const T* dO,
    const F* dS_out, const T* q, const T* k, const T* v, const T* g,
    const T* beta, const F* S_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile, WideMode mode) {
  GridOps<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(*this, workspace + f.GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
             mode);
  const F* dOf = w.In(dO, n * Dv);
  const F* qf = w.In(q, n * Dk);
  const F* kf = w.In(k, n * Dk);
  const F* vf = w.In(v, n * Dv);
  const F* gf = w.In(g, n);
  const F* bf = w.In(beta, n);
  F* dqf = w.Out(dq, n * Dk);
  F* dkf = w.Out(dk, n * Dk);
  F* dvf = w.Out(dv, n * Dv);
  F* dgf = w.Out(dg, n);
  F* dbf = w.Out(dbeta, n);
  if (mode.phase) {
    f.GdnCoreBackwardPhase(*mode.phase, dqf, dkf, dvf, dgf, dbf, dS_in, workspace, dOf, dS_out,
                           qf, kf, vf, gf, bf, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  } else if (mode.overlapped) {
    f.GdnCoreBackwardOverlapped(dqf, dkf, dvf, dgf, dbf, dS_in, workspace, dOf, dS_out, qf, kf,
                                vf, gf, bf, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  } else {
    f.GdnCoreBackward(dqf, dkf, dvf, dgf, dbf, dS_in, workspace, dOf, dS_out, qf, kf, vf, gf,
                      bf, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
  w.Narrow();
}

template <typename T, typename Exec>
void GridOps<T, Exec>::WideMamba3CoreForward(
    T* o, F* S_out, T* k_out, T* v_out, F* workspace, const T* q, const T* k,
    const T* v, const T* a, const T* gamma, const T* beta, const F* S_in,
    const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile, WideMode mode) {
  GridOps<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(*this, workspace + f.Mamba3CoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
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
void GridOps<T, Exec>::WideMamba3CoreBackward(
    T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, F* dS_in, T* dk_in,
    T* dv_in, F* workspace, const T* dO, const F* dS_out, const T* dk_out,
    const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const F* S_in, const T* k_in,
    const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size, int64_t st_tile, WideMode mode) {
  GridOps<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(*this, workspace + f.Mamba3CoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
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

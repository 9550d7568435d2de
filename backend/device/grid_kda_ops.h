// GridKdaOps<T, Exec>: the Kimi Delta Attention family's kernels (KdaOps<T>,
// kda_ops.h) on the grid devices: the gate and the chunkwise core (whole, on
// two streams, and phase by phase) as the grid passes of grid_kda_core.h
// (grid_kernels/kda_*.h), in float and double; in bf16 the float passes on
// float copies of the arguments (GridRecurrentCore's WideArgs, as the other
// families' cores). Run by the host-grid device with HostExec and by the
// CUDA device with CudaExec (backend/cuda/cuda_kda_ops.cu).
//
//   GridKdaOps<double, HostExec> kda{HostExec{}};
//   kda.KdaCoreForward(o, S_out, ws, q, k, v, g, beta, S_in, T, H, Dk, Dv, 64);
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/device/grid_kda_core.h"
#include "backend/device/grid_recurrent.h"
#include "backend/device/kda_ops.h"

namespace stateflow::backend {

template <typename T, typename Exec>
class GridKdaOps final : public KdaOps<T>, public GridRecurrentCore<T, Exec> {
  using F = StatOf<T>;  // the float passes' element type (float in bf16)

 public:
  explicit GridKdaOps(Exec exec) : GridRecurrentCore<T, Exec>(exec) {}

  void KdaGateForward(T* g, const T* a, const T* A_log, const T* dt_bias, int64_t T_len,
                      int64_t H, int64_t Dk) override {
    GridKdaGateForward(exec_, g, a, A_log, dt_bias, T_len, H, Dk);
  }
  void KdaGateBackward(T* da, GradOf<T>* dA_log, GradOf<T>* ddt_bias, const T* dg, const T* a,
                       const T* A_log, const T* dt_bias, int64_t T_len, int64_t H,
                       int64_t Dk) override {
    GridKdaGateBackward(exec_, da, dA_log, ddt_bias, dg, a, A_log, dt_bias, T_len, H, Dk);
  }

  // Larger than the CPU kernel's: every block's results of a pass exist at
  // once (grid_kernels/kda_common.h); in bf16 the float copies after them.
  int64_t KdaCoreForwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                                      int64_t block_size) override {
    return Core<F>::ForwardWorkspaceSize(T_len, H, Dk, Dv, block_size) +
           (kWide ? WideForwardSize(T_len * H, Dk, Dv) : 0);
  }
  int64_t KdaCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                                       int64_t block_size) override {
    return Core<F>::BackwardWorkspaceSize(T_len, H, Dk, Dv, block_size) +
           (kWide ? WideBackwardSize(T_len * H, Dk, Dv) : 0);
  }
  int64_t KdaCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                                           int64_t block_size) override {
    return KdaCoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  int64_t KdaCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                                            int64_t block_size) override {
    return KdaCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }

  void KdaCoreForward(T* o, F* S_out, F* workspace, const T* q, const T* k, const T* v,
                      const T* g, const T* beta, const F* S_in, int64_t T_len, int64_t H,
                      int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile = 0) override {
    Forward({}, o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size,
            st_tile);
  }
  void KdaCoreForwardOverlapped(T* o, F* S_out, F* workspace, const T* q, const T* k,
                                const T* v, const T* g, const T* beta, const F* S_in,
                                int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size, int64_t st_tile = 0) override {
    Forward(WideMode::Overlapped(), o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk,
            Dv, block_size, st_tile);
  }
  void KdaCoreForwardPhase(CorePhase phase, T* o, F* S_out, F* workspace, const T* q,
                           const T* k, const T* v, const T* g, const T* beta, const F* S_in,
                           int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile = 0) override {
    Forward(WideMode::Of(phase), o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv,
            block_size, st_tile);
  }
  void KdaCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in, F* workspace,
                       const T* dO, const F* dS_out, const T* q, const T* k, const T* v,
                       const T* g, const T* beta, const F* S_in, int64_t T_len, int64_t H,
                       int64_t Dk, int64_t Dv, int64_t block_size,
                       int64_t st_tile = 0) override {
    Backward({}, dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in,
             T_len, H, Dk, Dv, block_size, st_tile);
  }
  void KdaCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in, F* workspace,
                                 const T* dO, const F* dS_out, const T* q, const T* k,
                                 const T* v, const T* g, const T* beta, const F* S_in,
                                 int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                                 int64_t block_size, int64_t st_tile = 0) override {
    Backward(WideMode::Overlapped(), dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k,
             v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
  void KdaCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in,
                            F* workspace, const T* dO, const F* dS_out, const T* q,
                            const T* k, const T* v, const T* g, const T* beta, const F* S_in,
                            int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile = 0) override {
    Backward(WideMode::Of(phase), dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v,
             g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }

 private:
  using Base = GridRecurrentCore<T, Exec>;
  using Base::exec_;
  using Base::kWide;
  using typename Base::WideArgs;
  using typename Base::WideMode;
  template <typename E>
  using Core = GridKdaCore<E, Exec>;

  // The float copies' extra workspace elements (bf16), per n = T H rows:
  // q, k, v, g, beta, o; and dO, q, k, v, g, beta, dq, dk, dv, dg, dbeta.
  static int64_t WideForwardSize(int64_t n, int64_t Dk, int64_t Dv) {
    return n * (3 * Dk + 2 * Dv + 1);
  }
  static int64_t WideBackwardSize(int64_t n, int64_t Dk, int64_t Dv) {
    return n * (3 * Dk + 2 * Dv + 1) + n * (3 * Dk + Dv + 1);
  }

  // The core in float or double (the element type F of the float passes):
  // mode's whole call, overlapped call or phase.
  static void RunForward(Exec& e, WideMode mode, F* o, F* S_out, F* ws, const F* q, const F* k,
                         const F* v, const F* g, const F* beta, const F* S_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv, int64_t bs, int64_t st_tile) {
    if (mode.phase) {
      Core<F>::ForwardPhase(e, *mode.phase, o, S_out, ws, q, k, v, g, beta, S_in, T_len, H, Dk,
                            Dv, bs, st_tile);
    } else if (mode.overlapped) {
      Core<F>::ForwardOverlapped(e, o, S_out, ws, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, bs,
                                 st_tile);
    } else {
      Core<F>::Forward(e, o, S_out, ws, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, bs, st_tile);
    }
  }
  static void RunBackward(Exec& e, WideMode mode, F* dq, F* dk, F* dv, F* dg, F* dbeta,
                          F* dS_in, F* ws, const F* dO, const F* dS_out, const F* q, const F* k,
                          const F* v, const F* g, const F* beta, const F* S_in, int64_t T_len,
                          int64_t H, int64_t Dk, int64_t Dv, int64_t bs, int64_t st_tile) {
    if (mode.phase) {
      Core<F>::BackwardPhase(e, *mode.phase, dq, dk, dv, dg, dbeta, dS_in, ws, dO, dS_out, q, k,
                             v, g, beta, S_in, T_len, H, Dk, Dv, bs, st_tile);
    } else if (mode.overlapped) {
      Core<F>::BackwardOverlapped(e, dq, dk, dv, dg, dbeta, dS_in, ws, dO, dS_out, q, k, v, g,
                                  beta, S_in, T_len, H, Dk, Dv, bs, st_tile);
    } else {
      Core<F>::Backward(e, dq, dk, dv, dg, dbeta, dS_in, ws, dO, dS_out, q, k, v, g, beta, S_in,
                        T_len, H, Dk, Dv, bs, st_tile);
    }
  }

  // float and double: the passes on the arguments; bf16: on float copies
  // carved after the float core's workspace, named in one fixed order
  // whatever the mode, so the phases find what an earlier phase made.
  void Forward(WideMode mode, T* o, F* S_out, F* ws, const T* q, const T* k, const T* v,
               const T* g, const T* beta, const F* S_in, int64_t T_len, int64_t H, int64_t Dk,
               int64_t Dv, int64_t bs, int64_t st_tile) {
    if constexpr (!kWide) {
      RunForward(exec_, mode, o, S_out, ws, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, bs,
                 st_tile);
    } else {
      const int64_t n = T_len * H;
      WideArgs w(exec_, ws + Core<F>::ForwardWorkspaceSize(T_len, H, Dk, Dv, bs), mode);
      const F* qf = w.In(q, n * Dk);
      const F* kf = w.In(k, n * Dk);
      const F* vf = w.In(v, n * Dv);
      const F* gf = w.In(g, n * Dk);
      const F* bf = w.In(beta, n);
      F* of = w.Out(o, n * Dv);
      RunForward(exec_, mode, of, S_out, ws, qf, kf, vf, gf, bf, S_in, T_len, H, Dk, Dv, bs,
                 st_tile);
      w.Narrow();
    }
  }
  void Backward(WideMode mode, T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in, F* ws,
                const T* dO, const F* dS_out, const T* q, const T* k, const T* v, const T* g,
                const T* beta, const F* S_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                int64_t bs, int64_t st_tile) {
    if constexpr (!kWide) {
      RunBackward(exec_, mode, dq, dk, dv, dg, dbeta, dS_in, ws, dO, dS_out, q, k, v, g, beta,
                  S_in, T_len, H, Dk, Dv, bs, st_tile);
    } else {
      const int64_t n = T_len * H;
      WideArgs w(exec_, ws + Core<F>::BackwardWorkspaceSize(T_len, H, Dk, Dv, bs), mode);
      const F* dOf = w.In(dO, n * Dv);
      const F* qf = w.In(q, n * Dk);
      const F* kf = w.In(k, n * Dk);
      const F* vf = w.In(v, n * Dv);
      const F* gf = w.In(g, n * Dk);
      const F* bf = w.In(beta, n);
      F* dqf = w.Out(dq, n * Dk);
      F* dkf = w.Out(dk, n * Dk);
      F* dvf = w.Out(dv, n * Dv);
      F* dgf = w.Out(dg, n * Dk);
      F* dbf = w.Out(dbeta, n);
      RunBackward(exec_, mode, dqf, dkf, dvf, dgf, dbf, dS_in, ws, dOf, dS_out, qf, kf, vf, gf,
                  bf, S_in, T_len, H, Dk, Dv, bs, st_tile);
      w.Narrow();
    }
  }
};

}  // namespace stateflow::backend

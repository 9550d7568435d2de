// GridOps<T, Exec>: every kernel of Ops<T> (ops.h), the kernels every model
// family shares, as grid passes over the SF_HD functors of grid_kernels/ --
// the CUDA kernels' arithmetic -- run by an executor. Each family's own
// kernels are its grid ops beside this (grid_gdn_ops.h, grid_mamba3_ops.h,
// grid_kda_ops.h, over what grid_recurrent.h shares), on the same executor.
// The host-grid device runs them with HostExec (host loops,
// host_grid_device.h); the CUDA device with CudaExec (one thread per index,
// GEMMs in cuBLAS: backend/cuda/grid_exec.cuh). One definition of every
// kernel's arithmetic, tested on the CPU (tests/backend/grid_ops_test.cc).
//
// The executor (a small value type, copied into GridOps):
//   template <class F> void ForEach(int64_t n, F f);
//       calls f(i) for every i in [0, n), in any order, possibly in
//       parallel (every functor here writes disjoint elements per i);
//   template <typename T> void Gemm(bool trans_a, bool trans_b, int64_t M,
//       int64_t R, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
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
// Two streams (the paper's split-and-overlap, section 3.4), for the
// families' recurrent cores (grid_recurrent.h): the overlapped GDN cores
// cut a chunk's nb blocks into StreamSegments(nb) segments and
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
//   ops.RmsNormForward(y, rstd, x, w, R, C, 1e-6);
//
// Dimension legends: as in ops.h and the kernels' headers.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "backend/device/grid_kernels/elementwise.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/grid_kernels/rows.h"
#include "backend/device/ops.h"
#include "backend/kernels/weight_grad_sink.h"

namespace stateflow::backend {

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
  void RmsNormApply(T* y, const T* x, const StatOf<T>* rstd, const T* w, int64_t R,
                    int64_t C) override {
    exec_.ForEach(R * C, grid::RmsNormApplyFn<T>{y, x, rstd, w, C});
  }
  void AdamWUpdate(T* w, T* m, T* v, const T* g, int64_t n,
                   const AdamWCoefficients<T>& c) override {
    exec_.ForEach(n, grid::AdamWFn<T>{w, m, v, g, c.beta1, c.one_minus_beta1,
                                      c.beta2, c.one_minus_beta2, c.step_size,
                                      c.inv_sqrt_c2, c.eps, c.lr_decay});
  }

  // ---- dense kernels ----
  void LinearForward(T* y, const T* x, const T* w, const T* b, int64_t R,
                     int64_t C, int64_t D) override {
    Mm(exec_, false, true, R, D, C, x, C, w, C, 0, y, D);
    if (b != nullptr) exec_.ForEach(R * D, grid::AddBiasFn<T>{y, b, D});
  }
  void LinearBackward(T* dx, GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x,
                      const T* w, int64_t R, int64_t C, int64_t D) override {
    if (WeightGradSink<T, GradOf<T>>* sink = ActiveWeightGradSink<T, GradOf<T>>();
        sink != nullptr && dw != nullptr) {
      sink->DeferLinear(dw, db, dy, x, R, C, D);  // a split backward's W
      dw = db = nullptr;
    }
    if (dx != nullptr) {
      Mm(exec_, false, false, R, C, D, dy, D, w, C, 0, dx, C);
    }
    if (dw != nullptr) Mm(exec_, true, false, D, C, R, dy, D, x, C, 1, dw, C);
    if (db != nullptr) exec_.ForEach(D, grid::ColumnSumAddFn<T>{db, dy, R, D});
  }
  void RmsNormForward(T* y, StatOf<T>* rstd, const T* x, const T* w, int64_t R,
                      int64_t C, ComputeOf<T> eps) override {
    exec_.ForEach(R, grid::RmsNormRstdFn<T>{rstd, x, C, eps});
    exec_.ForEach(R * C, grid::RmsNormApplyFn<T>{y, x, rstd, w, C});
  }
  void RmsNormBackward(T* dx, GradOf<T>* dw, const T* dy, const T* x, const T* w,
                       const StatOf<T>* rstd, int64_t R, int64_t C) override {
    exec_.ForEach(C, grid::RmsNormWeightGradFn<T>{dw, dy, x, rstd, R, C});
    exec_.ForEach(R, grid::RmsNormInputGradFn<T>{dx, dy, x, w, rstd, C});
  }
  void LayerNormForward(T* y, StatOf<T>* mean, StatOf<T>* rstd, const T* x, const T* w,
                        const T* b, int64_t R, int64_t C, ComputeOf<T> eps) override {
    exec_.ForEach(R, grid::LayerNormStatsFn<T>{mean, rstd, x, C, eps});
    exec_.ForEach(R * C, grid::LayerNormApplyFn<T>{y, x, mean, rstd, w, b, C});
  }
  void LayerNormBackward(T* dx, GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x,
                         const T* w, const StatOf<T>* mean, const StatOf<T>* rstd,
                         int64_t R, int64_t C) override {
    exec_.ForEach(C, grid::LayerNormParamGradFn<T>{dw, db, dy, x, mean, rstd, R, C});
    exec_.ForEach(R, grid::LayerNormInputGradFn<T>{dx, dy, x, w, mean, rstd, C});
  }
  void GeluForward(T* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::GeluForwardFn<T>{y, x});
  }
  void GeluBackward(T* dx, const T* dy, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::GeluBackwardFn<T>{dx, dy, x});
  }
  void SiluForward(T* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::SiluForwardFn<T>{y, x});
  }
  void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::SiluBackwardFn<T>{dx, dy, x});
  }
  void SigmoidForward(T* y, const T* x, int64_t n) override {
    exec_.ForEach(n, grid::SigmoidForwardFn<T>{y, x});
  }
  void SigmoidBackward(T* dx, const T* dy, const T* y, int64_t n) override {
    exec_.ForEach(n, grid::SigmoidBackwardFn<T>{dx, dy, y});
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

  // ---- MLP, embedding, output loss ----
  void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x, const T* wg,
                        const T* wu, const T* wd, int64_t R, int64_t C,
                        int64_t F) override {
    LinearForward(gate, x, wg, nullptr, R, C, F);
    LinearForward(up, x, wu, nullptr, R, C, F);
    exec_.ForEach(R * F, grid::SwigluHiddenFn<T>{h, gate, up});
    LinearForward(y, h, wd, nullptr, R, F, C);
  }
  void SwigluMlpBackward(T* dx, GradOf<T>* dwg, GradOf<T>* dwu, GradOf<T>* dwd,
                         T* workspace,
                         const T* dy, const T* gate, const T* up, const T* x,
                         const T* wg, const T* wu, const T* wd, int64_t R,
                         int64_t C, int64_t F) override {
    T* hd = workspace;             // (R, F): h, then d(up)
    T* dgate = workspace + R * F;  // (R, F): dh, then d(gate)
    exec_.ForEach(R * F, grid::SwigluHiddenFn<T>{hd, gate, up});
    LinearBackward(dgate, dwd, nullptr, dy, hd, wd, R, F, C);
    exec_.ForEach(R * F, grid::SwigluBackwardFn<T>{dgate, hd, gate, up});
    LinearBackward(dx, dwg, nullptr, dgate, x, wg, R, C, F);
    LinearBackward(nullptr, dwu, nullptr, hd, x, wu, R, C, F);
    if (dx != nullptr) {
      Mm(exec_, false, false, R, C, F, hd, F, wu, C, 1, dx, C);
    }
  }
  void EmbeddingForward(T* y, const int32_t* ids, const T* table, int64_t R,
                        int64_t C, int64_t /*V*/) override {
    exec_.ForEach(R * C, grid::EmbeddingGatherFn<T>{y, ids, table, C});
  }
  void EmbeddingBackward(GradOf<T>* dtable, const T* dy, const int32_t* ids,
                         int64_t R, int64_t C, int64_t /*V*/) override {
    exec_.ForEach(C, grid::EmbeddingScatterAddFn<T>{dtable, dy, ids, R, C});
  }
  double OutputLossForward(StatOf<T>* losses, StatOf<T>* lse, StatOf<T>* logits, const T* x,
                           const T* w, const int32_t* targets, int64_t R,
                           int64_t C, int64_t V, int64_t Vs) override;
  void OutputLossBackward(T* dx, GradOf<T>* dw, StatOf<T>* logits, const StatOf<T>* dlosses,
                          const StatOf<T>* lse, const T* x, const T* w,
                          const int32_t* targets, int64_t R, int64_t C,
                          int64_t V, int64_t Vs, T* workspace = nullptr) override;
  int64_t OutputLossBackwardWorkspaceSize(int64_t R, int64_t V,
                                          int64_t Vs) override {
    return kWide ? R * (V < Vs ? V : Vs) : 0;
  }

 private:
  // bf16 (StatOf<T> wider than T): the head's d(logits) rounded for its GEMMs.
  static constexpr bool kWide = !std::is_same_v<StatOf<T>, T>;
  using F = StatOf<T>;
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

  Exec exec_;
};

// ---- out-of-line members ----------------------------------------------------

template <typename T, typename Exec>
double GridOps<T, Exec>::OutputLossForward(StatOf<T>* losses, StatOf<T>* lse, StatOf<T>* logits,
                                           const T* x, const T* w,
                                           const int32_t* targets, int64_t R,
                                           int64_t C, int64_t V, int64_t Vs) {
  if (R == 0) return 0.0;
  exec_.ForEach(R, grid::FillFn<F>{lse, grid::NegInf<F>()});
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = V - v0 < Vs ? V - v0 : Vs;
    Mm(exec_, false, true, R, vs, C, x, C, w + v0 * C, C, 0, logits, vs);
    exec_.ForEach(R, grid::OnlineLogsumexpFn<T>{lse, logits, vs});
  }
  // The per-token losses into the (now free) logits workspace, summed there.
  exec_.ForEach(R, grid::TokenLossFn<T>{logits, losses, lse, x, w, targets, C});
  return exec_.Sum(logits, R) / static_cast<double>(R);
}

template <typename T, typename Exec>
void GridOps<T, Exec>::OutputLossBackward(T* dx, GradOf<T>* dw, StatOf<T>* logits,
                                          const StatOf<T>* dlosses, const StatOf<T>* lse,
                                          const T* x, const T* w,
                                          const int32_t* targets, int64_t R,
                                          int64_t C, int64_t V, int64_t Vs,
                                          T* workspace) {
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = V - v0 < Vs ? V - v0 : Vs;
    const T* ws = w + v0 * C;  // (vs, C)
    Mm(exec_, false, true, R, vs, C, x, C, ws, C, 0, logits, vs);
    exec_.ForEach(R * vs,
                  grid::SoftmaxGradFn<T>{logits, lse, dlosses, targets, vs, v0});
    // d(logits): in bf16, rounded into the workspace for the two GEMMs (as
    // a bf16 framework casts the float gradient back); else the logits.
    const T* dl = nullptr;
    if constexpr (kWide) {
      Narrow(workspace, logits, R * vs);
      dl = workspace;
    } else {
      dl = logits;
    }
    if (dx != nullptr) {
      Mm(exec_, false, false, R, C, vs, dl, vs, ws, C, v0 == 0 ? 0 : 1, dx, C);
    }
    Mm(exec_, true, false, vs, C, R, dl, vs, x, C, 1, dw + v0 * C, C);
  }
  if (dx != nullptr && V == 0) exec_.ForEach(R * C, grid::FillFn<T>{dx, T(0)});
}

}  // namespace stateflow::backend

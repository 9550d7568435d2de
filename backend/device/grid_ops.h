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
//
// Not the CPU device's kernels (cpu_device.cc: Eigen, backend/kernels/) and not
// attention (grid_attention_ops.h).
//
//   GridOps<double, HostExec> ops{HostExec{}};
//   ops.RmsNormForward(y, rstd, x, w, N, C, 1e-6);
//
// Dimension legends: as in ops.h and the kernels' headers.
#pragma once

#include <cstdint>

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
  void RmsNormApply(T* y, const T* x, const T* rstd, const T* w, int64_t N,
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
    exec_.Gemm(false, true, N, D, C, T(1), x, C, w, C, T(0), y, D);
    if (b != nullptr) exec_.ForEach(N * D, grid::AddBiasFn<T>{y, b, D});
  }
  void LinearBackward(T* dx, T* dw, T* db, const T* dy, const T* x,
                      const T* w, int64_t N, int64_t C, int64_t D) override {
    if (dx != nullptr) {
      exec_.Gemm(false, false, N, C, D, T(1), dy, D, w, C, T(0), dx, C);
    }
    exec_.Gemm(true, false, D, C, N, T(1), dy, D, x, C, T(1), dw, C);
    if (db != nullptr) exec_.ForEach(D, grid::ColumnSumAddFn<T>{db, dy, N, D});
  }
  void RmsNormForward(T* y, T* rstd, const T* x, const T* w, int64_t N,
                      int64_t C, T eps) override {
    exec_.ForEach(N, grid::RmsNormRstdFn<T>{rstd, x, C, eps});
    exec_.ForEach(N * C, grid::RmsNormApplyFn<T>{y, x, rstd, w, C});
  }
  void RmsNormBackward(T* dx, T* dw, const T* dy, const T* x, const T* w,
                       const T* rstd, int64_t N, int64_t C) override {
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
  void ShortConvBackward(T* dx, T* dtail_in, T* dw, const T* dy,
                         const T* dtail_out, const T* x, const T* w,
                         const T* tail_in, int64_t T_len, int64_t C,
                         int64_t W) override {
    exec_.ForEach((W - 1 + T_len) * C,
                  grid::ShortConvInputGradFn<T>{dx, dtail_in, dy, dtail_out, w,
                                                T_len, C, W});
    exec_.ForEach(W * C, grid::ShortConvWeightGradFn<T>{dw, dy, x, tail_in,
                                                         T_len, C, W});
  }
  void L2NormForward(T* y, T* rnorm, const T* x, int64_t R, int64_t D,
                     T scale, T eps) override {
    exec_.ForEach(R, grid::L2NormForwardFn<T>{y, rnorm, x, D, scale, eps});
  }
  void L2NormBackward(T* dx, const T* dy, const T* x, const T* rnorm,
                      int64_t R, int64_t D, T scale) override {
    exec_.ForEach(R, grid::L2NormBackwardFn<T>{dx, dy, x, rnorm, D, scale});
  }
  void GdnGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                      int64_t T_len, int64_t H) override {
    exec_.ForEach(T_len * H, grid::GdnGateForwardFn<T>{g, a, A_log, dt_bias, H});
  }
  // REQUIRES: da does not alias dg (as the CPU kernel).
  void GdnGateBackward(T* da, T* dA_log, T* ddt_bias, const T* dg,
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
  int64_t GdnCoreForwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                      int64_t Dv,
                                      int64_t block_size) override {
    return grid::GdnForwardWorkspace<T>::Size(
        grid::GdnShape::Make(T_len, H, Dk, Dv, block_size));
  }
  void GdnCoreForward(T* o, T* S_out, T* workspace, const T* q, const T* k,
                      const T* v, const T* g, const T* beta, const T* S_in,
                      int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                      int64_t block_size) override;
  // Larger than the CPU kernel's (H nb Dv Dk): see GdnBackwardWorkspace
  // (grid_kernels/gdn_common.h) -- every block's intermediate results of a
  // pass exist at once, where the CPU walks the blocks with small scratch.
  int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv,
                                       int64_t block_size) override {
    return grid::GdnBackwardWorkspace<T>::Size(
        grid::GdnShape::Make(T_len, H, Dk, Dv, block_size));
  }
  void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                       T* workspace, const T* dO, const T* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size) override;

  // The core phase by phase (ops.h): the passes of GdnCoreForward /
  // GdnCoreBackward in three groups, on their own workspaces.
  int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size) override {
    return GdnCoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  void GdnCoreForwardPhase(GdnPhase phase, T* o, T* S_out, T* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const T* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size) override;
  int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                            int64_t Dk, int64_t Dv,
                                            int64_t block_size) override {
    return GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  void GdnCoreBackwardPhase(GdnPhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, T* dS_in, T* workspace, const T* dO,
                            const T* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const T* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size) override;

  // ---- Mamba-3 (grid_kernels/mamba3_prep.h, mamba3_core.h) ----
  void Mamba3GatesForward(T* dt, T* lam, T* theta, const T* dt_bias,
                          int64_t S, int64_t H, int64_t Na) override {
    exec_.ForEach(S * H, grid::Mamba3GatesFn<T>{dt, lam, dt_bias, H});
    exec_.ForEach(S * Na, grid::Mamba3ThetaFn<T>{theta});
  }
  void Mamba3GatesBackward(T* ddA, T* dtrap, T* ddt, T* ddt_bias, const T* da,
                           const T* dgamma, const T* dbeta, const T* A_proj,
                           const T* dt, const T* lam, int64_t S, int64_t H,
                           T a_floor) override {
    exec_.ForEach(S * H, grid::Mamba3GatesGradFn<T>{ddA, dtrap, ddt, da, dgamma,
                                                    dbeta, A_proj, dt, lam,
                                                    a_floor});
    exec_.ForEach(H, grid::Mamba3DtBiasGradFn<T>{ddt_bias, ddt, S, H});
  }
  void Mamba3AnglesForward(T* phi, T* angle_out, const T* theta, const T* dt,
                           const T* angle_in, int64_t B, int64_t Ts, int64_t H,
                           int64_t Na) override {
    exec_.ForEach(B * H * Na, grid::Mamba3AnglesFn<T>{phi, angle_out, theta, dt,
                                                      angle_in, Ts, H, Na});
  }
  // dphi becomes the scan's running sums.
  void Mamba3AnglesBackward(T* dtheta, T* ddt, T* dangle_in, T* dphi,
                            const T* theta, const T* dt, const T* dangle_out,
                            int64_t B, int64_t Ts, int64_t H,
                            int64_t Na) override {
    exec_.ForEach(B * H * Na, grid::Mamba3AnglesScanGradFn<T>{
                                  dphi, dangle_in, dangle_out, Ts, H, Na});
    exec_.ForEach(B * Ts * Na,
                  grid::Mamba3ThetaGradFn<T>{dtheta, dphi, theta, dt, H, Na});
    exec_.ForEach(B * Ts * H, grid::Mamba3AngleDtGradFn<T>{ddt, dphi, theta, H, Na});
  }
  void Mamba3RotaryForward(T* q, T* k, const T* Cn, const T* Bn,
                           const T* C_bias, const T* B_bias, const T* phi,
                           int64_t S, int64_t H, int64_t N,
                           int64_t Na) override {
    exec_.ForEach(S * H * N, grid::Mamba3RotateFn<T>{k, Bn, B_bias, phi, H, N, Na});
    exec_.ForEach(S * H * N, grid::Mamba3RotateFn<T>{q, Cn, C_bias, phi, H, N, Na});
  }
  void Mamba3RotaryBackward(T* dphi, T* dCn, T* dBn, T* dC_bias, T* dB_bias,
                            T* dq, T* dk, const T* q, const T* k, const T* phi,
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
                                 T a_floor) override {
    exec_.ForEach(n, grid::Mamba3CoefficientsFn<T>{a, gamma, beta, A_proj, dt,
                                                   lam, a_floor});
  }
  void Mamba3CoefficientsBackward(T* ddt, const T* da, const T* dgamma,
                                  const T* dbeta, const T* A_proj,
                                  const T* lam, int64_t n,
                                  T a_floor) override {
    exec_.ForEach(n, grid::Mamba3CoefficientsGradFn<T>{ddt, da, dgamma, dbeta,
                                                       A_proj, lam, a_floor});
  }
  void Mamba3GateOutputForward(T* gated, const T* o, const T* xv,
                               const T* silu_z, const T* D, int64_t S,
                               int64_t H, int64_t P) override {
    exec_.ForEach(S * H * P,
                  grid::Mamba3GateOutputFn<T>{gated, o, xv, silu_z, D, H, P});
  }
  void Mamba3GateOutputBackward(T* dz, T* d_o, T* dxv, T* dD, const T* dgated,
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
        grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size));
  }
  void Mamba3CoreForward(T* o, T* S_out, T* k_out, T* v_out, T* workspace,
                         const T* q, const T* k, const T* v, const T* a,
                         const T* gamma, const T* beta, const T* S_in,
                         const T* k_in, const T* v_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size) override;
  // 2 H T + 3 H nb T_C^2 + H (3 nb + 1) Dv Dk, where the CPU kernel keeps
  // only the H nb Dv Dk entering states.
  int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                          int64_t Dv,
                                          int64_t block_size) override {
    return grid::Mamba3BackwardWorkspace<T>::Size(
        grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size));
  }
  void Mamba3CoreBackward(T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                          T* dS_in, T* dk_in, T* dv_in, T* workspace,
                          const T* dO, const T* dS_out, const T* dk_out,
                          const T* dv_out, const T* q, const T* k, const T* v,
                          const T* a, const T* gamma, const T* beta,
                          const T* S_in, const T* k_in, const T* v_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size) override;

  // ---- MLP, embedding, output loss ----
  void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x, const T* wg,
                        const T* wu, const T* wd, int64_t N, int64_t C,
                        int64_t F) override {
    LinearForward(gate, x, wg, nullptr, N, C, F);
    LinearForward(up, x, wu, nullptr, N, C, F);
    exec_.ForEach(N * F, grid::SwigluHiddenFn<T>{h, gate, up});
    LinearForward(y, h, wd, nullptr, N, F, C);
  }
  void SwigluMlpBackward(T* dx, T* dwg, T* dwu, T* dwd, T* workspace,
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
      exec_.Gemm(false, false, N, C, F, T(1), hd, F, wu, C, T(1), dx, C);
    }
  }
  void EmbeddingForward(T* y, const int32_t* ids, const T* table, int64_t N,
                        int64_t C, int64_t /*V*/) override {
    exec_.ForEach(N * C, grid::EmbeddingGatherFn<T>{y, ids, table, C});
  }
  void EmbeddingBackward(T* dtable, const T* dy, const int32_t* ids,
                         int64_t N, int64_t C, int64_t /*V*/) override {
    exec_.ForEach(C, grid::EmbeddingScatterAddFn<T>{dtable, dy, ids, N, C});
  }
  double OutputLossForward(T* losses, T* lse, T* logits, const T* x,
                           const T* w, const int32_t* targets, int64_t N,
                           int64_t C, int64_t V, int64_t Vs) override;
  void OutputLossBackward(T* dx, T* dw, T* logits, const T* dlosses,
                          const T* lse, const T* x, const T* w,
                          const int32_t* targets, int64_t N, int64_t C,
                          int64_t V, int64_t Vs) override;

 private:
  // tile[h, b] (L, L) = X_b Y_b^T for every head and block of (T, H, D)
  // buffers X, Y: one strided-batched GEMM per head over its full blocks,
  // one GEMM for a partial last block.
  void BlockGram(T* tile, const T* X, const T* Y, int64_t D,
                 const grid::GdnShape& s);
  // Pre and ST of the forward: G, KG, W, U (and V_new into Vn), the
  // entering states; the last block's exit state into S_out unless nullptr.
  void GdnReplay(const grid::GdnForwardWorkspace<T>& ws, T* Vn, T* S_out,
                 const T* k, const T* v, const T* g, const T* beta,
                 const T* S_in, const grid::GdnShape& s);

  // Pre and ST of the Mamba-3 forward: G, U, the carried entering states;
  // the last block's exit state into S_out unless nullptr.
  void Mamba3Replay(const grid::Mamba3ForwardWorkspace<T>& ws, T* S_out,
                    const T* k, const T* v, const T* a, const T* gamma,
                    const T* beta, const T* S_in, const T* k_in,
                    const T* v_in, const grid::Mamba3Shape& s);

  Exec exec_;
};

// ---- out-of-line members ----------------------------------------------------

template <typename T, typename Exec>
void GridOps<T, Exec>::BlockGram(T* tile, const T* X, const T* Y, int64_t D,
                                 const grid::GdnShape& s) {
  const int64_t full = s.T / s.bs, ld = s.H * D;
  for (int64_t h = 0; h < s.H; ++h) {
    if (full > 0) {
      exec_.GemmStridedBatched(false, true, s.bs, s.bs, D, T(1), X + h * D, ld,
                               s.bs * ld, Y + h * D, ld, s.bs * ld, T(0),
                               tile + s.Tile(h, 0, 0, 0), s.bs, s.bs * s.bs,
                               full);
    }
    if (full < s.nb) {
      const int64_t L = s.L(full), off = s.Row(full * s.bs, h, D);
      exec_.Gemm(false, true, L, L, D, T(1), X + off, ld, Y + off, ld, T(0),
                 tile + s.Tile(h, full, 0, 0), s.bs);
    }
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnReplay(const grid::GdnForwardWorkspace<T>& ws,
                                 T* Vn, T* S_out, const T* k, const T* v,
                                 const T* g, const T* beta, const T* S_in,
                                 const grid::GdnShape& s) {
  // Pre: every (head, block) at once.
  exec_.ForEach(s.tokens(), grid::GdnCumDecayFn<T>{ws.G, g, s});
  BlockGram(ws.KG, k, k, s.Dk, s);
  exec_.ForEach(s.tiles(), grid::GdnMaskDecayFn<T>{ws.KG, ws.G, s, true});
  exec_.ForEach(s.H * s.nb * (s.Dv + s.Dk),
                grid::GdnPreSolveFn<T>{ws.U, ws.W, ws.KG, k, v, beta, ws.G, s});
  // ST: heads x value rows, blocks in order.
  exec_.ForEach(s.H * s.Dv, grid::GdnSTFn<T>{ws.S, Vn, S_out, ws.U, ws.W, k,
                                             ws.G, S_in, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreForward(T* o, T* S_out, T* workspace,
                                      const T* q, const T* k, const T* v,
                                      const T* g, const T* beta,
                                      const T* S_in, int64_t T_len, int64_t H,
                                      int64_t Dk, int64_t Dv,
                                      int64_t block_size) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  GdnReplay(ws, /*Vn=*/ws.U, S_out, k, v, g, beta, S_in, s);
  // Out: every (head, block) at once; P over KG (no longer needed).
  BlockGram(ws.KG, q, k, Dk, s);
  exec_.ForEach(s.tiles(), grid::GdnMaskDecayFn<T>{ws.KG, ws.G, s, false});
  exec_.ForEach(s.tokens() * Dv,
                grid::GdnOutFn<T>{o, q, ws.KG, ws.U, ws.S, ws.G, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreBackward(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in, T* workspace,
    const T* dO, const T* dS_out, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const T* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size) {
  using namespace grid;
  const GdnShape s = GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnBackwardWorkspace<T> ws(workspace, s);
  const GdnForwardWorkspace<T>& f = ws.f;
  GdnReplay(f, ws.Vn, /*S_out=*/nullptr, k, v, g, beta, S_in, s);
  // Out's backward, every block at once.
  BlockGram(ws.P, q, k, Dk, s);
  exec_.ForEach(s.tiles(), GdnMaskDecayFn<T>{ws.P, f.G, s, false});
  BlockGram(ws.dP, dO, ws.Vn, Dv, s);
  exec_.ForEach(s.tiles(), GdnMaskBlockFn<T>{ws.dP, s});
  exec_.ForEach(s.tokens(),
                GdnOutDecayGradFn<T>{dg, ws.P, ws.dP, q, dO, f.S, f.G, s});
  exec_.ForEach(s.tokens() * Dk, GdnOutQueryGradFn<T>{dq, ws.dP, k, dO, f.S, f.G, s});
  exec_.ForEach(s.tokens() * Dk, GdnOutKeyGradFn<T>{dk, ws.dP, q, f.G, s});
  exec_.ForEach(s.tokens() * Dv, GdnOutValueGradFn<T>{ws.dVn, ws.P, dO, s});
  exec_.ForEach(s.H * s.nb * Dv * Dk,
                GdnStateShareFn<T>{ws.dS, dO, q, ws.dVn, f.W, f.G, s});
  // ST's backward: heads x value rows, blocks in reverse.
  exec_.ForEach(H * Dv, GdnSTBackwardFn<T>{ws.dS, ws.Z, dS_in, dS_out, k, f.W,
                                           f.G, s});
  exec_.ForEach(s.tokens() * Dv, AddFn<T>{ws.dVn, ws.Z});
  exec_.ForEach(s.tokens(), GdnSTRowGradFn<T>{dk, ws.e, ws.Vn, ws.dS, k, f.G, s});
  exec_.ForEach(H * s.nb, GdnSTDecayGradFn<T>{dg, ws.e, ws.dS, f.S, f.G, s});
  exec_.ForEach(s.tokens() * Dk, GdnWGradFn<T>{ws.dW, ws.dVn, f.S, s});
  // Pre's backward, every block at once.
  exec_.ForEach(H * s.nb * (Dv + Dk),
                GdnPreBackSolveFn<T>{ws.dVn, ws.dW, f.KG, beta, s});
  exec_.ForEach(s.tiles(), GdnDAFn<T>{ws.dP, ws.dVn, ws.dW, f.U, f.W, s});
  exec_.ForEach(s.tokens() * Dv, GdnScaleByBetaFn<T>{dv, ws.dVn, beta, Dv});
  exec_.ForEach(s.tokens(), GdnPreRowGradFn<T>{dbeta, dg, ws.dVn, ws.dW, ws.dP,
                                               f.KG, k, v, beta, f.G, s});
  exec_.ForEach(s.tokens() * Dk,
                GdnPreKeyGradFn<T>{dk, ws.dW, ws.dP, k, beta, f.G, s});
  exec_.ForEach(H * s.nb, GdnDecayCumsumFn<T>{dg, s});
}

// The phases repeat GdnReplay's, GdnCoreForward's and GdnCoreBackward's
// passes in the same order (tests/backend/grid_gdn_test.cc checks that the
// three phases give the whole core's bits).
template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreForwardPhase(GdnPhase phase, T* o, T* S_out,
                                           T* workspace, const T* q,
                                           const T* k, const T* v, const T* g,
                                           const T* beta, const T* S_in,
                                           int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case GdnPhase::kPre:
      exec_.ForEach(s.tokens(), grid::GdnCumDecayFn<T>{ws.G, g, s});
      BlockGram(ws.KG, k, k, s.Dk, s);
      exec_.ForEach(s.tiles(), grid::GdnMaskDecayFn<T>{ws.KG, ws.G, s, true});
      exec_.ForEach(s.H * s.nb * (s.Dv + s.Dk),
                    grid::GdnPreSolveFn<T>{ws.U, ws.W, ws.KG, k, v, beta, ws.G, s});
      break;
    case GdnPhase::kST:
      exec_.ForEach(s.H * s.Dv, grid::GdnSTFn<T>{ws.S, ws.U, S_out, ws.U, ws.W,
                                                 k, ws.G, S_in, s});
      break;
    case GdnPhase::kOut:
      BlockGram(ws.KG, q, k, Dk, s);
      exec_.ForEach(s.tiles(), grid::GdnMaskDecayFn<T>{ws.KG, ws.G, s, false});
      exec_.ForEach(s.tokens() * Dv,
                    grid::GdnOutFn<T>{o, q, ws.KG, ws.U, ws.S, ws.G, s});
      break;
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::GdnCoreBackwardPhase(
    GdnPhase phase, T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
    T* workspace, const T* dO, const T* dS_out, const T* q, const T* k,
    const T* v, const T* g, const T* beta, const T* S_in, int64_t T_len,
    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size) {
  using namespace grid;
  const GdnShape s = GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnBackwardWorkspace<T> ws(workspace, s);
  const GdnForwardWorkspace<T>& f = ws.f;
  switch (phase) {
    case GdnPhase::kPre:  // the replay and Out's backward
      GdnReplay(f, ws.Vn, /*S_out=*/nullptr, k, v, g, beta, S_in, s);
      BlockGram(ws.P, q, k, Dk, s);
      exec_.ForEach(s.tiles(), GdnMaskDecayFn<T>{ws.P, f.G, s, false});
      BlockGram(ws.dP, dO, ws.Vn, Dv, s);
      exec_.ForEach(s.tiles(), GdnMaskBlockFn<T>{ws.dP, s});
      exec_.ForEach(s.tokens(),
                    GdnOutDecayGradFn<T>{dg, ws.P, ws.dP, q, dO, f.S, f.G, s});
      exec_.ForEach(s.tokens() * Dk,
                    GdnOutQueryGradFn<T>{dq, ws.dP, k, dO, f.S, f.G, s});
      exec_.ForEach(s.tokens() * Dk, GdnOutKeyGradFn<T>{dk, ws.dP, q, f.G, s});
      exec_.ForEach(s.tokens() * Dv, GdnOutValueGradFn<T>{ws.dVn, ws.P, dO, s});
      exec_.ForEach(s.H * s.nb * Dv * Dk,
                    GdnStateShareFn<T>{ws.dS, dO, q, ws.dVn, f.W, f.G, s});
      break;
    case GdnPhase::kST:  // the state-gradient chain
      exec_.ForEach(H * Dv, GdnSTBackwardFn<T>{ws.dS, ws.Z, dS_in, dS_out, k,
                                               f.W, f.G, s});
      break;
    case GdnPhase::kOut:  // the ST's rows and Pre's backward
      exec_.ForEach(s.tokens() * Dv, AddFn<T>{ws.dVn, ws.Z});
      exec_.ForEach(s.tokens(),
                    GdnSTRowGradFn<T>{dk, ws.e, ws.Vn, ws.dS, k, f.G, s});
      exec_.ForEach(H * s.nb, GdnSTDecayGradFn<T>{dg, ws.e, ws.dS, f.S, f.G, s});
      exec_.ForEach(s.tokens() * Dk, GdnWGradFn<T>{ws.dW, ws.dVn, f.S, s});
      exec_.ForEach(H * s.nb * (Dv + Dk),
                    GdnPreBackSolveFn<T>{ws.dVn, ws.dW, f.KG, beta, s});
      exec_.ForEach(s.tiles(), GdnDAFn<T>{ws.dP, ws.dVn, ws.dW, f.U, f.W, s});
      exec_.ForEach(s.tokens() * Dv, GdnScaleByBetaFn<T>{dv, ws.dVn, beta, Dv});
      exec_.ForEach(s.tokens(), GdnPreRowGradFn<T>{dbeta, dg, ws.dVn, ws.dW,
                                                   ws.dP, f.KG, k, v, beta,
                                                   f.G, s});
      exec_.ForEach(s.tokens() * Dk,
                    GdnPreKeyGradFn<T>{dk, ws.dW, ws.dP, k, beta, f.G, s});
      exec_.ForEach(H * s.nb, GdnDecayCumsumFn<T>{dg, s});
      break;
  }
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3Replay(const grid::Mamba3ForwardWorkspace<T>& ws,
                                    T* S_out, const T* k, const T* v,
                                    const T* a, const T* gamma, const T* beta,
                                    const T* S_in, const T* k_in,
                                    const T* v_in, const grid::Mamba3Shape& s) {
  // Pre: every (head, block) at once.
  exec_.ForEach(s.tokens(), grid::GdnCumDecayFn<T>{ws.G, a, s});
  exec_.ForEach(s.states(s.nb), grid::Mamba3BlockUFn<T>{ws.U, k, v, ws.G, gamma, beta, s});
  // ST: heads x state rows, blocks in order.
  exec_.ForEach(s.H * s.Dv, grid::Mamba3STFn<T>{ws.S, S_out, ws.U, k, v, ws.G, beta,
                                                S_in, k_in, v_in, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3CoreForward(
    T* o, T* S_out, T* k_out, T* v_out, T* workspace, const T* q, const T* k,
    const T* v, const T* a, const T* gamma, const T* beta, const T* S_in,
    const T* k_in, const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size) {
  const grid::Mamba3Shape s = grid::Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const grid::Mamba3ForwardWorkspace<T> ws(workspace, s);
  Mamba3Replay(ws, S_out, k, v, a, gamma, beta, S_in, k_in, v_in, s);
  // Out: every (head, block) at once.
  exec_.ForEach(s.tiles(), grid::Mamba3GramFn<T>{ws.P, q, k, ws.G, gamma, beta, Dk,
                                                 true, s});
  exec_.ForEach(s.tokens() * Dv, grid::Mamba3OutFn<T>{o, q, v, ws.P, ws.S, ws.G, s});
  exec_.ForEach(H * (Dk + Dv),
                grid::Mamba3CarryOutFn<T>{k_out, v_out, k, v, k_in, v_in, s});
}

template <typename T, typename Exec>
void GridOps<T, Exec>::Mamba3CoreBackward(
    T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta, T* dS_in, T* dk_in,
    T* dv_in, T* workspace, const T* dO, const T* dS_out, const T* dk_out,
    const T* dv_out, const T* q, const T* k, const T* v, const T* a,
    const T* gamma, const T* beta, const T* S_in, const T* k_in,
    const T* v_in, int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size) {
  using namespace grid;
  const Mamba3Shape s = Mamba3Shape::Make(T_len, H, Dk, Dv, block_size);
  const Mamba3BackwardWorkspace<T> ws(workspace, s);
  const Mamba3ForwardWorkspace<T>& f = ws.f;
  Mamba3Replay(f, /*S_out=*/nullptr, k, v, a, gamma, beta, S_in, k_in, v_in, s);
  // Out's tiles, every block at once: Q K^T (into P) and dO V^T.
  exec_.ForEach(s.tiles(), Mamba3GramFn<T>{f.P, q, k, f.G, gamma, beta, Dk, false, s});
  exec_.ForEach(s.tiles(), Mamba3GramFn<T>{ws.dOV, dO, v, f.G, gamma, beta, Dv, false, s});
  // Out's share of each block's state gradient (over U), then ST's backward.
  exec_.ForEach(s.states(s.nb), Mamba3OutStateGradFn<T>{f.U, dO, q, f.G, s});
  exec_.ForEach(H * Dv, Mamba3STGradFn<T>{ws.dS, dS_in, dS_out, f.U, f.G, s});
  // Every block at once again.
  exec_.ForEach(s.tiles(), Mamba3WeightGradFn<T>{ws.dM, f.P, ws.dOV, ws.dS, k, v, s});
  exec_.ForEach(s.tokens() * Dk, Mamba3QueryGradFn<T>{dq, dO, k, ws.dOV, f.S, f.G,
                                                      gamma, beta, s});
  exec_.ForEach(s.tokens() * Dk, Mamba3KeyGradFn<T>{dk, q, v, ws.dOV, ws.dS, f.G,
                                                    gamma, beta, dk_out, s});
  exec_.ForEach(s.tokens() * Dv, Mamba3ValueGradFn<T>{dv, dO, k, f.P, ws.dS, f.G,
                                                      gamma, beta, dv_out, s});
  exec_.ForEach(s.tokens(), Mamba3DecayGradFn<T>{ws.dG, q, dO, ws.dM, f.S, ws.dS,
                                                 f.G, gamma, beta, s});
  exec_.ForEach(s.tokens(), Mamba3CumGradFn<T>{da, ws.dG, s});
  exec_.ForEach(s.tokens(), Mamba3GateGradFn<T>{dgamma, dbeta, ws.dM, ws.dS, k, v,
                                                k_in, v_in, f.G, s});
  exec_.ForEach(H * (Dk + Dv), Mamba3CarryInGradFn<T>{dk_in, dv_in, ws.dS, k_in, v_in,
                                                      dk_out, dv_out, beta, s});
}

template <typename T, typename Exec>
double GridOps<T, Exec>::OutputLossForward(T* losses, T* lse, T* logits,
                                           const T* x, const T* w,
                                           const int32_t* targets, int64_t N,
                                           int64_t C, int64_t V, int64_t Vs) {
  if (N == 0) return 0.0;
  exec_.ForEach(N, grid::FillFn<T>{lse, grid::NegInf<T>()});
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = V - v0 < Vs ? V - v0 : Vs;
    exec_.Gemm(false, true, N, vs, C, T(1), x, C, w + v0 * C, C, T(0), logits,
               vs);
    exec_.ForEach(N, grid::OnlineLogsumexpFn<T>{lse, logits, vs});
  }
  // The per-token losses into the (now free) logits workspace, summed there.
  exec_.ForEach(N, grid::TokenLossFn<T>{logits, losses, lse, x, w, targets, C});
  return exec_.Sum(logits, N) / static_cast<double>(N);
}

template <typename T, typename Exec>
void GridOps<T, Exec>::OutputLossBackward(T* dx, T* dw, T* logits,
                                          const T* dlosses, const T* lse,
                                          const T* x, const T* w,
                                          const int32_t* targets, int64_t N,
                                          int64_t C, int64_t V, int64_t Vs) {
  for (int64_t v0 = 0; v0 < V; v0 += Vs) {
    const int64_t vs = V - v0 < Vs ? V - v0 : Vs;
    const T* ws = w + v0 * C;  // (vs, C)
    exec_.Gemm(false, true, N, vs, C, T(1), x, C, ws, C, T(0), logits, vs);
    exec_.ForEach(N * vs,
                  grid::SoftmaxGradFn<T>{logits, lse, dlosses, targets, vs, v0});
    if (dx != nullptr) {
      exec_.Gemm(false, false, N, C, vs, T(1), logits, vs, ws, C,
                 v0 == 0 ? T(0) : T(1), dx, C);
    }
    exec_.Gemm(true, false, vs, C, N, T(1), logits, vs, x, C, T(1),
               dw + v0 * C, C);
  }
  if (dx != nullptr && V == 0) exec_.ForEach(N * C, grid::FillFn<T>{dx, T(0)});
}

}  // namespace stateflow::backend

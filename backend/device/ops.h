// The kernels every model family shares, as one interface per element type:
// the device seam. A family's own kernels (its gates and recurrence core)
// are its own interface beside this one (gdn_ops.h, mamba3_ops.h,
// kda_ops.h; family_ops.h says how they reach a device); softmax
// attention's are AttentionOps below. Layers, stage modules and the trainer
// call a Device's Ops<T> (device.h) and never a kernel directly, so the same
// layer code runs on the CPU (Eigen: cpu_device.cc, bit-identical to calling
// the kernels), on the host-grid device (the CUDA kernels' per-element/
// per-row/per-tile arithmetic run by host loops: host_grid_device.h) and on
// a GPU (the same arithmetic launched as CUDA kernels, GEMMs in cuBLAS:
// cuda/).
//
// Contracts: every kernel entry point has exactly the contract of the CPU
// kernel of the same name in backend/kernels/*.h (shapes, what is written,
// what is accumulated, nullptr meaning "skip"); the pointers point into the
// device's memory (MemoryResource), token ids included. The elementwise maps
// are the small pieces of arithmetic the layers used to do inline.
//
// Scratch: where a kernel needs workspace (the head's bf16 slice here; the
// recurrent cores' in the families' ops), a *WorkspaceSize query says how
// many elements and the caller allocates them (BufferClass::kWorkspace), so
// every byte stays counted.
//
// Not streams or events (Device::Synchronize; the grid devices' overlapped
// recurrent cores use a side stream inside one call: grid_recurrent.h), not
// communication (comm/comm.h).
//
//   Ops<float>& ops = alloc.device().ops<float>();
//   ops.RmsNormForward(y, rstd, x, w, R, C, 1e-6f);
//   ops.Add(h, x, R * C);   // h += x
//
// Dimension legends: as in the kernels' headers.
#pragma once

#include <cstdint>

#include "backend/device/precision.h"

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
  // y (R, C) = x (R, C) * rstd (R) per row * w (C) per column, that is
  // (x_nc rstd_n) w_c: an RMSNorm re-applied with its saved rstd.
  virtual void RmsNormApply(T* y, const T* x, const StatOf<T>* rstd, const T* w,
                            int64_t R, int64_t C) = 0;
  // One AdamW update of n elements: m, v, w in place from g.
  virtual void AdamWUpdate(T* w, T* m, T* v, const T* g, int64_t n,
                           const AdamWCoefficients<T>& c) = 0;

  // ---- kernels: the contracts of backend/kernels/*.h ----
  virtual void LinearForward(T* y, const T* x, const T* w, const T* b,
                             int64_t R, int64_t C, int64_t D) = 0;
  virtual void LinearBackward(T* dx, GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x,
                              const T* w, int64_t R, int64_t C,
                              int64_t D) = 0;
  virtual void RmsNormForward(T* y, StatOf<T>* rstd, const T* x, const T* w,
                              int64_t R, int64_t C, ComputeOf<T> eps) = 0;
  virtual void RmsNormBackward(T* dx, GradOf<T>* dw, const T* dy, const T* x,
                               const T* w, const StatOf<T>* rstd, int64_t R,
                               int64_t C) = 0;
  // LayerNorm (backend/kernels/layer_norm.h): y (R, C) = (x - mean) rstd w +
  // b per row, mean and rstd = 1 / sqrt(var + eps) (R) saved in StatOf<T>
  // (the biased variance, as torch.nn.LayerNorm). Backward: dx written, dw
  // and db (C) accumulated. REQUIRES: dx does not alias dy.
  virtual void LayerNormForward(T* y, StatOf<T>* mean, StatOf<T>* rstd, const T* x,
                                const T* w, const T* b, int64_t R, int64_t C,
                                ComputeOf<T> eps) = 0;
  virtual void LayerNormBackward(T* dx, GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x,
                                 const T* w, const StatOf<T>* mean, const StatOf<T>* rstd,
                                 int64_t R, int64_t C) = 0;
  // y = GELU(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (the exact form,
  // torch.nn.GELU()); backward dx = dy (Phi(x) + x phi(x)) from the input x.
  // y may alias x; dx may alias dy.
  virtual void GeluForward(T* y, const T* x, int64_t n) = 0;
  virtual void GeluBackward(T* dx, const T* dy, const T* x, int64_t n) = 0;
  virtual void SiluForward(T* y, const T* x, int64_t n) = 0;
  virtual void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) = 0;
  // y = sigmoid(x) (GDN's and KDA's beta, KDA's output gate); backward dx =
  // dy y (1 - y) from the forward's output y.
  virtual void SigmoidForward(T* y, const T* x, int64_t n) = 0;
  virtual void SigmoidBackward(T* dx, const T* dy, const T* y, int64_t n) = 0;
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
  virtual void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x,
                                const T* wg, const T* wu, const T* wd,
                                int64_t R, int64_t C, int64_t F) = 0;
  virtual void SwigluMlpBackward(T* dx, GradOf<T>* dwg, GradOf<T>* dwu,
                                 GradOf<T>* dwd, T* workspace,
                                 const T* dy, const T* gate, const T* up,
                                 const T* x, const T* wg, const T* wu,
                                 const T* wd, int64_t R, int64_t C,
                                 int64_t F) = 0;
  // An id of -1 is another tensor-parallel rank's row: a zero row in the
  // forward, nothing in the backward.
  virtual void EmbeddingForward(T* y, const int32_t* ids, const T* table,
                                int64_t R, int64_t C, int64_t V) = 0;
  virtual void EmbeddingBackward(GradOf<T>* dtable, const T* dy, const int32_t* ids,
                                 int64_t R, int64_t C, int64_t V) = 0;
  // Returns the mean loss as the CPU kernel does (host value).
  virtual double OutputLossForward(StatOf<T>* losses, StatOf<T>* lse,
                                   StatOf<T>* logits, const T* x,
                                   const T* w, const int32_t* targets,
                                   int64_t R, int64_t C, int64_t V,
                                   int64_t Vs) = 0;
  virtual void OutputLossBackward(T* dx, GradOf<T>* dw, StatOf<T>* logits,
                                  const StatOf<T>* dlosses,
                                  const StatOf<T>* lse, const T* x, const T* w,
                                  const int32_t* targets, int64_t R,
                                  int64_t C, int64_t V, int64_t Vs,
                                  T* workspace = nullptr) = 0;
  // OutputLossBackward's workspace: 0 where StatOf<T> is T; for bf16 one
  // vocabulary slice of d(logits) rounded to bf16 (R min(V, Vs) elements),
  // which the GEMMs read.
  virtual int64_t OutputLossBackwardWorkspaceSize(int64_t /*R*/,
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
  virtual void RopeForward(T* x, int64_t R, int64_t H, int64_t d,
                           int64_t pos0, double base) = 0;
  virtual void RopeBackward(T* dx, int64_t R, int64_t H, int64_t d,
                            int64_t pos0, double base) = 0;
};

}  // namespace stateflow::backend

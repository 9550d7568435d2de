// The CPU device (device.h): host memory and the Eigen kernels of
// backend/kernels/ that every family shares (a family's own are its cpu_*_ops.cc), called exactly as the layers called them before the seam
// (same functions, same arguments, same order), so that results are
// bit-identical. The elementwise maps are plain loops in the arithmetic order
// the layers' Eigen expressions used. GetDevice (the registry) is here too.
#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "backend/device/device.h"
#include "backend/kernels/attention.h"
#include "backend/kernels/embedding.h"
#include "backend/kernels/gdn_prep.h"  // L2NormForward / L2NormBackward
#include "backend/kernels/gelu.h"
#include "backend/kernels/layer_norm.h"
#include "backend/kernels/linear.h"
#include "backend/kernels/output_loss.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/kernels/rope.h"
#include "backend/kernels/short_conv.h"
#include "backend/kernels/silu.h"
#include "backend/kernels/swiglu_mlp.h"
#include "backend/threading.h"

namespace stateflow::backend {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kHostGrid: return "host-grid";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

Status Device::TimerStart() {
  SF_RETURN_IF_ERROR(Synchronize());
  timer_start_s_ = std::chrono::duration<double>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  return Status::Ok();
}

Result<double> Device::TimerStop() {
  if (timer_start_s_ < 0) {
    return Status::Internal("device " + name() + ": TimerStop without TimerStart");
  }
  SF_RETURN_IF_ERROR(Synchronize());
  const double end = std::chrono::duration<double>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  const double seconds = end - timer_start_s_;
  timer_start_s_ = -1;
  return seconds;
}

namespace {

template <typename T>
class CpuOps final : public Ops<T> {
 public:
  void Fill(T* x, T value, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) x[i] = value;
  }
  void Copy(T* y, const T* x, int64_t n) override {
    HostMemory().Copy(y, x, n * int64_t{sizeof(T)});
  }
  void Add(T* y, const T* x, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i];
  }
  void Mul(T* y, const T* a, const T* b, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
  }
  // StatOf<T> is T on the CPU (float and double only): copies.
  void Widen(T* y, const T* x, int64_t n) override { Copy(y, x, n); }
  void Narrow(T* y, const T* x, int64_t n) override { Copy(y, x, n); }
  double Sum(const T* x, int64_t n) override {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
    return sum;
  }
  void RmsNormApply(T* y, const T* x, const T* rstd, const T* w, int64_t R,
                    int64_t C) override {
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] * rstd[r] * w[c];
    }
  }
  void AdamWUpdate(T* w, T* m, T* v, const T* g, int64_t n,
                   const AdamWCoefficients<T>& c) override {
    for (int64_t e = 0; e < n; ++e) {
      m[e] = c.beta1 * m[e] + c.one_minus_beta1 * g[e];
      v[e] = c.beta2 * v[e] + c.one_minus_beta2 * g[e] * g[e];
      w[e] -= c.step_size * m[e] / (std::sqrt(v[e]) * c.inv_sqrt_c2 + c.eps) +
              c.lr_decay * w[e];
    }
  }

  void LinearForward(T* y, const T* x, const T* w, const T* b, int64_t R,
                     int64_t C, int64_t D) override {
    backend::LinearForward<T>(y, x, w, b, R, C, D);
  }
  void LinearBackward(T* dx, T* dw, T* db, const T* dy, const T* x,
                      const T* w, int64_t R, int64_t C, int64_t D) override {
    backend::LinearBackward<T>(dx, dw, db, dy, x, w, R, C, D);
  }
  void RmsNormForward(T* y, T* rstd, const T* x, const T* w, int64_t R,
                      int64_t C, T eps) override {
    backend::RmsNormForward<T>(y, rstd, x, w, R, C, eps);
  }
  void RmsNormBackward(T* dx, T* dw, const T* dy, const T* x, const T* w,
                       const T* rstd, int64_t R, int64_t C) override {
    backend::RmsNormBackward<T>(dx, dw, dy, x, w, rstd, R, C);
  }
  void LayerNormForward(T* y, T* mean, T* rstd, const T* x, const T* w,
                        const T* b, int64_t R, int64_t C, T eps) override {
    backend::LayerNormForward<T>(y, mean, rstd, x, w, b, R, C, eps);
  }
  void LayerNormBackward(T* dx, T* dw, T* db, const T* dy, const T* x,
                         const T* w, const T* mean, const T* rstd, int64_t R,
                         int64_t C) override {
    backend::LayerNormBackward<T>(dx, dw, db, dy, x, w, mean, rstd, R, C);
  }
  void GeluForward(T* y, const T* x, int64_t n) override {
    backend::GeluForward<T>(y, x, n);
  }
  void GeluBackward(T* dx, const T* dy, const T* x, int64_t n) override {
    backend::GeluBackward<T>(dx, dy, x, n);
  }
  void SiluForward(T* y, const T* x, int64_t n) override {
    backend::SiluForward<T>(y, x, n);
  }
  void SiluBackward(T* dx, const T* dy, const T* x, int64_t n) override {
    backend::SiluBackward<T>(dx, dy, x, n);
  }
  void SigmoidForward(T* y, const T* x, int64_t n) override {
    backend::SigmoidForward<T>(y, x, n);
  }
  void SigmoidBackward(T* dx, const T* dy, const T* y, int64_t n) override {
    backend::SigmoidBackward<T>(dx, dy, y, n);
  }
  void ShortConvForward(T* y, T* tail_out, const T* x, const T* w,
                        const T* tail_in, int64_t T_len, int64_t C,
                        int64_t W) override {
    backend::ShortConvForward<T>(y, tail_out, x, w, tail_in, T_len, C, W);
  }
  void ShortConvBackward(T* dx, T* dtail_in, T* dw, const T* dy,
                         const T* dtail_out, const T* x, const T* w,
                         const T* tail_in, int64_t T_len, int64_t C,
                         int64_t W) override {
    backend::ShortConvBackward<T>(dx, dtail_in, dw, dy, dtail_out, x, w,
                                  tail_in, T_len, C, W);
  }
  void L2NormForward(T* y, T* rnorm, const T* x, int64_t R, int64_t D,
                     T scale, T eps) override {
    backend::L2NormForward<T>(y, rnorm, x, R, D, scale, eps);
  }
  void L2NormBackward(T* dx, const T* dy, const T* x, const T* rnorm,
                      int64_t R, int64_t D, T scale) override {
    backend::L2NormBackward<T>(dx, dy, x, rnorm, R, D, scale);
  }
  void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x, const T* wg,
                        const T* wu, const T* wd, int64_t R, int64_t C,
                        int64_t F) override {
    backend::SwigluMlpForward<T>(y, gate, up, h, x, wg, wu, wd, R, C, F);
  }
  void SwigluMlpBackward(T* dx, T* dwg, T* dwu, T* dwd, T* workspace,
                         const T* dy, const T* gate, const T* up, const T* x,
                         const T* wg, const T* wu, const T* wd, int64_t R,
                         int64_t C, int64_t F) override {
    backend::SwigluMlpBackward<T>(dx, dwg, dwu, dwd, workspace, dy, gate, up,
                                  x, wg, wu, wd, R, C, F);
  }
  void EmbeddingForward(T* y, const int32_t* ids, const T* table, int64_t R,
                        int64_t C, int64_t V) override {
    backend::EmbeddingForward<T>(y, ids, table, R, C, V);
  }
  void EmbeddingBackward(T* dtable, const T* dy, const int32_t* ids,
                         int64_t R, int64_t C, int64_t V) override {
    backend::EmbeddingBackward<T>(dtable, dy, ids, R, C, V);
  }
  double OutputLossForward(T* losses, T* lse, T* logits, const T* x,
                           const T* w, const int32_t* targets, int64_t R,
                           int64_t C, int64_t V, int64_t Vs) override {
    return backend::OutputLossForward<T>(losses, lse, logits, x, w, targets,
                                         R, C, V, Vs);
  }
  void OutputLossBackward(T* dx, T* dw, T* logits, const T* dlosses,
                          const T* lse, const T* x, const T* w,
                          const int32_t* targets, int64_t R, int64_t C,
                          int64_t V, int64_t Vs,
                          T* /*workspace*/ = nullptr) override {
    backend::OutputLossBackward<T>(dx, dw, logits, dlosses, lse, x, w,
                                   targets, R, C, V, Vs);
  }
};

template <typename T>
class CpuAttentionOps final : public AttentionOps<T> {
 public:
  void AttentionForward(T* o, T* lse, const T* q, const T* k, const T* v,
                        int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                        int64_t d, int64_t q_tile, int64_t k_tile) override {
    backend::AttentionForward<T>(o, lse, q, k, v, s, start, Hq, Hkv, d, q_tile,
                                 k_tile);
  }
  void AttentionBackward(T* dq, T* dk, T* dv, T* D, const T* dO, const T* o,
                         const T* lse, const T* q, const T* k, const T* v,
                         int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                         int64_t d, int64_t q_tile, int64_t k_tile) override {
    backend::AttentionBackward<T>(dq, dk, dv, D, dO, o, lse, q, k, v, s,
                                  start, Hq, Hkv, d, q_tile, k_tile);
  }
  void RopeForward(T* x, int64_t R, int64_t H, int64_t d, int64_t pos0,
                   double base) override {
    backend::RopeForward<T>(x, R, H, d, pos0, base);
  }
  void RopeBackward(T* dx, int64_t R, int64_t H, int64_t d, int64_t pos0,
                    double base) override {
    backend::RopeBackward<T>(dx, R, H, d, pos0, base);
  }
};

class CpuDeviceImpl final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string name() const override { return "cpu"; }
  MemoryResource& memory() override { return HostMemory(); }
  Status Synchronize() override { return Status::Ok(); }

 protected:
  Ops<float>& ops_f32() override { return ops_f32_; }
  Ops<double>& ops_f64() override { return ops_f64_; }
  AttentionOps<float>* attention_ops_f32() override { return &attn_f32_; }
  AttentionOps<double>* attention_ops_f64() override { return &attn_f64_; }

 private:
  CpuOps<float> ops_f32_;
  CpuOps<double> ops_f64_;
  CpuAttentionOps<float> attn_f32_;
  CpuAttentionOps<double> attn_f64_;
};

}  // namespace

Device& CpuDevice() {
  static CpuDeviceImpl* const device = new CpuDeviceImpl();
  return *device;
}

}  // namespace stateflow::backend

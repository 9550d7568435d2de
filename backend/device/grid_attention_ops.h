// GridAttentionOps<T, Exec>: AttentionOps<T> (ops.h) -- causal softmax
// attention with GQA, and RoPE -- as grid passes over the SF_HD functors of
// grid_kernels/attention.h, run by an executor as GridOps is (grid_ops.h
// describes the executor). The host-grid device runs it with HostExec, the
// CUDA device with CudaExec.
//
// Not the CPU kernels' tiling: one call per query row (forward: an online
// softmax over key tiles of k_tile keys; q_tile does not apply, every query
// row being its own call) or per key row.
//
//   GridAttentionOps<double, HostExec> attn{HostExec{}};
//   attn.AttentionForward(o, lse, q, k, v, s, start, Hq, Hkv, d, 64, 64);
//
// Dimensions: as in backend/kernels/attention.h and rope.h.
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/attention.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/ops.h"

namespace stateflow::backend {

template <typename T, typename Exec>
class GridAttentionOps final : public AttentionOps<T> {
 public:
  explicit GridAttentionOps(Exec exec) : exec_(exec) {}

  void AttentionForward(T* o, StatOf<T>* lse, const T* q, const T* k, const T* v,
                        int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                        int64_t d, int64_t /*q_tile*/, int64_t k_tile) override {
    exec_.ForEach(s * Hq, grid::AttentionForwardFn<T>{
                              o, lse, q, k, v, Shape(s, start, Hq, Hkv, d, k_tile),
                              Scale(d)});
  }
  void AttentionBackward(T* dq, StatOf<T>* dk, StatOf<T>* dv, StatOf<T>* D, const T* dO, const T* o,
                         const StatOf<T>* lse, const T* q, const T* k, const T* v,
                         int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                         int64_t d, int64_t /*q_tile*/,
                         int64_t k_tile) override {
    const grid::AttnShape a = Shape(s, start, Hq, Hkv, d, k_tile);
    exec_.ForEach(s * Hq, grid::AttentionDeltaFn<T>{D, dO, o, d});
    exec_.ForEach(s * Hq, grid::AttentionQueryGradFn<T>{dq, dO, lse, D, q, k, v,
                                                        a, Scale(d)});
    exec_.ForEach((start + s) * Hkv,
                  grid::AttentionKeyValueGradFn<T>{dk, dv, dO, lse, D, q, k, v, a,
                                                   Scale(d)});
  }
  void RopeForward(T* x, int64_t R, int64_t H, int64_t d, int64_t pos0,
                   double base) override {
    exec_.ForEach(R * H * (d / 2), grid::RopeFn<T>{x, H, d, pos0, base, T(1)});
  }
  void RopeBackward(T* dx, int64_t R, int64_t H, int64_t d, int64_t pos0,
                    double base) override {
    exec_.ForEach(R * H * (d / 2), grid::RopeFn<T>{dx, H, d, pos0, base, T(-1)});
  }

 private:
  static grid::AttnShape Shape(int64_t s, int64_t start, int64_t Hq,
                               int64_t Hkv, int64_t d, int64_t k_tile) {
    return {s, start, Hq, Hkv, d, k_tile};
  }
  static ComputeOf<T> Scale(int64_t d) {
    return ComputeOf<T>(1) / grid::Sqrt(static_cast<ComputeOf<T>>(d));
  }

  Exec exec_;
};

}  // namespace stateflow::backend

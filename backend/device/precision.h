// The element types of one training dtype (issue 12, "bf16"): a layer's
// activations and their gradients are T; the statistics it saves (norm
// 1/rms, L2 1/|.|, log-sum-exps, rotary angles), the recurrent states and
// their gradients, the recurrent cores' scratch, logits and per-token losses
// are StatOf<T>; the parameters' gradients GradOf<T>; the optimizer's master
// weights and moments MasterOf<T>; a kernel computes in ComputeOf<T> and
// rounds once when it stores a T.
//
// For float and double every one of them is T itself, so the float32 and
// float64 backends are unchanged by these names (bit for bit). For bf16 they
// are float: the simulator's default precision (models::PrecisionForDtype,
// models/layer_formulas.h StatBytes) of 2-byte weights and activations, 4-byte
// gradients and statistics, 12 optimizer bytes (fp32 master, m, v).
//
//   template <typename T> void Norm(Tensor<T>& y, Tensor<StatOf<T>>& rstd);
#pragma once

#include <type_traits>

#include "backend/device/bf16.h"

namespace stateflow::backend {

template <typename T>
struct Precision {
  using Stat = T;
  using Grad = T;
  using Master = T;
  using Compute = T;
};

template <>
struct Precision<bf16> {
  using Stat = float;
  using Grad = float;
  using Master = float;
  using Compute = float;
};

template <typename T>
using StatOf = typename Precision<T>::Stat;
template <typename T>
using GradOf = typename Precision<T>::Grad;
template <typename T>
using MasterOf = typename Precision<T>::Master;
template <typename T>
using ComputeOf = typename Precision<T>::Compute;

// The largest head dim of bf16 attention: its kernels keep a row of running
// sums in float locals (grid_kernels/attention.h AccRow); the layer refuses
// more.
inline constexpr long kMaxBf16AttentionHeadDim = 256;

// Whether T keeps fp32 master weights apart from its working copy.
template <typename T>
inline constexpr bool kHasMaster = !std::is_same_v<MasterOf<T>, T>;

}  // namespace stateflow::backend

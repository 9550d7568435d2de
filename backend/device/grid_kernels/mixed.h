// The mixed-precision pieces of bf16 training (issue 12; the plan in
// docs/backend.md, "bf16"): conversions between float and bf16 storage, and
// the AdamW step on fp32 master weights that also writes the bf16 working
// copy the layers read. SF_HD functors for GridOps' executors, like the
// rest of this folder.
//
// The master update is AdamWFn<float>'s arithmetic, line for line, so a
// bf16 run's master weights follow the float run's rule; the working copy
// is the master rounded once to nearest even.
//
//   exec.ForEach(n, grid::AdamWMasterFn{w_master, m, v, g, w_bf16, ...});
//   exec.ForEach(n, grid::ToBf16Fn{y, x});     // y (bf16) = round(x)
#pragma once

#include <cstdint>

#include "backend/device/bf16.h"
#include "backend/device/grid_kernels/math.h"
#include "backend/device/hd.h"

namespace stateflow::backend::grid {

// y[i] = x[i] rounded to nearest even.
struct ToBf16Fn {
  bf16* y;
  const float* x;
  SF_HD void operator()(int64_t i) const { y[i] = bf16(x[i]); }
};

// y[i] = x[i], exactly.
struct ToFloatFn {
  float* y;
  const bf16* x;
  SF_HD void operator()(int64_t i) const { y[i] = static_cast<float>(x[i]); }
};

// AdamW on the fp32 master w (moments m, v and gradient g in fp32), then the
// bf16 working copy w_bf16[i] = round(w[i]).
struct AdamWMasterFn {
  float* w;
  float* m;
  float* v;
  const float* g;
  bf16* w_bf16;
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size, inv_sqrt_c2, eps, lr_decay;
  SF_HD void operator()(int64_t i) const {
    m[i] = beta1 * m[i] + one_minus_beta1 * g[i];
    v[i] = beta2 * v[i] + one_minus_beta2 * g[i] * g[i];
    w[i] -= step_size * m[i] / (Sqrt(v[i]) * inv_sqrt_c2 + eps) + lr_decay * w[i];
    w_bf16[i] = bf16(w[i]);
  }
};

}  // namespace stateflow::backend::grid

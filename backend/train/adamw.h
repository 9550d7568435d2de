// AdamW (Loshchilov and Hutter's decoupled weight decay) over one stage's
// parameters: each stage updates its own parameters after the step's M
// microbatches, with no communication (the gradients of a stage's
// parameters are complete on that stage). The moments m and v are allocated
// once, as optimizer state (BufferClass::kOptimizerState), one pair per
// parameter.
//
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + lr wd w
// Weight decay applies to matrices (rank >= 2) only, not to gains or biases.
//
// In bf16 (precision.h: kHasMaster) the update runs on fp32 master weights
// (kOptimizerState, beside m and v: 12 bytes a parameter) from the fp32
// gradient, exactly as a float32 run updates its weights, and the bf16 value
// the layers read is the master rounded once (Ops::Narrow). The master
// starts as the bf16 value widened.
//
// Not a gradient clipper and not a learning-rate schedule.
//
//   SF_ASSIGN_OR_RETURN(AdamW<float> opt, AdamW<float>::Make(module->Parameters(), alloc, {}));
//   opt.Step();   // after the step's backward passes
#pragma once

#include <vector>

#include "backend/allocator.h"
#include "backend/device/device.h"
#include "backend/stage_module.h"
#include "common/status.h"

namespace stateflow::backend {

struct AdamWOptions {
  double learning_rate = 3e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
};

template <typename T>
class AdamW {
 public:
  // Error: the allocator's capacity error for the moments.
  static Result<AdamW> Make(std::vector<ParamRef<T>> params, TrackingAllocator& alloc,
                            const AdamWOptions& options);

  AdamW(AdamW&&) = default;
  AdamW& operator=(AdamW&&) = default;

  // One update of every parameter from its gradient.
  void Step();
  int steps_taken() const { return steps_taken_; }

  // For checkpoints (checkpoint.h): the parameters in order, the moments of
  // parameter k (same shape), and restoring the step counter (bias
  // corrections use it). REQUIRES: k < params().size(), steps >= 0.
  const std::vector<ParamRef<T>>& params() const { return params_; }
  Tensor<MasterOf<T>>& first_moment(std::size_t k) { return m_[k]; }
  Tensor<MasterOf<T>>& second_moment(std::size_t k) { return v_[k]; }
  // The fp32 master weights of parameter k (kHasMaster<T> only), and
  // rounding them into the values after a checkpoint restored them.
  Tensor<MasterOf<T>>& master(std::size_t k) { return master_[k]; }
  void NarrowMasters();
  void set_steps_taken(int steps) { steps_taken_ = steps; }

 private:
  AdamW(std::vector<ParamRef<T>> params, const AdamWOptions& options, Device* device)
      : params_(std::move(params)), options_(options), device_(device) {}

  std::vector<ParamRef<T>> params_;
  std::vector<Tensor<MasterOf<T>>> m_;  // same shapes as params_
  std::vector<Tensor<MasterOf<T>>> v_;
  std::vector<Tensor<MasterOf<T>>> master_;  // kHasMaster<T> only
  AdamWOptions options_;
  Device* device_;  // the parameters' device (their allocator's); not owned
  int steps_taken_ = 0;
};

}  // namespace stateflow::backend

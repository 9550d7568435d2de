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
// The distributed optimizer (parallel.distributed_optimizer, ZeRO-1): an
// AdamW may own only a range of the stage's parameters laid end to end (in
// params order; models::ShardOf gives replica d's): its moments (and
// masters) are allocated for that range alone, one tensor per parameter it
// touches, and Step updates that range only. Element by element the update
// is the same arithmetic, so the shards of D replicas together update
// exactly as one whole AdamW does.
//
// Not a gradient clipper and not a learning-rate schedule.
//
//   SF_ASSIGN_OR_RETURN(AdamW<float> opt, AdamW<float>::Make(module->Parameters(), alloc, {}));
//   opt.Step();   // after the step's backward passes
#pragma once

#include <cstdint>
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

// Elements [begin, begin + count) of the parameters laid end to end;
// count < 0: all of them.
struct ParamRange {
  std::int64_t begin = 0;
  std::int64_t count = -1;
};

template <typename T>
class AdamW {
 public:
  // Error: the allocator's capacity error for the moments; a range outside
  // the parameters (Internal).
  static Result<AdamW> Make(std::vector<ParamRef<T>> params, TrackingAllocator& alloc,
                            const AdamWOptions& options, ParamRange range = {});

  AdamW(AdamW&&) = default;
  AdamW& operator=(AdamW&&) = default;

  // One update of every parameter (of the range) from its gradient.
  void Step();
  int steps_taken() const { return steps_taken_; }

  // Whether it owns a part of the parameters only (a distributed optimizer's
  // shard); checkpoints need a whole one.
  bool sharded() const { return sharded_; }

  // For checkpoints (checkpoint.h): the parameters in order, the moments of
  // piece k (pieces(); unsharded, parameter k, same shape), and restoring
  // the step counter (bias corrections use it). REQUIRES: k < pieces().size()
  // for the moments and masters, steps >= 0.
  const std::vector<ParamRef<T>>& params() const { return params_; }
  Tensor<MasterOf<T>>& first_moment(std::size_t k) { return m_[k]; }
  Tensor<MasterOf<T>>& second_moment(std::size_t k) { return v_[k]; }
  // The fp32 master weights of parameter k (kHasMaster<T> only), and
  // rounding them into the values after a checkpoint restored them.
  Tensor<MasterOf<T>>& master(std::size_t k) { return master_[k]; }
  void NarrowMasters();
  void set_steps_taken(int steps) { steps_taken_ = steps; }

  // The part of parameter `param` it updates: elements [offset, offset + count).
  struct Piece {
    std::size_t param = 0;
    std::int64_t offset = 0, count = 0;
  };
  // What it owns, in params order: unsharded, every parameter whole (piece k
  // is parameter k); sharded, its range's pieces. Piece j's moments (and
  // masters) are first_moment(j), second_moment(j) (master(j)), count
  // elements each.
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  AdamW(std::vector<ParamRef<T>> params, const AdamWOptions& options, Device* device)
      : params_(std::move(params)), options_(options), device_(device) {}

  std::vector<ParamRef<T>> params_;
  std::vector<Piece> pieces_;  // unsharded: one per parameter, whole
  bool sharded_ = false;
  // One per piece; unsharded, the same shapes as params_.
  std::vector<Tensor<MasterOf<T>>> m_;
  std::vector<Tensor<MasterOf<T>>> v_;
  std::vector<Tensor<MasterOf<T>>> master_;  // kHasMaster<T> only
  AdamWOptions options_;
  Device* device_;  // the parameters' device (their allocator's); not owned
  int steps_taken_ = 0;
};

}  // namespace stateflow::backend

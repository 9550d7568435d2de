// The contract between the pipeline runtime and the model: what one pipeline
// stage's share of the model (its layers of the layer list, models/model.h)
// does for one chunk of one microbatch. The runtime (stage_runtime.h) only
// moves activations and their gradients between stages in plan order; the
// module keeps everything that stays on the stage: parameters and their
// gradients, the tensors each chunk saves for its backward, boundary states
// (handed from chunk i to chunk i+1 of the same microbatch) and their
// gradients (handed from chunk i+1's backward to chunk i's).
//
// Lifetimes (the paper's): a chunk's saved tensors and its input boundary
// state are allocated by Forward(a, i) and freed when Backward(a, i) returns.
//
// Not a scheduler: the module runs whatever it is told, in the order it is
// told, and returns an error (never crashes) if told something impossible
// (a backward before its forward, a chunk i before chunk i-1).
//
//   module.BeginStep(batch, partition, /*loss_scale=*/1.0 / (M * T));
//   SF_ASSIGN_OR_RETURN(Tensor<T> y, module.Forward(a, i, &x));   // y to stage r+1
//   SF_ASSIGN_OR_RETURN(Tensor<T> dx, module.Backward(a, i, &dy)); // dx to stage r-1
#pragma once

#include <cstdint>
#include <vector>

#include "backend/device/precision.h"
#include "backend/tensor.h"
#include "common/status.h"
#include "schedule/partition.h"

namespace stateflow::backend {

// The tokens of one step: M microbatches of B sequences (microbatch_size) of
// T + 1 byte-level tokens each (inputs are [0, T), targets are [1, T + 1)).
struct Batch {
  int microbatches = 0;             // M
  int microbatch_size = 1;          // B
  std::int64_t seq_len = 0;         // T
  std::vector<std::int32_t> tokens; // (M, B, T + 1)

  // Sequence b of microbatch a.
  const std::int32_t* inputs(int a, int b = 0) const {
    return tokens.data() + (static_cast<std::int64_t>(a) * microbatch_size + b) * (seq_len + 1);
  }
  const std::int32_t* targets(int a, int b = 0) const { return inputs(a, b) + 1; }
};

// A parameter and its gradient, for the optimizer.
template <typename T>
struct ParamRef {
  std::string name;   // e.g. "block3.q_proj.weight"
  Tensor<T>* value;
  Tensor<GradOf<T>>* grad;  // float in bf16 (precision.h)
  // Whole on every tensor-parallel rank, its gradient each rank's share
  // (Param::tp_partial_grad): summed over the TP group before the update.
  bool tp_partial_grad = false;
  int tp_split_dim = -1;  // Param::tp_split_dim
};

template <typename T>
class StageModule {
 public:
  virtual ~StageModule() = default;

  virtual bool is_first() const = 0;  // holds the embedding
  virtual bool is_last() const = 0;   // holds the head (norm, output, loss)
  virtual std::int64_t hidden_size() const = 0;
  virtual int microbatch_size() const = 0;  // B

  // Starts a step over `batch` cut by `partition`. Every token's loss is
  // multiplied by `loss_scale` (1 / (M * B * T) for a mean). REQUIRES: the
  // previous step's chunks all ran backward. Error: a batch whose
  // microbatch_size is not the module's.
  virtual Status BeginStep(const Batch* batch, const schedule::Partition* partition,
                           double loss_scale) = 0;

  // Forward of chunk i of microbatch a. `x` is the (B * s_i, hidden)
  // activation from the previous stage (rows sequence-major: row b s_i + t is
  // token t of the chunk in sequence b; nullptr on the first stage, which
  // embeds the batch's tokens). Returns the (B * s_i, hidden) output for the
  // next stage, or an empty tensor on the last stage (which adds the chunk's
  // scaled loss to the step's loss).
  virtual Result<Tensor<T>> Forward(int microbatch, int chunk, const Tensor<T>* x) = 0;

  // Backward of chunk i of microbatch a. `dy` is the gradient of the output
  // from the next stage (nullptr on the last stage). Adds into the parameter
  // gradients. Returns the (B * s_i, hidden) gradient of the input for the
  // previous stage, or an empty tensor on the first stage. Frees the chunk's
  // saved tensors and its input boundary state.
  virtual Result<Tensor<T>> Backward(int microbatch, int chunk, const Tensor<T>* dy) = 0;

  // The weight-gradient pass W of chunk i of microbatch a, when the module
  // splits its backward (StageModuleOptions::split_backward): its Backward
  // is then the input-gradient pass, which leaves the weight gradients of
  // the chunk's linears and embedding to this. Adds into the parameter
  // gradients and frees what Backward kept for it. Error: a module that
  // does not split, or a W before its B or run twice.
  virtual Status Weight(int microbatch, int chunk) {
    (void)microbatch;
    (void)chunk;
    return Status::Invalid("this stage module does not split its backward (no W pass)");
  }

  // The step's loss so far (sum of scaled token losses; last stage only).
  virtual double loss() const = 0;

  virtual std::vector<ParamRef<T>> Parameters() = 0;
  virtual void ZeroGrads() = 0;
};

}  // namespace stateflow::backend

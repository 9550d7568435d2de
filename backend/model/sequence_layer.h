// A layer of the layer list between the embedding and the head (a block:
// recurrence or softmax-attention mixer plus MLP), seen from the stage
// module: it runs chunks of microbatches in the paper's order and keeps what
// must survive between them, per microbatch:
//
//   recurrence (GDN, Mamba-3): chunk i's saved tensors, the boundary state
//     entering each chunk and, during the backward, the d(state out) the
//     later chunk handed down;
//   softmax attention: chunk i's saved tensors and the microbatch's
//     sequence-wide K/V buffer and its gradient accumulator.
//
// The order of allocations is the memory model's (models/memory_model.h),
// because the stage's peak depends on it:
//   F(a, 0): StartSequence(a) on every layer of the stage first (a recurrence
//            makes chunk 0's zero state), then Forward layer by layer; a
//            recurrence makes chunk i+1's state in at the start of its
//            Forward (i < N-1); attention makes the K/V buffer at the start
//            of its Forward of chunk 0;
//   B(a, i): Backward layer by layer in reverse; a recurrence makes d(state
//            in) (i > 0) at its start and frees the d(state out) it was
//            handed (i < N-1) at its end; attention makes the K/V gradient
//            accumulator at the start of chunk N-1's and frees the buffer and
//            accumulator at the end of chunk 0's; then FinishBackward(a, i) on
//            every layer (a recurrence frees chunk i's state in).
//
// Not a scheduler: the stage module checks the order (F(i-1) < F(i) < B(i),
// B(i+1) < B(i)) before calling. Errors are one-line Statuses naming the
// layer.
//
//   SF_ASSIGN_OR_RETURN(auto layer, MakeSequenceLayer<float>(model, l, alloc, options));
//   layer->BeginStep(M, /*batch=*/B, partition);
//   SF_RETURN_IF_ERROR(layer->StartSequence(a));                 // F(a, 0) only
//   SF_RETURN_IF_ERROR(layer->Forward(&y, a, i, x));
//   SF_RETURN_IF_ERROR(layer->Backward(&dx, a, i, dy));
//   layer->FinishBackward(a, i);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/layers/tensor_parallel.h"
#include "backend/allocator.h"
#include "backend/layers/param.h"
#include "backend/tensor.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "proto/stateflow.pb.h"
#include "schedule/partition.h"

namespace stateflow::backend {

template <typename T>
class SequenceLayer {
 public:
  virtual ~SequenceLayer() = default;

  // Index in the model's layer list (1 .. L).
  virtual int layer() const = 0;
  // "gdn", "attention", "mamba3": for parameter names and errors.
  virtual const char* kind_name() const = 0;
  virtual std::vector<Param<T>>& params() = 0;

  // A new step of `microbatches` microbatches of `batch` sequences each, cut
  // by `partition` (which outlives the step). Drops whatever an earlier,
  // failed step left.
  virtual void BeginStep(int microbatches, std::int64_t batch,
                         const schedule::Partition* partition) = 0;
  // F(a, 0), before any layer of the stage runs.
  virtual Status StartSequence(int a) = 0;
  // x, y: (B s_i, C), rows sequence-major.
  virtual Status Forward(Tensor<T>* y, int a, int i, const Tensor<T>& x) = 0;
  virtual Status Backward(Tensor<T>* dx, int a, int i, const Tensor<T>& dy) = 0;
  // B(a, i), after every layer of the stage ran its backward.
  virtual void FinishBackward(int a, int i) = 0;
};

struct SequenceLayerOptions {
  models::Recompute recompute = models::Recompute::kNone;
  std::uint64_t seed = 0;
  // Recurrent layers: the core's split-and-overlap (GdnLayerDims::st_overlap,
  // Mamba3LayerDims::st_overlap) and ST tile (GdnLayerDims::st_tile,
  // Mamba3LayerDims::st_tile).
  bool st_overlap = false;
  int64_t st_tile = 0;
  // Tensor parallelism: this rank's heads and MLP columns (tensor_parallel.h).
  TpShard tp{};
};

// Layer `l` (1 <= l <= num_layers) of models::LayerList(model), its
// parameters seeded from (seed, l, name) only. Errors (Invalid, one line):
// a layer kind or architecture the backend does not run, naming it.
// REQUIRES: models::ValidateModel(model).ok(); alloc outlives the layer.
template <typename T>
Result<std::unique_ptr<SequenceLayer<T>>> MakeSequenceLayer(
    const pb::ModelSpec& model, int l, TrackingAllocator* alloc,
    const SequenceLayerOptions& options);

}  // namespace stateflow::backend

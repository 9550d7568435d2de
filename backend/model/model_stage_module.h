// The StageModule (backend/stage_module.h) of any model the backend runs:
// one pipeline stage's layers [first, last) of the model's layer list
// [embedding, layer_0, ..., layer_{L-1}, head] (models/model.h), run chunk
// by chunk. The blocks between embedding and head are SequenceLayers
// (sequence_layer.h): each keeps what its kind carries between the chunks of
// a microbatch (boundary states and their gradients for a recurrence, the
// sequence-wide K/V buffer and its gradient for softmax attention) and its
// chunks' saved tensors. Lifetimes, per (microbatch a, chunk i):
//
//   Forward(a, i):  allocates chunk i's saved tensors (kActivations); for
//                   i < N-1 each recurrence makes the state entering chunk
//                   i+1 (kBoundaryStates; chunk 0's zero state is made by
//                   Forward(a, 0)); attention's K/V buffer (kKvBuffers) is
//                   made by Forward(a, 0).
//   Backward(a, i): consumes d(state out) handed over by Backward(a, i+1),
//                   hands d(state in) to Backward(a, i-1) (kBoundaryStates),
//                   frees chunk i's saved tensors and its state in; the K/V
//                   gradient accumulator lives from Backward(a, N-1) and, with
//                   the buffer, is freed by Backward(a, 0).
// Parameters are kWeights, their gradients kGradients, transient buffers
// kWorkspace (including the stage's output and input gradient it returns),
// logits slices kLogits. After a step, nothing but weights and gradients is
// live. Exactly what models/memory_model.h predicts, byte for byte.
//
// A microbatch is `microbatch_size` (B) sequences: activations have B s_i
// rows, sequence-major.
//
// Untied embeddings only; layers' parameters are seeded from (seed, global
// layer index, parameter name) only, so that any split of the layer list
// over stages holds exactly the parameters one process holds. Not a
// scheduler (the runtime calls it in plan order) and not an optimizer.
//
//   SF_ASSIGN_OR_RETURN(auto stage, MakeStageModule<float>(model, {0, 3}, {.seed = 1}, &alloc));
//   SF_RETURN_IF_ERROR(stage->BeginStep(&batch, &partition, 1.0 / (M * B * T)));
#pragma once

#include <cstdint>
#include <memory>

#include "backend/allocator.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/stage_module.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// Vocabulary columns of one logits slice of the head (output_loss.h): the
// memory model's sliced loss.
inline constexpr std::int64_t kHeadVocabSlice = models::kLossVocabSlice;

struct StageModuleOptions {
  // Blocks are recomputed in the backward when kFull (the embedding and head
  // never are; attention's K/V buffer is kept, not recomputed).
  models::Recompute recompute = models::Recompute::kNone;
  std::uint64_t seed = 0;
  int microbatch_size = 1;  // B sequences per microbatch
  // schedule.st_overlap: recurrent layers (GDN, Mamba-3) run their core's
  // forward and backward split and overlapped (SequenceLayerOptions::st_overlap).
  bool st_overlap = false;
  // schedule.st_tile: B_V, the recurrent cores' ST tile of value rows
  // (SequenceLayerOptions::st_tile; 0: the device's default, untiled).
  int64_t st_tile = 0;
  // Tensor parallelism (tensor_parallel.h): this rank's heads, MLP columns
  // and vocabulary rows of every layer of the stage.
  TpShard tp{};
  // Split each backward into B (Backward: input gradients, each block's
  // linears' weight gradients deferred into a W store, weight_grad_store.h)
  // and W (Weight: those weight gradients and the embedding's), as a plan
  // with W actions runs it (zero-bubble schedules).
  bool split_backward = false;
};


// A stage module holding layers [layers.first, layers.last) of
// models::LayerList(model). `alloc` (not owned) must outlive the module and
// every tensor it returns.
// Errors (Invalid, one line): the model fails models::ValidateModel; a layer
// kind the backend does not run (naming it); model.untied_embeddings false;
// layers not a non-empty range inside the layer list; microbatch_size < 1;
// alloc null. Resource: the allocator's capacity.
template <typename T>
Result<std::unique_ptr<StageModule<T>>> MakeStageModule(const pb::ModelSpec& model,
                                                        models::StageLayers layers,
                                                        const StageModuleOptions& options,
                                                        TrackingAllocator* alloc);

}  // namespace stateflow::backend

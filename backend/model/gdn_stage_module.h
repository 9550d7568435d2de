// The StageModule (backend/stage_module.h) of a Gated DeltaNet model: one
// pipeline stage's layers [first, last) of the model's layer list
// [embedding, layer_0, ..., layer_{L-1}, head] (models/model.h), run chunk
// by chunk. It keeps, per (microbatch, chunk), the layers' saved tensors, and
// per microbatch the boundary states between chunks and their gradients:
//
//   Forward(a, i):  allocates chunk i's saved tensors (kActivations) and, for
//                   i < N-1, the boundary state entering chunk i+1
//                   (kBoundaryStates; chunk 0's zero state is allocated by
//                   Forward(a, 0)).
//   Backward(a, i): consumes d(state out) handed over by Backward(a, i+1),
//                   hands d(state in) to Backward(a, i-1) (kBoundaryStates),
//                   and frees chunk i's saved tensors and its state in.
// Parameters are kWeights, their gradients kGradients, transient buffers
// kWorkspace (including the stage's output and input gradient it returns),
// logits slices kLogits. After a step, nothing but weights and gradients is
// live.
//
// Only architecture "gdn" with layer_pattern "recurrent" and untied
// embeddings is supported; the GDN layers' parameters are seeded from
// (seed, global layer index, parameter name) only, so that any split of the
// layer list over stages holds exactly the parameters one process holds.
// Not a scheduler (the runtime calls it in plan order) and not an optimizer.
//
//   SF_ASSIGN_OR_RETURN(auto stage, MakeGdnStageModule<float>(model, {0, 3}, models::Recompute::kNone, seed, &alloc));
//   SF_RETURN_IF_ERROR(stage->BeginStep(&batch, &partition, 1.0 / (M * T)));
#pragma once

#include <cstdint>
#include <memory>

#include "backend/allocator.h"
#include "backend/stage_module.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// Vocabulary columns of one logits slice of the head (output_loss.h): the
// memory model's sliced loss.
inline constexpr std::int64_t kHeadVocabSlice = models::kLossVocabSlice;

// A stage module holding layers [layers.first, layers.last) of
// models::LayerList(model). GDN layers are recomputed in the backward when
// `recompute` is kFull (the embedding and head never are). `alloc` (not
// owned) must outlive the module and every tensor it returns.
// Errors (Invalid, one line): the model fails models::ValidateModel;
// model.architecture other than "gdn"; model.layer_pattern other than
// "recurrent"; model.untied_embeddings false; layers not a non-empty range
// inside the layer list; alloc null. Resource: the allocator's capacity.
template <typename T>
Result<std::unique_ptr<StageModule<T>>> MakeGdnStageModule(
    const pb::ModelSpec& model, models::StageLayers layers,
    models::Recompute recompute, std::uint64_t seed, TrackingAllocator* alloc);

}  // namespace stateflow::backend

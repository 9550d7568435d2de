// A small StageModule for testing the pipeline runtime and the trainer
// without the Gated DeltaNet model: a test double with the same contract
// (backend/stage_module.h) and exact hand-written gradients, checked against
// central differences in runtime_test.cc.
//
// Layer list [embedding, layer_0, ..., layer_{L-1}, head] as models/model.h;
// a stage holds layers [first, last). Per token t of a sequence:
//   embedding: x_t = E[token_t]                            E (V, H)
//   layer:     z_t = W x_t;  s_t = lambda s_{t-1} + u . x_t  (scalar state)
//              y_t = x_t + tanh(z_t) + s_t v              W (H, H), u, v (H), lambda (1)
//   head:      loss += scale * (logsumexp(O x_t) - (O x_t)[target_t])   O (V, H)
// The scalar s is the layer's boundary state: chunk i hands s to chunk i+1,
// and Backward(a, i+1) hands d s back to Backward(a, i). Parameters are
// seeded from (seed, layer index, parameter) only, so any split over stages
// holds exactly the parameters one stage holding every layer holds.
//
// Memory: weights kWeights, gradients kGradients, each chunk's saved layer
// inputs and states and head inputs kActivations, the boundary states
// kBoundaryStates, the returned output and input gradient kWorkspace.
//
// Not a model anyone would train for quality; it is small enough that a
// float64 run is exact to rounding.
//
//   auto module = MakeToyStageModule<double>(/*L=*/4, /*H=*/8, {0, 3}, /*seed=*/7, &alloc);
//   module->BeginStep(&batch, &partition, 1.0 / (M * T));
#pragma once

#include <cstdint>
#include <memory>

#include "backend/allocator.h"
#include "backend/stage_module.h"
#include "models/model.h"

namespace stateflow::backend::testing {

inline constexpr int kToyVocab = 256;

// Layers [layers.first, layers.last) of a model with `num_layers` recurrent layers of
// width `hidden`. Errors: an empty or out-of-range layer range.
template <typename T>
Result<std::unique_ptr<StageModule<T>>> MakeToyStageModule(int num_layers, int hidden,
                                                           models::StageLayers layers,
                                                           std::uint64_t seed,
                                                           TrackingAllocator* alloc);

}  // namespace stateflow::backend::testing

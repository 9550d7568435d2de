// A recurrent model family on the backend side: how to make one of its
// layers for a stage module (a SequenceLayer) and how to run its core one
// phase at a time for the profiler, for each element type; found by the
// model's architecture. The registry (layer_family.cc) lists one line per
// family; the analytic half of a family is models/family.h, its kernels are
// its device ops (backend/device/family_ops.h).
//
// A family provides traits (GdnFamilyTraits in gdn_layer.h is the pattern):
// kName, Layer<T> (called alike through RecurrentEntry: Make, Forward,
// Backward, State, Saved), Dims and DimsOf(model) (with st_overlap and
// st_tile, which the options set), Constants(dims) (what the ModelSpec does
// not carry: eps values, T_C) and MakePhaseRunner<T>.
//
//   const LayerFamily* f = FindLayerFamily(model.architecture());
//   SF_ASSIGN_OR_RETURN(auto layer, f->layer<float>()(model, l, alloc, options));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/layers/core_phases.h"
#include "backend/model/recurrent_sequence_layer.h"
#include "backend/model/sequence_layer.h"
#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

struct LayerFamily {
  // Layer `l` (1-based in the layer list) of `model` (its architecture this
  // family's), parameters seeded from (seed, l, name).
  template <typename T>
  using LayerMaker = Result<std::unique_ptr<SequenceLayer<T>>> (*)(
      const pb::ModelSpec& model, int l, TrackingAllocator* alloc,
      const SequenceLayerOptions& options);
  // The core of one of its layers on `batch` sequences of `tokens` tokens,
  // with ST tile `st_tile`, its buffers from `alloc` (kWorkspace).
  template <typename T>
  using PhaseMaker = Result<std::unique_ptr<CorePhaseRunner<T>>> (*)(
      const pb::ModelSpec& model, TrackingAllocator& alloc, std::int64_t batch,
      std::int64_t tokens, std::int64_t st_tile);

  // The family's constants that the ModelSpec does not carry, by name
  // ({"norm_eps", 1e-6}, {"block_size", 64}, ...): --dump-weights writes them.
  using Constants = std::vector<std::pair<std::string, double>>;

  std::string_view name;  // models::Family::name(): "gdn"
  Constants (*constants)(const pb::ModelSpec& model) = nullptr;
  LayerMaker<float> layer_f32 = nullptr;
  LayerMaker<double> layer_f64 = nullptr;
  LayerMaker<bf16> layer_bf16 = nullptr;
  PhaseMaker<float> phases_f32 = nullptr;
  PhaseMaker<double> phases_f64 = nullptr;
  PhaseMaker<bf16> phases_bf16 = nullptr;

  template <typename T>
  LayerMaker<T> layer() const {
    if constexpr (std::is_same_v<T, float>) return layer_f32;
    else if constexpr (std::is_same_v<T, double>) return layer_f64;
    else return layer_bf16;
  }
  template <typename T>
  PhaseMaker<T> phases() const {
    if constexpr (std::is_same_v<T, float>) return phases_f32;
    else if constexpr (std::is_same_v<T, double>) return phases_f64;
    else return phases_bf16;
  }
};

// The registered families, in registration order.
const std::vector<LayerFamily>& LayerFamilies();
// The family named `architecture`, or nullptr (the backend does not run it).
const LayerFamily* FindLayerFamily(std::string_view architecture);

// ---- building an entry from a family's traits ------------------------------

template <class Family, typename T>
Result<std::unique_ptr<SequenceLayer<T>>> MakeFamilyLayer(const pb::ModelSpec& model, int l,
                                                         TrackingAllocator* alloc,
                                                         const SequenceLayerOptions& options) {
  typename Family::Dims dims = Family::DimsOf(model);
  if (options.tp.on()) dims = dims.Sharded(options.tp);
  dims.st_overlap = options.st_overlap;
  dims.st_tile = options.st_tile;
  SF_ASSIGN_OR_RETURN(auto layer, (Family::template Layer<T>::Make(
                                      *alloc, dims, l, static_cast<int>(model.num_layers()),
                                      options.seed)));
  return std::unique_ptr<SequenceLayer<T>>(std::make_unique<RecurrentSequenceLayer<T, Family>>(
      std::move(layer), alloc, options.recompute));
}

template <class Family, typename T>
Result<std::unique_ptr<CorePhaseRunner<T>>> MakeFamilyPhases(const pb::ModelSpec& model,
                                                             TrackingAllocator& alloc,
                                                             std::int64_t batch,
                                                             std::int64_t tokens,
                                                             std::int64_t st_tile) {
  typename Family::Dims dims = Family::DimsOf(model);
  dims.st_tile = st_tile;
  return Family::template MakePhaseRunner<T>(dims, alloc, batch, tokens);
}

template <class Family>
LayerFamily MakeLayerFamily() {
  LayerFamily f;
  f.name = Family::kName;
  f.constants = [](const pb::ModelSpec& model) { return Family::Constants(Family::DimsOf(model)); };
  f.layer_f32 = &MakeFamilyLayer<Family, float>;
  f.layer_f64 = &MakeFamilyLayer<Family, double>;
  f.layer_bf16 = &MakeFamilyLayer<Family, bf16>;
  f.phases_f32 = &MakeFamilyPhases<Family, float>;
  f.phases_f64 = &MakeFamilyPhases<Family, double>;
  f.phases_bf16 = &MakeFamilyPhases<Family, bf16>;
  return f;
}

}  // namespace stateflow::backend

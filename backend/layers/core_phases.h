// A recurrent family's chunkwise core run one phase at a time on layer-like
// inputs, for the profiler (backend/profile/layer_timer.h): Pre, ST and Out
// (core_phase.h) of the forward and of the backward, each a separate call, so
// that each can be timed alone and a replay can predict the core split and
// overlapped from sequential measurements (docs/cost-model.md, section 2,
// "State transition"). Each family makes its runner (its layer family's
// phase maker, backend/model/layer_family.h): its inputs of one chunk of a
// microbatch at the layer's shapes, in kWorkspace, then its phases through
// its device ops.
//
// Not a kernel and not a test: the values are deterministic patterns of the
// sizes a layer produces; the outputs are not read.
//
//   SF_ASSIGN_OR_RETURN(auto runner, family->phases<float>()(model, alloc, B, s, st_tile));
//   for (CorePhase p : kCorePhases) runner->Run(p, /*backward=*/false);
#pragma once

#include <cstdint>
#include <vector>

#include "backend/kernels/core_phase.h"
#include "backend/tensor.h"

namespace stateflow::backend {

template <typename T>
class CorePhaseRunner {
 public:
  virtual ~CorePhaseRunner() = default;
  // Phase `phase` of the forward (backward: `backward`) over every sequence
  // of the microbatch; run in the order kPre, kST, kOut (the backward after
  // the forward), the phases give the whole core's results.
  virtual void Run(CorePhase phase, bool backward) = 0;
};

// Deterministic values in [lo, hi], never denormal (a denormal input would
// slow the kernels down and time something no run does).
template <typename T>
void FillRange(Tensor<T>* t, std::uint64_t seed, double lo, double hi) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<T> host(static_cast<std::size_t>(t->numel()));
  for (std::int64_t e = 0; e < t->numel(); ++e) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const double u = static_cast<double>((x * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
    host[static_cast<std::size_t>(e)] = static_cast<T>(lo + (hi - lo) * u);
  }
  t->FromHost(host);
}

// Values in [-scale, scale].
template <typename T>
void FillPattern(Tensor<T>* t, std::uint64_t seed, double scale) {
  FillRange(t, seed, -scale, scale);
}

// Sequence b's part of a (B rows, w) buffer of `rows` rows per sequence;
// nullptr for an empty (unused) tensor.
template <typename T>
T* SequencePart(Tensor<T>& t, std::int64_t b, std::int64_t rows, std::int64_t w) {
  return t.numel() == 0 ? nullptr : t.data() + b * rows * w;
}

}  // namespace stateflow::backend

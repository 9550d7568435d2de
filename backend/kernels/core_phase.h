// The three phases of a chunkwise recurrence core (the paper's Pre / ST /
// Out), named so that a caller can run a core one phase at a time: the
// profiler times each phase separately (each family's *CoreForwardPhase and
// *CoreBackwardPhase: gdn_core.h, mamba3_core.h, kda_core.h, and their
// device ops; layers/core_phases.h) so that a replay can predict the
// split-and-overlap time from sequential measurements (docs/cost-model.md,
// section 2, "State transition"). Every family names its phases with this
// one enum; the roles below are GDN's (KDA's are the same), Mamba-3's are in
// mamba3_core.h (the backward's kPre = replay + OutAG, kST = the chain,
// kOut = OutWG).
//
// Forward:  kPre = Pre of every block (G, Gam, KG, W, U), kST = the
//           sequential state chain (V_new, the entering states), kOut = Out
//           of every block.
// Backward: the roles of the cost model's StTiming (models/cost_model.h):
//           kPre = the parallel work before the state-gradient chain (the
//           replay of the entering states, Pre recomputed, V_new, the Out
//           backward), kST = the state-gradient chain (the ST backward,
//           blocks last to first), kOut = the parallel work after it (the
//           Pre backward and the gradient rows).
//
// Not a scheduler: running the phases in order is the sequential core.
//
//   for (CorePhase p : kCorePhases) ops.GdnCoreForwardPhase(p, o, S_out, ws, ...);
#pragma once

namespace stateflow::backend {

enum class CorePhase { kPre, kST, kOut };

inline constexpr CorePhase kCorePhases[] = {CorePhase::kPre, CorePhase::kST,
                                          CorePhase::kOut};

// "pre", "st", "out".
inline const char* CorePhaseName(CorePhase phase) {
  switch (phase) {
    case CorePhase::kPre: return "pre";
    case CorePhase::kST: return "st";
    case CorePhase::kOut: return "out";
  }
  return "?";
}

}  // namespace stateflow::backend

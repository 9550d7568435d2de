// Task ids of the schedule: one action is the forward (F), backward (B) or,
// when backward is split, weight-gradient (W) pass of chunk `chunk` of
// microbatch `microbatch` on pipeline stage `stage`.
//
// Text form (round-trips through ParseAction): "<stage><pass><microbatch>.<chunk>",
// e.g. "2F0.3" is stage 2, forward, microbatch 0, chunk 3. Not a container of
// work: costs and buffers belong to the cost sources, not to the action.
//
//   Action a{.stage = 2, .pass = Pass::kForward, .microbatch = 0, .chunk = 3};
//   assert(ToString(a) == "2F0.3" && *ParseAction("2F0.3") == a);
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace stateflow::schedule {

enum class Pass : std::uint8_t { kForward, kBackward, kWeight };

// 'F', 'B' or 'W'.
char PassLetter(Pass pass);

struct Action {
  int stage = 0;       // r, 0..P-1
  Pass pass = Pass::kForward;
  int microbatch = 0;  // a, 0..M-1
  int chunk = 0;       // i, 0..N-1

  auto operator<=>(const Action&) const = default;
};

std::string ToString(const Action& action);

// Parses the text form; the error names the text and what is wrong with it.
Result<Action> ParseAction(std::string_view text);

// The neighbours of an action in a pipeline of `stages` (P) stages: what
// crosses stages is a forward's activation (stage r to r + 1) and a
// backward's activation gradient (r to r - 1); a boundary state and a
// weight-gradient pass never cross.
//
// InputFrom: the stage whose action of the same pass, microbatch and chunk
// sends this action its input: r - 1 for a forward, r + 1 for a backward;
// none for the first stage's forward, the last stage's backward and a W.
// OutputTo: the stage this action sends its output to: r + 1 for a forward,
// r - 1 for a backward; none for the last stage's forward, the first
// stage's backward and a W.
//
//   InputFrom({.stage = 2, .pass = Pass::kBackward}, 4) == 3
//   OutputTo({.stage = 3, .pass = Pass::kForward}, 4) == std::nullopt
//
// REQUIRES: 0 <= action.stage < stages.
// (Inline: the engine asks at every event.)
inline std::optional<int> InputFrom(const Action& action, int stages) {
  if (action.pass == Pass::kForward && action.stage > 0) return action.stage - 1;
  if (action.pass == Pass::kBackward && action.stage + 1 < stages) return action.stage + 1;
  return std::nullopt;  // the first stage's forward, the last's backward, any W
}
inline std::optional<int> OutputTo(const Action& action, int stages) {
  if (action.pass == Pass::kForward && action.stage + 1 < stages) return action.stage + 1;
  if (action.pass == Pass::kBackward && action.stage > 0) return action.stage - 1;
  return std::nullopt;  // the last stage's forward, the first's backward, any W
}

}  // namespace stateflow::schedule

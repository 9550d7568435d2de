// The tiny presets of every registered recurrent family (models/family.h):
// "<family>-tiny" and "<family>-hybrid-tiny" (3 recurrence layers to 1
// softmax-attention layer), in registration order, so that a test over
// "every family" covers a new family without being edited.
// tests/models/presets_test.cc checks that every family has both. Then the
// tiny presets of a family's other configurations: deltanet-tiny (gdn
// without decay, LayerNorm, GELU, biases).
//
//   for (const std::string& preset : TinyFamilyPresets()) { ... }
#pragma once

#include <string>
#include <vector>

#include "models/family.h"

namespace stateflow::testing {

// [gdn-tiny, gdn-hybrid-tiny, mamba3-tiny, mamba3-hybrid-tiny, kda-tiny, ...,
// deltanet-tiny];
// only the recurrent ones when `hybrids` is false.
inline std::vector<std::string> TinyFamilyPresets(bool hybrids = true) {
  std::vector<std::string> out;
  for (const models::Family* f : models::Families()) {
    out.push_back(std::string(f->name()) + "-tiny");
    if (hybrids) out.push_back(std::string(f->name()) + "-hybrid-tiny");
  }
  out.push_back("deltanet-tiny");
  return out;
}

}  // namespace stateflow::testing

// The buffer classes of the memory ledger, shared by the simulator's memory
// model and the backend's tracking allocator so that both count the same
// things (ARCHITECTURE.md, invariant 3). Names are the strings reports use.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace stateflow {

enum class BufferClass : int {
  kWeights = 0,
  kGradients,
  kOptimizerState,
  kActivations,     // tensors saved by forward for backward
  kBoundaryStates,  // recurrent state and conv tail handed between chunks
  kKvBuffers,       // sequence-wide K/V of softmax-attention layers
  kWorkspace,       // transient: lives within one action
  kLogits,          // output-layer logits (a vocabulary slice at a time)
};

inline constexpr int kNumBufferClasses = 8;

inline constexpr std::array<std::string_view, kNumBufferClasses>
    kBufferClassNames = {"weights",         "gradients",  "optimizer_state",
                         "activations",     "boundary_states", "kv_buffers",
                         "workspace",       "logits"};

inline std::string_view BufferClassName(BufferClass c) {
  return kBufferClassNames[static_cast<int>(c)];
}

inline std::optional<BufferClass> ParseBufferClass(std::string_view name) {
  for (int i = 0; i < kNumBufferClasses; ++i) {
    if (kBufferClassNames[i] == name) return static_cast<BufferClass>(i);
  }
  return std::nullopt;
}

}  // namespace stateflow

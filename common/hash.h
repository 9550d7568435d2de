// FNV-1a 64: a fast, stable hash of bytes for identities that must not
// change between builds or machines (a checkpoint's model, plan and data;
// its checksum). Not cryptographic.
//
//   const std::uint64_t id = Fnv1a64(text);
#pragma once

#include <cstdint>
#include <string_view>

namespace stateflow {

inline std::uint64_t Fnv1a64(std::string_view bytes) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace stateflow

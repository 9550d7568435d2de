// Whether this test program is built with a sanitizer (scripts/build.sh
// --sanitize: address and undefined behaviour; or SF_TSAN), and the subset
// of a heavy case that such a build runs.
//
// The sanitizer build looks for memory and undefined-behaviour errors: a code
// path run once finds what running it eight times finds. So the heaviest
// cases (those that repeat one path over many shapes, seeds or inputs) run a
// covering subset there, still taking every code path (every family, both
// branches of each option), and the Release build runs them in full. Each
// such case says what its subset is. Measured: docs/performance.md, "Build
// and test time (CI)".
//
//   for (int P : SanitizedOr<int>({1, 2, 3}, {3})) { ... }
//   const long inputs = kSanitized ? kDefaultInputs / 10 : kDefaultInputs;
#pragma once

#include <vector>

namespace stateflow::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// `all` in a Release build, `subset` under a sanitizer.
template <typename T>
std::vector<T> SanitizedOr(std::vector<T> all, std::vector<T> subset) {
  return kSanitized ? subset : all;
}

}  // namespace stateflow::testing

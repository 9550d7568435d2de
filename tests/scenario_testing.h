// Test helper: a scenario built in a test, resolved (scenario/resolve.h) so
// that it can be handed to the simulator, the sweep or the backend.
//
//   Result<Simulation> sim = Simulate(MustResolve(TinyScenario()), spec);
#pragma once

#include <cstdio>
#include <cstdlib>

#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"

namespace stateflow::testing {

// REQUIRES: `s` resolves; a test scenario that does not is a bug in the
// test, reported with Resolve's message before the test binary aborts.
inline scenario::ResolvedScenario MustResolve(pb::Scenario s) {
  Result<scenario::ResolvedScenario> r = scenario::Resolve(std::move(s));
  if (!r.ok()) {
    std::fprintf(stderr, "test scenario does not resolve: %s\n", r.status().message().c_str());
    std::abort();
  }
  return std::move(r).value();
}

}  // namespace stateflow::testing

// What a simulated step is made of, term by term (`stateflow simulate
// --explain`): the analytic cost model's terms (models/cost_model.h,
// PassTerms) of one layer of each kind over one microbatch, and of each
// stage's busy time over the step, beside the engine's gradient sync,
// optimizer step and idle time.
//
// Not a second cost model: every term is the one the analytic cost source
// summed into the action durations the engine ran, so a stage's terms add
// up to its busy time (checked: a mismatch is an internal error).
//
//   Result<Simulation> sim = Simulate(resolved, resolved.proto().schedule());
//   Result<pb::Explanation> why = Explain(*sim);
#pragma once

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "sim/simulation.h"

namespace stateflow::sim {

// The terms of `sim`'s schedule. Error (one line) when its times did not come
// from the analytic model: the uniform model's units, a replayed cost table's
// and a real run's times are measured or given wholes, without terms.
Result<pb::Explanation> Explain(const Simulation& sim);

}  // namespace stateflow::sim

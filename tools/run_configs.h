// The configurations `stateflow profile` and `stateflow validate` cover: the
// scenario's schedule and baselines, or the grid of sweep list flags crossed
// with recompute modes, each one schedule at M microbatches of T tokens.
//
// Not the measuring (tools/profiling.h) nor the comparison (sim/validation.h).
//
//   SF_ASSIGN_OR_RETURN(std::vector<RunConfig> configs, ConfigsFor(scenario, flags.configs, false));
//   for (const RunConfig& c : configs) Run(ScenarioFor(scenario, c));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "tools/sweep_options.h"

namespace stateflow::tools {

// One configuration: a schedule (policy, N, alpha, recompute) at M
// microbatches of T tokens.
struct RunConfig {
  pb::ScheduleSpec schedule;
  int microbatches = 1;       // M
  std::int64_t seq_len = 1;   // T
};

// "stateflow N=4 M=8 T=256 recompute full" (alpha when not 0).
std::string ConfigName(const RunConfig& config);

// The scenario narrowed to `config`: its schedule, no baselines and no
// sweep, M and T set, resolved again (a backend run of it then takes
// scenario::ForBackendRun).
Result<scenario::ResolvedScenario> ScenarioFor(const scenario::ResolvedScenario& scenario,
                                               const RunConfig& config);

// The list flags (--policies, --chunks-list, --alpha-list,
// --microbatches-list, --seq-len-list, --global-batch-list as in
// `stateflow sweep`, and --recompute-list none,full).
struct ConfigFlags {
  SweepFlags sweep;
  std::optional<std::string> recompute;
  bool any() const;
};
void AddConfigOptions(boost::program_options::options_description* desc, ConfigFlags* flags);

// Without list flags: the scenario's schedule and each baseline, at its M
// and T. With them: the grid sim::ExpandSweep makes of the scenario's sweep
// ranges with the flags applied (1f1b gets N = 1), crossed with
// --recompute-list (else each schedule keeps its mode). `with_sweep` adds
// the grid of the scenario's own sweep ranges even without flags (what
// `profile` measures for). Errors name the flag or sweep field.
Result<std::vector<RunConfig>> ConfigsFor(const scenario::ResolvedScenario& scenario,
                                          const ConfigFlags& flags, bool with_sweep);

// "none,full" -> {"none", "full"} (each once, in order); errors name
// --recompute-list.
Result<std::vector<std::string>> RecomputeModes(const std::string& text);

}  // namespace stateflow::tools

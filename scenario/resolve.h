// A resolved scenario: the one input both executors accept. Resolution merges
// the model and cluster presets (fields set in the scenario win), fills the
// defaults (TP, DP and microbatch size 1; policy stateflow; chunks 1;
// granularity 128; recompute none; cost model analytic) and checks every
// field the executors rely on, naming the field at fault.
//
// Not the configuration of one run (configure.h) and not file reading
// (load.h). A ResolvedScenario can only be made by Resolve or by its With*
// methods, which keep it resolved; so a function that takes one never has to
// say "REQUIRES: resolved".
//
//   SF_ASSIGN_OR_RETURN(ResolvedScenario s, Resolve(std::move(raw)));
//   SF_ASSIGN_OR_RETURN(ResolvedScenario longer, s.WithSeqLen(131072));
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::scenario {

class ResolvedScenario;

// Presets merged, defaults filled, every field checked.
Result<ResolvedScenario> Resolve(pb::Scenario scenario);

class ResolvedScenario {
 public:
  // The resolved fields; never an unresolved scenario.
  const pb::Scenario& proto() const { return scenario_; }

  int stages() const { return static_cast<int>(scenario_.parallel().pipeline_size()); }  // P
  int microbatches() const { return static_cast<int>(scenario_.parallel().microbatches()); }  // M
  std::int64_t seq_len() const { return static_cast<std::int64_t>(scenario_.seq_len()); }  // T

  // Copies with one thing changed, checked as Resolve checks it. Errors name
  // the field ("seq_len must be >= 1", "parallel.microbatches must be >= 1").
  Result<ResolvedScenario> WithSeqLen(std::int64_t seq_len) const;
  Result<ResolvedScenario> WithMicrobatches(std::int64_t microbatches) const;
  // The schedule under study replaced (defaults filled, checked as
  // "schedule"); the baselines are kept.
  Result<ResolvedScenario> WithSchedule(pb::ScheduleSpec schedule) const;
  // P, TP, DP, M and microbatch size replaced, with Resolve's defaults and
  // checks (the model's heads must divide by TP, P must not exceed the
  // layers, ...).
  Result<ResolvedScenario> WithParallel(const pb::ParallelSpec& parallel) const;

 private:
  friend Result<ResolvedScenario> Resolve(pb::Scenario scenario);
  explicit ResolvedScenario(pb::Scenario scenario) : scenario_(std::move(scenario)) {}

  pb::Scenario scenario_;
};

// The scenario of one run of the backend, built one way for every caller
// (the trainer's setup, train's memory check, validate's and profile's
// runs): the precision of the run's element type `dtype` (float32, float64
// or bf16: models::PrecisionForDtype; empty: float32) and, when `device` is
// not empty, train.device the run's (whose recurrence-core
// scratch the memory model counts: models/placement.cc), and no baselines or
// sweep. Errors: an unknown dtype, naming train.dtype.
Result<ResolvedScenario> ForBackendRun(const ResolvedScenario& scenario, std::string_view dtype,
                                       std::string_view device);

// Fills a schedule's defaults (policy stateflow, chunks 1, granularity 128,
// recompute none) and checks it; `field` prefixes the messages ("schedule",
// "baselines[0]").
Result<pb::ScheduleSpec> ResolveSchedule(pb::ScheduleSpec schedule, std::string_view field);

// Checks one schedule without filling anything; messages as ResolveSchedule's.
Status ValidateSchedule(const pb::ScheduleSpec& schedule, std::string_view field);

}  // namespace stateflow::scenario

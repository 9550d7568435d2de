// Search over the configurations of one scenario: the cross product of a
// SweepSpec's ranges (policies, sequence lengths, global batches or
// microbatch counts, chunk counts N, partitions alpha), each simulated,
// grouped into cells (policy x sequence length x global batch), and in each
// cell the best feasible configuration: StateFlow's profile-guided choice of
// (N, alpha), made on the simulator.
//
// Not printing (tools/sweep_command.cc) and not the choice of P, TP and DP
// (sim/capacity_plan.h).
//
//   Result<pb::SweepReport> r = RunSweep(scenario, scenario.sweep());
//   const pb::SweepRun& best = r->runs(r->cells(0).best_run());  // if >= 0
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "sim/cost_table.h"

namespace stateflow::sim {

// One configuration of a sweep.
struct SweepConfig {
  std::string policy;
  std::int64_t seq_len = 0;  // T, tokens per sequence
  int global_batch = 0;      // sequences per step: M * microbatch_size * DP
  int microbatches = 0;      // M
  int chunks = 1;            // N
  double alpha = 0;
  bool st_overlap = false;   // split-and-overlap of the recurrence core
  int st_tile = 0;           // B_V; 0 keeps the schedule's (64 when it has none)
  int virtual_stages = 1;    // v (interleaved: swept; zbv: 2; else 1)
};

// The configurations of a sweep in run order (policy, then sequence length,
// then global batch, then v, then N, then ST overlap, then ST tile, then
// alpha, each in the order listed), so that each cell's runs are contiguous;
// and a sentence for each thing the expansion decided on its own (ranges
// collapsed, interleaved shapes skipped because M N is not a multiple of P).
struct SweepGrid {
  std::vector<SweepConfig> configs;
  std::vector<std::string> notes;
};

struct SweepOptions {
  // Called after each configuration (simulated or reused) with the number
  // done so far and the total. May be empty.
  std::function<void(std::size_t done, std::size_t total)> progress;
  // Replay these measured costs (cost_table.h) instead of the scenario's
  // cost model: every configuration's chunks must be in the table (an error
  // names the missing one). Not owned; may be null.
  const CostTableIndex* costs = nullptr;
};

// Checks the ranges against a resolved scenario. Messages name the field and
// index: "sweep.alpha[3] must be >= 0 (got -0.5)", "sweep.chunks[0] must be
// >= 1", "sweep.global_batch[1] (6) must be divisible by
// parallel.microbatch_size * parallel.data_size (4)", "sweep.policies[1]:
// unknown 'zigzag' (known: ...)", "sweep.chunks[2] repeats 8",
// "sweep.st_tile[0] must be in [1, 4096] (got 0)", and "sweep: set
// global_batch or microbatches, not both".
Status ValidateSweep(const scenario::ResolvedScenario& scenario, const pb::SweepSpec& sweep);

// The grid of a validated sweep. An empty range keeps the scenario's own
// value: policies = the schedule's and the baselines' policies; seq_len =
// scenario.seq_len; the batch = parallel.microbatches; N and alpha = those of
// the policy's schedule (ScheduleFor). `1f1b` always gets N = 1 and
// alpha = 0 only. A model without softmax-attention layers gets only the
// first listed alpha (its FLOP-balanced partition is the equal one, so every
// alpha gives the same chunks), with a note saying so. st_overlap and st_tile
// (empty: the policy's schedule's) are swept for every policy; on a device
// without compute_units they change nothing (the ST model is off), so only
// the first listed value of each is simulated, with a note saying so.
Result<SweepGrid> ExpandSweep(const scenario::ResolvedScenario& scenario,
                              const pb::SweepSpec& sweep);

// The schedule a sweep simulates for `config`: the scenario's schedule if
// its policy matches, else the first baseline with that policy, else the
// scenario's schedule with the policy replaced; then N and alpha from
// `config`, and st_overlap and st_tile (when not 0). (Recompute mode and
// granularity come from that schedule.)
pb::ScheduleSpec ScheduleFor(const scenario::ResolvedScenario& scenario,
                             const SweepConfig& config);

// Runs a sweep. Each configuration is configured with
// scenario::ConfigurePlaced and simulated with SimulateConfigured, the
// placement (cost model and stage assignment) being made once per (sequence
// length, recompute mode, system, ST overlap, ST tile); a run
// whose rounded chunk boundaries equal an earlier run's of the same cell and
// N (alphas that rounding saturates) copies that run's result (`reused`).
// Errors (bad ranges, a length that cannot be cut into N chunks) name the
// field or the configuration.
Result<pb::SweepReport> RunSweep(const scenario::ResolvedScenario& scenario,
                                 const pb::SweepSpec& sweep, const SweepOptions& options = {});

// The order that picks a cell's best run among feasible (non-OOM) runs:
// higher tokens/s; on a tie, lower peak memory, then fewer chunks, then
// smaller alpha, then overlap off, then smaller ST tile, then policy name.
// True if `a` comes before `b`.
bool BetterRun(const pb::SweepRun& a, const pb::SweepRun& b);

// "stateflow T=65536 GBS=8 N=4 alpha=0.5", to name a configuration, with
// " st_overlap=on" and " st_tile=32" when set.
std::string ConfigLabel(const SweepConfig& config);

}  // namespace stateflow::sim

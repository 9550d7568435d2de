// Capacity planning: for a model, a sequence length, a global batch and a
// number of devices of one cluster kind, every split of the devices into
// P pipeline stages x TP tensor-parallel ranks x DP data-parallel replicas,
// checked against the rules that make a split legal, and each legal one
// swept over (N, alpha) (sim/search.h) to find its fastest configuration
// that fits in memory. Rejected splits say why.
//
// Not printing (tools/capacity_plan_command.cc) and not a search over
// sequence lengths or batches (those are fixed by the question).
//
//   Result<pb::CapacityPlanReport> r = PlanCapacity(scenario, {.devices = 32,
//       .seq_len = 262144, .global_batch = 8});
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/stateflow.pb.h"
#include "sim/search.h"

namespace stateflow::sim {

struct CapacityPlanRequest {
  int devices = 0;            // P * TP * DP
  std::int64_t seq_len = 0;   // T
  int global_batch = 0;       // sequences per step
  // Chunk counts, alphas and policies to try per split (its other ranges are
  // ignored). Empty chunks: the paper's {2, 4, 6, 8, 16, 32}; empty alpha:
  // {0, 0.1, ..., 1.0, 1.25}; empty policies: {"1f1b", "stateflow"}. Chunk counts
  // that cannot cut seq_len at the schedule's granularity are dropped (noted).
  pb::SweepSpec sweep;
  // CP degrees to try beside P, TP and DP (devices = P x TP x CP x DP);
  // empty: CP 1 only.
  std::vector<int> context_sizes;
};

// Why the split P x TP x DP is illegal for `scenario`'s model and cluster, or
// "" if it is legal. The rules, checked in this order:
//   TP <= cluster.devices_per_node and TP divides it (a TP group stays in
//   one node); recurrence heads, attention heads and K/V heads divisible by
//   TP (models::ValidateModel); P <= model.num_layers (every stage holds a
//   block); global batch divisible by DP * microbatch size.
std::string SplitRejection(const pb::Scenario& scenario, int stages, int tensor_size,
                           int data_size, int global_batch);

// Checks the request (devices >= 1 and, when they span more than one node, a
// multiple of cluster.devices_per_node; seq_len >= 1; global_batch >= 1; the
// sweep ranges) and plans. The scenario's parallel P/TP/DP/M are replaced
// per split; its microbatch size, schedule (recompute, granularity),
// precision and cost model are kept. Candidates come
// feasible-first by BetterRun on their best runs, then OOM, then illegal,
// each group in (P, TP) order otherwise.
Result<pb::CapacityPlanReport> PlanCapacity(const scenario::ResolvedScenario& scenario,
                                            const CapacityPlanRequest& request,
                                            const SweepOptions& options = {});

}  // namespace stateflow::sim

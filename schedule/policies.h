// Issue policies: the plans the schedule core makes by name (GPipe, 1F1B,
// StateFlow's 1F1B over chunk units, interleaved, zero-bubble).
//
// Not the validator (validator.h): a policy's plan is valid by construction,
// and the tests prove it against the precedence rules.
//
//   Result<Plan> plan = MakePlan("stateflow", /*P=*/4, /*M=*/2, /*N=*/3);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "schedule/plan.h"

namespace stateflow::schedule {

// The issue policies, by name:
//   "gpipe":     all forwards in (microbatch, chunk) order, then all
//                backwards, microbatch by microbatch, last chunk first.
//   "1f1b":      conventional 1F1B over whole-sequence microbatches;
//                requires chunks == 1.
//   "stateflow": 1F1B over the M*N chunk units: stage r runs
//                min(M*N, N + P - r - 1) forwards, then alternates one
//                backward and one forward; forwards in (microbatch, chunk)
//                order; backwards per microbatch from the last chunk to the
//                first. With N = 1 it is 1f1b.
//   "interleaved": interleaved 1F1B (Megatron-Core's virtual pipeline) over
//                the M*N chunk units with `virtual_stages` v model stages
//                per stage, placed in a loop (model stage c P + r on stage
//                r; policies.cc says the order); needs M*N a multiple of P.
//                With v = 1 it is stateflow's order.
//   "zb-h1":     the zero-bubble paper's ZB-H1 over the M*N chunk units:
//                stateflow's F and B order, each backward split into B
//                (input gradient, including the boundary-state gradient)
//                and W (weight gradients), stage r holding back its first r
//                W passes to the end (policies.cc). Peak: N + P - 1 units
//                waiting for their W, stateflow's first stage's. At
//                F = B = W each stage idles (P - 1) (F + B - W) inside its
//                span (N = 1: the paper's, a third of 1F1B's).
//   "zb-h2":     ZB-H2 over chunk units: up to N + 2 (P - 1) units waiting
//                for their W (twice 1F1B's activations at N = 1), B first,
//                W passes where no F may run; made by the greedy executor
//                at F = B = W, where each stage's span has no bubble.
//   "zbv":       the zero-bubble paper's ZBV over chunk units: two model
//                stages per stage placed in a V (model stages r and 2P-1-r
//                on stage r), the backward split; made by the greedy
//                executor at F = B = W with at most 2 (N + P - 1)
//                model-stage units waiting for their W on any stage
//                (1F1B's activations; policies.cc states the rule). Needs
//                virtual_stages = 2.
//   "zb-interleaved": interleaved zero bubble over chunk units: v model
//                stages per stage in a loop (as "interleaved"), the
//                backward split; made by the greedy executor at F = B = W
//                with at most v (N + P - 1) model-stage units waiting for
//                their W on any stage (1F1B's activations; policies.cc
//                states the rule). Any M and N; v >= 1 (default 2).
// Errors name the field: unknown policy (listing the known ones), stages,
// microbatches or chunks < 1, microbatches * chunks > kMaxUnitsPerStage,
// 1f1b with chunks != 1, virtual_stages != 1 for a policy but interleaved,
// zb-interleaved and zbv, virtual_stages != 2 for zbv,
// interleaved with M*N not a multiple of P.
Result<Plan> MakePlan(std::string_view policy, int stages, int microbatches,
                      int chunks, int virtual_stages = 1);

// MakePlan's checks of the dimensions: stages, microbatches and chunks >= 1
// and microbatches * chunks <= kMaxUnitsPerStage, the error naming the field
// ("chunks (schedule.chunks) must be >= 1, got 0").
Status CheckPlanDimensions(int stages, int microbatches, int chunks);

// The names MakePlan accepts.
const std::vector<std::string>& PolicyNames();

// The rule that a whole-sequence policy ("1f1b") runs one chunk per
// microbatch, in one place: every room that fills in or checks a schedule
// asks these.
//   WholeSequencePolicy: whether `policy` takes whole-sequence microbatches.
//   ChunksFor: the chunk count a schedule of `policy` runs when `requested`
//     (the flag, row or spec; nullopt: not given) says so: 1 for a
//     whole-sequence policy given none, else `requested` (or `fallback`).
//   CheckPolicyChunks: Ok, or "<field> must be 1 for policy 1f1b
//     (whole-sequence microbatches), got N; ..." naming `field`.
bool WholeSequencePolicy(std::string_view policy);
// The virtual stages a policy runs when none are asked for: 2 for "zbv"
// (its V) and "zb-interleaved", else 1.
int DefaultVirtualStages(std::string_view policy);
// Whether a policy takes any v (a sweep's range applies to it):
// "interleaved" and "zb-interleaved". zbv's is fixed at 2, the others' at 1.
bool VirtualStagesFree(std::string_view policy);
// Where a policy places its model stages: the V for "zbv", else the loop.
StagePlacement PolicyPlacement(std::string_view policy);
std::optional<long long> ChunksFor(std::string_view policy, std::optional<long long> requested);
Status CheckPolicyChunks(std::string_view policy, long long chunks, std::string_view field);

// The number of forwards stage r of the "stateflow" policy runs before its
// first backward: min(M N, N + P - r - 1) (for "1f1b", N = 1: min(M, P - r)).
// REQUIRES: stages, microbatches, chunks >= 1 and 0 <= stage < stages.
int StateflowWarmupForwards(int stages, int microbatches, int chunks, int stage);

}  // namespace stateflow::schedule

// Plans to and from torch.distributed.pipelining's schedule CSV ("compute
// only" format, as its PipelineScheduleMulti._dump_csv writes and _load_csv
// reads): one row per rank, one cell per step, each cell an action's text
// `<stage><type><microbatch>` (torch's _Action: "0F3", "1I0", "2W1", "1B2"),
// an empty cell for a step where the rank idles.
//
// Mapping (stated in docs/usage.md, plan-dump):
//   - torch's microbatch m is our unit (microbatch a, chunk i) with
//     m = a N + i: with N = 1 (torch's own case) it is the microbatch;
//   - torch's F is our F; its full backward B is our B; its I (input
//     gradient) is our B of a plan with W actions, its W our W. A plan
//     whose backwards are written B and that has W actions reads each B as
//     an I (the CSVs torch's own tests keep, e.g. zb1p_2rank_2stagep, write
//     the input-gradient backward B beside W); the validator then checks
//     that every backward has its W or none has;
//   - torch's stage is our model stage. With P rows (ranks) and S model
//     stages (the highest named + 1), each rank holds v = S / P of them, as
//     torch's multi-stage schedules place them: stage s on rank s mod P (a
//     loop: Interleaved1F1B, InterleavedZeroBubble; our policy interleaved)
//     or, at v = 2, stages r and 2P - 1 - r on rank r (a V: ZBVZeroBubble,
//     DualPipeV; our policy zbv). The plan carries v and the placement.
// Torch's communication and sharding actions (SEND_F, RECV_F, SEND_B,
// RECV_B, UNSHARD, RESHARD: the "compute_comms" format) are implied by our
// plans and skipped on import.
//
//   std::string csv = PlanToTorchCsv(plan);
//   Result<Plan> back = ParseTorchCsv(csv, "zb.csv", /*chunks=*/1, "zb-h1");
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "schedule/plan.h"

namespace stateflow::schedule {

// The CSV (each row ends with "\n", no header). A backward is written "I"
// when the plan has W actions, else "B".
std::string PlanToTorchCsv(const Plan& plan);

// Parses the CSV into a plan of `chunks` chunks per microbatch (M = the
// largest microbatch named plus one, divided by `chunks`), named `policy`.
// Errors (kInvalidInput) name "<source>:<row>:<cell>" (1-based) and what is
// wrong: an action that is not torch's grammar, a stage count that is not a
// multiple of the rows, a stage on a rank that neither placement puts it
// on, a microbatch count that `chunks` does not divide, a plan writing
// backwards both B and I, no rows. Not validated:
// ValidatePlan says whether the order is legal.
Result<Plan> ParseTorchCsv(std::string_view text, std::string_view source, int chunks,
                           std::string_view policy = "torch");

// Whether `text` looks like the CSV rather than our text form (its first
// non-blank line does not start with "plan" or '#').
bool LooksLikeTorchCsv(std::string_view text);

}  // namespace stateflow::schedule

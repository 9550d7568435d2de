// Bounded work: every command estimates the largest plan it will build, and
// the simulator's memory for it, before building anything, and refuses a
// plan above --max-actions or one whose estimated memory exceeds this
// machine's, with one line naming the limit and the flag that raises it.
//
// A plan has 2 P M N actions (a forward and a backward of every chunk of
// every microbatch on every stage); a sweep's largest configuration has the
// largest P, M and N of its ranges. The simulator's memory grows linearly
// in the actions: kSimBytesPerAction each plus kSimBaseBytes, fitted to peak
// RSS of `stateflow simulate` on gdn-32b plans of 1 M to 21 M actions
// (docs/reliability.md, "Bounded work").
//
// Not a memory limit on the backend's tensors (the tracking allocator's
// capacity does that).
//
//   SF_RETURN_IF_ERROR(CheckPlanBounds(resolved.proto(), nullptr, flags.max_actions));
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::tools {

inline constexpr std::int64_t kDefaultMaxActions = 50'000'000;
inline constexpr std::int64_t kMaxMaxActions = std::int64_t{1} << 40;
inline constexpr double kSimBytesPerAction = 24;
inline constexpr double kSimBaseBytes = 64.0 * (1 << 20);
// Runs in one calibration's CSV: each is a scenario held for the whole fit
// (a few KiB), and every evaluation simulates them all.
inline constexpr std::size_t kMaxCalibrationRuns = 10'000;
// `stateflow train`'s host memory outside the tensors the memory model
// counts, per action of its plan in each process: the step's per-action
// records (the stages' timelines, gathered for the report) and the plan.
// Measured (docs/reliability.md, "Bounded work"): 672 bytes per action in
// one process (gdn-tiny, P = 2, N = 4, M = 2000 to 6000), 480 on rank 0
// under mpirun; this bound keeps a margin above both.
inline constexpr double kTrainHostBytesPerAction = 1024;

// 1280000000 as "1,280,000,000".
std::string Count(std::int64_t v);

struct PlanEstimate {
  std::int64_t stages = 1, microbatches = 1, chunks = 1;  // of the largest plan
  std::int64_t actions = 0;                               // 2 P M N
  double sim_bytes = 0;                                   // the simulator's estimate
};

// The largest plan of `scenario` (its schedule and baselines) and, if given,
// of every configuration of `sweep`. All in 64 bits: no product wraps.
PlanEstimate EstimateLargestPlan(const pb::Scenario& scenario, const pb::SweepSpec* sweep);

// Errors (kInvalidInput, one line): the largest plan has more actions than
// `max_actions` (default kDefaultMaxActions), or the simulator's estimate
// exceeds `memory_bytes` (default: this machine's physical memory).
Status CheckPlanBounds(const pb::Scenario& scenario, const pb::SweepSpec* sweep,
                       std::optional<long long> max_actions,
                       std::optional<double> memory_bytes = std::nullopt);

}  // namespace stateflow::tools

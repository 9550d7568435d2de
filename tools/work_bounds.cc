#include "tools/work_bounds.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "models/limits.h"

namespace stateflow::tools {
namespace {

double MachineMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_bytes > 0 ? static_cast<double>(pages) * page_bytes : 0;
}


std::string GiB(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / (1 << 30));
  return buf;
}

}  // namespace

std::string Count(std::int64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t k = 0; k < digits.size(); ++k) {
    if (k > 0 && (digits.size() - k) % 3 == 0) out += ',';
    out += digits[k];
  }
  return out;
}

PlanEstimate EstimateLargestPlan(const pb::Scenario& scenario, const pb::SweepSpec* sweep) {
  const pb::ParallelSpec& par = scenario.parallel();
  PlanEstimate e;
  e.stages = std::max<std::int64_t>(1, par.pipeline_size());
  e.microbatches = std::max<std::int64_t>(1, par.microbatches());
  e.chunks = std::max<std::int64_t>(1, scenario.schedule().chunks());
  for (const pb::ScheduleSpec& b : scenario.baselines()) {
    e.chunks = std::max<std::int64_t>(e.chunks, b.chunks());
  }
  // Values out of their field's range are left to that field's own check
  // (a clearer message than the plan's size).
  auto in = [](std::int64_t v, const models::IntRange& r) { return v >= r.lo && v <= r.hi; };
  if (sweep != nullptr) {
    for (std::uint32_t n : sweep->chunks()) {
      if (in(n, models::kChunks)) e.chunks = std::max<std::int64_t>(e.chunks, n);
    }
    for (std::uint32_t m : sweep->microbatches()) {
      if (in(m, models::kMicrobatches)) e.microbatches = std::max<std::int64_t>(e.microbatches, m);
    }
    // A global batch is M x microbatch size x data parallel size.
    const std::int64_t per_microbatch = std::max<std::int64_t>(1, par.microbatch_size()) *
                                        std::max<std::int64_t>(1, par.data_size());
    for (std::uint32_t g : sweep->global_batch()) {
      if (!in(g, models::kGlobalBatch)) continue;
      e.microbatches = std::max<std::int64_t>(e.microbatches, (g + per_microbatch - 1) /
                                                                  per_microbatch);
    }
  }
  // Each factor is below 2^32: the product of three fits in a double exactly
  // enough to compare, and in 64 bits when it is below 2^62.
  const double actions = 2.0 * e.stages * e.microbatches * e.chunks;
  e.actions = actions < 4.6e18 ? static_cast<std::int64_t>(actions) : INT64_MAX;
  e.sim_bytes = kSimBaseBytes + kSimBytesPerAction * actions;
  return e;
}

Status CheckPlanBounds(const pb::Scenario& scenario, const pb::SweepSpec* sweep,
                       std::optional<long long> max_actions, std::optional<double> memory_bytes) {
  if (max_actions && (*max_actions < 1 || *max_actions > kMaxMaxActions)) {
    return Status::Invalid("--max-actions must be in [1, 2^40] (got " +
                           std::to_string(*max_actions) + ")");
  }
  const PlanEstimate e = EstimateLargestPlan(scenario, sweep);
  const std::int64_t limit = max_actions.value_or(kDefaultMaxActions);
  const std::string plan = std::string(sweep != nullptr ? "the sweep's largest plan" : "the plan") +
                           " (P = " + std::to_string(e.stages) + ", M = " +
                           std::to_string(e.microbatches) + ", N = " + std::to_string(e.chunks) +
                           ") has 2 P M N = " + Count(e.actions) + " actions";
  if (e.actions > limit) {
    return Status::Invalid(plan + ", above the limit of " + Count(limit) +
                           " (--max-actions raises it)");
  }
  const double memory = memory_bytes.value_or(MachineMemoryBytes());
  if (memory > 0 && e.sim_bytes > memory) {
    return Status::Invalid(plan + ": simulating it needs about " + GiB(e.sim_bytes) +
                           ", more than this machine's " + GiB(memory) + " of memory");
  }
  return Status::Ok();
}

}  // namespace stateflow::tools

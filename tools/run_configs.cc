#include "tools/run_configs.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "models/cost_model.h"
#include "scenario/configure.h"
#include "sim/search.h"
#include "tools/cli.h"

namespace stateflow::tools {
namespace {

std::vector<RunConfig> ScheduleAndBaselines(const pb::Scenario& s) {
  std::vector<RunConfig> configs;
  const auto add = [&](const pb::ScheduleSpec& schedule) {
    configs.push_back(RunConfig{schedule, static_cast<int>(s.parallel().microbatches()),
                                static_cast<std::int64_t>(s.seq_len())});
  };
  add(s.schedule());
  for (const pb::ScheduleSpec& b : s.baselines()) add(b);
  return configs;
}

Result<std::vector<RunConfig>> SweepGrid(const scenario::ResolvedScenario& scenario,
                                         const ConfigFlags& flags) {
  pb::SweepSpec sweep = scenario.proto().sweep();
  SF_RETURN_IF_ERROR(ApplySweepFlags(flags.sweep, &sweep));
  SF_ASSIGN_OR_RETURN(sim::SweepGrid grid, sim::ExpandSweep(scenario, sweep));
  std::vector<RunConfig> configs;
  for (const sim::SweepConfig& c : grid.configs) {
    configs.push_back(RunConfig{sim::ScheduleFor(scenario, c), c.microbatches, c.seq_len});
  }
  return configs;
}

// Each configuration once per mode of --recompute-list.
Result<std::vector<RunConfig>> WithModes(std::vector<RunConfig> configs, const ConfigFlags& flags) {
  if (!flags.recompute) return configs;
  SF_ASSIGN_OR_RETURN(std::vector<std::string> modes, RecomputeModes(*flags.recompute));
  std::vector<RunConfig> out;
  for (const RunConfig& c : configs) {
    for (const std::string& mode : modes) {
      RunConfig copy = c;
      copy.schedule.set_recompute(mode);
      out.push_back(std::move(copy));
    }
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> RecomputeModes(const std::string& text) {
  std::vector<std::string> modes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = Trim(item);
    if (!models::ParseRecompute(item).ok() || item.empty()) {
      return Status::Invalid("--recompute-list: '" + item + "' is not none or full");
    }
    if (std::find(modes.begin(), modes.end(), item) == modes.end()) modes.push_back(item);
  }
  if (modes.empty()) return Status::Invalid("--recompute-list is empty (give none, full or both)");
  return modes;
}

std::string ConfigName(const RunConfig& c) {
  std::string name = c.schedule.policy() + " N=" + std::to_string(c.schedule.chunks()) +
                     " M=" + std::to_string(c.microbatches) + " T=" + std::to_string(c.seq_len);
  if (const int v = scenario::VirtualStagesOf(c.schedule); v > 1) name += " v=" + std::to_string(v);
  if (c.schedule.alpha() != 0) {
    char alpha[32];
    std::snprintf(alpha, sizeof(alpha), " alpha=%g", c.schedule.alpha());
    name += alpha;
  }
  const std::string mode = c.schedule.recompute().empty() ? "none" : c.schedule.recompute();
  return name + " recompute " + mode;
}

Result<scenario::ResolvedScenario> ScenarioFor(const scenario::ResolvedScenario& scenario,
                                               const RunConfig& config) {
  pb::Scenario s = scenario.proto();
  *s.mutable_schedule() = config.schedule;
  s.clear_baselines();
  s.clear_sweep();
  s.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(config.microbatches));
  s.set_seq_len(static_cast<std::uint64_t>(config.seq_len));
  return scenario::Resolve(std::move(s));
}

bool ConfigFlags::any() const {
  return sweep.chunks || sweep.alpha || sweep.seq_len || sweep.global_batch || sweep.microbatches ||
         sweep.policies || recompute;
}

void AddConfigOptions(po::options_description* desc, ConfigFlags* flags) {
  AddSweepOptions(desc, &flags->sweep);
  desc->add_options()("recompute-list", Optional(&flags->recompute),
                      "recompute modes, e.g. none,full (each configuration in each)");
}

Result<std::vector<RunConfig>> ConfigsFor(const scenario::ResolvedScenario& scenario,
                                          const ConfigFlags& flags, bool with_sweep) {
  std::vector<RunConfig> configs;
  if (!flags.any() || with_sweep) configs = ScheduleAndBaselines(scenario.proto());
  if (flags.any() || with_sweep) {
    SF_ASSIGN_OR_RETURN(std::vector<RunConfig> grid, SweepGrid(scenario, flags));
    configs.insert(configs.end(), grid.begin(), grid.end());
  }
  return WithModes(std::move(configs), flags);
}

}  // namespace stateflow::tools

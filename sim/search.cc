#include "common/text.h"
#include "sim/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "models/limits.h"
#include "models/model.h"
#include "models/placement.h"
#include "scenario/configure.h"
#include "schedule/plan.h"
#include "schedule/policies.h"
#include "sim/simulation.h"

namespace stateflow::sim {
namespace {

std::string Field(const char* name, int index) {
  return std::string("sweep.") + name + "[" + std::to_string(index) + "]";
}

// "sweep.chunks[3] repeats 8" for the first value listed twice.
template <typename List>
Status NoRepeats(const char* name, const List& values) {
  for (int i = 0; i < values.size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (values[j] == values[i]) {
        return Status::Invalid(Field(name, i) + " repeats " + FormatG(values[i]) + " (also " +
                               Field(name, j) + ")");
      }
    }
  }
  return Status::Ok();
}

// Every value in `range` (models/limits.h), none repeated.
template <typename List>
Status InRange(const char* name, const List& values, const models::IntRange& range) {
  for (int i = 0; i < values.size(); ++i) {
    SF_RETURN_IF_ERROR(models::CheckRange(Field(name, i), values[i], range));
  }
  return NoRepeats(name, values);
}

// microbatch_size * data_size; REQUIRES: a resolved scenario, whose global
// batch (the product with M >= 1) is in kGlobalBatch, so it fits an int.
int BatchDivisor(const pb::Scenario& s) {
  return static_cast<int>(std::uint64_t{std::max(1u, s.parallel().microbatch_size())} *
                          std::max(1u, s.parallel().data_size()));
}

Status ValidatePolicies(const pb::SweepSpec& sweep) {
  const std::vector<std::string>& known = schedule::PolicyNames();
  for (int i = 0; i < sweep.policies_size(); ++i) {
    if (std::find(known.begin(), known.end(), sweep.policies(i)) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Status::Invalid(Field("policies", i) + ": unknown '" + sweep.policies(i) +
                             "' (known: " + list + ")");
    }
  }
  for (int i = 0; i < sweep.policies_size(); ++i) {
    for (int j = 0; j < i; ++j) {
      if (sweep.policies(i) == sweep.policies(j)) {
        return Status::Invalid(Field("policies", i) + " repeats '" + sweep.policies(i) +
                               "' (also " + Field("policies", j) + ")");
      }
    }
  }
  return Status::Ok();
}

bool HasAttention(const pb::ModelSpec& model) {
  for (models::LayerKind kind : models::LayerList(model)) {
    if (kind == models::LayerKind::kAttention) return true;
  }
  return false;
}

std::vector<std::string> PoliciesOf(const pb::Scenario& s, const pb::SweepSpec& sweep) {
  if (sweep.policies_size() > 0) return {sweep.policies().begin(), sweep.policies().end()};
  std::vector<std::string> out = {s.schedule().policy()};
  for (const pb::ScheduleSpec& b : s.baselines()) {
    if (std::find(out.begin(), out.end(), b.policy()) == out.end()) out.push_back(b.policy());
  }
  return out;
}

// (global batch, M) pairs.
std::vector<std::pair<int, int>> BatchesOf(const pb::Scenario& s, const pb::SweepSpec& sweep) {
  const int divisor = BatchDivisor(s);
  std::vector<std::pair<int, int>> out;
  for (std::uint32_t gb : sweep.global_batch()) {
    out.emplace_back(static_cast<int>(gb), static_cast<int>(gb) / divisor);
  }
  for (std::uint32_t m : sweep.microbatches()) {
    out.emplace_back(static_cast<int>(m) * divisor, static_cast<int>(m));
  }
  if (out.empty()) {
    const int m = static_cast<int>(s.parallel().microbatches());
    out.emplace_back(m * divisor, m);
  }
  return out;
}

// The template schedule of a policy (see ScheduleFor).
const pb::ScheduleSpec& TemplateFor(const pb::Scenario& s, const std::string& policy) {
  if (s.schedule().policy() == policy) return s.schedule();
  for (const pb::ScheduleSpec& b : s.baselines()) {
    if (b.policy() == policy) return b;
  }
  return s.schedule();
}

// The SweepRun fields that come from a simulation.
pb::SweepRun RunFromReport(const SweepConfig& config, const pb::ScheduleSpec& schedule,
                           const pb::Report& report) {
  pb::SweepRun run;
  run.set_policy(config.policy);
  run.set_seq_len(static_cast<double>(config.seq_len));
  run.set_global_batch(config.global_batch);
  run.set_microbatches(config.microbatches);
  run.set_chunks(config.chunks);
  run.set_alpha(config.alpha);
  run.set_st_overlap(report.st_overlap());
  run.set_st_tile(report.st_tile());
  run.set_virtual_stages(static_cast<std::uint32_t>(config.virtual_stages));
  run.set_recompute(schedule.recompute());
  run.set_system(report.system());
  run.set_step_time_s(report.step_time_s());
  run.set_tokens_per_s(report.tokens_per_s());
  run.set_bubble_fraction(report.bubble_fraction());
  run.set_peak_memory_bytes(report.peak_memory_bytes());
  run.set_oom(report.oom());
  for (const pb::StageReport& stage : report.stages()) {
    if (stage.peak_memory_bytes() == report.peak_memory_bytes()) {
      run.set_peak_stage(stage.stage());
      run.set_peak_class(stage.peak_dominant_class());
      break;
    }
  }
  run.set_num_tasks(report.num_tasks());
  return run;
}

bool SameCell(const SweepConfig& a, const SweepConfig& b) {
  return a.policy == b.policy && a.seq_len == b.seq_len && a.global_batch == b.global_batch;
}

// Marks the best feasible run of runs[first, end) and records the cell.
void FinishCell(const SweepConfig& config, int first, pb::SweepReport* report) {
  pb::SweepCell* cell = report->add_cells();
  cell->set_policy(config.policy);
  cell->set_seq_len(static_cast<double>(config.seq_len));
  cell->set_global_batch(config.global_batch);
  cell->set_first_run(first);
  cell->set_num_runs(report->runs_size() - first);
  int best = -1;
  for (int i = first; i < report->runs_size(); ++i) {
    const pb::SweepRun& run = report->runs(i);
    if (!run.oom() && (best < 0 || BetterRun(run, report->runs(best)))) best = i;
  }
  cell->set_best_run(best);
  if (best >= 0) report->mutable_runs(best)->set_best(true);
}

// Placements (cost model and stage assignment), one per (sequence length,
// recompute mode, system, ST overlap, ST tile, virtual stages): the cost
// model's options and the model stages.
class PlacementCache {
 public:
  Result<std::shared_ptr<const scenario::Placement>> Get(
      const scenario::ResolvedScenario& scenario, const pb::ScheduleSpec& schedule) {
    const auto key = std::make_tuple(scenario.seq_len(), schedule.recompute(), schedule.system(),
                                     schedule.st_overlap(),
                                     schedule.has_st_tile() ? schedule.st_tile() : 0u,
                                     scenario::VirtualStagesOf(schedule));
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      SF_ASSIGN_OR_RETURN(std::shared_ptr<const scenario::Placement> placement,
                          scenario::Place(scenario, schedule));
      it = cache_.emplace(key, std::move(placement)).first;
    }
    return it->second;
  }

 private:
  std::map<std::tuple<std::int64_t, std::string, std::string, bool, std::uint32_t, int>,
           std::shared_ptr<const scenario::Placement>>
      cache_;
};

// Simulates one configuration, or copies an earlier run of the same cell and
// N whose rounded boundaries are the same (`seen`: boundaries -> run index).
// `work` is the scenario at the configuration's T and M (changed here when
// they differ from the previous configuration's).
Result<pb::SweepRun> RunOne(const SweepConfig& config, scenario::ResolvedScenario* work,
                            PlacementCache* cache, scenario::PlanCache* plans,
                            std::map<std::vector<std::int64_t>, int>* seen,
                            const CostTableIndex* costs, pb::SweepReport* report) {
  const pb::ScheduleSpec schedule = ScheduleFor(*work, config);
  if (work->seq_len() != config.seq_len) {
    SF_ASSIGN_OR_RETURN(*work, work->WithSeqLen(config.seq_len));
  }
  if (work->microbatches() != config.microbatches) {
    SF_ASSIGN_OR_RETURN(*work, work->WithMicrobatches(config.microbatches));
  }
  SF_ASSIGN_OR_RETURN(std::shared_ptr<const scenario::Placement> placement,
                      cache->Get(*work, schedule));
  SF_ASSIGN_OR_RETURN(schedule::Partition partition,
                      models::PartitionFor(placement->cost_model, config.seq_len, schedule));
  const auto [it, inserted] = seen->emplace(partition.boundaries(), report->runs_size());
  if (!inserted) {
    pb::SweepRun run = report->runs(it->second);
    run.set_alpha(config.alpha);
    run.set_reused(true);
    return run;
  }
  SF_ASSIGN_OR_RETURN(scenario::Configuration configuration,
                      scenario::ConfigurePlaced(*work, std::move(placement), schedule,
                                                /*plan=*/nullptr, plans));
  SF_ASSIGN_OR_RETURN(Simulation sim,
                      SimulateConfigured(*work, std::move(configuration), {.costs = costs}));
  report->set_num_simulated(report->num_simulated() + 1);
  return RunFromReport(config, schedule, sim.report);
}

void FillHeader(const pb::Scenario& s, pb::SweepReport* report) {
  report->set_scenario(s.name());
  report->set_model(s.model().name());
  report->set_pipeline_size(s.parallel().pipeline_size());
  report->set_tensor_size(std::max(1u, s.parallel().tensor_size()));
  report->set_data_size(std::max(1u, s.parallel().data_size()));
  report->set_context_size(std::max(1u, s.parallel().context_size()));
  report->set_microbatch_size(std::max(1u, s.parallel().microbatch_size()));
  report->set_cost_model(s.cost_model().empty() ? "analytic" : s.cost_model());
  report->set_time_unit(s.cost_model() == "uniform" ? "units" : "s");
  report->set_capacity_bytes(s.cluster().device().memory_capacity_bytes());
  report->set_usable_bytes(models::UsableMemoryBytes(s.cluster().device()));
}

}  // namespace

std::string ConfigLabel(const SweepConfig& c) {
  return c.policy + " T=" + std::to_string(c.seq_len) + " GBS=" +
         std::to_string(c.global_batch) + " N=" + std::to_string(c.chunks) +
         " alpha=" + FormatG(c.alpha) + (c.st_overlap ? " st_overlap=on" : "") +
         (c.st_tile > 0 ? " st_tile=" + std::to_string(c.st_tile) : "") +
         (c.virtual_stages > 1 ? " v=" + std::to_string(c.virtual_stages) : "");
}

Status ValidateSweep(const scenario::ResolvedScenario& resolved, const pb::SweepSpec& sweep) {
  const pb::Scenario& scenario = resolved.proto();
  SF_RETURN_IF_ERROR(InRange("chunks", sweep.chunks(), models::kChunks));
  for (int i = 0; i < sweep.alpha_size(); ++i) {
    SF_RETURN_IF_ERROR(models::CheckRange(Field("alpha", i), sweep.alpha(i), models::kAlpha));
  }
  SF_RETURN_IF_ERROR(NoRepeats("alpha", sweep.alpha()));
  if (sweep.microbatches_size() > 0 && sweep.global_batch_size() > 0) {
    return Status::Invalid("sweep: set global_batch or microbatches, not both");
  }
  SF_RETURN_IF_ERROR(InRange("microbatches", sweep.microbatches(), models::kMicrobatches));
  SF_RETURN_IF_ERROR(InRange("global_batch", sweep.global_batch(), models::kGlobalBatch));
  const int divisor = BatchDivisor(scenario);
  for (int i = 0; i < sweep.microbatches_size(); ++i) {
    SF_RETURN_IF_ERROR(models::CheckRange(
        Field("microbatches", i) + " * microbatch_size * data_size",
        std::uint64_t{sweep.microbatches(i)} * static_cast<std::uint64_t>(divisor),
        models::kGlobalBatch));
  }
  for (int i = 0; i < sweep.global_batch_size(); ++i) {
    if (sweep.global_batch(i) % divisor != 0) {
      return Status::Invalid(Field("global_batch", i) + " (" +
                             std::to_string(sweep.global_batch(i)) +
                             ") must be divisible by parallel.microbatch_size * "
                             "parallel.data_size (" + std::to_string(divisor) + ")");
    }
  }
  SF_RETURN_IF_ERROR(InRange("seq_len", sweep.seq_len(), models::kSeqLen));
  SF_RETURN_IF_ERROR(InRange("st_tile", sweep.st_tile(), models::kStTile));
  SF_RETURN_IF_ERROR(NoRepeats("st_overlap", sweep.st_overlap()));
  SF_RETURN_IF_ERROR(InRange("virtual_stages", sweep.virtual_stages(), models::kVirtualStages));
  return ValidatePolicies(sweep);
}

pb::ScheduleSpec ScheduleFor(const scenario::ResolvedScenario& scenario, const SweepConfig& config) {
  pb::ScheduleSpec spec = TemplateFor(scenario.proto(), config.policy);
  spec.set_policy(config.policy);
  spec.set_chunks(static_cast<std::uint32_t>(config.chunks));
  spec.set_alpha(config.alpha);
  spec.set_st_overlap(config.st_overlap);
  if (config.st_tile > 0) spec.set_st_tile(static_cast<std::uint32_t>(config.st_tile));
  spec.set_virtual_stages(static_cast<std::uint32_t>(config.virtual_stages));
  return spec;
}

Result<SweepGrid> ExpandSweep(const scenario::ResolvedScenario& resolved,
                              const pb::SweepSpec& sweep) {
  SF_RETURN_IF_ERROR(ValidateSweep(resolved, sweep));
  const pb::Scenario& s = resolved.proto();
  SweepGrid grid;
  std::vector<std::int64_t> seq_lens(sweep.seq_len().begin(), sweep.seq_len().end());
  if (seq_lens.empty()) seq_lens.push_back(static_cast<std::int64_t>(s.seq_len()));
  const bool alpha_matters = HasAttention(s.model());
  const bool st_matters = s.cluster().device().compute_units() > 0;
  bool collapsed = false, st_collapsed = false;
  const int stages = static_cast<int>(std::max(1u, s.parallel().pipeline_size()));
  long long skipped = 0;  // interleaved configurations with M N not a multiple of P
  for (const std::string& policy : PoliciesOf(s, sweep)) {
    const pb::ScheduleSpec& tmpl = TemplateFor(s, policy);
    std::vector<int> chunks(sweep.chunks().begin(), sweep.chunks().end());
    if (chunks.empty()) chunks.push_back(static_cast<int>(std::max(1u, tmpl.chunks())));
    std::vector<double> alphas(sweep.alpha().begin(), sweep.alpha().end());
    if (alphas.empty()) alphas.push_back(tmpl.alpha());
    if (schedule::WholeSequencePolicy(policy)) {
      chunks = {1};
      alphas = {0.0};
    } else if (!alpha_matters && alphas.size() > 1) {
      alphas = {alphas.front()};
      collapsed = true;
    }
    std::vector<bool> overlaps(sweep.st_overlap().begin(), sweep.st_overlap().end());
    if (overlaps.empty()) overlaps.push_back(tmpl.st_overlap());
    std::vector<int> tiles(sweep.st_tile().begin(), sweep.st_tile().end());
    if (tiles.empty()) tiles.push_back(tmpl.has_st_tile() ? static_cast<int>(tmpl.st_tile()) : 0);
    if (!st_matters && (overlaps.size() > 1 || tiles.size() > 1)) {
      overlaps.resize(1);
      tiles.resize(1);
      st_collapsed = true;
    }
    // v: swept for interleaved and zb-interleaved (the range, else the
    // template's), the policy's own for the others.
    const bool free_v = schedule::VirtualStagesFree(policy);
    std::vector<int> vs = {free_v && tmpl.virtual_stages() != 0
                               ? scenario::VirtualStagesOf(tmpl)
                               : schedule::DefaultVirtualStages(policy)};
    if (free_v && sweep.virtual_stages_size() > 0) {
      vs.assign(sweep.virtual_stages().begin(), sweep.virtual_stages().end());
    }
    // A v whose P v model stages cannot be placed is skipped, noted once.
    std::vector<int> placed;
    for (int v : vs) {
      pb::ScheduleSpec spec = tmpl;
      spec.set_policy(policy);
      spec.set_virtual_stages(static_cast<std::uint32_t>(v));
      if (Status ok = scenario::CheckModelStages(resolved, spec); !ok.ok()) {
        grid.notes.push_back(policy + " at v = " + std::to_string(v) + " skipped: " + ok.message());
      } else {
        placed.push_back(v);
      }
    }
    for (std::int64_t seq_len : seq_lens) {
      for (const auto& [gb, m] : BatchesOf(s, sweep)) {
        for (int v : placed) {
          for (int n : chunks) {
            if (policy == "interleaved" && v > 1 && (static_cast<long long>(m) * n) % stages != 0) {
              skipped += static_cast<long long>(overlaps.size() * tiles.size() * alphas.size());
              continue;
            }
            for (bool overlap : overlaps) {
              for (int tile : tiles) {
                for (double alpha : alphas) {
                  grid.configs.push_back({policy, seq_len, gb, m, n, alpha, overlap, tile, v});
                }
              }
            }
          }
        }
      }
    }
  }
  if (collapsed) {
    grid.notes.push_back("alpha has no effect on " + s.model().name() +
                         " (no softmax-attention layers: the FLOP-balanced partition is the "
                         "equal one), so alpha = " + FormatG(sweep.alpha(0)) +
                         " was simulated for all " + std::to_string(sweep.alpha_size()) +
                         " values of the range");
  }
  const std::vector<std::string> policies = PoliciesOf(s, sweep);
  if (sweep.virtual_stages_size() > 0 &&
      std::none_of(policies.begin(), policies.end(), schedule::VirtualStagesFree)) {
    grid.notes.push_back(
        "virtual_stages applies to policies interleaved and zb-interleaved only: the other "
        "policies ran at their own (zbv 2, else 1)");
  }
  if (skipped > 0) {
    grid.notes.push_back(
        std::to_string(skipped) + " interleaved configuration" + (skipped == 1 ? " was" : "s were") +
        " skipped: with v > 1, M N must be a multiple of P = " + std::to_string(stages) +
        " (Megatron-Core's rule for its microbatches)");
  }
  if (st_collapsed) {
    grid.notes.push_back(
        "st_overlap and st_tile have no effect without cluster.device.compute_units (the "
        "state-transition model is off), so only the first value of each range was simulated");
  }
  return grid;
}

bool BetterRun(const pb::SweepRun& a, const pb::SweepRun& b) {
  if (a.tokens_per_s() != b.tokens_per_s()) return a.tokens_per_s() > b.tokens_per_s();
  if (a.peak_memory_bytes() != b.peak_memory_bytes()) {
    return a.peak_memory_bytes() < b.peak_memory_bytes();
  }
  if (a.chunks() != b.chunks()) return a.chunks() < b.chunks();
  if (a.alpha() != b.alpha()) return a.alpha() < b.alpha();
  if (a.st_overlap() != b.st_overlap()) return !a.st_overlap();
  if (a.st_tile() != b.st_tile()) return a.st_tile() < b.st_tile();
  if (a.virtual_stages() != b.virtual_stages()) return a.virtual_stages() < b.virtual_stages();
  return a.policy() < b.policy();
}

Result<pb::SweepReport> RunSweep(const scenario::ResolvedScenario& scenario,
                                 const pb::SweepSpec& sweep, const SweepOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  SF_ASSIGN_OR_RETURN(SweepGrid grid, ExpandSweep(scenario, sweep));
  pb::SweepReport report;
  FillHeader(scenario.proto(), &report);
  if (options.costs != nullptr) {
    report.set_cost_model("replay");
    report.set_time_unit("s");
  }
  for (std::string& note : grid.notes) report.add_notes(std::move(note));
  scenario::ResolvedScenario work = scenario;
  PlacementCache cache;
  scenario::PlanCache plans;
  std::map<std::vector<std::int64_t>, int> seen;  // this cell, N and ST settings
  int cell_first = 0;
  const std::size_t total = grid.configs.size();
  for (std::size_t k = 0; k < total; ++k) {
    const SweepConfig& config = grid.configs[k];
    if (k > 0 && !SameCell(config, grid.configs[k - 1])) {
      FinishCell(grid.configs[k - 1], cell_first, &report);
      cell_first = report.runs_size();
    }
    // Reuse is by rounded boundaries, which alpha alone changes.
    if (k == 0 || !SameCell(config, grid.configs[k - 1]) ||
        config.chunks != grid.configs[k - 1].chunks ||
        config.virtual_stages != grid.configs[k - 1].virtual_stages ||
        config.st_overlap != grid.configs[k - 1].st_overlap ||
        config.st_tile != grid.configs[k - 1].st_tile) {
      seen.clear();
    }
    Result<pb::SweepRun> run = RunOne(config, &work, &cache, &plans, &seen, options.costs, &report);
    if (!run.ok()) return run.status().WithPrefix("sweep run " + ConfigLabel(config));
    *report.add_runs() = std::move(run).value();
    if (options.progress) options.progress(k + 1, total);
  }
  if (total > 0) FinishCell(grid.configs.back(), cell_first, &report);
  report.set_elapsed_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return report;
}

}  // namespace stateflow::sim

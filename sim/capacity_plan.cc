#include "common/text.h"
#include "sim/capacity_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "models/cost_model.h"
#include "models/model.h"

namespace stateflow::sim {
namespace {

constexpr int kPaperChunks[] = {2, 4, 6, 8, 16, 32};
constexpr double kPaperAlphas[] = {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25};

std::vector<int> Divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::string Gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

Status ValidateRequest(const scenario::ResolvedScenario& resolved,
                       const CapacityPlanRequest& req) {
  const pb::Scenario& s = resolved.proto();
  const int per_node = static_cast<int>(s.cluster().devices_per_node());
  if (req.devices < 1) {
    return Status::Invalid("devices must be >= 1 (got " + std::to_string(req.devices) + ")");
  }
  if (req.devices > per_node && req.devices % per_node != 0) {
    return Status::Invalid("devices (" + std::to_string(req.devices) +
                           ") must be a multiple of cluster.devices_per_node (" +
                           std::to_string(per_node) + ") when they span more than one node");
  }
  if (req.seq_len < 1) return Status::Invalid("seq_len must be >= 1");
  if (req.global_batch < 1) return Status::Invalid("global_batch must be >= 1");
  pb::SweepSpec ranges;  // the ranges the plan uses (the others are fixed per split)
  *ranges.mutable_chunks() = req.sweep.chunks();
  *ranges.mutable_alpha() = req.sweep.alpha();
  *ranges.mutable_policies() = req.sweep.policies();
  return ValidateSweep(resolved, ranges);
}

// The (N, alpha, policy) ranges of every split, with chunk counts that
// cannot cut the sequence dropped.
Result<pb::SweepSpec> SplitSweep(const pb::Scenario& s, const CapacityPlanRequest& req,
                                 pb::CapacityPlanReport* report) {
  pb::SweepSpec spec;
  std::vector<int> chunks(req.sweep.chunks().begin(), req.sweep.chunks().end());
  if (chunks.empty()) chunks.assign(std::begin(kPaperChunks), std::end(kPaperChunks));
  const std::int64_t granularity =
      s.schedule().has_granularity() ? s.schedule().granularity() : 128;
  const std::int64_t inner_multiples = (req.seq_len - 1) / granularity;  // in (0, T)
  std::string dropped;
  for (int n : chunks) {
    if (n - 1 <= inner_multiples) {
      spec.add_chunks(n);
    } else {
      dropped += (dropped.empty() ? "" : ", ") + std::to_string(n);
    }
  }
  if (spec.chunks_size() == 0) {
    return Status::Invalid("sweep.chunks: no chunk count can cut seq_len " +
                           std::to_string(req.seq_len) + " at granularity " +
                           std::to_string(granularity));
  }
  if (!dropped.empty()) {
    report->add_notes("N = " + dropped + " dropped: seq_len " + std::to_string(req.seq_len) +
                      " has too few multiples of " + std::to_string(granularity) +
                      " to cut into that many chunks");
  }
  if (req.sweep.alpha_size() > 0) {
    *spec.mutable_alpha() = req.sweep.alpha();
  } else {
    for (double a : kPaperAlphas) spec.add_alpha(a);
  }
  if (req.sweep.policies_size() > 0) {
    *spec.mutable_policies() = req.sweep.policies();
  } else {
    spec.add_policies("1f1b");
    spec.add_policies("stateflow");
  }
  // The other ranges as given (none: each schedule's own).
  *spec.mutable_st_overlap() = req.sweep.st_overlap();
  *spec.mutable_st_tile() = req.sweep.st_tile();
  *spec.mutable_virtual_stages() = req.sweep.virtual_stages();
  spec.add_seq_len(static_cast<std::uint64_t>(req.seq_len));
  spec.add_global_batch(static_cast<std::uint32_t>(req.global_batch));
  return spec;
}

// Fills `candidate` from a swept split: its best feasible run, or why none fits.
void Judge(const pb::SweepReport& sweep, pb::PlanCandidate* candidate) {
  candidate->set_num_runs(sweep.runs_size());
  if (sweep.runs_size() == 0) {  // every configuration skipped (its notes say why)
    std::string why = "the sweep's ranges give no configuration on this split";
    for (const std::string& note : sweep.notes()) {
      if (note.find("skipped") != std::string::npos) {
        why = note;
        break;
      }
    }
    candidate->set_verdict("illegal");
    candidate->set_reason("nothing to simulate: " + why);
    return;
  }
  const pb::SweepRun* best = nullptr;
  for (const pb::SweepCell& cell : sweep.cells()) {
    if (cell.best_run() < 0) continue;
    const pb::SweepRun& run = sweep.runs(cell.best_run());
    if (best == nullptr || BetterRun(run, *best)) best = &run;
  }
  if (best != nullptr) {
    candidate->set_verdict("feasible");
    *candidate->mutable_best() = *best;
    return;
  }
  const pb::SweepRun* least = nullptr;
  for (const pb::SweepRun& run : sweep.runs()) {
    if (least == nullptr || run.peak_memory_bytes() < least->peak_memory_bytes()) least = &run;
  }
  candidate->set_verdict("oom");
  if (least == nullptr) return;
  *candidate->mutable_best() = *least;
  candidate->set_reason("OOM at every N and alpha; the smallest peak, at " + least->policy() +
                        " N=" + std::to_string(least->chunks()) + " alpha=" +
                        FormatG(least->alpha()) + ", is " + Gib(least->peak_memory_bytes()) +
                        " on stage " + std::to_string(least->peak_stage()) + " (largest: " +
                        least->peak_class() + ") > usable " + Gib(sweep.usable_bytes()) +
                        " (capacity " + Gib(sweep.capacity_bytes()) + " less the reserve)");
}

void Rank(pb::CapacityPlanReport* report) {
  std::vector<pb::PlanCandidate> all(report->candidates().begin(), report->candidates().end());
  auto group = [](const pb::PlanCandidate& c) {
    return c.verdict() == "feasible" ? 0 : c.verdict() == "oom" ? 1 : 2;
  };
  std::stable_sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
    if (group(a) != group(b)) return group(a) < group(b);
    return group(a) == 0 && BetterRun(a.best(), b.best());
  });
  report->clear_candidates();
  std::uint32_t rank = 0;
  for (pb::PlanCandidate& c : all) {
    if (c.verdict() == "feasible") c.set_rank(++rank);
    *report->add_candidates() = std::move(c);
  }
}

void FillHeader(const pb::Scenario& s, const CapacityPlanRequest& req,
                pb::CapacityPlanReport* report) {
  report->set_model(s.model().name());
  report->set_cluster(s.cluster().name());
  report->set_seq_len(static_cast<double>(req.seq_len));
  report->set_global_batch(req.global_batch);
  report->set_devices(req.devices);
  report->set_devices_per_node(s.cluster().devices_per_node());
  report->set_microbatch_size(std::max(1u, s.parallel().microbatch_size()));
  report->set_capacity_bytes(s.cluster().device().memory_capacity_bytes());
}

// Every P x TP x DP = devices, in (P, TP) order; illegal ones with their
// reason, legal ones with an empty verdict (to be swept) and their M.
void AddSplits(const pb::Scenario& scenario, const CapacityPlanRequest& req,
               pb::CapacityPlanReport* report) {
  const int mbs = static_cast<int>(report->microbatch_size());
  const std::vector<int> cps = req.context_sizes.empty() ? std::vector<int>{1} : req.context_sizes;
  const std::int64_t granularity =
      scenario.schedule().has_granularity() ? scenario.schedule().granularity() : 128;
  for (int cp : cps) {
    if (req.devices % cp != 0) continue;
    const int rest = req.devices / cp;
    for (int p : Divisors(rest)) {
      for (int tp : Divisors(rest / p)) {
        const int dp = rest / (p * tp);
        pb::PlanCandidate* c = report->add_candidates();
        c->set_pipeline_size(p);
        c->set_tensor_size(tp);
        c->set_data_size(dp);
        c->set_context_size(cp);
        c->set_reason(SplitRejection(scenario, p, tp, dp, req.global_batch));
        if (c->reason().empty() && cp > 1 && cp > std::min(granularity, req.seq_len)) {
          // Chunks are multiples of the granularity: a shorter one could
          // leave a CP device without a token.
          c->set_reason("CP " + std::to_string(cp) + " > the chunks' granularity " +
                        std::to_string(std::min(granularity, req.seq_len)) +
                        " (every CP device needs a token of every chunk)");
        }
        c->set_verdict(c->reason().empty() ? "" : "illegal");
        if (c->reason().empty()) c->set_microbatches(req.global_batch / (dp * mbs));
      }
    }
  }
}

// The scenario's schedule and its baselines.
std::vector<const pb::ScheduleSpec*> SchedulesOf(const pb::Scenario& s) {
  std::vector<const pb::ScheduleSpec*> out = {&s.schedule()};
  for (const pb::ScheduleSpec& b : s.baselines()) out.push_back(&b);
  return out;
}

}  // namespace

std::string SplitRejection(const pb::Scenario& s, int stages, int tensor_size, int data_size,
                           int global_batch) {
  const int per_node = static_cast<int>(s.cluster().devices_per_node());
  if (tensor_size > per_node) {
    return "TP " + std::to_string(tensor_size) + " > cluster.devices_per_node " +
           std::to_string(per_node) + " (a TP group must stay in one node)";
  }
  if (per_node % tensor_size != 0) {
    return "TP " + std::to_string(tensor_size) + " does not divide cluster.devices_per_node " +
           std::to_string(per_node) + " (a TP group would straddle two nodes)";
  }
  if (Status heads = models::ValidateModel(s.model(), tensor_size); !heads.ok()) {
    return heads.message();
  }
  if (stages > static_cast<int>(s.model().num_layers())) {
    return "P " + std::to_string(stages) + " > model.num_layers " +
           std::to_string(s.model().num_layers()) + " (every stage needs a block)";
  }
  // A framework's schedule (megatron-core, ms-swift) splits the layers
  // evenly over the stages (models::EvenLayerStages).
  for (const pb::ScheduleSpec* spec : SchedulesOf(s)) {
    Result<models::System> system = models::ParseSystem(spec->system());
    if (system.ok() && models::FrameworkLayerSplit(*system) &&
        s.model().num_layers() % static_cast<unsigned>(stages) != 0) {
      return "P " + std::to_string(stages) + " does not divide model.num_layers " +
             std::to_string(s.model().num_layers()) + " (" + spec->system() +
             " splits the layers evenly over the stages)";
    }
  }
  const int mbs = static_cast<int>(std::max(1u, s.parallel().microbatch_size()));
  if (global_batch % (data_size * mbs) != 0) {
    return "global batch " + std::to_string(global_batch) + " is not divisible by DP " +
           std::to_string(data_size) + " x microbatch size " + std::to_string(mbs);
  }
  return "";
}

Result<pb::CapacityPlanReport> PlanCapacity(const scenario::ResolvedScenario& resolved,
                                            const CapacityPlanRequest& req,
                                            const SweepOptions& options) {
  const pb::Scenario& scenario = resolved.proto();
  const auto start = std::chrono::steady_clock::now();
  SF_RETURN_IF_ERROR(ValidateRequest(resolved, req));
  pb::CapacityPlanReport report;
  FillHeader(scenario, req, &report);
  SF_ASSIGN_OR_RETURN(const pb::SweepSpec spec, SplitSweep(scenario, req, &report));
  AddSplits(scenario, req, &report);
  if (options.costs != nullptr) {  // measured layer times hold for their own TP only
    report.add_notes("costs: layer times replayed from " + options.costs->source() +
                     " (measured at TP " + std::to_string(options.costs->tensor_size()) +
                     ", with its link); TP and DP all-reduces from the cluster's links");
    for (pb::PlanCandidate& c : *report.mutable_candidates()) {
      if (!c.verdict().empty()) continue;
      if (c.context_size() > 1) {
        c.set_verdict("illegal");
        c.set_reason("a measured cost table cannot replay CP " + std::to_string(c.context_size()));
        continue;
      }
      if (static_cast<int>(c.tensor_size()) == options.costs->tensor_size()) continue;
      c.set_verdict("illegal");
      c.set_reason("the cost table " + options.costs->source() + " was measured at TP " +
                   std::to_string(options.costs->tensor_size()));
    }
  }
  // Every legal split sweeps the same ranges; its grid's size (interleaved
  // shapes are skipped where P does not divide M N) counts its progress.
  const auto split_of = [&](const pb::PlanCandidate& c) {
    pb::ParallelSpec parallel = scenario.parallel();
    parallel.set_pipeline_size(c.pipeline_size());
    parallel.set_tensor_size(c.tensor_size());
    parallel.set_data_size(c.data_size());
    parallel.set_context_size(std::max(1u, c.context_size()));
    parallel.set_microbatches(c.microbatches());
    return resolved.WithParallel(parallel);
  };
  std::vector<std::size_t> sizes;  // per legal split, in order
  std::size_t total = 0;
  for (const pb::PlanCandidate& c : report.candidates()) {
    if (!c.verdict().empty()) continue;
    Result<scenario::ResolvedScenario> split = split_of(c);
    Result<SweepGrid> grid = split.ok() ? ExpandSweep(*split, spec) : Result<SweepGrid>(split.status());
    sizes.push_back(grid.ok() ? grid->configs.size() : 0);
    total += sizes.back();
  }
  std::size_t offset = 0, legal = 0;
  std::vector<std::string> notes;  // the splits' sweeps' notes, each once
  SweepOptions split_options;
  split_options.costs = options.costs;
  if (options.progress) {
    split_options.progress = [&](std::size_t done, std::size_t) {
      options.progress(offset + done, total);
    };
  }
  for (pb::PlanCandidate& c : *report.mutable_candidates()) {
    if (!c.verdict().empty()) continue;
    Result<scenario::ResolvedScenario> split = split_of(c);
    Result<pb::SweepReport> sweep =
        split.ok() ? RunSweep(*split, spec, split_options) : Result<pb::SweepReport>(split.status());
    if (!sweep.ok()) {
      return sweep.status().WithPrefix("split " + std::to_string(c.pipeline_size()) + " x " +
                                       std::to_string(c.tensor_size()) + " x " +
                                       std::to_string(c.data_size()) +
                                       (c.context_size() > 1
                                            ? " CP " + std::to_string(c.context_size())
                                            : std::string()));
    }
    offset += sizes[legal++];
    report.set_num_simulated(report.num_simulated() + sweep->num_simulated());
    for (const std::string& note : sweep->notes()) {
      if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
    }
    Judge(*sweep, &c);
  }
  for (const std::string& note : notes) report.add_notes(note);
  Rank(&report);
  report.set_elapsed_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return report;
}

}  // namespace stateflow::sim

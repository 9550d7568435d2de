// `stateflow capacity`: which P x TP x DP splits of a number of devices can
// train a model at a sequence length and global batch, each with its best
// (N, alpha), ranked; and why the others cannot.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iostream>

#include "common/files.h"
#include "common/text.h"
#include "models/limits.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "sim/capacity_plan.h"
#include "tools/cli.h"
#include "tools/work_bounds.h"
#include "tools/report_format.h"
#include "tools/sweep_format.h"
#include "tools/sweep_options.h"

namespace stateflow::tools {
namespace {

constexpr char kCapacityName[] = "capacity";

constexpr char kCapacityExamples[] = R"(Every split of --devices into P x TP x DP is checked: TP within a node
(TP <= devices per node and divides it), heads (recurrence, attention, K/V)
divisible by TP, P <= layers, global batch divisible by DP x microbatch size.
Each legal split is swept with M = global batch / (DP x microbatch size) over
the policies 1f1b and stateflow, N in 2,4,6,8,16,32 and alpha in
0,0.1,...,1,1.25 (one alpha for models without softmax attention), or the
ranges of --scenario's sweep block and of the list flags; N too large to cut
the sequence at the granularity is dropped. A split's best is its fastest
configuration that fits in memory. Recompute mode, microbatch size, precision
and cost model come from the scenario (default: the embedded one, full
recompute).

examples:
  stateflow capacity --model gdn-hybrid-15b --seq-len 262144 --global-batch 8 --devices 32
  stateflow capacity --model mamba3-32b -T 131072 --global-batch 16 --devices 32 --top 3
  stateflow capacity --scenario scenarios/paper/gdn-hybrid-3b.textproto --devices 8 --json
  stateflow capacity --model gdn-3b --devices 8 --policies 1f1b,stateflow --chunks-list 4,8
  stateflow capacity --model gdn-hybrid-15b --cluster a100-80gb-nvlink -T 262144 --devices 16 \
      --context-parallel-list 1,2,4 --distributed-optimizer on
      SPP, context parallelism or both: every P x TP x CP x DP of 16 A100s
)";

struct PlanFlags {
  ScenarioFlags scenario;
  SweepFlags sweep;
  std::optional<long long> devices;
  std::optional<long long> global_batch;
  std::string costs_path;
  int top = 5;
  std::string context_sizes;  // --context-parallel-list
};

// "1,2,4" -> {1, 2, 4}; each in models::kContextSize.
Result<std::vector<int>> ParseContextSizes(const std::string& text) {
  std::vector<int> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    long long v = 0;
    const auto [end, err] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || err != std::errc() || end != item.data() + item.size()) {
      return Status::Invalid("--context-parallel-list: '" + Printable(item) +
                             "' is not a whole number");
    }
    SF_RETURN_IF_ERROR(
        models::CheckRange("--context-parallel-list", static_cast<std::int64_t>(v), models::kContextSize));
    if (std::find(out.begin(), out.end(), static_cast<int>(v)) == out.end()) {
      out.push_back(static_cast<int>(v));
    }
    at = comma + 1;
  }
  return out;
}

void AddPlanOptions(po::options_description* desc, PlanFlags* f) {
  desc->add_options()
      ("scenario", po::value(&f->scenario.scenario_path),
       ("scenario file: model, cluster, recompute, microbatch size (text format, at most " + LimitText(kMaxTextFileBytes) + "); "
        "default: the embedded one").c_str())
      ("model", po::value(&f->scenario.model_preset), "model preset (see `stateflow presets`)")
      ("cluster", po::value(&f->scenario.cluster_preset), "cluster preset")
      ("seq-len,T", Optional(&f->scenario.seq_len), "T, tokens per sequence (default: scenario)")
      ("global-batch", Optional(&f->global_batch),
       "sequences per step (default: the scenario's M x microbatch size x DP)")
      ("devices", Optional(&f->devices),
       "devices to split into P x TP x DP (default: the scenario's P x TP x DP)")
      ("recompute", po::value(&f->scenario.recompute), "none or full")
      ("system", po::value(&f->scenario.system),
       "stateflow, megatron-core or ms-swift: the training system whose head and loss every "
       "schedule runs with (docs/cost-model.md, Systems; default: the scenario's)")
      ("costs", po::value(&f->costs_path),
       "replay this CostTable (stateflow profile) instead of the cost model; splits at another "
       "TP than the table's are rejected (at most 64 MiB)")
      ("distributed-optimizer", po::value(&f->scenario.distributed_optimizer),
       "on or off: shard the optimizer state over each split's DP (x CP) replicas "
       "(parallel.distributed_optimizer, ZeRO-1; default: the scenario's)")
      ("overlap-grad-reduce", po::value(&f->scenario.overlap_grad_reduce),
       "on or off: the first stage's DP gradient sync in buckets overlapped with its last "
       "backward (parallel.overlap_grad_reduce; default: the scenario's)")
      ("context-parallel-list", po::value(&f->context_sizes),
       "CP degrees to try beside P, TP and DP (devices = P x TP x CP x DP), e.g. 1,2,4,8 "
       "(default: 1; docs/cost-model.md, Context parallelism)")
      ("top", po::value(&f->top)->default_value(5),
       "feasible splits to show in the table (0: all; --json has all)");
}

Status CheckFlags(const PlanFlags& f) {
  if (f.devices && (*f.devices < 1 || *f.devices > (1 << 20))) {
    return Status::Invalid("--devices must be in [1, 1048576] (got " +
                           std::to_string(*f.devices) + ")");
  }
  if (f.global_batch && (*f.global_batch < 1 || *f.global_batch > (1 << 20))) {
    return Status::Invalid("--global-batch must be in [1, 1048576] (got " +
                           std::to_string(*f.global_batch) + ")");
  }
  if (f.top < 0) return Status::Invalid("--top must be >= 0 (got " + std::to_string(f.top) + ")");
  return Status::Ok();
}

// The scenario's devices (P x TP x DP) and global batch (M x microbatch size
// x DP), the defaults of --devices and --global-batch, as its file says.
Result<std::pair<int, int>> ScenarioDevicesAndBatch(const std::string& path) {
  pb::Scenario raw;
  if (path.empty()) {
    SF_ASSIGN_OR_RETURN(raw, scenario::ParseScenarioText(scenario::DefaultScenarioText(), "<default scenario>"));
  } else {
    SF_ASSIGN_OR_RETURN(raw, scenario::LoadScenarioFile(path));
  }
  const pb::ParallelSpec& par = raw.parallel();
  auto one = [](std::uint32_t v) { return static_cast<int>(std::max(1u, v)); };
  const int dp = one(par.data_size());
  return std::make_pair(one(par.pipeline_size()) * one(par.tensor_size()) * dp,
                        one(par.microbatches()) * one(par.microbatch_size()) * dp);
}

Result<pb::CapacityPlanReport> Run(const PlanFlags& f) {
  SF_RETURN_IF_ERROR(CheckFlags(f));
  SF_ASSIGN_OR_RETURN(const auto defaults, ScenarioDevicesAndBatch(f.scenario.scenario_path));
  // P, TP, DP and M are set per split; P = TP = 1 here so that the scenario's
  // own split need not suit a model given by --model.
  ScenarioFlags scenario_flags = f.scenario;
  scenario_flags.stages = 1;
  scenario_flags.tensor_size = 1;
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario resolved, LoadResolvedScenario(scenario_flags));
  const pb::Scenario& scenario = resolved.proto();
  sim::CapacityPlanRequest request;
  request.devices = static_cast<int>(f.devices.value_or(defaults.first));
  request.global_batch = static_cast<int>(f.global_batch.value_or(defaults.second));
  request.seq_len = static_cast<std::int64_t>(scenario.seq_len());
  if (!f.context_sizes.empty()) {
    SF_ASSIGN_OR_RETURN(request.context_sizes, ParseContextSizes(f.context_sizes));
  }
  // A scenario file's sweep ranges apply; the embedded default's do not (the
  // plan then tries the paper's N and alpha, with 1f1b and stateflow).
  if (!f.scenario.scenario_path.empty()) request.sweep = scenario.sweep();
  SF_RETURN_IF_ERROR(ApplySweepFlags(f.sweep, &request.sweep));
  // The largest split's plan: every device a stage (P = devices, DP = 1), so
  // M = global batch / microbatch size.
  pb::Scenario largest = scenario;
  largest.mutable_parallel()->set_pipeline_size(static_cast<std::uint32_t>(request.devices));
  largest.mutable_parallel()->set_data_size(1);
  const std::int64_t per_microbatch = std::max(1u, scenario.parallel().microbatch_size());
  largest.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(
      std::min<std::int64_t>((request.global_batch + per_microbatch - 1) / per_microbatch,
                             UINT32_MAX)));
  SF_RETURN_IF_ERROR(CheckPlanBounds(largest, &request.sweep, f.scenario.max_actions));
  std::optional<sim::CostTableIndex> costs;
  if (!f.costs_path.empty()) {
    SF_ASSIGN_OR_RETURN(costs, LoadCostsFor(f.costs_path, scenario));
  }
  ProgressBar bar("configurations");
  SF_ASSIGN_OR_RETURN(
      pb::CapacityPlanReport report,
      sim::PlanCapacity(resolved, request,
                        {.progress = [&bar](std::size_t done, std::size_t total) {
                           bar.Update(done, total);
                         },
                         .costs = costs ? &*costs : nullptr}));
  pb::Report provenance;
  FillProvenance(1, &provenance);
  *report.mutable_provenance() = provenance.provenance();
  return report;
}

}  // namespace

int CapacityPlanCommand(int argc, char** argv) {
  PlanFlags flags;
  po::options_description desc("stateflow capacity [options]");
  desc.add_options()("help,h", "show this help")
      ("json", "print the CapacityPlanReport as JSON on stdout instead of the tables");
  AddPlanOptions(&desc, &flags);
  AddSweepOptions(&desc, &flags.sweep, /*batches_and_lengths=*/false);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kCapacityName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kCapacityExamples;
    return kExitOk;
  }
  Result<pb::CapacityPlanReport> report = Run(flags);
  if (!report.ok()) return Fail(kCapacityName, report.status());
  std::cout << (vm.count("json") ? MessageToJson(*report) : FormatPlanTable(*report, flags.top));
  return kExitOk;
}

}  // namespace stateflow::tools

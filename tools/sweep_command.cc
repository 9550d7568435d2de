// `stateflow sweep`: every combination of a scenario's sweep ranges
// simulated, the best feasible (N, alpha) per cell, as a table, CSV or JSON.
#include <iostream>
#include <optional>

#include "scenario/load.h"
#include "scenario/resolve.h"
#include "sim/search.h"
#include "tools/cli.h"
#include "tools/work_bounds.h"
#include "tools/report_format.h"
#include "tools/sweep_format.h"
#include "tools/sweep_options.h"

namespace stateflow::tools {
namespace {

constexpr char kSweepName[] = "sweep";

constexpr char kSweepExamples[] = R"(The ranges come from the scenario's `sweep { ... }` block, replaced by the
--*-list flags; an empty range keeps the scenario's own value. 1f1b is always
simulated with N = 1 and alpha = 0. A scalar flag (-N, --alpha, -M, -T,
--policy, --st-overlap, --st-tile) fixes that field: it clears the scenario's
range for it. Each cell (policy x sequence length x global batch) shows its
best feasible configuration: highest tokens/s among those that fit in memory
(ties: lower peak memory, then smaller N, then smaller alpha, then overlap
off, then smaller ST tile). The ST ranges matter only on a device with
compute units (--compute-units, or the cluster preset's).

examples:
  stateflow sweep
      the default scenario's sweep: 3B GDN at 64K, N in {2,4,8,16,32}, 1f1b beside stateflow
  stateflow sweep --scenario scenarios/paper/gdn-hybrid-15b.textproto --csv sweep.csv
      one paper grid: 3 lengths x 3 global batches x every N and alpha, one CSV row each
  stateflow sweep --chunks-list 2,4,8 --alpha-list 0,0.5,1 --model gdn-hybrid-3b
  stateflow sweep --seq-len-list 65536,131072 --global-batch-list 4,8 --policies 1f1b,stateflow
  stateflow sweep --json > sweep.json
  stateflow sweep --compute-units 108 --tensor-parallel 4 --st-overlap-list off,on --st-tile-list 16,32,64
      the state transition's split-and-overlap and tile B_V as swept dimensions
  stateflow sweep -P 4 -M 8 --policies stateflow,interleaved,zb-h1,zbv --virtual-stages-list 2,4
      schedules side by side, interleaved at v = 2 and 4 (configurations with M N not a
      multiple of P skipped, with a note)
)";

// Scalar overrides fix a field, so they clear the scenario's range for it.
void ClearOverriddenRanges(const ScenarioFlags& f, pb::SweepSpec* sweep) {
  if (f.chunks) sweep->clear_chunks();
  if (f.alpha) sweep->clear_alpha();
  if (f.seq_len) sweep->clear_seq_len();
  if (f.microbatches) {
    sweep->clear_microbatches();
    sweep->clear_global_batch();
  }
  if (!f.policy.empty()) sweep->clear_policies();
  if (!f.st_overlap.empty()) sweep->clear_st_overlap();
  if (f.st_tile) sweep->clear_st_tile();
  if (f.virtual_stages) sweep->clear_virtual_stages();
}

Result<pb::SweepReport> Run(const ScenarioFlags& flags, const SweepFlags& sweep_flags,
                            const std::string& costs_path) {
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario scenario, LoadResolvedScenario(flags));
  pb::SweepSpec sweep = scenario.proto().sweep();
  ClearOverriddenRanges(flags, &sweep);
  SF_RETURN_IF_ERROR(ApplySweepFlags(sweep_flags, &sweep));
  SF_RETURN_IF_ERROR(CheckPlanBounds(scenario.proto(), &sweep, flags.max_actions));
  std::optional<sim::CostTableIndex> costs;
  if (!costs_path.empty()) {
    SF_ASSIGN_OR_RETURN(costs, LoadCostsFor(costs_path, scenario.proto()));
  }
  ProgressBar bar("configurations");
  SF_ASSIGN_OR_RETURN(
      pb::SweepReport report,
      sim::RunSweep(scenario, sweep,
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

int SweepCommand(int argc, char** argv) {
  ScenarioFlags flags;
  SweepFlags sweep_flags;
  std::string csv_path, costs_path;
  po::options_description desc("stateflow sweep [options]");
  desc.add_options()("help,h", "show this help")
      ("json", "print the SweepReport as JSON on stdout instead of the table")
      ("csv", po::value(&csv_path), "write one row per simulated configuration to this file")
      ("costs", po::value(&costs_path),
       "replay this CostTable (stateflow profile) instead of the cost model: it must hold "
       "every configuration's chunk lengths (at most 64 MiB)");
  AddSweepOptions(&desc, &sweep_flags);
  AddScenarioOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kSweepName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kSweepExamples;
    return kExitOk;
  }
  // Before the sweep (issue 31): a CSV path that cannot be written.
  if (Status s = CheckOutputPath("--csv", csv_path); !s.ok()) return Fail(kSweepName, s);
  Result<pb::SweepReport> report = Run(flags, sweep_flags, costs_path);
  if (!report.ok()) return Fail(kSweepName, report.status());
  if (!csv_path.empty()) {
    if (Status s = WriteSweepCsv(*report, csv_path); !s.ok()) return Fail(kSweepName, s);
  }
  if (vm.count("json")) {
    std::cout << MessageToJson(*report);
    return kExitOk;
  }
  std::cout << FormatSweepTable(*report);
  if (!csv_path.empty()) {
    std::cout << "\n" << report->runs_size() << " rows written to " << csv_path << "\n";
  }
  return kExitOk;
}

}  // namespace stateflow::tools

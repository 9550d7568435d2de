// `stateflow simulate`: one scenario, its schedule and baselines, simulated.
#include <iostream>
#include <optional>

#include "common/files.h"
#include "common/trace.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "schedule/plan.h"
#include "schedule/plan_text.h"
#include "schedule/validator.h"
#include "sim/explain.h"
#include "sim/simulation.h"
#include "tools/cli.h"
#include "tools/report_format.h"

namespace stateflow::tools {
namespace {

using sim::MemorySample;
using sim::SimulationOptions;
using sim::Simulation;
using sim::Simulate;
using sim::Slice;
using sim::StageResult;

constexpr char kSimulateName[] = "simulate";

constexpr char kSimulateExamples[] = R"(examples:
  stateflow simulate
      the default scenario: 3B GDN, 64K tokens, 8 A100s, StateFlow N=8 beside 1F1B
  stateflow simulate --scenario scenarios/default.textproto --chunks 16 --json
  stateflow simulate --policy stateflow -P 4 -M 8 -N 4 --cost-model uniform
      the idealised case of the paper's analysis (times in units)
  stateflow simulate --trace trace.json
      open trace.json in ui.perfetto.dev: one track per stage, memory counters
  stateflow plan-dump -N 4 --out plan.txt && stateflow simulate -N 4 --plan plan.txt
      simulate a plan edited by hand (it is validated first)
  stateflow simulate --scenario scenarios/tiny-train.textproto --costs costs.textproto
      replay costs measured on this machine by `stateflow profile`
  stateflow simulate --model gdn-15b --tensor-parallel 4 -P 4 -N 4 --compute-units 108 \
      --st-overlap on --explain
      where the step's time goes: per layer kind and per stage, compute, memory,
      the state transition's exposed time and what overlap hid, TP all-reduces
)";

void AddTrace(const Simulation& sim, int pid, TraceWriter* trace) {
  std::string name = "simulate " + sim.report.policy() + " N=" + std::to_string(sim.report.chunks());
  if (sim.config.plan.virtual_stages() > 1) {
    name += " v=" + std::to_string(sim.config.plan.virtual_stages());
  }
  trace->BeginProcess(name, pid);
  for (std::size_t r = 0; r < sim.engine.stages.size(); ++r) {
    const StageResult& stage = sim.engine.stages[r];
    for (const Slice& s : stage.slices) {
      trace->AddSlice(static_cast<int>(r), schedule::ToString(s.action),
                      std::string(1, schedule::PassLetter(s.action.pass)), s.start_s, s.end_s);
    }
    for (const MemorySample& m : stage.memory) {
      trace->AddMemory(static_cast<int>(r), m.time_s, m.bytes);
    }
  }
}

Result<schedule::Plan> LoadPlan(const std::string& path, std::optional<long long> chunks) {
  SF_ASSIGN_OR_RETURN(schedule::Plan plan, LoadPlanFile(path, chunks));
  Status valid = schedule::ValidatePlan(plan);
  if (!valid.ok()) return valid.WithPrefix(path);
  return plan;
}

}  // namespace

int SimulateCommand(int argc, char** argv) {
  ScenarioFlags flags;
  std::string plan_path, trace_path, costs_path;
  po::options_description desc("stateflow simulate [options]");
  desc.add_options()("help,h", "show this help")
      ("json", "print the Report as JSON on stdout instead of the table")
      ("plan", po::value(&plan_path),
       ("simulate this plan file (plan-dump's text form, or torch.distributed.pipelining's schedule CSV whose microbatches are --chunks chunks each; at most " + LimitText(kMaxTextFileBytes) + ") as the schedule").c_str())
      ("trace", po::value(&trace_path), "write a Chrome/Perfetto trace to this file")
      ("explain", "also print where the time goes, term by term (the analytic model's "
                  "compute, memory, state transition, TP all-reduces; per layer kind and per "
                  "stage), for every schedule; in the JSON, each Report's explanation")
      ("costs", po::value(&costs_path),
       ("replay per-chunk costs measured by `stateflow profile` (a CostTable file, at most " + LimitText(kMaxTextFileBytes) + ")").c_str());
  AddScenarioOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(kSimulateName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kSimulateExamples;
    return kExitOk;
  }
  std::optional<schedule::Plan> plan;
  if (!plan_path.empty()) {
    Result<schedule::Plan> loaded = LoadPlan(plan_path, flags.chunks);
    if (!loaded.ok()) return Fail(kSimulateName, loaded.status());
    plan = std::move(loaded).value();
    // The plan decides the schedule's policy and chunk count; no baselines.
    if (!flags.chunks) flags.chunks = plan->chunks();
    if (!flags.virtual_stages) flags.virtual_stages = plan->virtual_stages();
    if (flags.policy.empty()) flags.policy = SchedulePolicyFor(*plan);
  }
  // Before the simulation (issue 31): a trace path that cannot be written.
  if (Status s = CheckOutputPath("--trace", trace_path); !s.ok()) return Fail(kSimulateName, s);
  Result<scenario::ResolvedScenario> resolved = LoadResolvedScenario(flags);
  if (!resolved.ok()) return Fail(kSimulateName, resolved.status());
  const pb::Scenario& scenario = resolved->proto();

  std::optional<sim::CostTableIndex> costs;
  if (!costs_path.empty()) {
    Result<sim::CostTableIndex> index = LoadCostsFor(costs_path, scenario);
    if (!index.ok()) return Fail(kSimulateName, index.status());
    costs = std::move(index).value();
  }
  const bool want_trace = !trace_path.empty();
  SimulationOptions options{.record_timeline = want_trace,
                            .plan = plan ? &*plan : nullptr,
                            .costs = costs ? &*costs : nullptr};
  const bool explain = vm.count("explain") > 0;
  // The schedule's terms in its report (simulate --explain).
  const auto add_explanation = [&](const Simulation& sim, pb::Report* report) -> Status {
    if (!explain) return Status::Ok();
    SF_ASSIGN_OR_RETURN(*report->mutable_explanation(), sim::Explain(sim));
    return Status::Ok();
  };
  Result<Simulation> primary = Simulate(*resolved, scenario.schedule(), options);
  if (!primary.ok()) return Fail(kSimulateName, primary.status());
  TraceWriter trace("simulate");
  if (want_trace) AddTrace(*primary, 0, &trace);

  pb::Report report = primary->report;
  if (plan) report.set_policy(plan->policy());  // a plan imported or made elsewhere keeps its name
  if (Status s = add_explanation(*primary, &report); !s.ok()) return Fail(kSimulateName, s);
  for (int b = 0; b < scenario.baselines_size(); ++b) {
    Result<Simulation> base =
        Simulate(*resolved, scenario.baselines(b),
                 {.record_timeline = want_trace, .costs = options.costs});
    if (!base.ok()) {
      return Fail(kSimulateName, base.status().WithPrefix("baselines[" + std::to_string(b) + "]"));
    }
    *report.add_comparisons() = base->report;
    if (Status s = add_explanation(*base, report.mutable_comparisons(b)); !s.ok()) {
      return Fail(kSimulateName, s.WithPrefix("baselines[" + std::to_string(b) + "]"));
    }
    if (want_trace) AddTrace(*base, b + 1, &trace);
  }
  FillProvenance(1, &report);
  if (want_trace) {
    if (Status s = trace.WriteFile(trace_path); !s.ok()) return Fail(kSimulateName, s);
  }
  if (vm.count("json")) {
    std::cout << MessageToJson(report);
  } else {
    std::cout << FormatSimulateTable(report);
    if (explain) {
      // Baselines first, the schedule under study last, as in the table.
      for (const pb::Report& base : report.comparisons()) {
        std::cout << "\n" << FormatExplanation(base);
      }
      std::cout << "\n" << FormatExplanation(report);
    }
  }
  if (want_trace && !vm.count("json")) std::cout << "\ntrace written to " << trace_path << "\n";
  return kExitOk;
}

}  // namespace stateflow::tools

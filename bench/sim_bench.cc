// Simulator speed: one StateFlow plan with P = 8, M = 16, N = 32 (8,192
// actions) on the 3B GDN preset, end to end (cost model, partition, plan,
// validation, events, report), the engine alone, and the reference event-queue
// engine alone.
//
//   ./build/bench/bench_sim --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include "models/model.h"
#include "sim/cost_source.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {

using ::stateflow::testing::MustResolve;
namespace {

pb::Scenario PaperScenario(int stages, int microbatches) {
  pb::Scenario s;
  s.set_name("bench");
  *s.mutable_model() = *models::ModelPreset("gdn-3b");
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  s.mutable_parallel()->set_pipeline_size(stages);
  s.mutable_parallel()->set_tensor_size(1);
  s.mutable_parallel()->set_data_size(1);
  s.mutable_parallel()->set_microbatch_size(1);
  s.mutable_parallel()->set_microbatches(microbatches);
  s.set_seq_len(65536);
  return s;
}

pb::ScheduleSpec StateflowSchedule(int chunks) {
  pb::ScheduleSpec spec;
  spec.set_policy("stateflow");
  spec.set_chunks(chunks);
  spec.set_granularity(128);
  spec.set_recompute("full");
  return spec;
}

void BM_SimulateEndToEnd(benchmark::State& state) {
  const scenario::ResolvedScenario s = MustResolve(PaperScenario(8, 16));
  const pb::ScheduleSpec spec = StateflowSchedule(static_cast<int>(state.range(0)));
  std::uint64_t events = 0, tasks = 0;
  for (auto _ : state) {
    Result<Simulation> sim = Simulate(s, spec);
    if (!sim.ok()) state.SkipWithError(sim.status().message().c_str());
    events += sim->report.num_events();
    tasks += sim->report.num_tasks();
    benchmark::DoNotOptimize(sim->report.step_time_s());
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events),
                                                   benchmark::Counter::kIsRate);
  state.counters["tasks"] = static_cast<double>(tasks) / state.iterations();
}
BENCHMARK(BM_SimulateEndToEnd)->Arg(32)->Unit(benchmark::kMillisecond);

void BM_EventLoopOnly(benchmark::State& state) {
  const scenario::ResolvedScenario s = MustResolve(PaperScenario(8, 16));
  const pb::ScheduleSpec spec = StateflowSchedule(static_cast<int>(state.range(0)));
  Result<Simulation> sim = Simulate(s, spec);
  SimSetup setup{&sim->config.placement->cost_model, sim->config.placement->stage_layers,
                 sim->config.partition, 16};
  auto costs = MakeAnalyticCostSource(setup);
  std::uint64_t events = 0;
  for (auto _ : state) {
    Result<EngineResult> r = RunPlan(sim->config.plan, *costs);
    events += r->num_events;
    benchmark::DoNotOptimize(r->step_time_s);
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EventLoopOnly)->Arg(32)->Unit(benchmark::kMillisecond);

// The same plan and costs through the reference discrete-event engine
// (RunPlanByEvents, an event queue): the engine's speed-up, side by side.
void BM_EventQueueReference(benchmark::State& state) {
  const scenario::ResolvedScenario s = MustResolve(PaperScenario(8, 16));
  const pb::ScheduleSpec spec = StateflowSchedule(static_cast<int>(state.range(0)));
  Result<Simulation> sim = Simulate(s, spec);
  SimSetup setup{&sim->config.placement->cost_model, sim->config.placement->stage_layers,
                 sim->config.partition, 16};
  auto costs = MakeAnalyticCostSource(setup);
  std::uint64_t events = 0;
  for (auto _ : state) {
    Result<EngineResult> r = RunPlanByEvents(sim->config.plan, *costs);
    events += r->num_events;
    benchmark::DoNotOptimize(r->step_time_s);
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(events),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EventQueueReference)->Arg(32)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace stateflow::sim

BENCHMARK_MAIN();

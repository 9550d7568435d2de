#include "sim/simulation.h"

#include <algorithm>
#include <memory>
#include <string>

#include "scenario/report_header.h"
#include "sim/cost_source.h"

namespace stateflow::sim {
namespace {

int OrOne(std::uint32_t v) { return v == 0 ? 1 : static_cast<int>(v); }

std::string ClassOf(const ClassBytes& bytes) {
  int best = 0;
  for (int c = 1; c < kNumBufferClasses; ++c) {
    if (bytes[c] > bytes[best]) best = c;
  }
  return std::string(BufferClassName(static_cast<BufferClass>(best)));
}

std::string Gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

void FillStages(const EngineResult& engine, const schedule::Plan& plan,
                const std::vector<models::StageLayers>& layers,
                const pb::DeviceSpec& device, pb::Report* report) {
  const double usable = models::UsableMemoryBytes(device);
  double busy_total = 0.0;
  const double step = engine.step_time_s;
  for (std::size_t r = 0; r < engine.stages.size(); ++r) {
    const StageResult& s = engine.stages[r];
    pb::StageReport* out = report->add_stages();
    out->set_stage(static_cast<std::uint32_t>(r));
    const models::StageLayers& own = layers[static_cast<std::size_t>(
        plan.ModelStageOf(static_cast<int>(r), 0))];
    out->set_first_layer(own.first);
    out->set_last_layer(own.last);
    for (int k = 0; plan.virtual_stages() > 1 && k < plan.virtual_stages(); ++k) {
      const int s = plan.ModelStageOf(static_cast<int>(r), k);
      pb::LayerRange* range = out->add_model_stages();
      range->set_model_stage(static_cast<std::uint32_t>(s));
      range->set_first_layer(layers[static_cast<std::size_t>(s)].first);
      range->set_last_layer(layers[static_cast<std::size_t>(s)].last);
    }
    out->set_busy_s(s.busy_s);
    out->set_bubble_fraction(step > 0 ? 1.0 - s.busy_s / step : 0.0);
    out->set_peak_memory_bytes(s.peak_bytes);
    out->set_peak_time_s(s.peak_time_s);
    out->set_peak_dominant_class(ClassOf(s.peak_by_class));
    for (int c = 0; c < kNumBufferClasses; ++c) {
      pb::BufferBytes* b = out->add_peak_by_class();
      b->set_buffer_class(std::string(kBufferClassNames[c]));
      b->set_bytes(s.peak_by_class[c]);
    }
    out->set_oom(models::OutOfMemory(s.peak_bytes, device));
    busy_total += s.busy_s;
    if (s.peak_bytes > report->peak_memory_bytes()) {
      report->set_peak_memory_bytes(s.peak_bytes);
    }
    if (out->oom() && !report->oom()) {
      report->set_oom(true);
      report->set_oom_detail("stage " + std::to_string(r) + " peaks at " +
                             Gib(s.peak_bytes) + " > usable " + Gib(usable) + " (capacity " +
                             Gib(device.memory_capacity_bytes()) + " - reserve " +
                             Gib(models::MemoryReserveBytes(device)) + ")" +
                             " (largest: " + out->peak_dominant_class() + ")");
    }
  }
  const double p = static_cast<double>(engine.stages.size());
  report->set_bubble_fraction(step > 0 ? 1.0 - busy_total / (p * step) : 0.0);
}

}  // namespace

Result<Simulation> Simulate(const scenario::ResolvedScenario& scenario,
                            const pb::ScheduleSpec& schedule,
                            const SimulationOptions& options) {
  SF_ASSIGN_OR_RETURN(scenario::Configuration config,
                      scenario::Configure(scenario, schedule, {.plan = options.plan}));
  return SimulateConfigured(scenario, std::move(config), options);
}

Result<Simulation> SimulateConfigured(const scenario::ResolvedScenario& resolved,
                                      scenario::Configuration config,
                                      const SimulationOptions& options) {
  Simulation sim;
  sim.config = std::move(config);
  const pb::Scenario& scenario = resolved.proto();
  const pb::ParallelSpec& par = scenario.parallel();
  const int stages = resolved.stages();
  const int microbatches = resolved.microbatches();
  const std::int64_t seq_len = resolved.seq_len();
  const double capacity = scenario.cluster().device().memory_capacity_bytes();
  const models::CostModel& cm = sim.config.placement->cost_model;
  const models::CostModelOptions& cost_options = cm.options();
  const std::vector<models::StageLayers>& stage_layers = sim.config.placement->stage_layers;
  const schedule::Plan& plan = sim.config.plan;
  const schedule::Partition& partition = sim.config.partition;

  SimSetup setup{&cm, stage_layers, partition, microbatches,
                 sim.config.placement->memory_cache.get(),
                 sim.config.placement->time_cache.get(), plan.virtual_stages(),
                 schedule::SplitsBackward(plan)};
  std::unique_ptr<CostSource> costs;
  const std::string& cost_model = scenario.cost_model();
  if (options.stage_costs != nullptr && options.stage_costs->size() ==
                                            static_cast<std::size_t>(plan.stages()) &&
      plan.virtual_stages() > 1) {
    // One table per stage (a process profiled per rank, as validate takes
    // them): each model stage is timed by its stage's.
    std::vector<const CostTableIndex*> per_model_stage;
    for (int s = 0; s < plan.model_stages(); ++s) {
      per_model_stage.push_back((*options.stage_costs)[static_cast<std::size_t>(plan.RankOf(s))]);
    }
    SF_ASSIGN_OR_RETURN(costs, MakeReplayCostSource(setup, per_model_stage));
  } else if (options.stage_costs != nullptr) {
    SF_ASSIGN_OR_RETURN(costs, MakeReplayCostSource(setup, *options.stage_costs));
  } else if (options.costs != nullptr) {
    SF_ASSIGN_OR_RETURN(costs, MakeReplayCostSource(setup, *options.costs));
  } else if (cost_model.empty() || cost_model == "analytic") {
    costs = MakeAnalyticCostSource(setup);
  } else if (cost_model == "uniform") {
    costs = MakeUniformCostSource(setup);
  } else if (cost_model == "replay") {
    return Status::Invalid("cost_model replay needs a measured cost table (--costs FILE)");
  } else {
    return Status::Invalid("cost_model: unknown '" + cost_model +
                           "' (known: analytic, uniform, replay)");
  }
  if (options.durations != nullptr) {
    SF_ASSIGN_OR_RETURN(costs,
                        MakeMeasuredDurationSource(std::move(costs), *options.durations, plan));
  }
  SF_ASSIGN_OR_RETURN(sim.engine,
                      RunPlan(plan, *costs, {.record_timeline = options.record_timeline}));

  pb::Report& report = sim.report;
  scenario::FillReportHeader({.source = "simulate",
                              .scenario = scenario.name(),
                              .model = scenario.model().name(),
                              .plan = &plan,
                              .partition = &partition,
                              .pipeline_size = stages,
                              .tensor_size = cost_options.tensor_size,
                              .data_size = OrOne(par.data_size()),
                              .microbatches = microbatches,
                              .context_size = cost_options.context_size,
                              .seq_len = static_cast<std::int64_t>(scenario.seq_len()),
                              .alpha = sim.config.schedule.alpha(),
                              .recompute = cost_options.recompute,
                              .st_overlap = cost_options.st_overlap,
                              .st_tile = cost_options.st_tile,
                              .cost_model = costs->name(),
                              .time_unit = costs->time_unit()},
                             &report);
  report.set_compute_units(cm.cluster().device().compute_units());
  report.set_step_time_s(sim.engine.step_time_s);
  const double tokens = static_cast<double>(microbatches) * cost_options.microbatch_size *
                        report.data_size() * static_cast<double>(seq_len);
  report.set_tokens_per_s(sim.engine.step_time_s > 0 ? tokens / sim.engine.step_time_s : 0);
  report.set_num_events(sim.engine.num_events);
  report.set_capacity_bytes(capacity);
  report.set_usable_bytes(models::UsableMemoryBytes(scenario.cluster().device()));
  report.set_system(std::string(models::SystemName(cost_options.system)));
  report.set_framework(models::FrameworkSettingsText(cm));
  FillStages(sim.engine, plan, stage_layers, scenario.cluster().device(), &report);
  return sim;
}

}  // namespace stateflow::sim

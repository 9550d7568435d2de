#include "sim/simulation.h"

#include <algorithm>
#include <memory>
#include <string>

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

void FillStages(const EngineResult& engine,
                const std::vector<models::StageLayers>& layers, double capacity,
                pb::Report* report) {
  double busy_total = 0.0;
  const double step = engine.step_time_s;
  for (std::size_t r = 0; r < engine.stages.size(); ++r) {
    const StageResult& s = engine.stages[r];
    pb::StageReport* out = report->add_stages();
    out->set_stage(static_cast<std::uint32_t>(r));
    out->set_first_layer(layers[r].first);
    out->set_last_layer(layers[r].last);
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
    out->set_oom(s.peak_bytes > capacity);
    busy_total += s.busy_s;
    if (s.peak_bytes > report->peak_memory_bytes()) {
      report->set_peak_memory_bytes(s.peak_bytes);
    }
    if (out->oom() && !report->oom()) {
      report->set_oom(true);
      report->set_oom_detail("stage " + std::to_string(r) + " peaks at " +
                             Gib(s.peak_bytes) + " > capacity " + Gib(capacity) +
                             " (largest: " + out->peak_dominant_class() + ")");
    }
  }
  const double p = static_cast<double>(engine.stages.size());
  report->set_bubble_fraction(step > 0 ? 1.0 - busy_total / (p * step) : 0.0);
}

}  // namespace

Result<PreparedScenario> PrepareScenario(const pb::Scenario& scenario,
                                         const pb::ScheduleSpec& schedule) {
  const int stages = static_cast<int>(scenario.parallel().pipeline_size());
  if (stages < 1) return Status::Invalid("parallel.pipeline_size must be >= 1");
  if (scenario.seq_len() < 1) return Status::Invalid("seq_len must be >= 1");
  const auto seq_len = static_cast<std::int64_t>(scenario.seq_len());
  SF_ASSIGN_OR_RETURN(models::CostModelOptions cost_options,
                      models::CostOptionsFor(scenario, schedule));
  SF_ASSIGN_OR_RETURN(models::CostModel cm,
                      models::CostModel::Make(scenario.model(), scenario.precision(),
                                              scenario.cluster(), cost_options));
  SF_ASSIGN_OR_RETURN(std::vector<models::StageLayers> layers,
                      models::AssignScenarioStages(cm, stages, seq_len));
  auto memory_cache = std::make_shared<models::ActionMemoryCache>(cm);
  return PreparedScenario{std::move(cm), std::move(layers), std::move(memory_cache)};
}

Result<Simulation> Simulate(const pb::Scenario& scenario,
                            const pb::ScheduleSpec& schedule,
                            const SimulationOptions& options) {
  SF_ASSIGN_OR_RETURN(PreparedScenario prepared, PrepareScenario(scenario, schedule));
  return SimulatePrepared(scenario, prepared, schedule, options);
}

Result<Simulation> SimulatePrepared(const pb::Scenario& scenario,
                                    const PreparedScenario& prepared,
                                    const pb::ScheduleSpec& schedule,
                                    const SimulationOptions& options) {
  Simulation sim;
  const pb::ParallelSpec& par = scenario.parallel();
  const int stages = static_cast<int>(par.pipeline_size());
  const int microbatches = static_cast<int>(par.microbatches());
  if (microbatches < 1) return Status::Invalid("parallel.microbatches must be >= 1");
  const auto seq_len = static_cast<std::int64_t>(scenario.seq_len());
  const double capacity = scenario.cluster().device().memory_capacity_bytes();
  const models::CostModel& cm = prepared.cost_model;
  const models::CostModelOptions& cost_options = cm.options();
  SF_ASSIGN_OR_RETURN(models::Recompute recompute,
                      models::ParseRecompute(schedule.recompute()));
  if (static_cast<int>(prepared.stage_layers.size()) != stages ||
      recompute != cost_options.recompute) {
    return Status::Internal("SimulatePrepared: prepared for " +
                            std::to_string(prepared.stage_layers.size()) +
                            " stages and recompute " +
                            std::string(models::RecomputeName(cost_options.recompute)) +
                            ", asked for " + std::to_string(stages) + " and " +
                            std::string(models::RecomputeName(recompute)));
  }
  sim.stage_layers = prepared.stage_layers;
  SF_ASSIGN_OR_RETURN(sim.partition, models::PartitionFor(cm, seq_len, schedule));

  if (options.plan != nullptr) {
    const schedule::Plan& p = *options.plan;
    if (p.stages() != stages || p.microbatches() != microbatches ||
        p.chunks() != static_cast<int>(schedule.chunks())) {
      return Status::Invalid(
          "plan is for stages " + std::to_string(p.stages()) + " microbatches " +
          std::to_string(p.microbatches()) + " chunks " + std::to_string(p.chunks()) +
          " but the scenario has parallel.pipeline_size " + std::to_string(stages) +
          ", parallel.microbatches " + std::to_string(microbatches) +
          ", schedule.chunks " + std::to_string(schedule.chunks()));
    }
    sim.plan = p;
  } else {
    SF_ASSIGN_OR_RETURN(sim.plan, schedule::MakePlan(schedule.policy(), stages,
                                                     microbatches,
                                                     static_cast<int>(schedule.chunks())));
  }
  SF_RETURN_IF_ERROR(schedule::ValidatePlan(sim.plan));

  SimSetup setup{&cm, sim.stage_layers, sim.partition, microbatches,
                 prepared.memory_cache.get()};
  std::unique_ptr<CostSource> costs;
  const std::string& cost_model = scenario.cost_model();
  if (options.stage_costs != nullptr) {
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
                        MakeMeasuredDurationSource(std::move(costs), *options.durations, sim.plan));
  }
  SF_ASSIGN_OR_RETURN(sim.engine,
                      RunPlan(sim.plan, *costs, {.record_timeline = options.record_timeline}));

  pb::Report& report = sim.report;
  report.set_scenario(scenario.name());
  report.set_source("simulate");
  report.set_model(scenario.model().name());
  report.set_policy(sim.plan.policy());
  report.set_pipeline_size(stages);
  report.set_tensor_size(cost_options.tensor_size);
  report.set_data_size(OrOne(par.data_size()));
  report.set_microbatches(microbatches);
  report.set_chunks(schedule.chunks());
  report.set_alpha(schedule.alpha());
  report.set_seq_len(scenario.seq_len());
  report.set_recompute(cost_options.recompute == models::Recompute::kFull ? "full" : "none");
  report.set_cost_model(costs->name());
  report.set_time_unit(costs->time_unit());
  for (std::int64_t b : sim.partition.boundaries()) report.add_chunk_boundaries(b);
  report.set_step_time_s(sim.engine.step_time_s);
  const double tokens = static_cast<double>(microbatches) * cost_options.microbatch_size *
                        report.data_size() * static_cast<double>(seq_len);
  report.set_tokens_per_s(sim.engine.step_time_s > 0 ? tokens / sim.engine.step_time_s : 0);
  report.set_num_tasks(sim.plan.num_actions());
  report.set_num_events(sim.engine.num_events);
  report.set_capacity_bytes(capacity);
  FillStages(sim.engine, sim.stage_layers, capacity, &report);
  return sim;
}

}  // namespace stateflow::sim

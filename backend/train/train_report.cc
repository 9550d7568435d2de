#include "backend/train/train_report.h"

#include <algorithm>

#include "models/cost_model.h"
#include "scenario/report_header.h"

namespace stateflow::backend {
namespace {

// Per stage over steps: the step with the highest total peak.
const StageStepStats* PeakStep(const std::vector<StepResult>& steps, int stage) {
  const StageStepStats* best = nullptr;
  for (const StepResult& s : steps) {
    const StageStepStats& st = s.stages[stage];
    if (best == nullptr || st.memory.peak_total_bytes > best->memory.peak_total_bytes) {
      best = &st;
    }
  }
  return best;
}

void FillStage(const std::vector<StepResult>& steps, const std::vector<StepResult>& measured,
               const TrainSetup& setup, double step_time_s, int r, pb::StageReport* out) {
  out->set_stage(r);
  const models::StageLayers& own =
      setup.stage_layers[static_cast<std::size_t>(setup.plan.ModelStageOf(r, 0))];
  out->set_first_layer(own.first);
  out->set_last_layer(own.last);
  for (int k = 0; setup.plan.virtual_stages() > 1 && k < setup.plan.virtual_stages(); ++k) {
    const int s = setup.plan.ModelStageOf(r, k);
    pb::LayerRange* range = out->add_model_stages();
    range->set_model_stage(static_cast<std::uint32_t>(s));
    range->set_first_layer(setup.stage_layers[static_cast<std::size_t>(s)].first);
    range->set_last_layer(setup.stage_layers[static_cast<std::size_t>(s)].last);
  }
  double busy = 0;
  for (const StepResult& s : measured) busy += s.stages[r].busy_s;
  busy /= static_cast<double>(measured.size());
  out->set_busy_s(busy);
  out->set_bubble_fraction(step_time_s > 0 ? 1.0 - busy / step_time_s : 0.0);
  const StageStepStats* peak = PeakStep(steps, r);
  out->set_peak_memory_bytes(static_cast<double>(peak->memory.peak_total_bytes));
  out->set_peak_time_s(std::max(0.0, peak->peak_time_s));
  int dominant = 0;
  for (int c = 0; c < kNumBufferClasses; ++c) {
    const std::int64_t bytes = peak->memory.at_total_peak_bytes[c];
    if (bytes > peak->memory.at_total_peak_bytes[dominant]) dominant = c;
    pb::BufferBytes* b = out->add_peak_by_class();
    b->set_buffer_class(std::string(kBufferClassNames[c]));
    b->set_bytes(static_cast<double>(bytes));
  }
  out->set_peak_dominant_class(std::string(kBufferClassNames[dominant]));
}

}  // namespace

std::vector<StepResult> MeasuredSteps(const std::vector<StepResult>& steps) {
  if (steps.size() < 2) return steps;
  return std::vector<StepResult>(steps.begin() + 1, steps.end());
}

pb::Report MakeTrainReport(const TrainSetup& setup, const TrainOptions& options,
                           const std::vector<StepResult>& steps) {
  pb::Report report;
  scenario::FillReportHeader({.source = "train",
                              .scenario = setup.scenario_name,
                              .model = setup.model.name(),
                              .plan = &setup.plan,
                              .partition = &setup.partition,
                              .pipeline_size = setup.stages,
                              .tensor_size = setup.tensor_size,
                              .data_size = setup.data_size,
                              .microbatches = setup.microbatches,
                              .seq_len = setup.seq_len,
                              .alpha = setup.alpha,
                              .recompute = setup.recompute,
                              .st_overlap = setup.st_overlap,  // the recurrent cores split and overlapped
                              .st_tile = setup.st_tile,
                              .cost_model = "measured",
                              .time_unit = "s"},
                             &report);
  if (options.capacity_bytes) report.set_capacity_bytes(static_cast<double>(*options.capacity_bytes));
  for (const StepResult& s : steps) {
    report.add_losses(s.loss);
    report.add_step_times_s(s.time_s);
  }
  if (steps.empty()) return report;

  const std::vector<StepResult> measured = MeasuredSteps(steps);
  double step_time = 0;
  for (const StepResult& s : measured) step_time += s.time_s;
  step_time /= static_cast<double>(measured.size());
  report.set_step_time_s(step_time);
  const double tokens = static_cast<double>(setup.microbatches) * setup.data_size *
                        setup.microbatch_size * setup.seq_len;
  report.set_tokens_per_s(step_time > 0 ? tokens / step_time : 0);
  double busy_total = 0;
  for (int r = 0; r < setup.stages; ++r) {
    pb::StageReport* stage = report.add_stages();
    FillStage(steps, measured, setup, step_time, r, stage);
    busy_total += stage->busy_s();
    report.set_peak_memory_bytes(std::max(report.peak_memory_bytes(), stage->peak_memory_bytes()));
  }
  report.set_bubble_fraction(step_time > 0 ? 1.0 - busy_total / (setup.stages * step_time) : 0);
  return report;
}

void AddTrainTrace(const std::vector<StageTimeline>& timelines, const std::string& label,
                   int pid, TraceWriter* trace) {
  trace->BeginProcess(label, pid);
  for (const StageTimeline& t : timelines) {
    for (const ActionRecord& r : t.actions) {
      trace->AddSlice(t.stage, schedule::ToString(r.action),
                      std::string(1, schedule::PassLetter(r.action.pass)), r.start_s, r.end_s);
    }
    for (std::size_t k = 0; k < t.optimizer_start_s.size(); ++k) {
      trace->AddSlice(t.stage, "optimizer", "optimizer", t.optimizer_start_s[k],
                      t.optimizer_end_s[k]);
    }
    for (const MemorySample& m : t.memory) {
      std::array<double, kNumBufferClasses> bytes{};
      for (int c = 0; c < kNumBufferClasses; ++c) bytes[c] = static_cast<double>(m.bytes[c]);
      trace->AddMemory(t.stage, m.time_s, bytes);
    }
  }
}

}  // namespace stateflow::backend

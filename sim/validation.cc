#include "sim/validation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "common/buffer_class.h"
#include "common/quantile.h"
#include "schedule/action.h"

namespace stateflow::sim {
namespace {

std::map<std::string, double> ByClass(const pb::StageReport& stage) {
  std::map<std::string, double> bytes;
  for (const pb::BufferBytes& b : stage.peak_by_class()) bytes[b.buffer_class()] = b.bytes();
  return bytes;
}

// The eight classes in ledger order, 0 bytes for a class `stage` lacks.
void AddClasses(const pb::StageReport& stage,
                google::protobuf::RepeatedPtrField<pb::BufferBytes>* out) {
  const std::map<std::string, double> bytes = ByClass(stage);
  for (std::string_view name : kBufferClassNames) {
    pb::BufferBytes* b = out->Add();
    b->set_buffer_class(std::string(name));
    auto it = bytes.find(std::string(name));
    b->set_bytes(it == bytes.end() ? 0.0 : it->second);
  }
}

// The median over the steps after the first, when there are two or more.
double MedianAfterFirst(std::vector<double> times_s) {
  if (times_s.size() >= 2) times_s.erase(times_s.begin());
  return Quantile(std::move(times_s), 0.5);
}

// Each round's measured step time, in round order.
std::vector<double> RoundStepTimes(const std::vector<MeasuredRun>& rounds) {
  std::vector<double> times;
  for (const MeasuredRun& run : rounds) times.push_back(MeasuredStepTime(run.report).step_time_s);
  return times;
}

// The index of the lower middle value of `values` (ties: the first index).
std::size_t LowerMedianIndex(const std::vector<double>& values) {
  std::vector<std::pair<double, std::size_t>> by_value;
  for (std::size_t k = 0; k < values.size(); ++k) by_value.emplace_back(values[k], k);
  std::sort(by_value.begin(), by_value.end());
  return by_value[(by_value.size() - 1) / 2].second;
}

}  // namespace

double RelError(double predicted, double measured) {
  return measured != 0 ? (predicted - measured) / measured : 0.0;
}

MeasuredStep MeasuredStepTime(const pb::Report& measured) {
  std::vector<double> times(measured.step_times_s().begin(), measured.step_times_s().end());
  if (times.size() >= 2) times.erase(times.begin());
  const auto steps = static_cast<std::uint32_t>(times.size());
  return {times.empty() ? measured.step_time_s() : Quantile(times, 0.5), steps};
}

std::size_t MedianRound(const std::vector<MeasuredRun>& rounds) {
  return LowerMedianIndex(RoundStepTimes(rounds));
}

std::size_t MedianReport(const std::vector<pb::Report>& reports) {
  std::vector<double> times;
  for (const pb::Report& r : reports) times.push_back(r.step_time_s());
  return LowerMedianIndex(times);
}

pb::ValidationStage CompareStage(const pb::StageReport& p, const pb::StageReport& m,
                                 double measured_step_s) {
  pb::ValidationStage s;
  s.set_stage(p.stage());
  s.set_predicted_busy_s(p.busy_s());
  s.set_measured_busy_s(m.busy_s());
  s.set_busy_rel_error(RelError(p.busy_s(), m.busy_s()));
  s.set_predicted_bubble_fraction(p.bubble_fraction());
  s.set_measured_bubble_fraction(measured_step_s > 0 ? 1 - m.busy_s() / measured_step_s : 0);
  s.set_predicted_peak_memory_bytes(p.peak_memory_bytes());
  s.set_measured_peak_memory_bytes(m.peak_memory_bytes());
  s.set_peak_memory_rel_error(RelError(p.peak_memory_bytes(), m.peak_memory_bytes()));
  AddClasses(p, s.mutable_predicted_peak_by_class());
  AddClasses(m, s.mutable_measured_peak_by_class());
  return s;
}

pb::ValidationRun Compare(const pb::Report& predicted, const std::vector<MeasuredRun>& rounds,
                          const pb::Report& replayed, const RunShape& shape) {
  const std::vector<double> times = RoundStepTimes(rounds);
  const pb::Report& measured = rounds[MedianRound(rounds)].report;
  const MeasuredStep own = MeasuredStepTime(measured);
  const double step = Quantile(times, 0.5);
  pb::ValidationRun run;
  run.set_policy(predicted.policy());
  run.set_virtual_stages(static_cast<std::uint32_t>(
      predicted.stages_size() > 0 ? std::max(1, predicted.stages(0).model_stages_size()) : 1));
  run.set_pipeline_size(predicted.pipeline_size());
  run.set_microbatches(static_cast<std::uint32_t>(shape.microbatches));
  run.set_chunks(predicted.chunks());
  run.set_alpha(predicted.alpha());
  run.set_seq_len(shape.seq_len);
  run.set_recompute(predicted.recompute());
  // The step count of the last round, as each round runs the same steps.
  run.set_measured_steps(MeasuredStepTime(rounds.back().report).steps);
  run.set_rounds(static_cast<std::uint32_t>(rounds.size()));
  run.set_measured_step_time_min_s(*std::min_element(times.begin(), times.end()));
  run.set_measured_step_time_max_s(*std::max_element(times.begin(), times.end()));
  run.set_replayed_step_time_s(replayed.step_time_s());
  run.set_replayed_run_step_time_s(own.step_time_s);
  run.set_replay_step_time_rel_error(RelError(replayed.step_time_s(), own.step_time_s));
  run.set_predicted_step_time_s(predicted.step_time_s());
  run.set_measured_step_time_s(step);
  run.set_step_time_rel_error(RelError(predicted.step_time_s(), step));
  run.set_predicted_bubble_fraction(predicted.bubble_fraction());
  double busy = 0;
  for (int r = 0; r < predicted.stages_size(); ++r) {
    pb::ValidationStage s = CompareStage(predicted.stages(r), measured.stages(r), step);
    busy += s.measured_busy_s();
    if (std::abs(s.peak_memory_rel_error()) >= std::abs(run.peak_memory_rel_error())) {
      run.set_peak_memory_rel_error(s.peak_memory_rel_error());
    }
    *run.add_stages() = std::move(s);
  }
  const double stages = predicted.stages_size();
  run.set_measured_bubble_fraction(step > 0 ? 1 - busy / (stages * step) : 0);
  return run;
}

void Summarize(pb::ValidationReport* report) {
  std::vector<double> step_errors, replay_errors;
  for (const pb::ValidationRun& r : report->runs()) {
    step_errors.push_back(std::abs(r.step_time_rel_error()));
    replay_errors.push_back(std::abs(r.replay_step_time_rel_error()));
    report->set_max_abs_step_time_rel_error(
        std::max(report->max_abs_step_time_rel_error(), std::abs(r.step_time_rel_error())));
    report->set_max_abs_peak_memory_rel_error(
        std::max(report->max_abs_peak_memory_rel_error(), std::abs(r.peak_memory_rel_error())));
    report->set_max_abs_replay_step_time_rel_error(std::max(
        report->max_abs_replay_step_time_rel_error(), std::abs(r.replay_step_time_rel_error())));
  }
  if (!step_errors.empty()) {
    report->set_median_abs_step_time_rel_error(Quantile(step_errors, 0.5));
    report->set_median_abs_replay_step_time_rel_error(Quantile(replay_errors, 0.5));
  }
}

Result<MeasuredDurations> DurationsFromTrace(const pb::Trace& trace, int stages,
                                             int virtual_stages,
                                             schedule::StagePlacement placement) {
  std::map<schedule::Action, std::vector<double>> actions;
  std::vector<std::vector<double>> optimizer(static_cast<std::size_t>(stages));
  for (const pb::TraceEvent& e : trace.trace_events()) {
    if (e.ph() != "X" || e.tid() >= static_cast<std::uint32_t>(stages)) continue;
    const int stage = static_cast<int>(e.tid());
    if (e.name() == "optimizer") {
      optimizer[static_cast<std::size_t>(stage)].push_back(e.dur() * 1e-6);
      continue;
    }
    Result<schedule::Action> action = schedule::ParseAction(e.name());
    if (!action.ok()) continue;
    if (action->stage < 0 || action->stage >= stages * virtual_stages ||
        schedule::RankOfModelStage(action->stage, stages, virtual_stages, placement) != stage) {
      return Status::Internal("trace: action " + e.name() + " on the track of stage " +
                              std::to_string(stage));
    }
    actions[*action].push_back(e.dur() * 1e-6);
  }
  MeasuredDurations out;
  for (auto& [action, times] : actions) out.action_s[action] = MedianAfterFirst(std::move(times));
  for (std::vector<double>& times : optimizer) {
    if (times.empty()) {
      return Status::Internal("the trace of stage " + std::to_string(out.optimizer_s.size()) +
                              " has no optimizer step");
    }
    out.optimizer_s.push_back(MedianAfterFirst(std::move(times)));
  }
  return out;
}

}  // namespace stateflow::sim

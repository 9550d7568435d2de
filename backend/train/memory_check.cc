#include "backend/train/memory_check.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "backend/model/model_stage_module.h"
#include "backend/train/trainer.h"
#include "models/cost_model.h"
#include "models/memory_model.h"
#include "models/placement.h"
#include "scenario/configure.h"

namespace stateflow::backend {
namespace {

StagePeaks FromSegment(const models::MemorySegment& step) {
  StagePeaks p;
  p.peak_total_bytes = step.peak_total();
  p.at_peak = step.at_peak();
  p.class_peak = step.class_peak();
  return p;
}

StagePeaks FromStats(const MemoryStats& stats) {
  StagePeaks p;
  p.peak_total_bytes = static_cast<double>(stats.peak_total_bytes);
  for (int c = 0; c < kNumBufferClasses; ++c) {
    p.at_peak[c] = static_cast<double>(stats.at_total_peak_bytes[c]);
    p.class_peak[c] = static_cast<double>(stats.peak_bytes[c]);
  }
  return p;
}

template <typename T>
Result<std::vector<StagePeaks>> MeasureTyped(const TrainSetup& setup, const TrainOptions& options,
                                             const TextData& text) {
  StageModuleFactory<T> factory = [&](int, const models::StageLayers& layers,
                                      TrackingAllocator* alloc) {
    return MakeStageModule<T>(setup.model, layers, {.recompute = setup.recompute, .seed = options.seed, .microbatch_size = setup.microbatch_size, .st_overlap = setup.st_overlap, .st_tile = setup.st_tile, .split_backward = schedule::SplitsBackward(setup.plan)}, alloc);
  };
  SF_ASSIGN_OR_RETURN(Transport<T> transport, MakeSingleProcessTransport<T>(setup.stages, setup.data_size));
  SF_ASSIGN_OR_RETURN(std::unique_ptr<Trainer<T>> trainer,
                      Trainer<T>::Make(setup, options, text, factory, std::move(transport)));
  SF_ASSIGN_OR_RETURN(StepResult step, trainer->Step(0));
  std::vector<StagePeaks> peaks;
  for (const StageStepStats& s : step.stages) peaks.push_back(FromStats(s.memory));
  return peaks;
}

// Bytes whose windows cover any seq_len: the ledger does not read them.
TextData SyntheticText(std::int64_t seq_len) {
  std::string bytes(static_cast<std::size_t>(2 * seq_len + 2), '\0');
  for (std::size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<char>(k * 31 % 251);
  return TextData::FromBytes(std::move(bytes), "<synthetic>");
}

}  // namespace

Result<std::vector<StagePeaks>> PredictStageMemory(const scenario::ResolvedScenario& scenario,
                                                   const TrainSetup& setup,
                                                   const std::string& dtype) {
  SF_ASSIGN_OR_RETURN(pb::PrecisionSpec precision, models::PrecisionForDtype(dtype));
  SF_ASSIGN_OR_RETURN(std::shared_ptr<const scenario::Placement> placement,
                      scenario::Place(scenario, scenario.proto().schedule(), &precision));
  const models::CostModel& cm = placement->cost_model;
  std::vector<StagePeaks> peaks;
  for (int r = 0; r < setup.stages; ++r) {
    if (setup.plan.virtual_stages() == 1) {
      peaks.push_back(FromSegment(models::StageStepMemory(cm, setup.stage_layers[r],
                                                          setup.partition, setup.plan.stage(r))));
      continue;
    }
    std::vector<int> own;  // the stage's model stages
    for (int k = 0; k < setup.plan.virtual_stages(); ++k) own.push_back(setup.plan.ModelStageOf(r, k));
    peaks.push_back(FromSegment(models::StageStepMemory(cm, setup.stage_layers, own,
                                                        setup.partition, setup.plan.stage(r))));
  }
  return peaks;
}

Result<std::vector<StagePeaks>> MeasureStageMemory(const TrainSetup& setup,
                                                   const TrainOptions& options,
                                                   const TextData& text) {
  if (options.dtype == "float64") return MeasureTyped<double>(setup, options, text);
  if (options.dtype == "float32") return MeasureTyped<float>(setup, options, text);
  if (options.dtype == "bf16") return MeasureTyped<bf16>(setup, options, text);
  return Status::Invalid("train.dtype: unknown '" + options.dtype +
                         "' (known: float32, float64, bf16)");
}

Result<std::vector<StageMemoryCheck>> CheckStepMemory(const scenario::ResolvedScenario& scenario,
                                                      const std::string& dtype) {
  SF_ASSIGN_OR_RETURN(TrainSetup setup, MakeTrainSetup(scenario, nullptr));
  SF_ASSIGN_OR_RETURN(std::vector<StagePeaks> predicted,
                      PredictStageMemory(scenario, setup, dtype));
  TrainOptions options;
  options.dtype = dtype;
  // Measured on the scenario's device, whose core scratch the prediction counts.
  if (!scenario.proto().train().device().empty()) options.device = scenario.proto().train().device();
  SF_ASSIGN_OR_RETURN(std::vector<StagePeaks> measured,
                      MeasureStageMemory(setup, options, SyntheticText(setup.seq_len)));
  std::vector<StageMemoryCheck> checks;
  for (int r = 0; r < setup.stages; ++r) {
    checks.push_back(StageMemoryCheck{r, predicted[r], measured[r]});
  }
  return checks;
}

double MemoryRelError(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : (predicted > 0 ? 1.0 : -1.0);
  return (predicted - measured) / measured;
}

double WorstRelError(const std::vector<StageMemoryCheck>& stages) {
  double worst = 0;
  for (const StageMemoryCheck& s : stages) {
    worst = std::max(worst, std::abs(MemoryRelError(s.predicted.peak_total_bytes,
                                                    s.measured.peak_total_bytes)));
    for (int c = 0; c < kNumBufferClasses; ++c) {
      worst = std::max(worst, std::abs(MemoryRelError(s.predicted.at_peak[c], s.measured.at_peak[c])));
      worst = std::max(worst,
                       std::abs(MemoryRelError(s.predicted.class_peak[c], s.measured.class_peak[c])));
    }
  }
  return worst;
}

}  // namespace stateflow::backend

// Memory exactness, checked: the memory model's prediction for a scenario
// (models/memory_model.h, the simulator's ledger) beside what the backend's
// tracking allocators measure when the same plan runs one training step of
// the GDN model, stage by stage and buffer class by buffer class: the peak
// total, the bytes of each class at that peak, and each class's own peak.
// Both sides count the same buffers (docs/validation.md, "Memory: predicted
// vs measured"), so the expected relative error is 0.
//
// The measured step runs every stage in this process (in-process transport);
// a stage's ledger depends only on its own action order (stage_runtime.h),
// so an MPI run measures the same bytes. Not the timing comparison and not
// the command line (`stateflow validate` uses PredictStageMemory beside its
// measured reports, or CheckStepMemory).
//
//   SF_ASSIGN_OR_RETURN(std::vector<StageMemoryCheck> stages, CheckStepMemory(scenario, "float32"));
//   double worst = WorstRelError(stages);   // max |predicted - measured| / measured
#pragma once

#include <string>
#include <vector>

#include "backend/train/text_data.h"
#include "backend/train/train_setup.h"
#include "common/status.h"
#include "models/memory_segment.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// One stage's ledger at its peaks, over one step (weights, gradients and
// optimizer state included).
struct StagePeaks {
  double peak_total_bytes = 0;
  models::ClassBytes at_peak{};     // per class, when the total first peaked
  models::ClassBytes class_peak{};  // each class's own peak
};

struct StageMemoryCheck {
  int stage = 0;
  StagePeaks predicted;
  StagePeaks measured;
};

// The prediction for `setup` (its plan, partition and stage layers) with the
// scenario's model, TP/DP/microbatch size and recompute mode, in the
// precision of the backend's `dtype` (models::PrecisionForDtype). Errors:
// the scenario's cost model (names the field), an unknown dtype.
Result<std::vector<StagePeaks>> PredictStageMemory(const scenario::ResolvedScenario& scenario,
                                                   const TrainSetup& setup,
                                                   const std::string& dtype);

// One training step of the GDN model of `setup` in this process, in
// options.dtype, with the batches of `text`: each stage's allocator peaks
// within the step. Errors: the stage module's (an unsupported model), the
// trainer's (capacity), the text (shorter than seq_len + 1).
Result<std::vector<StagePeaks>> MeasureStageMemory(const TrainSetup& setup,
                                                   const TrainOptions& options,
                                                   const TextData& text);

// Both, for a resolved scenario: the setup of MakeTrainSetup, the
// prediction in `dtype`, one measured step in `dtype` on synthetic bytes
// (the ledger does not depend on the tokens), on the scenario's train.device
// (default cpu; the prediction counts that device's core scratch).
Result<std::vector<StageMemoryCheck>> CheckStepMemory(const scenario::ResolvedScenario& scenario,
                                                      const std::string& dtype);

// (predicted - measured) / measured; 0 when both are 0; +/-1 when only the
// measurement is 0 (the sign of the prediction).
double MemoryRelError(double predicted, double measured);

// The largest |MemoryRelError| over the stages: of the peak total, of every
// class at the peak and of every class's own peak.
double WorstRelError(const std::vector<StageMemoryCheck>& stages);

}  // namespace stateflow::backend

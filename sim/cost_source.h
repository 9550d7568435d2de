// Cost sources: where the simulator reads every duration and every buffer it
// allocates (ARCHITECTURE.md, invariant 2: costs are data). One interface,
// these sources:
//   - AnalyticCostSource: the analytic model (models/cost_model.h) on a
//     cluster preset, summed over each stage's layers;
//   - UniformCostSource: the idealised case of the paper's analysis, every
//     chunk's forward takes 1/N and its backward 2/N time units, and
//     communication is free. Memory still comes from the analytic model (the
//     idealisation is about time only).
//   - the replay of measured per-chunk costs (a CostTable, one for every
//     stage or one per stage): MakeReplayCostSource;
//   - on top of any of them, the measured durations of one real run:
//     MakeMeasuredDurationSource.
//
// Not the engine: a cost source answers "how long / how many bytes", never
// "when".
//
//   std::unique_ptr<CostSource> costs = MakeUniformCostSource(setup);
//   double t = costs->Duration(action);
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/buffer_class.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "models/layer_time_cache.h"
#include "models/memory_model.h"
#include "schedule/action.h"
#include "schedule/partition.h"
#include "schedule/plan.h"

namespace stateflow::sim {

// Bytes per buffer class.
using ClassBytes = std::array<double, kNumBufferClasses>;

// Bytes per class added to a stage's ledger at one moment, with whether any
// class changes and whether any grows, so that the engine need not look at
// every class of every action to know.
class MemoryDelta {
 public:
  MemoryDelta() = default;  // nothing changes
  explicit MemoryDelta(const ClassBytes& bytes) : bytes_(bytes) {
    for (double b : bytes_) {
      changes_ = changes_ || b != 0.0;
      grows_ = grows_ || b > 0.0;
    }
  }
  const ClassBytes& bytes() const { return bytes_; }
  bool changes() const { return changes_; }  // some class != 0
  bool grows() const { return grows_; }      // some class > 0

 private:
  ClassBytes bytes_{};
  bool changes_ = false;
  bool grows_ = false;
};

// What one action does to its stage's memory: `at_start` is allocated when it
// starts, `at_end` is added (usually negative: freed) when it ends.
struct MemoryEffect {
  MemoryDelta at_start;
  MemoryDelta at_end;
};

// Everything about a simulated configuration that a cost source needs.
struct SimSetup {
  const models::CostModel* cost_model = nullptr;  // not owned
  std::vector<models::StageLayers> stage_layers;  // (P v) per model stage
  schedule::Partition partition;                  // N chunks of T tokens
  int microbatches = 1;                           // M
  // Optional, not owned: action memory shared by the configurations of one
  // cost model (a sweep's), so that each distinct (stage, pass, chunk shape)
  // is composed once (models/memory_model.h). Null: the source composes
  // every action's memory with a cache of its own.
  // REQUIRES: made from *cost_model (or an equal copy of it).
  models::ActionMemoryCache* memory_cache = nullptr;
  // Optional, not owned: the layers' pass times shared likewise
  // (models/layer_time_cache.h). Null: computed for this source alone.
  // REQUIRES: made from *cost_model (or an equal copy of it).
  models::LayerTimeCache* time_cache = nullptr;
  // v: model stages per pipeline stage; stage_layers has P v entries, one per
  // model stage, and every per-stage answer is per model stage.
  int virtual_stages = 1;
  // The plan splits each backward into B (the input-gradient pass I) and W
  // (weight gradients): B then takes CostModel's backward less its
  // WeightGradTime, W that time, and the memory is the split's
  // (models::ActionMemory). Not for a replayed table (it has no W times).
  bool split_backward = false;
};

class CostSource {
 public:
  virtual ~CostSource() = default;

  // "analytic", "uniform", ...
  virtual std::string name() const = 0;
  // "s", or "units" for the uniform source.
  virtual std::string time_unit() const { return "s"; }

  // Compute time of one action on its stage (a B of a split backward: the
  // input-gradient pass I).
  virtual double Duration(const schedule::Action& action) const = 0;
  // Time from the end of `action` until its output (activation after F,
  // activation gradient after B) has arrived at the neighbouring stage, not
  // counting waiting for a busy link: latency + bytes / bandwidth.
  virtual double TransferLatency(const schedule::Action& action) const = 0;
  // How long the output occupies the link (bytes / bandwidth), so that
  // transfers on one link queue behind each other.
  virtual double TransferOccupancy(const schedule::Action& action) const = 0;

  // The data-parallel gradient all-reduce of `stage`'s layers, run after the
  // stage's last action (0 without data parallelism or when communication
  // is free).
  virtual double GradientSyncTime(int stage) const = 0;
  // The sync when it overlaps the stage's compute (parallel.
  // overlap_grad_reduce): the time it runs past the stage's last action
  // (ended at `stage_end_s`), given the action after which the stage's
  // gradients are final (its last B or W, `final_action`) started at
  // `final_start_s`. nullopt (the default) when it does not overlap: then
  // GradientSyncTime runs after the last action.
  virtual std::optional<double> ExposedGradientSync(int /*stage*/,
                                                    const schedule::Action& /*final_action*/,
                                                    double /*final_start_s*/,
                                                    double /*stage_end_s*/) const {
    return std::nullopt;
  }
  // The optimizer step of `stage`'s parameters, after the gradient sync
  // (0 unless measured: the analytic model leaves it out).
  virtual double OptimizerTime(int /*stage*/) const { return 0.0; }

  // Bytes held for the whole step (weights, gradients, optimizer state).
  virtual ClassBytes StaticBytes(int stage) const = 0;
  // What `action` does to its stage's memory. The reference stays valid as
  // long as the source.
  virtual const MemoryEffect& Memory(const schedule::Action& action) const = 0;

  // The tables behind Duration, TransferLatency, TransferOccupancy and
  // Memory when those depend on an action only through (stage, pass, chunk)
  // (a W sends nothing): the engine then reads them directly instead of
  // asking per action. Null (the default) when not.
  struct ChunkTables {
    int chunks = 0;  // N; entry (stage, chunk) is stage * N + chunk
    const double* forward_s = nullptr;
    const double* backward_s = nullptr;  // I when the backward is split
    const double* weight_s = nullptr;    // W (null unless split)
    const double* transfer_latency_s = nullptr;
    const double* transfer_occupancy_s = nullptr;
    const MemoryEffect* forward_memory = nullptr;
    const MemoryEffect* backward_memory = nullptr;
    const MemoryEffect* weight_memory = nullptr;  // null unless split
  };
  virtual const ChunkTables* Tables() const { return nullptr; }
};

// The analytic model. REQUIRES: setup.cost_model outlives the source.
std::unique_ptr<CostSource> MakeAnalyticCostSource(const SimSetup& setup);

// The idealised uniform-time source (memory as the analytic model).
std::unique_ptr<CostSource> MakeUniformCostSource(const SimSetup& setup);

// Replays measured per-chunk costs: each action's duration is the sum over
// the stage's layers of the table's time for that layer kind and pass at the
// chunk's length (interpolated, sim/cost_table.h), transfers use the table's
// link, and the optimizer step its measured time per parameter. Memory as the
// analytic model. Errors: a chunk length outside the measured range, a layer
// kind or pass the table lacks.
class CostTableIndex;
Result<std::unique_ptr<CostSource>> MakeReplayCostSource(const SimSetup& setup,
                                                         const CostTableIndex& table);
// The same with stage r's costs (layers, optimizer, its outgoing link) from
// per_stage[r]: devices that differ, e.g. cores of one machine running at
// different speeds. Error: neither one table nor one per stage.
Result<std::unique_ptr<CostSource>> MakeReplayCostSource(
    const SimSetup& setup, const std::vector<const CostTableIndex*>& per_stage);

// The compute times a real run measured: every action's on its stage and
// each stage's optimizer step (seconds; e.g. medians over a run's steps).
// Replayed through the engine they say what the simulator's schedule model
// predicts when every cost is right, apart from the costs' own error.
struct MeasuredDurations {
  std::map<schedule::Action, double> action_s;
  std::vector<double> optimizer_s;  // (P)
};

// `base` with its durations and optimizer times replaced by `measured`
// (transfers, gradient sync and memory stay the base's). Error: an action of
// `plan` or a stage that `measured` lacks, named.
Result<std::unique_ptr<CostSource>> MakeMeasuredDurationSource(std::unique_ptr<CostSource> base,
                                                               const MeasuredDurations& measured,
                                                               const schedule::Plan& plan);

}  // namespace stateflow::sim

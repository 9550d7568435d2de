// Timing one layer kind of the GDN backend (the embedding, one GDN layer, the
// head) the way the pipeline runtime times an action: the wall time of one
// StageModule::Forward or ::Backward call on a chunk of s tokens, nothing
// before or after it. The module holds a single layer of the layer list
// (MakeStageModule with layers [l, l + 1)), so the samples of each kind
// can be summed over a stage's layers, which is what the replay cost source
// does (sim/cost_source.h).
//
// The timed chunk is the middle one of a sequence of three chunks of s
// tokens, so it receives a boundary state and hands one on (forward) and
// gets and returns their gradients (backward), as most chunks of a run with
// N > 1 do. A softmax-attention layer's time depends on the tokens before
// the chunk too: its timed chunk follows a chunk of `prefix` tokens (none
// when the prefix is 0) and precedes a one-token chunk, so it reads a K/V
// buffer of prefix + s rows. A microbatch is the run's microbatch_size
// sequences. One repetition: BeginStep, F(0), F(1) timed, F(2), B(2), B(1)
// timed, B(0); the untimed actions are the setup the timed ones need. The
// first `warmup` repetitions are thrown away (first-touch page faults, cold
// caches). Under recompute full a block's timed backward includes the forward
// it re-runs, as the runtime's would.
//
// A recurrence layer's core (GDN, or Mamba-3: of the mamba3 and
// mamba3-hybrid families) is also timed phase by phase (TimePhasesOnce): Pre,
// ST and Out of its forward and backward (its family's core phase runner,
// layers/core_phases.h; core_phase.h), each a span of the device's timer, on
// inputs of the layer's shapes, so that a replay can predict the core split
// and overlapped from sequential measurements. Every time is a device timer
// span (Device::TimerStart / TimerStop: the steady clock on the host, CUDA
// events on a GPU).
//
// Not the profile command (tools/profile_command.cc) and not a CostTable
// writer (profiler.h).
//
// Dimensions: s tokens of the timed chunk, C hidden size.
//
//   SF_ASSIGN_OR_RETURN(PassSamples t, TimeLayerPasses<float>(model, LayerKind::kRecurrence, Recompute::kNone, 64, {}));
//   t.forward_s.size();   // == repetitions
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "backend/device/device.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

// One repetition of the recurrence core's phases (core_phase.h), seconds:
// [kPre, kST, kOut] of the forward and of the backward.
struct CorePhaseSeconds {
  double forward[3] = {0, 0, 0};
  double backward[3] = {0, 0, 0};
};

struct TimingOptions {
  int repetitions = 10;  // kept samples
  int warmup = 2;        // thrown away first
};

// One layer of one kind in its own module, timed one repetition at a time
// at any chunk length (so that a profiler can interleave kinds and lengths
// in time: a burst of load on the machine then touches every sample a
// little instead of a few samples entirely). Not copyable.
template <typename T>
class LayerTimer {
 public:
  // Errors: the module's (an unsupported model names model.architecture or
  // model.layer_pattern), a kind the model lacks.
  // `device` (nullptr: the CPU) runs the module; a pass's time is a span
  // of its timer (it ends when the device has finished the pass).
  // `st_overlap` (schedule.st_overlap): GDN and Mamba-3 layers run their
  // core split and overlapped (StageModuleOptions::st_overlap); `st_tile`
  // (schedule.st_tile): their core's ST tile B_V, in TimeOnce and in
  // TimePhasesOnce alike (0: untiled). `tensor_size` (parallel.tensor_size):
  // one tensor rank's share of the layer (its heads, MLP columns, vocabulary
  // rows), its sums left out (MakeTimingTensorGroup); the phases over its
  // heads. REQUIRES: models::CheckTensorParallelModel(model, tensor_size).
  static Result<std::unique_ptr<LayerTimer>> Make(const pb::ModelSpec& model,
                                                  models::LayerKind kind,
                                                  models::Recompute recompute,
                                                  int microbatch_size = 1,
                                                  Device* device = nullptr,
                                                  bool st_overlap = false,
                                                  std::int64_t st_tile = 0,
                                                  int tensor_size = 1);
  ~LayerTimer();
  LayerTimer(const LayerTimer&) = delete;
  LayerTimer& operator=(const LayerTimer&) = delete;

  // One repetition over a chunk of `tokens` tokens after `prefix` tokens
  // (attention only; other kinds ignore it): the timed chunk's forward and
  // backward seconds. Error: tokens < 1, prefix < 0, the module's.
  Result<std::pair<double, double>> TimeOnce(std::int64_t tokens, std::int64_t prefix = 0);
  // The same repetition with the backward split (a zero-bubble plan's B and
  // W: StageModuleOptions::split_backward, on a second module with the same
  // parameters): the timed chunk's input-gradient pass B and its W seconds.
  Result<std::pair<double, double>> TimeSplitOnce(std::int64_t tokens, std::int64_t prefix = 0);

  // Whether TimePhasesOnce applies: a recurrence layer of a GDN or Mamba-3
  // model (a hybrid's recurrence layers included).
  bool has_phases() const;
  // One repetition of the core's phases over one microbatch of chunks of
  // `tokens` tokens (each phase over every sequence of the microbatch, one
  // timer span), always sequential (the phases one after another, whatever
  // st_overlap): layer-like inputs (unit-scale q, k rows, decays in
  // [e^-0.5, e^-0.01], GDN's beta in [0.1, 0.9], Mamba-3's gamma and beta in
  // [0.01, 0.5]), a boundary state in and out (Mamba-3's with its k, v carry).
  // Errors: !has_phases() (names the kind and architecture), tokens < 1, the
  // allocator's.
  Result<CorePhaseSeconds> TimePhasesOnce(std::int64_t tokens);

 private:
  LayerTimer() = default;
  // TimeOnce (split: TimeSplitOnce): the first pair's and second's seconds.
  Result<std::pair<double, double>> Time(std::int64_t tokens, std::int64_t prefix, bool split);
  struct State;
  std::unique_ptr<State> state_;
};

// Whether LayerTimer::TimePhasesOnce applies to `model`'s recurrence layers
// (a family of backend/model/layer_family.h: GDN and DeltaNet, Mamba-3,
// KDA, and their hybrids), without building a timer.
bool HasCorePhases(const pb::ModelSpec& model);

// Seconds of each kept repetition, in run order.
struct PassSamples {
  std::vector<double> forward_s;   // (repetitions)
  std::vector<double> backward_s;  // (repetitions)
  std::vector<double> input_s;     // (repetitions) the split backward's B
  std::vector<double> weight_s;    // (repetitions) its W
};

// The layers [l, l + 1) of the first layer of `kind` in
// models::LayerList(model). Error naming the kind if the model has none.
Result<models::StageLayers> OneLayerOf(const pb::ModelSpec& model, models::LayerKind kind);

// Times Forward and Backward of one layer of `kind` over a chunk of `tokens`
// tokens (T = float or double), `warmup` + `repetitions` LayerTimer
// repetitions in a row. Errors: the module's (an unsupported model
// names model.architecture or model.layer_pattern), tokens < 1,
// repetitions < 1 or warmup < 0.
template <typename T>
Result<PassSamples> TimeLayerPasses(const pb::ModelSpec& model, models::LayerKind kind,
                                    models::Recompute recompute, std::int64_t tokens,
                                    const TimingOptions& options);

// The layers [begin, end) whose parameters the optimizer is timed over: the
// whole model up to kOptimizerTimingMaxParams parameters; above it (a paper
// model: its 4 copies of 15B float32 parameters fit no GPU) one middle layer
// (no embedding or head), as AdamW's time per parameter does not depend on
// which parameter it is.
inline constexpr double kOptimizerTimingMaxParams = 268435456;  // 2^28
std::pair<int, int> OptimizerTimingLayers(const pb::ModelSpec& model);

// Seconds per parameter of the work the trainer does once per step on every
// parameter outside the plan's actions: one AdamW step (adamw.h) and zeroing
// the gradients, timed over the parameters of OptimizerTimingLayers in one
// module: one value per kept repetition.
template <typename T>
Result<std::vector<double>> TimeOptimizerPerParam(const pb::ModelSpec& model,
                                          const TimingOptions& options,
                                          Device* device = nullptr);

}  // namespace stateflow::backend

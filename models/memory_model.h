// The memory model of one pipeline stage: what each action (the forward or
// backward of one chunk of one microbatch) does to the stage's memory ledger,
// buffer class by buffer class, and the ledger's peaks over a whole step when
// the stage runs its actions in plan order. It is the simulator's memory
// model (sim/cost_source.cc applies ActionMemory to every action) and the
// prediction the backend's TrackingAllocator is compared with
// (backend/train/memory_check.h): both count the same buffers.
//
// An action is its layers' events (CostModel::ForwardMemory / BackwardMemory)
// in layer order, plus what the stage holds around them:
//   - its input (the activation from stage r-1 in F, the gradient from r+1
//     in B), copied from the transport at the action's start, and its output,
//     handed to the transport at its end (kWorkspace, inside the action only;
//     messages waiting between actions are the transport's, not the stage's);
//   - the output of one layer, the input of the next (kWorkspace), dropped
//     when the next layer has made its own;
//   - boundary states (kBoundaryStates): F(a, 0) makes chunk 0's zero state,
//     every F(a, i) with i < N-1 makes chunk i+1's state in (at the start of
//     each recurrence layer), B(a, i) frees chunk i's state in at its end; in
//     B(a, i) each recurrence layer makes d(state in) (i > 0) and then frees
//     the d(state out) B(a, i+1) made (i < N-1);
//   - K/V buffers of attention layers: the sequence-wide buffer from F(a, 0),
//     its gradient accumulator from B(a, N-1), both freed by B(a, 0);
//   - under a framework with its attention mask (CostModel::AttentionMaskBytes),
//     on a stage holding the embedding or the head: the mask, kept from
//     F(a, 0) to the end of B(a, 0) under full recompute (the checkpoints
//     save it), else within each forward.
// Weights, gradients and optimizer state are static (StaticStageBytes).
//
// Depends only on the stage's own order: nothing here depends on when a
// neighbour's message arrives.
//
//   MemorySegment f = ActionMemory(cm, layers, partition, {r, Pass::kForward, a, i});
//   MemorySegment step = StageStepMemory(cm, layers, partition, plan.stage(r));
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "models/cost_model.h"
#include "models/memory_segment.h"
#include "models/model.h"
#include "schedule/action.h"
#include "schedule/partition.h"

namespace stateflow::models {

// Weights, gradients and optimizer state of layers [first, last).
ClassBytes StaticStageBytes(const CostModel& cm, const StageLayers& layers);

// One action of the stage holding `layers` (the embedding if layers.first
// is 0, the head if layers.last is cm.num_layers()).
// The split backward (`split`: the plan has W actions): B is then the
// input-gradient pass I, whose events are the whole backward's with each
// layer making, as its backward starts, the W store it leaves alive until W
// (CostModel::WeightGradRetainedBytes, in kActivations; the backend's split
// must allocate it there); W frees the stage's (SplitRetainedBytes) at its
// end and allocates nothing else (the weight-gradient GEMMs accumulate into
// the gradients, which are static).
// REQUIRES: action.chunk < partition.num_chunks(); split for a W action.
MemorySegment ActionMemory(const CostModel& cm, const StageLayers& layers,
                           const schedule::Partition& partition,
                           const schedule::Action& action, bool split = false);

// What the I pass of a chunk of s tokens (one CP device's) leaves alive
// until its W on the stage holding `layers`: the sum of the layers'
// CostModel::WeightGradRetainedBytes.
double SplitRetainedBytes(const CostModel& cm, const StageLayers& layers, std::int64_t s);

// ActionMemory, memoised for one cost model: what a simulator needs for
// every (stage, chunk) of many configurations of the same model (a sweep).
// An action's segment depends on the action only through
//   - its stage's layers [first, last) (their kinds, and whether the stage
//     holds the embedding or the head),
//   - its pass,
//   - its chunk's length s,
//   - whether its chunk is the sequence's first (i == 0) and last (i == N-1),
//   - the sequence length T (the K/V buffers' and the attention mask's size);
// not on its microbatch, its chunk's start or N otherwise. The cache is keyed
// on all of these, so Get returns, bit for bit, what ActionMemory computes.
// The layers' own segments (CostModel::ForwardMemory / BackwardMemory) are
// cached too, by (layer kind, pass, s), and shared by all stages.
//
// It keeps its own copy of the cost model, so it may outlive or be moved
// apart from the one it was made from. It grows by one segment (192 bytes)
// per distinct action asked for and never forgets: the whole paper grid
// holds about 60,000. Not thread-safe.
//
//   ActionMemoryCache cache(cm);
//   const MemorySegment& f = cache.Get(layers, partition, {r, Pass::kForward, a, i});
class ActionMemoryCache {
 public:
  explicit ActionMemoryCache(const CostModel& cm) : cm_(cm) {}
  ActionMemoryCache(const ActionMemoryCache&) = delete;
  ActionMemoryCache& operator=(const ActionMemoryCache&) = delete;

  // Same as ActionMemory(cost_model(), layers, partition, action). The
  // reference stays valid as long as the cache.
  // REQUIRES: action.chunk < partition.num_chunks().
  const MemorySegment& Get(const StageLayers& layers, const schedule::Partition& partition,
                           const schedule::Action& action, bool split = false);

  const CostModel& cost_model() const { return cm_; }
  // Distinct actions computed so far.
  std::size_t size() const { return actions_.size(); }

 private:
  struct Key {
    int first_layer = 0, last_layer = 0;
    schedule::Pass pass = schedule::Pass::kForward;
    bool first_chunk = false, last_chunk = false;
    bool split = false;  // a B of a split backward (I)
    std::int64_t s = 0, seq_len = 0;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };
  class SharedKinds;  // adapts LayerSegment to the composition's Of(l)

  // Layer l's segment for one pass over s tokens (cached by l's kind).
  const MemorySegment& LayerSegment(int l, bool forward, std::int64_t s);

  const CostModel cm_;
  std::unordered_map<Key, MemorySegment, KeyHash> actions_;
  // Key: s * 8 + kind * 2 + (forward ? 1 : 0).
  std::unordered_map<std::uint64_t, MemorySegment> layers_;
};

// The whole step of the stage: the static bytes, then `actions` in order
// (a split backward when they hold a W).
// Its at_peak() and class_peak() are absolute: the predicted peak total, the
// bytes per class at that moment, and each class's own peak.
MemorySegment StageStepMemory(const CostModel& cm, const StageLayers& layers,
                              const schedule::Partition& partition,
                              const std::vector<schedule::Action>& actions);

// The same for a stage holding several model stages (virtual stages,
// schedule/plan.h): the static bytes of each of `model_stages` (the stage's
// own, Plan::ModelStageOf(r, 0 .. v - 1)), then `actions` in order, each
// with its model stage's layers, `layers[action.stage]` -- as the
// simulator's engine composes them.
// REQUIRES: every action's stage, and each of model_stages, indexes `layers`.
MemorySegment StageStepMemory(const CostModel& cm, const std::vector<StageLayers>& layers,
                              const std::vector<int>& model_stages,
                              const schedule::Partition& partition,
                              const std::vector<schedule::Action>& actions);

}  // namespace stateflow::models

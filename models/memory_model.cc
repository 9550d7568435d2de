// ActionMemory: an action's layers in order, with the stage's own buffers
// around them (memory_model.h). Legend: t = microbatch_size * s tokens of the
// chunk, h hidden size; io = t h activation bytes, one activation or
// activation gradient.
#include "models/memory_model.h"

#include <array>
#include <optional>

namespace stateflow::models {
namespace {

using schedule::Action;
using schedule::Pass;

constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr BufferClass kStates = BufferClass::kBoundaryStates;
constexpr BufferClass kKv = BufferClass::kKvBuffers;

// Each layer kind's segment for one pass over s tokens, made once per action:
// the cost model's per-layer events depend on a layer only through its kind.
class KindSegments {
 public:
  KindSegments(const CostModel& cm, std::int64_t s, bool forward)
      : cm_(cm), s_(s), forward_(forward) {}
  const MemorySegment& Of(int l) {
    std::optional<MemorySegment>& seg = cache_[static_cast<int>(cm_.layers()[l])];
    if (!seg) seg = forward_ ? cm_.ForwardMemory(l, s_) : cm_.BackwardMemory(l, s_);
    return *seg;
  }

 private:
  const CostModel& cm_;
  const std::int64_t s_;
  const bool forward_;
  std::array<std::optional<MemorySegment>, 4> cache_;  // by LayerKind
};

MemorySegment ForwardAction(const CostModel& cm, const StageLayers& layers,
                            const schedule::Partition& partition, int i) {
  const int N = partition.num_chunks();
  const std::int64_t s = partition.length(i);
  const double io = cm.BoundaryActivationBytes(s);
  const double seq_len = static_cast<double>(partition.seq_len());
  const bool first = layers.first == 0, last = layers.last == cm.num_layers();
  KindSegments kinds(cm, s, /*forward=*/true);
  MemorySegment seg;
  if (!first) seg.Add(kWs, io);  // the activation received from stage r-1
  for (int l = layers.first; l < layers.last && i == 0; ++l) {
    if (cm.layers()[l] == LayerKind::kRecurrence) seg.Add(kStates, cm.BoundaryStateBytes(l));
  }
  bool holds_input = false;  // whether the current layer input is the stage's own
  for (int l = layers.first; l < layers.last; ++l) {
    const LayerKind kind = cm.layers()[l];
    if (kind == LayerKind::kRecurrence && i + 1 < N) {
      seg.Add(kStates, cm.BoundaryStateBytes(l));  // chunk i+1's state in
    }
    if (kind == LayerKind::kAttention && i == 0) seg.Add(kKv, cm.KvBytesPerToken(l) * seq_len);
    seg.Append(kinds.Of(l));
    if (kind == LayerKind::kHead) break;
    if (holds_input) seg.Add(kWs, -io);  // the layer's input, its own output now made
    holds_input = true;
  }
  if (last && holds_input) seg.Add(kWs, -io);  // the head's input
  if (!first) seg.Add(kWs, -io);               // the received activation
  if (!last) seg.Add(kWs, -io);                // the output, handed to the transport
  return seg;
}

MemorySegment BackwardAction(const CostModel& cm, const StageLayers& layers,
                             const schedule::Partition& partition, int i) {
  const int N = partition.num_chunks();
  const std::int64_t s = partition.length(i);
  const double io = cm.BoundaryActivationBytes(s);
  const double seq_len = static_cast<double>(partition.seq_len());
  const bool first = layers.first == 0, last = layers.last == cm.num_layers();
  KindSegments kinds(cm, s, /*forward=*/false);
  MemorySegment seg;
  if (!last) seg.Add(kWs, io);  // the gradient received from stage r+1
  bool holds_input = false;     // whether the current output gradient is the stage's own
  for (int l = layers.last - 1; l >= layers.first; --l) {
    const LayerKind kind = cm.layers()[l];
    if (kind == LayerKind::kEmbedding) break;  // a scatter-add: nothing allocated
    const double state = cm.BoundaryStateBytes(l);
    const double kv = cm.KvBytesPerToken(l) * seq_len, kv_grad = cm.KvGradBytesPerToken(l) * seq_len;
    if (kind == LayerKind::kAttention && i == N - 1) seg.Add(kKv, kv_grad);
    if (kind == LayerKind::kRecurrence && i > 0) seg.Add(kStates, state);  // d(state in)
    seg.Append(kinds.Of(l));
    if (kind == LayerKind::kRecurrence && i + 1 < N) seg.Add(kStates, -state);  // d(state out)
    if (kind == LayerKind::kAttention && i == 0) seg.Add(kKv, -(kv + kv_grad));
    if (holds_input) seg.Add(kWs, -io);
    holds_input = true;
  }
  for (int l = layers.first; l < layers.last; ++l) {
    if (cm.layers()[l] == LayerKind::kRecurrence) seg.Add(kStates, -cm.BoundaryStateBytes(l));
  }
  if (first && holds_input) seg.Add(kWs, -io);  // the first block's input gradient
  if (!last) seg.Add(kWs, -io);                 // the received gradient
  if (!first) seg.Add(kWs, -io);                // the output, handed to the transport
  return seg;
}

}  // namespace

ClassBytes StaticStageBytes(const CostModel& cm, const StageLayers& layers) {
  ClassBytes bytes{};
  for (int l = layers.first; l < layers.last; ++l) {
    bytes[static_cast<int>(BufferClass::kWeights)] += cm.WeightBytes(l);
    bytes[static_cast<int>(BufferClass::kGradients)] += cm.GradientBytes(l);
    bytes[static_cast<int>(BufferClass::kOptimizerState)] += cm.OptimizerBytes(l);
  }
  return bytes;
}

MemorySegment ActionMemory(const CostModel& cm, const StageLayers& layers,
                           const schedule::Partition& partition, const Action& action) {
  switch (action.pass) {
    case Pass::kForward: return ForwardAction(cm, layers, partition, action.chunk);
    case Pass::kBackward: return BackwardAction(cm, layers, partition, action.chunk);
    case Pass::kWeight: return {};
  }
  return {};
}

MemorySegment StageStepMemory(const CostModel& cm, const StageLayers& layers,
                              const schedule::Partition& partition,
                              const std::vector<Action>& actions) {
  MemorySegment step;
  const ClassBytes fixed = StaticStageBytes(cm, layers);
  for (int c = 0; c < kNumBufferClasses; ++c) {
    step.Add(static_cast<BufferClass>(c), fixed[c]);
  }
  // Per (pass, chunk): an action's memory does not depend on its microbatch.
  const int N = partition.num_chunks();
  std::vector<std::optional<MemorySegment>> cache(2 * static_cast<std::size_t>(N));
  for (const Action& a : actions) {
    if (a.pass == Pass::kWeight) continue;
    std::optional<MemorySegment>& seg =
        cache[2 * static_cast<std::size_t>(a.chunk) + (a.pass == Pass::kBackward ? 1 : 0)];
    if (!seg) seg = ActionMemory(cm, layers, partition, a);
    step.Append(*seg);
  }
  return step;
}

}  // namespace stateflow::models

// ActionMemory: an action's layers in order, with the stage's own buffers
// around them (memory_model.h). Legend: t = microbatch_size * s tokens of the
// chunk, h hidden size; io = t h activation bytes, one activation or
// activation gradient.
#include "models/memory_model.h"

#include <array>
#include <algorithm>
#include <optional>

namespace stateflow::models {
namespace {

using schedule::Action;
using schedule::Pass;

constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr BufferClass kStates = BufferClass::kBoundaryStates;
constexpr BufferClass kKv = BufferClass::kKvBuffers;
constexpr BufferClass kAct = BufferClass::kActivations;

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

// Everything about an action's chunk that its segment depends on: its
// length, the sequence length (the K/V buffers) and whether it is the first
// (i == 0) or the last (i == N-1) chunk of the sequence. Nothing else of the
// partition (not the chunk's start, not N) and nothing of the microbatch.
struct ChunkShape {
  std::int64_t s = 0;        // tokens of the chunk
  std::int64_t seq_len = 0;  // T
  bool first = false;        // i == 0
  bool last = false;         // i == N - 1
};

// One device's share of chunk i: under context parallelism ceil(s / CP) of
// its tokens and ceil(T / CP) of the sequence's K/V positions.
ChunkShape ShapeOf(const CostModel& cm, const schedule::Partition& partition, int i) {
  return {cm.LocalTokens(partition.length(i)), cm.LocalTokens(partition.seq_len()), i == 0,
          i == partition.num_chunks() - 1};
}

// `kinds.Of(l)` is layer l's segment for this pass over shape.s tokens.
template <typename Kinds>
MemorySegment ForwardAction(const CostModel& cm, const StageLayers& layers,
                            const ChunkShape& shape, Kinds& kinds) {
  const double io = cm.BoundaryActivationBytes(shape.s);
  const double seq_len = static_cast<double>(shape.seq_len);
  const bool first = layers.first == 0, last = layers.last == cm.num_layers();
  MemorySegment seg;
  // The framework's attention mask (a stage with the embedding or the
  // head): under recompute the checkpoints save it, from the microbatch's
  // first forward to its first chunk's backward; else it lives in each
  // forward (the attention kernels, causal, do not keep it).
  const double mask = first || last ? cm.AttentionMaskBytes(shape.seq_len) : 0;
  const bool mask_kept = cm.options().recompute == Recompute::kFull;
  if (mask > 0 && (shape.first || !mask_kept)) seg.Add(mask_kept ? kAct : kWs, mask);
  if (!first) seg.Add(kWs, io);  // the activation received from stage r-1
  for (int l = layers.first; l < layers.last && shape.first; ++l) {
    if (cm.layers()[l] == LayerKind::kRecurrence) seg.Add(kStates, cm.BoundaryStateBytes(l));
  }
  bool holds_input = false;  // whether the current layer input is the stage's own
  for (int l = layers.first; l < layers.last; ++l) {
    const LayerKind kind = cm.layers()[l];
    if (kind == LayerKind::kRecurrence && !shape.last) {
      seg.Add(kStates, cm.BoundaryStateBytes(l));  // chunk i+1's state in
    }
    if (kind == LayerKind::kAttention && shape.first) seg.Add(kKv, cm.KvBytesPerToken(l) * seq_len);
    seg.Append(kinds.Of(l));
    if (kind == LayerKind::kHead) break;
    if (holds_input) seg.Add(kWs, -io);  // the layer's input, its own output now made
    holds_input = true;
  }
  if (last && holds_input) seg.Add(kWs, -io);  // the head's input
  if (!first) seg.Add(kWs, -io);               // the received activation
  if (!last) seg.Add(kWs, -io);                // the output, handed to the transport
  if (mask > 0 && !mask_kept) seg.Add(kWs, -mask);
  return seg;
}

// `split`: the input-gradient pass I of a split backward, each layer making
// its W store (CostModel::WeightGradRetainedBytes) as it starts.
template <typename Kinds>
MemorySegment BackwardAction(const CostModel& cm, const StageLayers& layers,
                             const ChunkShape& shape, Kinds& kinds, bool split) {
  const double io = cm.BoundaryActivationBytes(shape.s);
  const double seq_len = static_cast<double>(shape.seq_len);
  const bool first = layers.first == 0, last = layers.last == cm.num_layers();
  MemorySegment seg;
  if (!last) seg.Add(kWs, io);  // the gradient received from stage r+1
  bool holds_input = false;     // whether the current output gradient is the stage's own
  for (int l = layers.last - 1; l >= layers.first; --l) {
    const LayerKind kind = cm.layers()[l];
    if (split) seg.Add(kAct, cm.WeightGradRetainedBytes(l, shape.s));  // the W store
    if (kind == LayerKind::kEmbedding) break;  // a scatter-add: nothing allocated
    const double state = cm.BoundaryStateBytes(l);
    const double kv = cm.KvBytesPerToken(l) * seq_len, kv_grad = cm.KvGradBytesPerToken(l) * seq_len;
    if (kind == LayerKind::kAttention && shape.last) seg.Add(kKv, kv_grad);
    if (kind == LayerKind::kRecurrence && !shape.first) seg.Add(kStates, state);  // d(state in)
    seg.Append(kinds.Of(l));
    if (kind == LayerKind::kRecurrence && !shape.last) seg.Add(kStates, -state);  // d(state out)
    if (kind == LayerKind::kAttention && shape.first) seg.Add(kKv, -(kv + kv_grad));
    if (holds_input) seg.Add(kWs, -io);
    holds_input = true;
  }
  for (int l = layers.first; l < layers.last; ++l) {
    if (cm.layers()[l] == LayerKind::kRecurrence) seg.Add(kStates, -cm.BoundaryStateBytes(l));
  }
  if (first && holds_input) seg.Add(kWs, -io);  // the first block's input gradient
  if (!last) seg.Add(kWs, -io);                 // the received gradient
  if (!first) seg.Add(kWs, -io);                // the output, handed to the transport
  const double mask = first || last ? cm.AttentionMaskBytes(shape.seq_len) : 0;
  if (mask > 0 && shape.first && cm.options().recompute == Recompute::kFull) {
    seg.Add(kAct, -mask);  // the checkpoints' mask
  }
  return seg;
}

}  // namespace

ClassBytes StaticStageBytes(const CostModel& cm, const StageLayers& layers) {
  ClassBytes bytes{};
  for (int l = layers.first; l < layers.last; ++l) {
    bytes[static_cast<int>(BufferClass::kWeights)] += cm.WeightBytes(l);
    bytes[static_cast<int>(BufferClass::kGradients)] += cm.GradientBytes(l);
  }
  bytes[static_cast<int>(BufferClass::kOptimizerState)] =
      cm.StageOptimizerBytes(layers.first, layers.last);
  return bytes;
}

double SplitRetainedBytes(const CostModel& cm, const StageLayers& layers, std::int64_t s) {
  double bytes = 0;
  for (int l = layers.first; l < layers.last; ++l) bytes += cm.WeightGradRetainedBytes(l, s);
  return bytes;
}

MemorySegment ActionMemory(const CostModel& cm, const StageLayers& layers,
                           const schedule::Partition& partition, const Action& action,
                           bool split) {
  const ChunkShape shape = ShapeOf(cm, partition, action.chunk);
  switch (action.pass) {
    case Pass::kForward: {
      KindSegments kinds(cm, shape.s, /*forward=*/true);
      return ForwardAction(cm, layers, shape, kinds);
    }
    case Pass::kBackward: {
      KindSegments kinds(cm, shape.s, /*forward=*/false);
      return BackwardAction(cm, layers, shape, kinds, split);
    }
    case Pass::kWeight: {
      MemorySegment seg;
      seg.Add(kAct, -SplitRetainedBytes(cm, layers, shape.s));
      return seg;
    }
  }
  return {};
}

class ActionMemoryCache::SharedKinds {
 public:
  SharedKinds(ActionMemoryCache& cache, std::int64_t s, bool forward)
      : cache_(cache), s_(s), forward_(forward) {}
  const MemorySegment& Of(int l) { return cache_.LayerSegment(l, forward_, s_); }

 private:
  ActionMemoryCache& cache_;
  const std::int64_t s_;
  const bool forward_;
};

std::size_t ActionMemoryCache::KeyHash::operator()(const Key& k) const {
  std::uint64_t h = static_cast<std::uint64_t>(k.s);
  for (std::uint64_t v : {static_cast<std::uint64_t>(k.seq_len),
                          static_cast<std::uint64_t>(k.first_layer),
                          static_cast<std::uint64_t>(k.last_layer),
                          static_cast<std::uint64_t>(k.pass) * 8 + (k.split ? 4u : 0u) +
                              (k.first_chunk ? 2u : 0u) + (k.last_chunk ? 1u : 0u)}) {
    h = (h ^ v) * 0x9E3779B97F4A7C15ull;  // a multiplicative mix (Fibonacci hashing)
    h ^= h >> 29;
  }
  return static_cast<std::size_t>(h);
}

const MemorySegment& ActionMemoryCache::LayerSegment(int l, bool forward, std::int64_t s) {
  const std::uint64_t key = static_cast<std::uint64_t>(s) * 8 +
                            static_cast<std::uint64_t>(cm_.layers()[l]) * 2 + (forward ? 1 : 0);
  auto it = layers_.find(key);
  if (it == layers_.end()) {
    it = layers_.emplace(key, forward ? cm_.ForwardMemory(l, s) : cm_.BackwardMemory(l, s)).first;
  }
  return it->second;
}

const MemorySegment& ActionMemoryCache::Get(const StageLayers& layers,
                                            const schedule::Partition& partition,
                                            const Action& action, bool split) {
  const ChunkShape shape = ShapeOf(cm_, partition, action.chunk);
  split = split && action.pass == Pass::kBackward;
  const Key key{layers.first, layers.last, action.pass, shape.first, shape.last, split, shape.s,
                shape.seq_len};
  auto it = actions_.find(key);
  if (it != actions_.end()) return it->second;
  MemorySegment seg;
  if (action.pass == Pass::kWeight) {
    seg.Add(kAct, -SplitRetainedBytes(cm_, layers, shape.s));
  } else {
    const bool forward = action.pass == Pass::kForward;
    SharedKinds kinds(*this, shape.s, forward);
    seg = forward ? ForwardAction(cm_, layers, shape, kinds)
                  : BackwardAction(cm_, layers, shape, kinds, split);
  }
  return actions_.emplace(key, seg).first->second;
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
  const bool split = std::any_of(actions.begin(), actions.end(),
                                 [](const Action& a) { return a.pass == Pass::kWeight; });
  std::vector<std::optional<MemorySegment>> cache(3 * static_cast<std::size_t>(N));
  for (const Action& a : actions) {
    std::optional<MemorySegment>& seg =
        cache[3 * static_cast<std::size_t>(a.chunk) + static_cast<std::size_t>(a.pass)];
    if (!seg) seg = ActionMemory(cm, layers, partition, a, split);
    step.Append(*seg);
  }
  return step;
}

MemorySegment StageStepMemory(const CostModel& cm, const std::vector<StageLayers>& layers,
                              const std::vector<int>& model_stages,
                              const schedule::Partition& partition,
                              const std::vector<Action>& actions) {
  MemorySegment step;
  for (int s : model_stages) {
    const ClassBytes fixed = StaticStageBytes(cm, layers[static_cast<std::size_t>(s)]);
    for (int c = 0; c < kNumBufferClasses; ++c) {
      step.Add(static_cast<BufferClass>(c), fixed[c]);
    }
  }
  const int N = partition.num_chunks();
  const bool split = std::any_of(actions.begin(), actions.end(),
                                 [](const Action& a) { return a.pass == Pass::kWeight; });
  // Per (model stage, pass, chunk).
  std::vector<std::optional<MemorySegment>> cache(layers.size() * 3 *
                                                  static_cast<std::size_t>(N));
  for (const Action& a : actions) {
    std::optional<MemorySegment>& seg =
        cache[(static_cast<std::size_t>(a.stage) * static_cast<std::size_t>(N) +
               static_cast<std::size_t>(a.chunk)) * 3 +
              static_cast<std::size_t>(a.pass)];
    if (!seg) {
      seg = ActionMemory(cm, layers[static_cast<std::size_t>(a.stage)], partition, a, split);
    }
    step.Append(*seg);
  }
  return step;
}

}  // namespace stateflow::models

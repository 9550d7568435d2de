// The memory model: MemorySegment against a plain replay of its events, the
// layers' events against the sizes they must add up to (docs/cost-model.md,
// section 3), and a stage's actions against the ledger rules of
// models/memory_model.h (what outlives an action, boundary-state counts, a
// step that returns to its static bytes). Agreement with the backend's
// allocator, byte for byte, is tested in tests/backend/memory_check_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "models/cost_model.h"
#include "models/memory_model.h"
#include "schedule/plan.h"
#include "schedule/policies.h"

namespace stateflow::models {
namespace {

using schedule::Action;
using schedule::Pass;

constexpr int kAct = static_cast<int>(BufferClass::kActivations);
constexpr int kWs = static_cast<int>(BufferClass::kWorkspace);
constexpr int kStates = static_cast<int>(BufferClass::kBoundaryStates);
constexpr int kLogits = static_cast<int>(BufferClass::kLogits);

// ---- MemorySegment ---------------------------------------------------------------

struct Event {
  BufferClass cls;
  double bytes;
};

// The reference: walk the events, keep the running level, the first highest
// total with its classes, and each class's highest level.
struct Replay {
  ClassBytes live{}, at_peak{}, class_peak{};
  double peak = 0;
  explicit Replay(const std::vector<Event>& events) {
    for (const Event& e : events) {
      live[static_cast<int>(e.cls)] += e.bytes;
      if (TotalBytes(live) > peak) {
        peak = TotalBytes(live);
        at_peak = live;
      }
      for (int c = 0; c < kNumBufferClasses; ++c) class_peak[c] = std::max(class_peak[c], live[c]);
    }
  }
};

TEST(MemorySegment, ComposesLikeTheEventsItSummarises) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<Event> events;
    const int n = std::uniform_int_distribution(0, 40)(rng);
    for (int k = 0; k < n; ++k) {
      const auto cls = static_cast<BufferClass>(std::uniform_int_distribution(0, 7)(rng));
      // Integers, so that ties between equal totals are exact.
      events.push_back({cls, double(std::uniform_int_distribution(-50, 60)(rng))});
    }
    // One segment of every event, and the events cut into random segments.
    MemorySegment whole, pieces, piece;
    for (const Event& e : events) {
      whole.Add(e.cls, e.bytes);
      piece.Add(e.cls, e.bytes);
      if (std::uniform_int_distribution(0, 3)(rng) == 0) {
        pieces.Append(piece);
        piece = MemorySegment();
      }
    }
    pieces.Append(piece);
    const Replay ref(events);
    for (const MemorySegment* seg : {&whole, &pieces}) {
      EXPECT_EQ(seg->peak_total(), ref.peak) << "trial " << trial;
      EXPECT_EQ(seg->at_peak(), ref.at_peak) << "trial " << trial;
      EXPECT_EQ(seg->class_peak(), ref.class_peak) << "trial " << trial;
      EXPECT_EQ(seg->net(), ref.live) << "trial " << trial;
    }
  }
}

// ---- layers ----------------------------------------------------------------------

CostModel Make(const std::string& preset, int tp, int mbs, Recompute rc,
               const std::string& dtype = "") {
  CostModelOptions o;
  o.tensor_size = tp;
  o.microbatch_size = mbs;
  o.recompute = rc;
  pb::PrecisionSpec precision;  // the mixed-precision defaults
  if (!dtype.empty()) precision = *PrecisionForDtype(dtype);
  Result<CostModel> cm = CostModel::Make(*ModelPreset(preset), precision,
                                         *ClusterPreset("cpu"), o);
  EXPECT_TRUE(cm.ok()) << cm.status().message();
  return *std::move(cm);
}

// A forward saves StoredActivationBytes and ends holding its output (t, h);
// the backward frees the saved tensors and ends holding the input gradient;
// neither keeps workspace or logits beyond that.
TEST(LayerMemory, PassesAddUpToTheStoredTensorsAndOneActivation) {
  for (const char* preset : {"gdn-tiny", "gdn-3b", "gdn-hybrid-tiny", "mamba3-tiny"}) {
    for (int tp : {1, 2}) {
      for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
        const CostModel cm = Make(preset, tp, 3, rc);
        for (int l = 0; l < cm.num_layers(); ++l) {
          SCOPED_TRACE(std::string(preset) + " tp=" + std::to_string(tp) + " " +
                       std::string(RecomputeName(rc)) + " layer " + std::to_string(l));
          const std::int64_t s = 70;
          const MemorySegment f = cm.ForwardMemory(l, s), b = cm.BackwardMemory(l, s);
          const LayerKind kind = cm.layers()[l];
          const double io = cm.BoundaryActivationBytes(s);
          EXPECT_DOUBLE_EQ(f.net()[kAct], cm.StoredActivationBytes(l, s));
          EXPECT_DOUBLE_EQ(b.net()[kAct], -cm.StoredActivationBytes(l, s));
          EXPECT_DOUBLE_EQ(f.net()[kWs], kind == LayerKind::kHead ? 0.0 : io);
          const bool makes_input_grad = kind != LayerKind::kEmbedding;
          EXPECT_DOUBLE_EQ(b.net()[kWs], makes_input_grad ? io : 0.0);
          EXPECT_EQ(f.net()[kLogits], 0.0);
          EXPECT_EQ(b.net()[kLogits], 0.0);
          // LogitsBytes is the most held at once: the backward's, which in
          // bf16 adds the slice's d(logits) copy to the forward's slice.
          EXPECT_LE(f.class_peak()[kLogits], cm.LogitsBytes(l, s));
          EXPECT_DOUBLE_EQ(b.class_peak()[kLogits], cm.LogitsBytes(l, s));
          EXPECT_EQ(f.net()[kStates], 0.0);  // boundary states are the stage's
        }
      }
    }
  }
}

// The attention layer's workspace, from its tensor list in
// docs/cost-model.md (per token; B = 2 sequences of s tokens, t = 2 s):
// forward without recompute holds only the MLP's product (t, F) beside the
// output (t, C); the backward's highest moment is one of
//   d_hn + SwiGLU workspace          t (C + 2F)
//   dh + d_o + dq + D (one sequence)  t (C + 2 HqD) + s Hq (statistics)
//   dh + dq + dxn + part              t (3C + HqD).
// Under full recompute the replayed saved tensors are alive throughout.
TEST(LayerMemory, AttentionWorkspaceFromItsTensorList) {
  for (const char* dtype : {"float32", "float64"}) {
    const CostModel none = Make("gdn-hybrid-tiny", 1, 2, Recompute::kNone, dtype);
    const CostModel full = Make("gdn-hybrid-tiny", 1, 2, Recompute::kFull, dtype);
    int l = 0;
    while (none.layers()[l] != LayerKind::kAttention) ++l;
    const pb::ModelSpec& m = none.model();
    const double e = none.precision().activation_bytes();
    const double C = m.hidden_size(), F = m.mlp_size(), Hq = m.attn_heads();
    const double HqD = Hq * m.attn_head_dim();
    const std::int64_t s = 100;
    const double t = 2.0 * s;
    EXPECT_DOUBLE_EQ(none.ForwardWorkspaceBytes(l, s), t * (F + C) * e);
    const double backward = std::max({t * (C + 2 * F) * e,
                                      t * (C + 2 * HqD) * e + s * Hq * e,
                                      t * (3 * C + HqD) * e});
    EXPECT_DOUBLE_EQ(none.BackwardWorkspaceBytes(l, s), backward);
    const double intermediates = none.StoredActivationBytes(l, s) - t * C * e;
    EXPECT_DOUBLE_EQ(full.ForwardWorkspaceBytes(l, s), t * (F + C) * e + intermediates);
    EXPECT_DOUBLE_EQ(full.BackwardWorkspaceBytes(l, s), backward + intermediates);
    // The prefix lives in the stage's K/V buffer: K and V, H_kv d each, per
    // token of each of the B = 2 sequences.
    EXPECT_DOUBLE_EQ(none.KvBytesPerToken(l), 2 * 2.0 * KvHeads(m) * m.attn_head_dim() * e);
  }
}

// The GDN layer's forward workspace, from the tensor list of
// docs/cost-model.md: without recompute, the largest moment is the MLP's
// product (t, F) beside the block output (t, C), when F + C exceeds the
// earlier transients (b and the conv output: t (H + HK); the SiLU of the gate:
// t HV). Under full recompute every tensor the forward would have saved is
// alive there too.
TEST(LayerMemory, GdnForwardWorkspaceIsTheMlpProductAndTheOutput) {
  for (const char* dtype : {"float32", "float64"}) {
    const CostModel none = Make("gdn-tiny", 1, 1, Recompute::kNone, dtype);
    const CostModel full = Make("gdn-tiny", 1, 1, Recompute::kFull, dtype);
    const pb::ModelSpec& m = none.model();
    const double e = none.precision().activation_bytes();
    const double C = m.hidden_size(), F = m.mlp_size(), H = m.num_heads();
    const double HK = H * m.head_dim_k(), HV = H * m.head_dim_v();
    ASSERT_GT(F + C, std::max(H + HK, HV));
    const std::int64_t s = 100;
    EXPECT_DOUBLE_EQ(none.ForwardWorkspaceBytes(1, s), s * (F + C) * e);
    const double intermediates = none.StoredActivationBytes(1, s) - s * C * e;
    EXPECT_DOUBLE_EQ(full.ForwardWorkspaceBytes(1, s), s * (F + C) * e + intermediates);
    // The backward's own workspace is larger, and under full recompute larger
    // still by the replayed intermediates.
    EXPECT_GT(none.BackwardWorkspaceBytes(1, s), none.ForwardWorkspaceBytes(1, s));
    EXPECT_DOUBLE_EQ(full.BackwardWorkspaceBytes(1, s) - none.BackwardWorkspaceBytes(1, s),
                     intermediates);
  }
}

// The backward keeps the states entering each kernel block of one head:
// one more block of 64 tokens adds d_k d_v statistics. (Wide heads, so that
// these states are the largest moment of the backward.)
TEST(LayerMemory, GdnBackwardWorkspaceCountsKernelBlocksOfOneHead) {
  pb::ModelSpec wide = *ModelPreset("gdn-tiny");
  wide.set_num_heads(1);
  wide.set_head_dim_k(256);
  wide.set_head_dim_v(256);
  Result<CostModel> made = CostModel::Make(wide, *PrecisionForDtype("float64"),
                                           *ClusterPreset("cpu"), CostModelOptions{});
  ASSERT_TRUE(made.ok()) << made.status().message();
  const CostModel& cm = *made;
  const pb::ModelSpec& m = cm.model();
  const double per_block = double(m.head_dim_k()) * m.head_dim_v() * 8;
  // 64 -> 65 tokens: one token more, one kernel block more; 65 -> 66: one
  // token more only.
  const double step_block = cm.BackwardWorkspaceBytes(1, 65) - cm.BackwardWorkspaceBytes(1, 64);
  const double step_token = cm.BackwardWorkspaceBytes(1, 66) - cm.BackwardWorkspaceBytes(1, 65);
  EXPECT_DOUBLE_EQ(step_block - step_token, per_block);
}

// ---- a stage's actions ------------------------------------------------------------

struct StageCase {
  const char* preset;
  int P, M, N;
  Recompute rc;
};

std::string Name(const StageCase& c) {
  return std::string(c.preset) + " P=" + std::to_string(c.P) + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " " + std::string(RecomputeName(c.rc));
}

const StageCase kStageCases[] = {
    {"gdn-tiny", 1, 1, 1, Recompute::kNone},      {"gdn-tiny", 2, 3, 4, Recompute::kFull},
    {"gdn-tiny", 4, 2, 3, Recompute::kNone},      {"gdn-hybrid-tiny", 3, 2, 4, Recompute::kNone},
    {"mamba3-tiny", 2, 2, 5, Recompute::kFull}};

// Workspace and logits live within one action; boundary states follow the
// counts of memory_model.h: F(a, i) makes chunk 0's zero state (i = 0) and
// chunk i+1's state in (i < N-1); B(a, i) frees chunk i's state in, makes
// d(state in) (i > 0) and frees d(state out) (i < N-1); one state each per
// recurrence layer of the stage.
TEST(StageMemory, TransientsEndWithTheActionAndStatesFollowTheChunks) {
  for (const StageCase& c : kStageCases) {
    SCOPED_TRACE(Name(c));
    const CostModel cm = Make(c.preset, 1, 1, c.rc);
    const std::vector<StageLayers> stages =
        *AssignStages(std::vector<double>(cm.num_layers(), 1.0), c.P);
    const schedule::Partition partition =
        *schedule::MakePartition(256, c.N, 0, cm.ChunkCoefficients(0, cm.num_layers()), 1);
    for (int r = 0; r < c.P; ++r) {
      double state = 0;
      for (int l = stages[r].first; l < stages[r].last; ++l) state += cm.BoundaryStateBytes(l);
      for (int i = 0; i < c.N; ++i) {
        const MemorySegment f = ActionMemory(cm, stages[r], partition, {r, Pass::kForward, 0, i});
        const MemorySegment b = ActionMemory(cm, stages[r], partition, {r, Pass::kBackward, 0, i});
        for (const MemorySegment* seg : {&f, &b}) {
          EXPECT_EQ(seg->net()[kWs], 0.0) << "stage " << r << " chunk " << i;
          EXPECT_EQ(seg->net()[kLogits], 0.0) << "stage " << r << " chunk " << i;
        }
        const double made = (i == 0 ? 1 : 0) + (i + 1 < c.N ? 1 : 0);
        EXPECT_DOUBLE_EQ(f.net()[kStates], made * state) << "stage " << r << " chunk " << i;
        const double grads = (i > 0 ? 1 : 0) - (i + 1 < c.N ? 1 : 0);
        EXPECT_DOUBLE_EQ(b.net()[kStates], (grads - 1) * state) << "stage " << r << " chunk " << i;
      }
    }
  }
}

// Every policy's whole step returns each class to its static bytes, and the
// step's peak is at least the static bytes plus one chunk's activations.
TEST(StageMemory, StepReturnsToTheStaticBytes) {
  for (const StageCase& c : kStageCases) {
    for (const char* policy : {"gpipe", "stateflow"}) {
      SCOPED_TRACE(Name(c) + " " + policy);
      const CostModel cm = Make(c.preset, 1, 1, c.rc);
      const std::vector<StageLayers> stages =
          *AssignStages(std::vector<double>(cm.num_layers(), 1.0), c.P);
      const schedule::Partition partition =
          *schedule::MakePartition(256, c.N, 0, cm.ChunkCoefficients(0, cm.num_layers()), 1);
      const schedule::Plan plan = *schedule::MakePlan(policy, c.P, c.M, c.N);
      for (int r = 0; r < c.P; ++r) {
        const MemorySegment step = StageStepMemory(cm, stages[r], partition, plan.stage(r));
        const ClassBytes fixed = StaticStageBytes(cm, stages[r]);
        for (int k = 0; k < kNumBufferClasses; ++k) {
          EXPECT_NEAR(step.net()[k], fixed[k], 1e-6 * (1 + fixed[k])) << kBufferClassNames[k];
        }
        double chunk = 0;
        for (int l = stages[r].first; l < stages[r].last; ++l) {
          chunk += cm.StoredActivationBytes(l, partition.length(0));
        }
        EXPECT_GE(step.peak_total(), TotalBytes(fixed) + chunk);
        EXPECT_GE(step.class_peak()[kAct], step.at_peak()[kAct]);
      }
    }
  }
}

// Add skips the classes an event leaves alone; it must still equal Append of
// the one-event segment bit for bit, on sums that round (non-integers, mixed
// magnitudes), zeros, repeated totals and runs that return below zero.
TEST(MemorySegment, AddEqualsAppendOfOneEvent) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> frac(-1.0, 1.2);
  for (int trial = 0; trial < 500; ++trial) {
    MemorySegment fast, reference;
    const int n = std::uniform_int_distribution(0, 60)(rng);
    for (int k = 0; k < n; ++k) {
      const auto cls = static_cast<BufferClass>(std::uniform_int_distribution(0, 7)(rng));
      const int kind = std::uniform_int_distribution(0, 3)(rng);
      const double bytes = kind == 0   ? 0.0
                           : kind == 1 ? double(std::uniform_int_distribution(-5, 6)(rng))
                           : kind == 2 ? frac(rng) * 1e9
                                       : frac(rng) * 3e-3;
      fast.Add(cls, bytes);
      reference.AddByAppend(cls, bytes);
      // Composing the two the same way must agree too.
      if (k % 7 == 3) {
        const MemorySegment copy = reference;
        fast.Append(copy);
        reference.Append(copy);
      }
    }
    for (int c = 0; c < kNumBufferClasses; ++c) {
      EXPECT_EQ(fast.net()[c], reference.net()[c]) << "trial " << trial << " class " << c;
      EXPECT_EQ(fast.at_peak()[c], reference.at_peak()[c]) << "trial " << trial << " class " << c;
      EXPECT_EQ(fast.class_peak()[c], reference.class_peak()[c])
          << "trial " << trial << " class " << c;
      EXPECT_FALSE(std::signbit(fast.net()[c]) && fast.net()[c] == 0.0) << "a level of -0";
    }
  }
}

// ---- ActionMemoryCache -------------------------------------------------------------

// Bit for bit: every field of every class.
void ExpectSameSegment(const MemorySegment& got, const MemorySegment& want, const std::string& what) {
  for (int k = 0; k < kNumBufferClasses; ++k) {
    EXPECT_EQ(got.net()[k], want.net()[k]) << what << " net " << kBufferClassNames[k];
    EXPECT_EQ(got.at_peak()[k], want.at_peak()[k]) << what << " at_peak " << kBufferClassNames[k];
    EXPECT_EQ(got.class_peak()[k], want.class_peak()[k])
        << what << " class_peak " << kBufferClassNames[k];
  }
}

// The cache against the plain ActionMemory (the model it memoises), with one
// cache shared by many partitions (sequence lengths, N, alpha > 0 with
// chunks of unequal lengths) and microbatches, as a sweep shares it; the
// cache is made from a copy of the cost model that dies before it is used.
TEST(ActionMemoryCache, EqualsActionMemoryAcrossPartitions) {
  for (const StageCase& c : kStageCases) {
    SCOPED_TRACE(Name(c));
    const CostModel cm = Make(c.preset, 1, 1, c.rc);
    std::optional<ActionMemoryCache> cache;
    {
      const CostModel copy = cm;
      cache.emplace(copy);
    }
    const std::vector<StageLayers> stages =
        *AssignStages(std::vector<double>(cm.num_layers(), 1.0), c.P);
    for (std::int64_t seq_len : {256, 384}) {
      for (int n : {1, 2, 3, 5}) {
        for (double alpha : {0.0, 1.0}) {
          const schedule::Partition partition = *schedule::MakePartition(
              seq_len, n, alpha, cm.ChunkCoefficients(0, cm.num_layers()), 1);
          for (int r = 0; r < c.P; ++r) {
            for (int i = 0; i < n; ++i) {
              for (Pass pass : {Pass::kForward, Pass::kBackward, Pass::kWeight}) {
                for (int a : {0, 1}) {
                  const Action action{r, pass, a, i};
                  ExpectSameSegment(cache->Get(stages[r], partition, action),
                                    ActionMemory(cm, stages[r], partition, action),
                                    "T=" + std::to_string(seq_len) + " N=" + std::to_string(n) +
                                        " alpha=" + std::to_string(alpha) + " " +
                                        schedule::ToString(action));
                }
              }
            }
          }
        }
      }
    }
  }
}

// Chunks of one length share an entry: with N equal chunks, a stage's pass
// has at most three distinct actions (the first chunk, the middle ones, the
// last), whatever the microbatch.
TEST(ActionMemoryCache, ComposesEachDistinctActionOnce) {
  const StageCase c = {"gdn-hybrid-tiny", 3, 4, 6, Recompute::kNone};
  const CostModel cm = Make(c.preset, 1, 1, c.rc);
  ActionMemoryCache cache(cm);
  const std::vector<StageLayers> stages =
      *AssignStages(std::vector<double>(cm.num_layers(), 1.0), c.P);
  const schedule::Partition partition =
      *schedule::MakePartition(64 * c.N, c.N, 0, cm.ChunkCoefficients(0, cm.num_layers()), 1);
  for (int i = 0; i < c.N; ++i) ASSERT_EQ(partition.length(i), 64);
  const schedule::Plan plan = *schedule::MakePlan("stateflow", c.P, c.M, c.N);
  for (int r = 0; r < c.P; ++r) {
    for (const Action& a : plan.stage(r)) cache.Get(stages[r], partition, a);
  }
  const std::size_t distinct_chunks = std::min(c.N, 3);  // first, middle, last
  EXPECT_EQ(cache.size(), static_cast<std::size_t>(c.P) * 2 * distinct_chunks);
}

}  // namespace
}  // namespace stateflow::models

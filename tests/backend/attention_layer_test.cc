// The attention layer over a K/V buffer, run as the stage runs it: chunks
// forward 0..N-1 (each writing its K/V rows and attending over the prefix),
// then backward N-1..0 (each adding into dk, dv and finishing its own rows).
// Central differences (float64) of <ry, y> through that composition for
// every parameter and the input x (so the K/V buffer's contributions from
// later chunks to earlier chunks' x are checked), in both recompute modes;
// chunked equals unchunked (N = 1, 2, 3, lengths off the tiles) to 1e-10;
// B = 3 sequences equal three B = 1 runs; recompute full bit-identical to
// none; float32 against float64; the layer's allocations equal the memory
// model's events (AttentionLayerForwardMemory / BackwardMemory) class by
// class, and the K/V buffer's bytes the cost model's; errors for misuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/layers/attention_layer.h"
#include "models/cost_model.h"
#include "models/layer_formulas.h"
#include "models/model.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::backend {
namespace {

using models::Recompute;
using testing::FromVector;
using testing::RelError;
using testing::ToVector;
using testing::Uniform;

constexpr BufferClass kWs = BufferClass::kWorkspace;

// C 16, Hq 4, Hkv 2 (GQA group 2), head dim 6, F 24; tiles as given.
AttentionLayerDims SmallDims(int64_t q_tile = 4, int64_t k_tile = 5) {
  AttentionLayerDims d;
  d.C = 16, d.Hq = 4, d.Hkv = 2, d.D = 6, d.F = 24;
  d.q_tile = q_tile;
  d.k_tile = k_tile;
  return d;
}

// Random O(1) parameters (norms around 1), the same for float and double.
template <typename T>
void RandomizeParams(AttentionLayer<T>* attn, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Param<T>& p : attn->params()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    const double lo = norm ? 0.5 : -0.5, hi = norm ? 1.5 : 0.5;
    testing::Assign(&p.value, Uniform(rng, p.value.numel(), lo, hi));
  }
}

// Rows [t0, t1) of every sequence of a (B, T, width) buffer, sequence-major:
// the chunk's (B (t1 - t0), width) layer input.
std::vector<double> ChunkRows(const std::vector<double>& full, int64_t B,
                              int64_t T, int64_t width, int64_t t0, int64_t t1) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), full.begin() + (b * T + t0) * width,
               full.begin() + (b * T + t1) * width);
  }
  return out;
}

void PutChunkRows(std::vector<double>* full, const std::vector<double>& part,
                  int64_t B, int64_t T, int64_t width, int64_t t0, int64_t t1) {
  const int64_t s = t1 - t0;
  for (int64_t b = 0; b < B; ++b) {
    std::copy(part.begin() + b * s * width, part.begin() + (b + 1) * s * width,
              full->begin() + (b * T + t0) * width);
  }
}

// A microbatch of B sequences of T tokens cut at `cuts`.
struct Split {
  int64_t B, T;
  std::vector<int64_t> cuts;
  std::vector<int64_t> Bounds() const {
    std::vector<int64_t> b = {0};
    b.insert(b.end(), cuts.begin(), cuts.end());
    b.push_back(T);
    return b;
  }
  std::string Name() const {
    std::ostringstream o;
    o << "B=" << B << " T=" << T << " cuts=";
    for (int64_t c : cuts) o << c << ",";
    return o.str();
  }
};

// Everything one microbatch's forward and backward gives (full-sequence
// layouts (B, T, .)).
struct LayerRun {
  std::vector<double> y, dx;
  std::vector<std::vector<double>> dparams;  // per ParamId
};

// The stage's order: K/V buffer, forwards 0..N-1, gradient buffers,
// backwards N-1..0 (ry empty: forward only), buffer freed. Parameter
// gradients are zeroed first.
template <typename T>
LayerRun RunMicrobatch(AttentionLayer<T>* attn, TrackingAllocator& alloc,
                       const Split& sp, const std::vector<double>& x,
                       const std::vector<double>& ry, Recompute mode) {
  const AttentionLayerDims& d = attn->dims();
  const std::vector<int64_t> bounds = sp.Bounds();
  const size_t N = bounds.size() - 1;
  for (Param<T>& p : attn->params()) p.grad.SetZero();
  auto kv = KvBuffer<T>::Make(alloc, d, sp.B, sp.T);
  EXPECT_TRUE(kv.ok()) << kv.status().message();
  std::vector<AttentionLayerSaved<T>> saved(N);
  LayerRun r{std::vector<double>(x.size()), std::vector<double>(x.size()), {}};
  for (size_t i = 0; i < N; ++i) {
    Tensor<T> xi = FromVector<T>(alloc, kWs, {sp.B * (bounds[i + 1] - bounds[i]), d.C},
                                 ChunkRows(x, sp.B, sp.T, d.C, bounds[i], bounds[i + 1]));
    Tensor<T> y;
    const Status st = attn->Forward(&y, &saved[i], xi, sp.B, bounds[i], &*kv, mode);
    EXPECT_TRUE(st.ok()) << st.message();
    PutChunkRows(&r.y, ToVector(y), sp.B, sp.T, d.C, bounds[i], bounds[i + 1]);
  }
  if (ry.empty()) return r;
  EXPECT_TRUE(kv->MakeGrads(alloc).ok());
  for (size_t i = N; i-- > 0;) {
    Tensor<T> dy = FromVector<T>(alloc, kWs, {sp.B * (bounds[i + 1] - bounds[i]), d.C},
                                 ChunkRows(ry, sp.B, sp.T, d.C, bounds[i], bounds[i + 1]));
    Tensor<T> dx;
    const Status st = attn->Backward(&dx, &saved[i], dy, sp.B, bounds[i], &*kv);
    EXPECT_TRUE(st.ok()) << st.message();
    PutChunkRows(&r.dx, ToVector(dx), sp.B, sp.T, d.C, bounds[i], bounds[i + 1]);
  }
  for (Param<T>& p : attn->params()) r.dparams.push_back(ToVector(p.grad));
  return r;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Up to `k` indices spread over [0, n), always the first and last.
std::vector<int64_t> SampleIndices(int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<int64_t> idx;
  if (n <= k) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  idx = {0, n - 1};
  std::uniform_int_distribution<int64_t> dist(1, n - 2);
  while (static_cast<int64_t>(idx.size()) < k) idx.push_back(dist(rng));
  return idx;
}

// Central differences of f at `indices` of *values against `analytic`.
::testing::AssertionResult MatchesCentralDiff(const std::string& what,
                                              const std::function<double()>& f,
                                              std::vector<double>* values,
                                              const std::vector<double>& analytic,
                                              const std::vector<int64_t>& indices) {
  const double h = 1e-6;
  for (int64_t i : indices) {
    const double saved = (*values)[i];
    (*values)[i] = saved + h;
    const double up = f();
    (*values)[i] = saved - h;
    const double down = f();
    (*values)[i] = saved;
    const double numeric = (up - down) / (2 * h), a = analytic[i];
    if (!(std::abs(a - numeric) <= 1e-7 + 1e-6 * std::abs(numeric))) {
      return ::testing::AssertionFailure() << what << "[" << i << "]: backward " << a
                                           << ", central difference " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

struct GradCase {
  Split split;
  Recompute mode;
};
void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.split.Name() << " recompute " << models::RecomputeName(c.mode);
}

class AttentionLayerGradTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(AttentionLayerGradTest, BackwardMatchesCentralDifferences) {
  const GradCase c = GetParam();
  const Split& sp = c.split;
  const AttentionLayerDims d = SmallDims();
  TrackingAllocator alloc(0);
  auto attn = AttentionLayer<double>::Make(alloc, d, /*layer=*/3, /*num_layers=*/4, 7);
  ASSERT_TRUE(attn.ok()) << attn.status().message();
  RandomizeParams(&*attn, 11);
  std::mt19937_64 rng(13);
  std::vector<double> x = Uniform(rng, sp.B * sp.T * d.C, -1, 1);
  const std::vector<double> ry = Uniform(rng, sp.B * sp.T * d.C, -1, 1);
  const LayerRun run = RunMicrobatch(&*attn, alloc, sp, x, ry, c.mode);
  auto loss = [&] { return Dot(ry, RunMicrobatch(&*attn, alloc, sp, x, {}, c.mode).y); };
  EXPECT_TRUE(MatchesCentralDiff("x", loss, &x, run.dx,
                                 SampleIndices(static_cast<int64_t>(x.size()), 400, rng)));
  for (int id = 0; id < AttentionLayer<double>::kNumParams; ++id) {
    Param<double>& p = attn->param(static_cast<AttentionLayer<double>::ParamId>(id));
    std::vector<double> values = ToVector(p.value);
    auto fp = [&] {
      testing::Assign(&p.value, values);
      return loss();
    };
    EXPECT_TRUE(MatchesCentralDiff(p.name, fp, &values, run.dparams[id],
                                   SampleIndices(p.value.numel(), 16, rng)));
    testing::Assign(&p.value, values);
  }
}

// One chunk; two and three chunks off the 4 x 5 tiles; two sequences.
INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionLayerGradTest,
    ::testing::Values(GradCase{{1, 7, {}}, Recompute::kNone},
                      GradCase{{1, 11, {4}}, Recompute::kNone},
                      GradCase{{1, 11, {4}}, Recompute::kFull},
                      GradCase{{2, 9, {2, 7}}, Recompute::kNone},
                      GradCase{{2, 9, {5}}, Recompute::kFull}));

// Chunked equals unchunked to 1e-10 at the default 64 x 64 tiles, chunk
// lengths and starts off the tiles, N = 1, 2, 3.
TEST(AttentionLayerTest, ChunkedEqualsUnchunked) {
  const AttentionLayerDims d = SmallDims(kAttentionQueryTile, kAttentionKeyTile);
  TrackingAllocator alloc(0);
  auto attn = AttentionLayer<double>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(attn.ok());
  RandomizeParams(&*attn, 3);
  const int64_t B = 2, T = 150;
  std::mt19937_64 rng(4);
  const std::vector<double> x = Uniform(rng, B * T * d.C, -1, 1);
  const std::vector<double> ry = Uniform(rng, B * T * d.C, -1, 1);
  const LayerRun one = RunMicrobatch(&*attn, alloc, {B, T, {}}, x, ry, Recompute::kNone);
  for (const std::vector<int64_t>& cuts :
       {std::vector<int64_t>{70}, std::vector<int64_t>{13, 100}, std::vector<int64_t>{64, 65}}) {
    const Split sp{B, T, cuts};
    SCOPED_TRACE(sp.Name());
    const LayerRun run = RunMicrobatch(&*attn, alloc, sp, x, ry, Recompute::kNone);
    EXPECT_LT(RelError(run.y, one.y), 1e-10);
    EXPECT_LT(RelError(run.dx, one.dx), 1e-10);
    for (size_t id = 0; id < one.dparams.size(); ++id) {
      EXPECT_LT(RelError(run.dparams[id], one.dparams[id]), 1e-10) << attn->params()[id].name;
    }
  }
}

// B = 3 sequences in one microbatch equal three B = 1 runs: outputs and
// input gradients row by row, parameter gradients summed.
TEST(AttentionLayerTest, BatchOfThreeEqualsThreeRuns) {
  const AttentionLayerDims d = SmallDims();
  TrackingAllocator alloc(0);
  auto attn = AttentionLayer<double>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(attn.ok());
  RandomizeParams(&*attn, 8);
  const int64_t B = 3, T = 13, C = d.C;
  std::mt19937_64 rng(9);
  const std::vector<double> x = Uniform(rng, B * T * C, -1, 1);
  const std::vector<double> ry = Uniform(rng, B * T * C, -1, 1);
  const LayerRun three = RunMicrobatch(&*attn, alloc, {B, T, {6}}, x, ry, Recompute::kNone);
  std::vector<std::vector<double>> dparams_sum(three.dparams.size());
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> xb(x.begin() + b * T * C, x.begin() + (b + 1) * T * C);
    const std::vector<double> ryb(ry.begin() + b * T * C, ry.begin() + (b + 1) * T * C);
    const LayerRun one = RunMicrobatch(&*attn, alloc, {1, T, {6}}, xb, ryb, Recompute::kNone);
    const std::vector<double> y3(three.y.begin() + b * T * C, three.y.begin() + (b + 1) * T * C);
    const std::vector<double> dx3(three.dx.begin() + b * T * C, three.dx.begin() + (b + 1) * T * C);
    EXPECT_LT(RelError(y3, one.y), 1e-13) << "sequence " << b;
    EXPECT_LT(RelError(dx3, one.dx), 1e-13) << "sequence " << b;
    for (size_t id = 0; id < one.dparams.size(); ++id) {
      dparams_sum[id].resize(one.dparams[id].size());
      for (size_t e = 0; e < one.dparams[id].size(); ++e) dparams_sum[id][e] += one.dparams[id][e];
    }
  }
  for (size_t id = 0; id < dparams_sum.size(); ++id) {
    EXPECT_LT(RelError(three.dparams[id], dparams_sum[id]), 1e-13) << attn->params()[id].name;
  }
}

// Full recompute replays the forward reading K/V from the buffer: the same
// bits as no recompute, in float and double.
template <typename T>
void ExpectRecomputeBitIdentical() {
  const AttentionLayerDims d = SmallDims();
  TrackingAllocator alloc(0);
  auto none = AttentionLayer<T>::Make(alloc, d, 1, 2, 5);
  auto full = AttentionLayer<T>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(none.ok() && full.ok());
  RandomizeParams(&*none, 3);
  RandomizeParams(&*full, 3);
  const Split sp{2, 17, {5, 11}};
  std::mt19937_64 rng(4);
  const std::vector<double> x = Uniform(rng, sp.B * sp.T * d.C, -1, 1);
  const std::vector<double> ry = Uniform(rng, sp.B * sp.T * d.C, -1, 1);
  const LayerRun a = RunMicrobatch(&*none, alloc, sp, x, ry, Recompute::kNone);
  const LayerRun b = RunMicrobatch(&*full, alloc, sp, x, ry, Recompute::kFull);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  for (size_t id = 0; id < a.dparams.size(); ++id) {
    EXPECT_EQ(a.dparams[id], b.dparams[id]) << none->params()[id].name;
  }
}

TEST(AttentionLayerTest, RecomputeFullIsBitIdenticalToNone) {
  ExpectRecomputeBitIdentical<double>();
  ExpectRecomputeBitIdentical<float>();
}

TEST(AttentionLayerTest, Float32AgreesWithFloat64) {
  const AttentionLayerDims d = SmallDims(kAttentionQueryTile, kAttentionKeyTile);
  TrackingAllocator alloc(0);
  auto a64 = AttentionLayer<double>::Make(alloc, d, 1, 2, 9);
  auto a32 = AttentionLayer<float>::Make(alloc, d, 1, 2, 9);
  ASSERT_TRUE(a64.ok() && a32.ok());
  RandomizeParams(&*a64, 21);
  RandomizeParams(&*a32, 21);
  const Split sp{2, 90, {70}};
  std::mt19937_64 rng(22);
  const std::vector<double> x = Uniform(rng, sp.B * sp.T * d.C, -1, 1);
  const std::vector<double> ry = Uniform(rng, sp.B * sp.T * d.C, -1, 1);
  const LayerRun r64 = RunMicrobatch(&*a64, alloc, sp, x, ry, Recompute::kNone);
  const LayerRun r32 = RunMicrobatch(&*a32, alloc, sp, x, ry, Recompute::kNone);
  EXPECT_LT(RelError(r32.y, r64.y), 1e-5);
  EXPECT_LT(RelError(r32.dx, r64.dx), 1e-4);
  for (size_t id = 0; id < r64.dparams.size(); ++id) {
    EXPECT_LT(RelError(r32.dparams[id], r64.dparams[id]), 1e-4) << a64->params()[id].name;
  }
}

// Initialisation depends on (seed, layer, name) only, and names and shapes
// are as documented.
TEST(AttentionLayerTest, ParametersNamedAndKeyedBySeedLayerAndName) {
  const AttentionLayerDims d = SmallDims();
  TrackingAllocator alloc(0);
  auto a = AttentionLayer<double>::Make(alloc, d, 3, 4, 42);
  auto b = AttentionLayer<double>::Make(alloc, d, 3, 4, 42);
  auto other = AttentionLayer<double>::Make(alloc, d, 2, 4, 42);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  const std::vector<std::string> names = {
      "attn_norm.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
      "o_proj.weight", "mlp_norm.weight", "mlp.gate_proj.weight",
      "mlp.up_proj.weight", "mlp.down_proj.weight"};
  const std::vector<Shape> shapes = {{16}, {24, 16}, {12, 16}, {12, 16}, {16, 24},
                                     {16}, {24, 16}, {24, 16}, {16, 24}};
  ASSERT_EQ(a->params().size(), names.size());
  for (size_t id = 0; id < names.size(); ++id) {
    const Param<double>& p = a->params()[id];
    EXPECT_EQ(p.name, names[id]);
    EXPECT_EQ(p.value.shape(), shapes[id]) << p.name;
    const std::vector<double> va = ToVector(p.value);
    EXPECT_EQ(va, ToVector(b->params()[id].value)) << p.name;
    if (p.name.find("norm") != std::string::npos) continue;  // all ones
    EXPECT_NE(va, ToVector(other->params()[id].value)) << p.name;
  }
}

// ---- memory: the layer's allocations are the memory model's events ---------

// A gdn-hybrid-like model whose attention dims are `d` (hidden, heads, GQA
// group, head dim, MLP size: all the attention events read).
pb::ModelSpec ModelOf(const AttentionLayerDims& d) {
  pb::ModelSpec m = *models::ModelPreset("gdn-hybrid-tiny");
  m.set_hidden_size(d.C);
  m.set_attn_heads(d.Hq);
  m.set_gqa_group_size(d.Hq / d.Hkv);
  m.set_attn_head_dim(d.D);
  m.set_mlp_size(d.F);
  return m;
}

// What the allocator did since `before`, as a MemorySegment would say it:
// the net change, each class's own peak and the classes at the total peak,
// all relative to `before` (whose peaks were reset).
void ExpectSegment(const std::string& what, const MemoryStats& before,
                   const MemoryStats& after, const models::MemorySegment& seg) {
  SCOPED_TRACE(what);
  const double peak_total = static_cast<double>(after.peak_total_bytes - before.live_total_bytes);
  EXPECT_EQ(peak_total, seg.peak_total());
  for (int c = 0; c < kNumBufferClasses; ++c) {
    const std::string name(BufferClassName(static_cast<BufferClass>(c)));
    EXPECT_EQ(static_cast<double>(after.live_bytes[c] - before.live_bytes[c]), seg.net()[c]) << name;
    EXPECT_EQ(static_cast<double>(after.peak_bytes[c] - before.live_bytes[c]), seg.class_peak()[c]) << name;
    if (peak_total > 0) {
      EXPECT_EQ(static_cast<double>(after.at_total_peak_bytes[c] - before.live_bytes[c]),
                seg.at_peak()[c]) << name;
    }
  }
}

// Chunk i of a microbatch (chunk 0 forward first, so the K/V prefix is
// real), its forward and its backward each on the allocator whose peaks were
// just reset, against the events for t = B s tokens.
template <typename T>
void CheckLayerMemory(const AttentionLayerDims& d, const Split& sp, size_t chunk,
                      Recompute mode) {
  SCOPED_TRACE(sp.Name() + " chunk " + std::to_string(chunk) + " recompute " +
               std::string(models::RecomputeName(mode)) + (sizeof(T) == 4 ? " float" : " double"));
  TrackingAllocator alloc(0);
  auto attn = AttentionLayer<T>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(attn.ok());
  const std::vector<int64_t> bounds = sp.Bounds();
  auto kv = KvBuffer<T>::Make(alloc, d, sp.B, sp.T);
  ASSERT_TRUE(kv.ok());
  std::mt19937_64 rng(1);
  std::vector<AttentionLayerSaved<T>> saved(chunk + 1);
  for (size_t i = 0; i < chunk; ++i) {  // the prefix
    const int64_t rows = sp.B * (bounds[i + 1] - bounds[i]);
    Tensor<T> x = FromVector<T>(alloc, kWs, {rows, d.C}, Uniform(rng, rows * d.C, -1, 1)), y;
    ASSERT_TRUE(attn->Forward(&y, &saved[i], x, sp.B, bounds[i], &*kv, mode).ok());
  }
  const int64_t s = bounds[chunk + 1] - bounds[chunk], rows = sp.B * s;
  models::TensorBytes b;
  b.tokens = static_cast<double>(rows);
  b.seq_tokens = static_cast<double>(s);
  b.act = sizeof(T);
  const pb::ModelSpec model = ModelOf(d);
  const bool full = mode == Recompute::kFull;
  Tensor<T> x = FromVector<T>(alloc, kWs, {rows, d.C}, Uniform(rng, rows * d.C, -1, 1)), y;
  alloc.ResetPeaks();
  MemoryStats before = alloc.Stats();
  ASSERT_TRUE(attn->Forward(&y, &saved[chunk], x, sp.B, bounds[chunk], &*kv, mode).ok());
  ExpectSegment("forward", before, alloc.Stats(), models::AttentionLayerForwardMemory(model, b, full));
  ASSERT_TRUE(kv->MakeGrads(alloc).ok());
  Tensor<T> dy = FromVector<T>(alloc, kWs, {rows, d.C}, Uniform(rng, rows * d.C, -1, 1)), dx;
  y = Tensor<T>();
  alloc.ResetPeaks();
  before = alloc.Stats();
  ASSERT_TRUE(attn->Backward(&dx, &saved[chunk], dy, sp.B, bounds[chunk], &*kv).ok());
  ExpectSegment("backward", before, alloc.Stats(), models::AttentionLayerBackwardMemory(model, b, full));
}

// Dims at which the backward's workspace peaks while the kernel's D (one
// sequence's (s, Hq)) is live: dh + d_o + dq + D = C + 2 HqD + Hq s / t
// exceeds the later dh + dq + dxn + part = 3C + HqD and the MLP's
// C + 2F + C, so a wrong size of D (e.g. all B sequences') changes the peak.
AttentionLayerDims DPeakDims() {
  AttentionLayerDims d;
  d.C = 8, d.Hq = 4, d.Hkv = 2, d.D = 4, d.F = 4;
  d.q_tile = 4;
  d.k_tile = 4;
  return d;
}

TEST(AttentionLayerMemory, AllocationsEqualTheModelsEvents) {
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    CheckLayerMemory<double>(DPeakDims(), {3, 9, {4}}, 1, mode);
    CheckLayerMemory<double>(SmallDims(), {1, 11, {4}}, 0, mode);
    CheckLayerMemory<double>(SmallDims(), {2, 11, {4}}, 1, mode);
    CheckLayerMemory<float>(SmallDims(), {3, 20, {7, 13}}, 2, mode);
    // gdn-hybrid-tiny's own attention dims at the default tiles.
    const AttentionLayerDims tiny =
        AttentionLayerDims::FromModel(*models::ModelPreset("gdn-hybrid-tiny"));
    CheckLayerMemory<float>(tiny, {2, 200, {70}}, 1, mode);
  }
}

// The K/V buffer and its gradients hold 2 B T Hkv d elements each, as the
// cost model's KvBytesPerToken and KvGradBytesPerToken (times T) say.
TEST(AttentionLayerMemory, KvBufferBytesAreTheCostModels) {
  const pb::ModelSpec model = *models::ModelPreset("gdn-hybrid-tiny");
  const AttentionLayerDims d = AttentionLayerDims::FromModel(model);
  for (const char* dtype : {"float32", "float64"}) {
    for (int mbs : {1, 3}) {
      models::CostModelOptions o;
      o.microbatch_size = mbs;
      auto cm = models::CostModel::Make(model, *models::PrecisionForDtype(dtype),
                                        *models::ClusterPreset("cpu"), o);
      ASSERT_TRUE(cm.ok()) << cm.status().message();
      int l = 0;
      while (cm->layers()[l] != models::LayerKind::kAttention) ++l;
      const int64_t T = 256;
      TrackingAllocator alloc(0);
      const bool f64 = std::string(dtype) == "float64";
      const int64_t expected = f64 ? KvBuffer<double>::Bytes(d, mbs, T) : KvBuffer<float>::Bytes(d, mbs, T);
      EXPECT_EQ(expected, 2 * mbs * T * d.KV() * (f64 ? 8 : 4));
      EXPECT_EQ(static_cast<double>(expected), cm->KvBytesPerToken(l) * T) << dtype;
      EXPECT_EQ(static_cast<double>(expected), cm->KvGradBytesPerToken(l) * T) << dtype;
      auto kv = KvBuffer<float>::Make(alloc, d, mbs, T);
      ASSERT_TRUE(kv.ok());
      ASSERT_TRUE(kv->MakeGrads(alloc).ok());
      EXPECT_EQ(alloc.LiveBytes(BufferClass::kKvBuffers), 2 * KvBuffer<float>::Bytes(d, mbs, T));
    }
  }
}

// ---- misuse ----------------------------------------------------------------

TEST(AttentionLayerTest, MisuseIsAnErrorNotACrash) {
  const AttentionLayerDims d = SmallDims();
  TrackingAllocator alloc(0);
  auto attn = AttentionLayer<double>::Make(alloc, d, 4, 4, 1);
  ASSERT_TRUE(attn.ok());
  auto kv = KvBuffer<double>::Make(alloc, d, 2, 10);
  ASSERT_TRUE(kv.ok());
  auto zeros = [&](int64_t rows, int64_t cols) {
    return FromVector<double>(alloc, kWs, {rows, cols}, std::vector<double>(rows * cols, 0.0));
  };
  Tensor<double> y, dx;
  AttentionLayerSaved<double> saved;
  auto expect_error = [](const Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), Status::Code::kInvalidInput) << st.message();
    EXPECT_NE(st.message().find("layer 4 (attention layer)"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  Tensor<double> x = zeros(6, d.C);
  expect_error(attn->Backward(&dx, &saved, x, 2, 0, &*kv), "without a saved forward");
  expect_error(attn->Forward(&y, &saved, zeros(6, d.C + 1), 2, 0, &*kv, Recompute::kNone), "input x");
  expect_error(attn->Forward(&y, &saved, zeros(5, d.C), 2, 0, &*kv, Recompute::kNone), "multiple of batch");
  expect_error(attn->Forward(&y, &saved, x, 0, 0, &*kv, Recompute::kNone), "batch 0");
  expect_error(attn->Forward(&y, &saved, x, 2, 8, &*kv, Recompute::kNone), "outside the K/V buffer");
  expect_error(attn->Forward(&y, &saved, x, 3, 0, &*kv, Recompute::kNone), "K/V buffer k");
  ASSERT_TRUE(attn->Forward(&y, &saved, x, 2, 0, &*kv, Recompute::kNone).ok());
  expect_error(attn->Backward(&dx, &saved, x, 2, 0, &*kv), "MakeGrads");
  ASSERT_TRUE(kv->MakeGrads(alloc).ok());
  expect_error(attn->Backward(&dx, &saved, x, 2, 1, &*kv), "forward was batch 2 at start 0");
  AttentionLayerDims odd = d;
  odd.D = 5;
  auto bad = AttentionLayer<double>::Make(alloc, odd, 4, 4, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("attn_head_dim 5 is odd"), std::string::npos);
  AttentionLayerDims gqa = d;
  gqa.Hkv = 3;
  bad = AttentionLayer<double>::Make(alloc, gqa, 4, 4, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a multiple of the K/V heads 3"), std::string::npos);
  KvBuffer<double> none;
  EXPECT_FALSE(none.MakeGrads(alloc).ok());
}

}  // namespace
}  // namespace stateflow::backend

// The GDN layer: central-difference gradient checks (float64) of the
// input, every part of the boundary state in (recurrent state, three conv
// tails) and every parameter (sampled elements of the big ones), in both
// recompute modes; recompute full bit-identical to none; float32 against
// float64; what the forward saves; errors for misuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/layers/gdn_layer.h"
#include "tests/backend/delta_layer_harness.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::models {
// Readable recompute modes in test logs.
inline void PrintTo(Recompute r, std::ostream* os) { *os << RecomputeName(r); }
}  // namespace stateflow::models

namespace stateflow::backend {
namespace {

using namespace delta_layer_test;  // delta_layer_harness.h

GdnLayerDims SmallDims(const LayerCase& c) {
  GdnLayerDims d;
  d.C = 16, d.H = 2, d.K = 8, d.Dv = 6, d.F = 24, d.W = c.W;
  d.block_size = c.block_size;
  return d;
}

class GdnLayerGradTest
    : public ::testing::TestWithParam<std::tuple<LayerCase, Recompute>> {};

TEST_P(GdnLayerGradTest, BackwardMatchesCentralDifferences) {
  const LayerCase c = std::get<0>(GetParam());
  const Recompute mode = std::get<1>(GetParam());
  SCOPED_TRACE(c.Name() + " recompute " + std::string(models::RecomputeName(mode)));
  const GdnLayerDims d = SmallDims(c);
  TrackingAllocator alloc(0);
  auto gdn = GdnLayer<double>::Make(alloc, d, /*layer=*/2, /*num_layers=*/3, 7);
  ASSERT_TRUE(gdn.ok()) << gdn.status().message();
  RandomizeParams(&*gdn, 11);
  ExpectBackwardMatchesCentralDifferences(&*gdn, alloc, c, mode);
}

// Several kernel blocks with a partial last one; a chunk shorter than W - 1;
// width 1 (no tail); the default T_C with a partial gdn.
INSTANTIATE_TEST_SUITE_P(
    Cases, GdnLayerGradTest,
    ::testing::Combine(::testing::Values(LayerCase{11, 4, 4}, LayerCase{2, 4, 4},
                                         LayerCase{5, 1, 64}, LayerCase{70, 3, 64}),
                       ::testing::Values(Recompute::kNone, Recompute::kFull)),
    [](const ::testing::TestParamInfo<std::tuple<LayerCase, Recompute>>& info) {
      const LayerCase& c = std::get<0>(info.param);
      std::ostringstream name;
      name << "S" << c.S << "_W" << c.W << "_TC" << c.block_size << "_recompute_"
           << models::RecomputeName(std::get<1>(info.param));
      return name.str();
    });

// A sequence in two chunks, the state handed over and its gradient chained
// back, equals one chunk of both (float64, three kernel blocks cut mid-block).
TEST(GdnLayerTest, TwoChunksEqualOne) {
  const GdnLayerDims d = SmallDims({0, 4, 16});
  TrackingAllocator alloc(0);
  auto one = GdnLayer<double>::Make(alloc, d, 1, 2, 5);
  auto two = GdnLayer<double>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(one.ok() && two.ok());
  RandomizeParams(&*one, 3);
  RandomizeParams(&*two, 3);
  ExpectTwoChunksEqualOne(&*one, &*two, alloc, 21, 19, 1e-12);
}

TEST(GdnLayerTest, RecomputeFullIsBitIdenticalToNone) {
  const LayerCase c{37, 4, 16};
  const GdnLayerDims d = SmallDims(c);
  TrackingAllocator alloc(0);
  auto none = GdnLayer<double>::Make(alloc, d, 1, 2, 5);
  auto full = GdnLayer<double>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(none.ok() && full.ok());
  RandomizeParams(&*none, 3);
  RandomizeParams(&*full, 3);
  std::mt19937_64 rng(4);
  const BlockInputs in = MakeInputs(d, c.S, rng);
  // Twice, so that accumulated parameter gradients are compared too.
  ForwardBackward(&*none, alloc, in, Recompute::kNone);
  ForwardBackward(&*full, alloc, in, Recompute::kFull);
  const LayerRun a = ForwardBackward(&*none, alloc, in, Recompute::kNone);
  const LayerRun b = ForwardBackward(&*full, alloc, in, Recompute::kFull);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.S_out, b.S_out);
  EXPECT_EQ(a.tq_out, b.tq_out);
  EXPECT_EQ(a.tv_out, b.tv_out);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dS, b.dS);
  EXPECT_EQ(a.dtq, b.dtq);
  EXPECT_EQ(a.dtk, b.dtk);
  EXPECT_EQ(a.dtv, b.dtv);
  for (size_t id = 0; id < a.dparams.size(); ++id) {
    EXPECT_EQ(a.dparams[id], b.dparams[id]) << none->params()[id].name;
  }
}

// dims.st_overlap: the core's forward and backward through the Ops'
// overlapped entry points (on the CPU the split-and-overlap kernels), the
// same arithmetic per block:
// outputs, states and gradients bit for bit in float64 (full blocks of >= 16
// tokens, as gdn_core.h states), under both recompute modes.
TEST(GdnLayerTest, StOverlapIsBitIdenticalToSequential) {
  const LayerCase c{128, 4, 32};
  const GdnLayerDims d = SmallDims(c);
  GdnLayerDims d_on = d;
  d_on.st_overlap = true;
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    SCOPED_TRACE(RecomputeName(mode));
    TrackingAllocator alloc(0);
    auto off = GdnLayer<double>::Make(alloc, d, 1, 2, 5);
    auto on = GdnLayer<double>::Make(alloc, d_on, 1, 2, 5);
    ASSERT_TRUE(off.ok() && on.ok());
    ASSERT_TRUE(on->dims().st_overlap);
    RandomizeParams(&*off, 3);
    RandomizeParams(&*on, 3);
    std::mt19937_64 rng(4);
    const BlockInputs in = MakeInputs(d, c.S, rng);
    const LayerRun a = ForwardBackward(&*off, alloc, in, mode);
    const LayerRun b = ForwardBackward(&*on, alloc, in, mode);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.S_out, b.S_out);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.dS, b.dS);
    for (size_t id = 0; id < a.dparams.size(); ++id) {
      EXPECT_EQ(a.dparams[id], b.dparams[id]) << off->params()[id].name;
    }
  }
}

// dims.st_tile (schedule.st_tile): B_V reaches the core's Ops calls, and the
// layer's results do not depend on it beyond rounding (Dv = 6 in tiles of
// 1, 4 (not a divisor) and 6): within 1e-12 relative of the untiled layer in
// float64, sequential and overlapped, under both recompute modes.
TEST(GdnLayerTest, StTileChangesNothingBeyondRounding) {
  const LayerCase c{128, 4, 32};
  const GdnLayerDims d = SmallDims(c);
  for (bool overlap : {false, true}) {
    for (int64_t tile : {1, 4, 6}) {
      GdnLayerDims d_tile = d;
      d_tile.st_tile = tile;
      d_tile.st_overlap = overlap;
      for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
        SCOPED_TRACE(std::string(RecomputeName(mode)) + " st_tile " + std::to_string(tile) +
                     (overlap ? " overlapped" : ""));
        TrackingAllocator alloc(0);
        auto untiled = GdnLayer<double>::Make(alloc, d, 1, 2, 5);
        auto tiled = GdnLayer<double>::Make(alloc, d_tile, 1, 2, 5);
        ASSERT_TRUE(untiled.ok() && tiled.ok());
        ASSERT_EQ(tiled->dims().st_tile, tile);
        RandomizeParams(&*untiled, 3);
        RandomizeParams(&*tiled, 3);
        std::mt19937_64 rng(4);
        const BlockInputs in = MakeInputs(d, c.S, rng);
        const LayerRun a = ForwardBackward(&*untiled, alloc, in, mode);
        const LayerRun b = ForwardBackward(&*tiled, alloc, in, mode);
        EXPECT_LT(RelError(b.y, a.y), 1e-12);
        EXPECT_LT(RelError(b.S_out, a.S_out), 1e-12);
        EXPECT_LT(RelError(b.dx, a.dx), 1e-12);
        EXPECT_LT(RelError(b.dS, a.dS), 1e-12);
        for (size_t id = 0; id < a.dparams.size(); ++id) {
          EXPECT_LT(RelError(b.dparams[id], a.dparams[id]), 1e-12) << untiled->params()[id].name;
        }
      }
    }
  }
}

// What the forward keeps: under kNone the per-token elements counted in
// gdn_layer.h, here recounted from the list of saved tensors
//   x, xn, h, hn (4C); mlp gate, up (2F); rstd1, rstd2 (2);
//   q_in, k_in, q, k (4 HK); v_in, v, o, z, gated (5 HV);
//   q_rnorm, k_rnorm, a, g, beta, o_rstd (6 H);
// under kFull only x (C). Nothing else stays live after the forward.
TEST(GdnLayerTest, SavedBytesPerMode) {
  const LayerCase c{9, 4, 64};
  const GdnLayerDims d = SmallDims(c);
  const int64_t per_token_none = 4 * d.C + 2 * d.F + 2 + 4 * d.HK() + 5 * d.HV() + 6 * d.H;
  EXPECT_EQ(GdnLayerSaved<double>::NumelPerToken(d), per_token_none);
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    TrackingAllocator alloc(0);
    auto gdn = GdnLayer<double>::Make(alloc, d, 1, 1, 5);
    ASSERT_TRUE(gdn.ok());
    std::mt19937_64 rng(1);
    const BlockInputs in = MakeInputs(d, c.S, rng);
    Tensor<double> x = FromVector<double>(alloc, kWs, {c.S, d.C}, in.x);
    GdnState<double> state_in = MakeState<GdnState<double>>(alloc, d, in.S, in.tq, in.tk, in.tv);
    const int64_t ws_before = alloc.LiveBytes(kWs);
    Tensor<double> y;
    GdnState<double> state_out;
    GdnLayerSaved<double> saved;
    ASSERT_TRUE(gdn->Forward(&y, &state_out, &saved, x, 1, state_in, mode).ok());
    const int64_t per_token = mode == Recompute::kNone ? per_token_none : d.C;
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations),
              c.S * per_token * int64_t{sizeof(double)});
    // state in (made here) + state out.
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kBoundaryStates),
              2 * GdnState<double>::Numel(d) * int64_t{sizeof(double)});
    EXPECT_EQ(alloc.LiveBytes(kWs), ws_before + y.bytes());
    Tensor<double> dy = FromVector<double>(alloc, kWs, {c.S, d.C}, in.ry), dx;
    ASSERT_TRUE(gdn->Backward(&dx, nullptr, &saved, dy, 1, nullptr, state_in).ok());
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 0);
  }
}

TEST(GdnLayerTest, Float32AgreesWithFloat64) {
  const LayerCase c{70, 4, 64};
  const GdnLayerDims d = SmallDims(c);
  TrackingAllocator alloc(0);
  auto b64 = GdnLayer<double>::Make(alloc, d, 1, 2, 9);
  auto b32 = GdnLayer<float>::Make(alloc, d, 1, 2, 9);
  ASSERT_TRUE(b64.ok() && b32.ok());
  RandomizeParams(&*b64, 21);
  RandomizeParams(&*b32, 21);
  std::mt19937_64 rng(22);
  const BlockInputs in = MakeInputs(d, c.S, rng);
  const LayerRun r64 = ForwardBackward(&*b64, alloc, in, Recompute::kNone);
  const LayerRun r32 = ForwardBackward(&*b32, alloc, in, Recompute::kNone);
  const double tol = 1e-4;
  EXPECT_LT(RelError(r32.y, r64.y), tol);
  EXPECT_LT(RelError(r32.S_out, r64.S_out), tol);
  EXPECT_LT(RelError(r32.dx, r64.dx), tol);
  EXPECT_LT(RelError(r32.dS, r64.dS), tol);
  EXPECT_LT(RelError(r32.dtq, r64.dtq), tol);
  EXPECT_LT(RelError(r32.dtv, r64.dtv), tol);
  for (size_t id = 0; id < r64.dparams.size(); ++id) {
    EXPECT_LT(RelError(r32.dparams[id], r64.dparams[id]), tol) << b64->params()[id].name;
  }
}

// Initialisation depends on (seed, layer, name) only: the same layer index
// gives the same values whatever else exists; another layer index differs.
TEST(GdnLayerTest, InitialisationIsKeyedBySeedLayerAndName) {
  const GdnLayerDims d = SmallDims({4, 4, 64});
  TrackingAllocator alloc(0);
  auto a = GdnLayer<double>::Make(alloc, d, 3, 4, 42);
  auto b = GdnLayer<double>::Make(alloc, d, 3, 4, 42);
  auto other_layer = GdnLayer<double>::Make(alloc, d, 2, 4, 42);
  auto other_seed = GdnLayer<double>::Make(alloc, d, 3, 4, 43);
  ASSERT_TRUE(a.ok() && b.ok() && other_layer.ok() && other_seed.ok());
  for (int id = 0; id < GdnLayer<double>::kNumParams; ++id) {
    const auto pid = static_cast<GdnLayer<double>::ParamId>(id);
    if (!GdnLayer<double>::Has(d, pid)) continue;  // DeltaNet's biases: not GDN's
    const std::vector<double> va = ToVector(a->param(pid).value);
    EXPECT_EQ(va, ToVector(b->param(pid).value)) << a->param(pid).name;
    const bool constant = std::all_of(va.begin(), va.end(), [&](double v) { return v == va[0]; });
    if (constant) continue;  // norms start at 1 everywhere
    EXPECT_NE(va, ToVector(other_layer->param(pid).value)) << a->param(pid).name;
    EXPECT_NE(va, ToVector(other_seed->param(pid).value)) << a->param(pid).name;
  }
}

// GDN's gate initialisation: A = exp(A_log) in (0, 16), and
// dt = softplus(dt_bias) in [0.001, 0.1].
TEST(GdnLayerTest, GateParametersInitialisedAsInGdn) {
  GdnLayerDims d = SmallDims({4, 4, 64});
  d.H = 64;  // many heads, to see the ranges
  TrackingAllocator alloc(0);
  auto gdn = GdnLayer<double>::Make(alloc, d, 1, 1, 3);
  ASSERT_TRUE(gdn.ok());
  for (double a_log : ToVector(gdn->param(GdnLayer<double>::kALog).value)) {
    EXPECT_GT(std::exp(a_log), 0.0);
    EXPECT_LT(std::exp(a_log), 16.0);
  }
  for (double b : ToVector(gdn->param(GdnLayer<double>::kDtBias).value)) {
    const double dt = std::log1p(std::exp(b));
    EXPECT_GE(dt, 0.001 * (1 - 1e-12));
    EXPECT_LE(dt, 0.1 * (1 + 1e-12));
  }
}

TEST(GdnLayerTest, MisuseIsAnErrorNotACrash) {
  const GdnLayerDims d = SmallDims({4, 4, 64});
  TrackingAllocator alloc(0);
  auto gdn = GdnLayer<double>::Make(alloc, d, 4, 4, 1);
  ASSERT_TRUE(gdn.ok());
  auto state = GdnState<double>::Zeros(alloc, d, 1, BufferClass::kBoundaryStates);
  ASSERT_TRUE(state.ok());
  GdnLayerSaved<double> empty;
  Tensor<double> dy = FromVector<double>(alloc, kWs, {3, d.C}, std::vector<double>(3 * d.C, 0.0));
  Tensor<double> dx;
  Status st = gdn->Backward(&dx, nullptr, &empty, dy, 1, nullptr, *state);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("layer 4"), std::string::npos) << st.message();
  // Input of the wrong width.
  Tensor<double> bad = FromVector<double>(alloc, kWs, {3, d.C + 1}, std::vector<double>(3 * (d.C + 1), 0.0));
  Tensor<double> y;
  GdnLayerSaved<double> saved;
  st = gdn->Forward(&y, nullptr, &saved, bad, 1, *state, Recompute::kNone);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("input x"), std::string::npos) << st.message();
  // A state of the wrong shape.
  GdnState<double> wrong;
  st = gdn->Forward(&y, nullptr, &saved, dy, 1, wrong, Recompute::kNone);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("state_in.S"), std::string::npos) << st.message();
  // A backward of another batch than its forward's.
  ASSERT_TRUE(gdn->Forward(&y, nullptr, &saved, dy, 1, *state, Recompute::kNone).ok());
  st = gdn->Backward(&dx, nullptr, &saved, dy, 3, nullptr, *state);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("layer 4 (gdn layer): batch 3 in the backward, 1 in the forward"),
            std::string::npos)
      << st.message();
}

TEST(GdnLayerTest, CapacityErrorIsAStatus) {
  const GdnLayerDims d = SmallDims({4, 4, 64});
  TrackingAllocator alloc(0, /*capacity_bytes=*/1024);
  auto gdn = GdnLayer<double>::Make(alloc, d, 1, 1, 1);
  ASSERT_FALSE(gdn.ok());
  EXPECT_EQ(gdn.status().code(), Status::Code::kResource);
}

}  // namespace
}  // namespace stateflow::backend

// DeltaNet: the GDN layer without its decay gate, with LayerNorm pre-norms,
// a GELU MLP with biases and a bias on the output projection (gdn_layer.h,
// models/model.h's BlockShape). Central-difference gradient checks (float64)
// of the input, the boundary state and every parameter (the biases
// included) in both recompute modes; two chunks equal one; recompute full
// bit-identical to none; the host-grid device equal to the CPU; float32
// against float64; what the forward saves; the parameters that exist and
// their count against the cost model's; the delta rule with g = 0 against
// GDN with a gate whose decay is exactly 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/device/host_grid_device.h"
#include "backend/layers/gdn_layer.h"
#include "models/layer_formulas.h"
#include "models/model.h"
#include "tests/backend/delta_layer_harness.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::models {
inline void PrintTo(Recompute r, std::ostream* os) { *os << RecomputeName(r); }
}  // namespace stateflow::models

namespace stateflow::backend {
namespace {

using namespace delta_layer_test;  // delta_layer_harness.h
using Layer = GdnLayer<double>;

GdnLayerDims DeltaNetDims(const LayerCase& c) {
  GdnLayerDims d;
  d.C = 16, d.H = 2, d.K = 8, d.Dv = 8, d.F = 24, d.W = c.W;
  d.block_size = c.block_size;
  d.decay = false;
  d.shape.layer_norm = true;
  d.shape.gelu = true;
  d.shape.mlp_bias = true;
  d.shape.out_proj_bias = true;
  d.shape.norm_eps = d.norm_eps = 1e-5;
  return d;
}

class DeltaNetGradTest : public ::testing::TestWithParam<std::tuple<LayerCase, Recompute>> {};

TEST_P(DeltaNetGradTest, BackwardMatchesCentralDifferences) {
  const LayerCase c = std::get<0>(GetParam());
  const Recompute mode = std::get<1>(GetParam());
  SCOPED_TRACE(c.Name() + " recompute " + std::string(models::RecomputeName(mode)));
  TrackingAllocator alloc(0);
  auto layer = Layer::Make(alloc, DeltaNetDims(c), /*layer=*/2, /*num_layers=*/3, 7);
  ASSERT_TRUE(layer.ok()) << layer.status().message();
  RandomizeParams(&*layer, 11);
  ExpectBackwardMatchesCentralDifferences(&*layer, alloc, c, mode);
}

// Several kernel blocks with a partial last one; a chunk shorter than W - 1.
INSTANTIATE_TEST_SUITE_P(
    Cases, DeltaNetGradTest,
    ::testing::Combine(::testing::Values(LayerCase{11, 4, 4}, LayerCase{2, 4, 4},
                                         LayerCase{70, 4, 64}),
                       ::testing::Values(Recompute::kNone, Recompute::kFull)),
    [](const ::testing::TestParamInfo<std::tuple<LayerCase, Recompute>>& info) {
      const LayerCase& c = std::get<0>(info.param);
      std::ostringstream name;
      name << "S" << c.S << "_W" << c.W << "_TC" << c.block_size << "_recompute_"
           << models::RecomputeName(std::get<1>(info.param));
      return name.str();
    });

TEST(DeltaNetLayerTest, TwoChunksEqualOne) {
  const GdnLayerDims d = DeltaNetDims({0, 4, 16});
  TrackingAllocator alloc(0);
  auto one = Layer::Make(alloc, d, 1, 2, 5);
  auto two = Layer::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(one.ok() && two.ok());
  RandomizeParams(&*one, 3);
  RandomizeParams(&*two, 3);
  ExpectTwoChunksEqualOne(&*one, &*two, alloc, 21, 19, 1e-12);
}

// Recompute full gives none's bits; the host-grid device gives the CPU's
// results (float64, < 1e-12), both modes.
TEST(DeltaNetLayerTest, RecomputeAndHostGridAgree) {
  const LayerCase c{37, 4, 16};
  const GdnLayerDims d = DeltaNetDims(c);
  std::mt19937_64 rng(4);
  const BlockInputs in = MakeInputs(d, c.S, rng);
  TrackingAllocator cpu_alloc(0), grid_alloc(0, std::nullopt, &HostGridDevice());
  LayerRun runs[2][2];  // [cpu, host-grid][none, full]
  for (int device = 0; device < 2; ++device) {
    TrackingAllocator& alloc = device == 0 ? cpu_alloc : grid_alloc;
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      auto layer = Layer::Make(alloc, d, 1, 2, 5);
      ASSERT_TRUE(layer.ok());
      RandomizeParams(&*layer, 3);
      runs[device][mode == Recompute::kFull] = ForwardBackward(&*layer, alloc, in, mode);
    }
  }
  const LayerRun& a = runs[0][0];
  const LayerRun& b = runs[0][1];
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.S_out, b.S_out);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dS, b.dS);
  EXPECT_EQ(a.dtq, b.dtq);
  EXPECT_EQ(a.dparams, b.dparams);
  for (int mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE(mode == 0 ? "none" : "full");
    const LayerRun& g = runs[1][mode];
    EXPECT_LT(RelError(g.y, a.y), 1e-12);
    EXPECT_LT(RelError(g.S_out, a.S_out), 1e-12);
    EXPECT_LT(RelError(g.dx, a.dx), 1e-12);
    EXPECT_LT(RelError(g.dS, a.dS), 1e-12);
    EXPECT_LT(RelError(g.dtv, a.dtv), 1e-12);
    ASSERT_EQ(g.dparams.size(), a.dparams.size());
    for (size_t id = 0; id < a.dparams.size(); ++id) {
      EXPECT_LT(RelError(g.dparams[id], a.dparams[id]), 1e-12) << "parameter " << id;
    }
  }
}

TEST(DeltaNetLayerTest, Float32AgreesWithFloat64) {
  const LayerCase c{70, 4, 64};
  const GdnLayerDims d = DeltaNetDims(c);
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
  EXPECT_LT(RelError(r32.dx, r64.dx), tol);
  EXPECT_LT(RelError(r32.dS, r64.dS), tol);
  for (size_t id = 0; id < r64.dparams.size(); ++id) {
    EXPECT_LT(RelError(r32.dparams[id], r64.dparams[id]), tol) << b64->params()[id].name;
  }
}

// The delta rule is GDN with g = 0: the DeltaNet layer equals a GDN layer of
// the same shape whose gate gives exactly 0 (A_log = -inf: -exp(A_log) = 0)
// and whose extra parameters are copied, in the forward.
TEST(DeltaNetLayerTest, IsGdnWithAGateOfZero) {
  const LayerCase c{37, 4, 16};
  const GdnLayerDims dn = DeltaNetDims(c);
  GdnLayerDims gd = dn;
  gd.decay = true;
  TrackingAllocator alloc(0);
  auto delta = Layer::Make(alloc, dn, 1, 2, 5);
  auto gated = Layer::Make(alloc, gd, 1, 2, 5);
  ASSERT_TRUE(delta.ok() && gated.ok());
  RandomizeParams(&*delta, 3);
  for (Param<double>& p : gated->params()) {
    for (Param<double>& q : delta->params()) {
      if (q.name == p.name) testing::Assign(&p.value, ToVector(q.value));
    }
  }
  const double minus_inf = -std::numeric_limits<double>::infinity();
  testing::Assign(&gated->param(Layer::kALog).value,
                  std::vector<double>(static_cast<size_t>(dn.H), minus_inf));
  std::mt19937_64 rng(4);
  const BlockInputs in = MakeInputs(dn, c.S, rng);
  const LayerRun a = ForwardBackward(&*delta, alloc, in, Recompute::kNone);
  const LayerRun b = ForwardBackward(&*gated, alloc, in, Recompute::kNone);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.S_out, b.S_out);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.dS, b.dS);
}

// Under kNone the saved tensors: x, xn, h, hn (4C); mlp up (F); two
// LayerNorms' means and 1/std (4); q_in, k_in, q, k (4 HK); v_in, v, o, z,
// gated (5 HV); g (zeros), beta (2 H); q_rnorm, k_rnorm, o_rstd (3 H). Under
// kFull only x. Nothing stays after the backward.
TEST(DeltaNetLayerTest, SavedBytesPerMode) {
  const LayerCase c{9, 4, 64};
  const GdnLayerDims d = DeltaNetDims(c);
  const int64_t per_token_none = 4 * d.C + d.F + 4 + 4 * d.HK() + 5 * d.HV() + 5 * d.H;
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    TrackingAllocator alloc(0);
    auto layer = Layer::Make(alloc, d, 1, 1, 5);
    ASSERT_TRUE(layer.ok());
    std::mt19937_64 rng(1);
    const BlockInputs in = MakeInputs(d, c.S, rng);
    Tensor<double> x = FromVector<double>(alloc, kWs, {c.S, d.C}, in.x);
    GdnState<double> state_in = MakeState<GdnState<double>>(alloc, d, in.S, in.tq, in.tk, in.tv);
    Tensor<double> y;
    GdnState<double> state_out;
    GdnLayerSaved<double> saved;
    ASSERT_TRUE(layer->Forward(&y, &state_out, &saved, x, 1, state_in, mode).ok());
    const int64_t per_token = mode == Recompute::kNone ? per_token_none : d.C;
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations),
              c.S * per_token * int64_t{sizeof(double)});
    Tensor<double> dy = FromVector<double>(alloc, kWs, {c.S, d.C}, in.ry), dx;
    ASSERT_TRUE(layer->Backward(&dx, nullptr, &saved, dy, 1, nullptr, state_in).ok());
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 0);
  }
}

// DeltaNet's parameters, by name: no decay gate (a_proj, A_log, dt_bias)
// and no SwiGLU gate; the LayerNorm, output and MLP biases (zeros).
TEST(DeltaNetLayerTest, ParametersOfTheConfiguration) {
  TrackingAllocator alloc(0);
  auto layer = Layer::Make(alloc, DeltaNetDims({4, 4, 64}), 1, 2, 5);
  ASSERT_TRUE(layer.ok());
  std::set<std::string> names;
  for (Param<double>& p : layer->params()) {
    names.insert(p.name);
    if (p.name.find(".bias") != std::string::npos) {
      for (double v : ToVector(p.value)) EXPECT_EQ(v, 0.0) << p.name;
    }
  }
  const std::set<std::string> want = {
      "attn_norm.weight", "attn_norm.bias",    "q_proj.weight",     "k_proj.weight",
      "v_proj.weight",    "b_proj.weight",     "g_proj.weight",     "q_conv.weight",
      "k_conv.weight",    "v_conv.weight",     "o_norm.weight",     "o_proj.weight",
      "o_proj.bias",      "mlp_norm.weight",   "mlp_norm.bias",     "mlp.up_proj.weight",
      "mlp.up_proj.bias", "mlp.down_proj.weight", "mlp.down_proj.bias"};
  EXPECT_EQ(names, want);
}

// The layer's parameters are what the cost model counts (models/families/
// gdn.cc and the block's MLP and norms), and for the published structure
// 13 h^2 + h heads + 22 h + head_dim per layer.
TEST(DeltaNetLayerTest, ParameterCountEqualsTheCostModels) {
  for (const char* preset : {"deltanet-tiny", "deltanet-1.3b"}) {
    SCOPED_TRACE(preset);
    auto model = models::ModelPreset(preset);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const double h = model->hidden_size(), n = model->num_heads(), dk = model->head_dim_k();
    const double per_layer = models::MixerParamCount(*model, models::LayerKind::kRecurrence) +
                             models::MlpAndNormsParamCount(*model);
    EXPECT_EQ(per_layer, 13 * h * h + h * n + 22 * h + dk);
    if (std::string(preset) != "deltanet-tiny") continue;  // the 1.3B's tensors are big
    TrackingAllocator alloc(0);
    auto layer = GdnLayer<float>::Make(alloc, GdnLayerDims::FromModel(*model), 1, 1, 1);
    ASSERT_TRUE(layer.ok());
    int64_t count = 0;
    for (Param<float>& p : layer->params()) count += p.value.numel();
    EXPECT_EQ(static_cast<double>(count), per_layer);
  }
}

}  // namespace
}  // namespace stateflow::backend

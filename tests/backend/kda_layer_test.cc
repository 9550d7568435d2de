// The KDA layer: central-difference gradient checks (float64) of the input,
// every part of the boundary state in and every parameter, in both
// recompute modes (delta_layer_harness.h, as the GDN layer's); a sequence in
// two chunks equal to one; recompute full, the split-and-overlapped core and
// the ST tile against the plain layer; float32 against float64; the cpu and
// host-grid devices; what the forward saves; initialisation; errors for
// misuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/device/host_grid_device.h"
#include "backend/layers/kda_layer.h"
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

KdaLayerDims SmallDims(const LayerCase& c) {
  KdaLayerDims d;
  d.C = 16, d.H = 2, d.K = 8, d.Dv = 6, d.F = 24, d.W = c.W;
  d.block_size = c.block_size;
  return d;
}

class KdaLayerGradTest : public ::testing::TestWithParam<std::tuple<LayerCase, Recompute>> {};

TEST_P(KdaLayerGradTest, BackwardMatchesCentralDifferences) {
  const LayerCase c = std::get<0>(GetParam());
  const Recompute mode = std::get<1>(GetParam());
  SCOPED_TRACE(c.Name() + " recompute " + std::string(models::RecomputeName(mode)));
  TrackingAllocator alloc(0);
  auto kda = KdaLayer<double>::Make(alloc, SmallDims(c), /*layer=*/2, /*num_layers=*/3, 7);
  ASSERT_TRUE(kda.ok()) << kda.status().message();
  RandomizeParams(&*kda, 11);
  ExpectBackwardMatchesCentralDifferences(&*kda, alloc, c, mode);
}

// Several kernel blocks with a partial last one; a chunk shorter than W - 1;
// width 1 (no tail); the default T_C with a partial block.
INSTANTIATE_TEST_SUITE_P(
    Cases, KdaLayerGradTest,
    ::testing::Combine(::testing::Values(LayerCase{11, 4, 4}, LayerCase{2, 4, 4},
                                         LayerCase{5, 1, 64}, LayerCase{70, 3, 64}),
                       ::testing::Values(Recompute::kNone, Recompute::kFull)),
    [](const ::testing::TestParamInfo<std::tuple<LayerCase, Recompute>>& info) {
      const LayerCase& c = std::get<0>(info.param);
      return "S" + std::to_string(c.S) + "_W" + std::to_string(c.W) + "_TC" +
             std::to_string(c.block_size) + "_recompute_" +
             std::string(models::RecomputeName(std::get<1>(info.param)));
    });

TEST(KdaLayerTest, TwoChunksEqualOne) {
  const KdaLayerDims d = SmallDims({0, 4, 16});
  TrackingAllocator alloc(0);
  auto one = KdaLayer<double>::Make(alloc, d, 1, 2, 5);
  auto two = KdaLayer<double>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(one.ok() && two.ok());
  RandomizeParams(&*one, 3);
  RandomizeParams(&*two, 3);
  ExpectTwoChunksEqualOne(&*one, &*two, alloc, 21, 19, 1e-12);
}

// Recompute full gives the bits of none; the overlapped core those of the
// sequential one; an ST tile the untiled results within rounding.
TEST(KdaLayerTest, RecomputeOverlapAndTileAgreeWithThePlainLayer) {
  const LayerCase c{128, 4, 32};
  const KdaLayerDims d = SmallDims(c);
  struct Variant {
    const char* name;
    bool overlap;
    int64_t tile;
    Recompute mode;
    bool bit_exact;
  } variants[] = {{"recompute full", false, 0, Recompute::kFull, true},
                  {"overlapped", true, 0, Recompute::kNone, true},
                  {"overlapped, recompute full", true, 0, Recompute::kFull, true},
                  {"tile 4", false, 4, Recompute::kNone, false},
                  {"tile 1 overlapped", true, 1, Recompute::kFull, false}};
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    KdaLayerDims dv = d;
    dv.st_overlap = v.overlap;
    dv.st_tile = v.tile;
    TrackingAllocator alloc(0);
    auto plain = KdaLayer<double>::Make(alloc, d, 1, 2, 5);
    auto other = KdaLayer<double>::Make(alloc, dv, 1, 2, 5);
    ASSERT_TRUE(plain.ok() && other.ok());
    RandomizeParams(&*plain, 3);
    RandomizeParams(&*other, 3);
    std::mt19937_64 rng(4);
    const BlockInputs in = MakeInputs(d, c.S, rng);
    // Twice, so that accumulated parameter gradients are compared too.
    ForwardBackward(&*plain, alloc, in, Recompute::kNone);
    ForwardBackward(&*other, alloc, in, v.mode);
    const LayerRun a = ForwardBackward(&*plain, alloc, in, Recompute::kNone);
    const LayerRun b = ForwardBackward(&*other, alloc, in, v.mode);
    if (v.bit_exact) {
      EXPECT_EQ(a.y, b.y);
      EXPECT_EQ(a.S_out, b.S_out);
      EXPECT_EQ(a.dx, b.dx);
      EXPECT_EQ(a.dS, b.dS);
      EXPECT_EQ(a.dtq, b.dtq);
      for (size_t id = 0; id < a.dparams.size(); ++id) {
        EXPECT_EQ(a.dparams[id], b.dparams[id]) << plain->params()[id].name;
      }
    } else {
      EXPECT_LT(RelError(b.y, a.y), 1e-12);
      EXPECT_LT(RelError(b.S_out, a.S_out), 1e-12);
      EXPECT_LT(RelError(b.dx, a.dx), 1e-12);
      EXPECT_LT(RelError(b.dS, a.dS), 1e-12);
      for (size_t id = 0; id < a.dparams.size(); ++id) {
        EXPECT_LT(RelError(b.dparams[id], a.dparams[id]), 1e-12) << plain->params()[id].name;
      }
    }
  }
}

TEST(KdaLayerTest, Float32AgreesWithFloat64) {
  const LayerCase c{70, 4, 64};
  const KdaLayerDims d = SmallDims(c);
  TrackingAllocator alloc(0);
  auto b64 = KdaLayer<double>::Make(alloc, d, 1, 2, 9);
  auto b32 = KdaLayer<float>::Make(alloc, d, 1, 2, 9);
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

// The host-grid device (the GPU kernels' arithmetic) gives the CPU device's
// results in float64, both recompute modes, sequential and overlapped.
TEST(KdaLayerTest, HostGridAgreesWithCpu) {
  const LayerCase c{70, 4, 16};
  for (bool overlap : {false, true}) {
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      SCOPED_TRACE(std::string(models::RecomputeName(mode)) + (overlap ? " overlapped" : ""));
      KdaLayerDims d = SmallDims(c);
      d.st_overlap = overlap;
      TrackingAllocator cpu_alloc(0), grid_alloc(0, std::nullopt, &HostGridDevice());
      auto cpu = KdaLayer<double>::Make(cpu_alloc, d, 1, 2, 5);
      auto grid = KdaLayer<double>::Make(grid_alloc, d, 1, 2, 5);
      ASSERT_TRUE(cpu.ok() && grid.ok());
      RandomizeParams(&*cpu, 3);
      RandomizeParams(&*grid, 3);
      std::mt19937_64 rng(8);
      const BlockInputs in = MakeInputs(d, c.S, rng);
      const LayerRun a = ForwardBackward(&*cpu, cpu_alloc, in, mode);
      const LayerRun b = ForwardBackward(&*grid, grid_alloc, in, mode);
      EXPECT_LT(RelError(b.y, a.y), 1e-12);
      EXPECT_LT(RelError(b.S_out, a.S_out), 1e-12);
      EXPECT_LT(RelError(b.dx, a.dx), 1e-12);
      EXPECT_LT(RelError(b.dS, a.dS), 1e-12);
      EXPECT_LT(RelError(b.dtv, a.dtv), 1e-12);
      for (size_t id = 0; id < a.dparams.size(); ++id) {
        EXPECT_LT(RelError(b.dparams[id], a.dparams[id]), 1e-12) << cpu->params()[id].name;
      }
    }
  }
}

// What the forward keeps: under kNone the saved tensors of kda_layer.h,
//   x, xn, h, hn (4C); mlp gate, up (2F); rstd1, rstd2 (2);
//   q_in, k_in, q, k, a, g (6 HK); v_in, v, o, z, gated (5 HV);
//   f1, z1 (2 Dv); beta (H); q_rnorm, k_rnorm, o_rstd (3 H statistics);
// under kFull only x (C); the state out is the state's size. Nothing stays
// after the backward.
TEST(KdaLayerTest, SavedBytesPerMode) {
  const LayerCase c{9, 4, 64};
  const KdaLayerDims d = SmallDims(c);
  const int64_t per_token_none =
      4 * d.C + 2 * d.F + 2 + 6 * d.HK() + 5 * d.HV() + 2 * d.Dv + d.H + 3 * d.H;
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    TrackingAllocator alloc(0);
    auto kda = KdaLayer<double>::Make(alloc, d, 1, 1, 5);
    ASSERT_TRUE(kda.ok());
    std::mt19937_64 rng(1);
    const BlockInputs in = MakeInputs(d, c.S, rng);
    Tensor<double> x = FromVector<double>(alloc, kWs, {c.S, d.C}, in.x);
    KdaState<double> state_in = MakeState<KdaState<double>>(alloc, d, in.S, in.tq, in.tk, in.tv);
    const int64_t ws_before = alloc.LiveBytes(kWs);
    Tensor<double> y;
    KdaState<double> state_out;
    KdaLayerSaved<double> saved;
    ASSERT_TRUE(kda->Forward(&y, &state_out, &saved, x, 1, state_in, mode).ok());
    const int64_t per_token = mode == Recompute::kNone ? per_token_none : d.C;
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), c.S * per_token * int64_t{sizeof(double)});
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kBoundaryStates),
              2 * KdaState<double>::Numel(d) * int64_t{sizeof(double)});
    EXPECT_EQ(alloc.LiveBytes(kWs), ws_before + y.bytes());
    Tensor<double> dy = FromVector<double>(alloc, kWs, {c.S, d.C}, in.ry), dx;
    ASSERT_TRUE(kda->Backward(&dx, nullptr, &saved, dy, 1, nullptr, state_in).ok());
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 0);
  }
}

// Kimi Linear's gate initialisation: A = exp(A_log) in [1, 16], dt_bias 0,
// the output gate's bias 0; initialisation keyed by (seed, layer, name).
TEST(KdaLayerTest, Initialisation) {
  KdaLayerDims d = SmallDims({4, 4, 64});
  d.H = 64;  // many heads, to see the range
  TrackingAllocator alloc(0);
  auto a = KdaLayer<double>::Make(alloc, d, 3, 4, 42);
  auto b = KdaLayer<double>::Make(alloc, d, 3, 4, 42);
  auto other = KdaLayer<double>::Make(alloc, d, 2, 4, 42);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  for (double a_log : ToVector(a->param(KdaLayer<double>::kALog).value)) {
    EXPECT_GE(std::exp(a_log), 1.0 * (1 - 1e-12));
    EXPECT_LE(std::exp(a_log), 16.0 * (1 + 1e-12));
  }
  for (auto id : {KdaLayer<double>::kDtBias, KdaLayer<double>::kGProjBias}) {
    for (double v : ToVector(a->param(id).value)) EXPECT_EQ(v, 0.0) << a->param(id).name;
  }
  for (int id = 0; id < KdaLayer<double>::kNumParams; ++id) {
    const auto pid = static_cast<KdaLayer<double>::ParamId>(id);
    const std::vector<double> va = ToVector(a->param(pid).value);
    EXPECT_EQ(va, ToVector(b->param(pid).value)) << a->param(pid).name;
    const bool constant = std::all_of(va.begin(), va.end(), [&](double v) { return v == va[0]; });
    if (!constant) {
      EXPECT_NE(va, ToVector(other->param(pid).value)) << a->param(pid).name;
    }
  }
}

// The layer's parameters are what the cost model counts for a KDA layer
// (models/families/kda.cc: mixer plus MLP and norms).
TEST(KdaLayerTest, ParameterCountEqualsTheCostModels) {
  auto model = models::ModelPreset("kda-tiny");
  ASSERT_TRUE(model.ok()) << model.status().message();
  TrackingAllocator alloc(0);
  auto kda = KdaLayer<float>::Make(alloc, KdaLayerDims::FromModel(*model), 0, 1, 1);
  ASSERT_TRUE(kda.ok());
  int64_t count = 0;
  for (Param<float>& p : kda->params()) count += p.value.numel();
  EXPECT_EQ(static_cast<double>(count),
            models::MixerParamCount(*model, models::LayerKind::kRecurrence) +
                models::MlpAndNormsParamCount(*model));
}

TEST(KdaLayerTest, MisuseIsAnErrorNotACrash) {
  const KdaLayerDims d = SmallDims({4, 4, 64});
  TrackingAllocator alloc(0);
  auto kda = KdaLayer<double>::Make(alloc, d, 4, 4, 1);
  ASSERT_TRUE(kda.ok());
  auto state = KdaState<double>::Zeros(alloc, d, 1, BufferClass::kBoundaryStates);
  ASSERT_TRUE(state.ok());
  KdaLayerSaved<double> empty;
  Tensor<double> dy = FromVector<double>(alloc, kWs, {3, d.C}, std::vector<double>(3 * d.C, 0.0));
  Tensor<double> dx, y;
  Status st = kda->Backward(&dx, nullptr, &empty, dy, 1, nullptr, *state);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("layer 4 (kda layer)"), std::string::npos) << st.message();
  KdaState<double> wrong;
  KdaLayerSaved<double> saved;
  st = kda->Forward(&y, nullptr, &saved, dy, 1, wrong, Recompute::kNone);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("state_in.S"), std::string::npos) << st.message();
  // bf16 on the CPU device, which has no bf16 kernels: refused at Make.
  auto b16 = KdaLayer<bf16>::Make(alloc, d, 4, 4, 1);
  ASSERT_FALSE(b16.ok());
  EXPECT_NE(b16.status().message().find("has no KDA kernels"), std::string::npos)
      << b16.status().message();
}

}  // namespace
}  // namespace stateflow::backend

// Kernel costs (models/kernel_costs.h) and their use by the cost model:
// log-space interpolation, each table's lookup rule, a cluster whose table
// lacks a component (that component keeps the efficiency curve or the link
// model), malformed tables, and the A100 preset's data.
#include "models/kernel_costs.h"

#include <gtest/gtest.h>

#include <cmath>

#include "models/cost_model.h"
#include "models/layer_formulas.h"
#include "models/model.h"
#include "scenario/load.h"

namespace stateflow::models {
namespace {

pb::KernelCosts Costs(const std::string& text) {
  pb::KernelCosts c;
  EXPECT_TRUE(scenario::ParseTextProto("sources: \"test\"\n" + text, "costs", &c).ok());
  EXPECT_TRUE(ValidateKernelCosts(c).ok()) << ValidateKernelCosts(c).message();
  return c;
}

TEST(KernelCosts, LogLogInterpolationIsExactAtPointsLinearInLogAndClamped) {
  const std::vector<std::pair<double, double>> p = {{1, 1}, {4, 16}, {16, 32}};
  EXPECT_DOUBLE_EQ(LogLogInterpolate(p, 4), 16);
  EXPECT_NEAR(LogLogInterpolate(p, 2), 4, 1e-12);  // y = x^2 between the first two
  EXPECT_NEAR(LogLogInterpolate(p, 8), std::sqrt(16.0 * 32), 1e-9);
  EXPECT_DOUBLE_EQ(LogLogInterpolate(p, 0.5), 1);
  EXPECT_DOUBLE_EQ(LogLogInterpolate(p, 1000), 32);
}

TEST(KernelCosts, GemmIsExactAtAShapeAndTheLogMeanBetweenTwo) {
  const pb::KernelCosts c = Costs(
      "gemm { m: 1024 n: 1024 k: 1024 dtype: \"fp16\" flops_per_s: 100e12 }\n"
      "gemm { m: 4096 n: 4096 k: 4096 dtype: \"bf16\" flops_per_s: 200e12 }\n");
  const KernelRates r(c);
  EXPECT_EQ(*r.Gemm(1024, 1024, 1024, 2), 100e12);
  // 2048^3 is equally far (in log) from both: the geometric mean.
  EXPECT_NEAR(*r.Gemm(2048, 2048, 2048, 2) / std::sqrt(100e12 * 200e12), 1.0, 1e-12);
  // Nearer the larger point, nearer its rate.
  EXPECT_GT(*r.Gemm(3000, 3000, 3000, 2), *r.Gemm(2048, 2048, 2048, 2));
  // No fp32 / tf32 points: 4-byte activations get none.
  EXPECT_FALSE(r.Gemm(1024, 1024, 1024, 4).has_value());
}

// A float64 run's GEMMs (8-byte activations) take fp64 points only, and
// fp64 points time no 4-byte GEMM.
TEST(KernelCosts, Fp64IsItsOwnDtypeClass) {
  const KernelRates r(Costs("gemm { m: 64 n: 64 k: 64 dtype: \"fp32\" flops_per_s: 8e10 }\n"
                            "gemm { m: 64 n: 64 k: 64 dtype: \"fp64\" flops_per_s: 3e10 }\n"));
  EXPECT_EQ(*r.Gemm(64, 64, 64, 8), 3e10);
  EXPECT_EQ(*r.Gemm(64, 64, 64, 4), 8e10);
  const KernelRates fp32_only(Costs("gemm { m: 64 n: 64 k: 64 dtype: \"fp32\" flops_per_s: 8e10 }\n"));
  EXPECT_FALSE(fp32_only.Gemm(64, 64, 64, 8).has_value());
}

// Attention and recurrence points with a dtype time runs of its class only;
// without one, every run (published points that do not say).
TEST(KernelCosts, SeqPointsWithADtypeTimeThatClassOnly) {
  const KernelRates r(Costs(
      "recurrence { kernel: \"gdn\" seq_len: 64 head_dim: 32 pass: \"forward\" flops_per_s: 7e10 "
      "dtype: \"fp32\" }\n"
      "attention { seq_len: 64 head_dim: 32 pass: \"forward\" flops_per_s: 9e10 }\n"));
  EXPECT_EQ(*r.Recurrence("gdn", 64, 32, false, 4), 7e10);
  EXPECT_FALSE(r.Recurrence("gdn", 64, 32, false, 2).has_value());
  EXPECT_EQ(*r.Recurrence("gdn", 64, 32, false), 7e10);  // 0: any
  EXPECT_EQ(*r.Attention(64, 32, false, 2), 9e10);
  EXPECT_EQ(*r.Attention(64, 32, false, 4), 9e10);
  pb::KernelCosts bad = Costs("recurrence { kernel: \"gdn\" seq_len: 64 head_dim: 32 pass: "
                              "\"forward\" flops_per_s: 7e10 }\n");
  bad.mutable_recurrence(0)->set_dtype("fp8");
  EXPECT_EQ(ValidateKernelCosts(bad).message(),
            "cluster.kernel_costs.recurrence[0].dtype: unknown 'fp8' (known: fp16, bf16, fp32, "
            "tf32, fp64, or none for every dtype)");
}

TEST(KernelCosts, AttentionPicksTheNearestHeadDimAndFallsBackToFwdBwdPoints) {
  const pb::KernelCosts c = Costs(
      "attention { seq_len: 1024 head_dim: 64 pass: \"forward\" flops_per_s: 100e12 }\n"
      "attention { seq_len: 4096 head_dim: 64 pass: \"forward\" flops_per_s: 160e12 }\n"
      "attention { seq_len: 4096 head_dim: 64 pass: \"forward+backward\" flops_per_s: 120e12 }\n"
      "attention { seq_len: 4096 head_dim: 256 pass: \"forward\" flops_per_s: 40e12 }\n");
  const KernelRates r(c);
  EXPECT_NEAR(*r.Attention(2048, 64, false), std::sqrt(100e12 * 160e12), 1e3);
  EXPECT_EQ(*r.Attention(2048, 96, false), *r.Attention(2048, 64, false));  // 96 nearer 64
  EXPECT_EQ(*r.Attention(8192, 200, false), 40e12);
  EXPECT_EQ(*r.Attention(2048, 64, true), 120e12);  // no backward points of d = 64
  EXPECT_FALSE(r.Attention(2048, 256, true).has_value());
  EXPECT_FALSE(r.Recurrence("gdn", 2048, 64, false).has_value());
}

TEST(KernelCosts, ASeqCurveChosenOnceInterpolatesToTheSameRates) {
  for (const char* preset : {"a100-80gb-nvlink", "h100-80gb-nvlink", "h200-141gb-nvlink"}) {
    Result<pb::ClusterSpec> cluster = ClusterPreset(preset);
    ASSERT_TRUE(cluster.ok()) << preset;
    const KernelRates r(cluster->kernel_costs());
    for (const char* kernel : {"", "gdn", "mamba3", "kda"}) {
      for (double d : {64.0, 96.0, 128.0, 256.0}) {
        for (bool backward : {false, true}) {
          const KernelRates::Curve curve = r.SeqCurve(kernel, d, backward);
          for (double s : {1.0, 700.0, 4096.0, 12345.0, 65536.0, 1e6}) {
            const std::optional<double> want = r.Recurrence(kernel, s, d, backward);
            ASSERT_EQ(curve.empty(), !want.has_value()) << preset << " " << kernel << " " << d;
            if (want) {
              EXPECT_EQ(LogLogInterpolate(curve, s), *want) << preset << " " << kernel;
            }
          }
        }
      }
    }
  }
}

TEST(KernelCosts, AllReduceInterpolatesBusBandwidthInBytes) {
  const pb::KernelCosts c = Costs(
      "all_reduce { ranks: 8 bytes: 1048576 bus_bandwidth_bytes_per_s: 40e9 }\n"
      "all_reduce { ranks: 8 bytes: 4194304 bus_bandwidth_bytes_per_s: 160e9 }\n");
  const KernelRates r(c);
  EXPECT_EQ(*r.AllReduceBusBandwidth(1048576, 8), 40e9);
  EXPECT_NEAR(*r.AllReduceBusBandwidth(2097152, 8), 80e9, 1);
  EXPECT_EQ(*r.AllReduceBusBandwidth(1e12, 4), 160e9);  // nearest rank count, clamped
}

// The tiny GDN at TP `tp` on the CPU preset carrying `costs`.
CostModel Tiny(const pb::KernelCosts* costs, int tp = 1) {
  pb::ClusterSpec cluster = *ClusterPreset("cpu");
  cluster.mutable_device()->clear_efficiency();  // efficiency 1: the fallback is peak
  // The figures below are written for a 10 GFLOP/s peak (the CPU preset's
  // rate, which it now states as 0.04 of a 250 GFLOP/s bound).
  cluster.mutable_device()->set_peak_flops(10e9);
  if (costs != nullptr) *cluster.mutable_kernel_costs() = *costs;
  CostModelOptions o;
  o.tensor_size = tp;
  return *CostModel::Make(*ModelPreset("gdn-tiny"), PrecisionForDtype("float32").value(), cluster, o);
}

TEST(KernelCosts, MissingComponentsKeepTheCurveAndTheLinkModel) {
  // Only 16-bit GEMM points: a float32 model has no GEMM rate, no attention
  // or recurrence points, no all-reduce points: every time as without costs.
  const pb::KernelCosts c =
      Costs("gemm { m: 64 n: 64 k: 64 dtype: \"fp16\" flops_per_s: 1e15 }\n");
  const CostModel with = Tiny(&c, 2), without = Tiny(nullptr, 2);
  for (int l = 0; l < with.num_layers(); ++l) {
    EXPECT_DOUBLE_EQ(with.ForwardTime(l, 0, 256), without.ForwardTime(l, 0, 256)) << l;
    EXPECT_DOUBLE_EQ(with.BackwardTime(l, 256, 256), without.BackwardTime(l, 256, 256)) << l;
  }
}

TEST(KernelCosts, GemmsTakeTheTableRateAndTheRestThePeak) {
  // One fp32 point: every GEMM runs at 5 GFLOP/s, everything else at the
  // preset's 10 GFLOP/s peak (efficiency 1). Block layer 1, 512 tokens.
  const pb::KernelCosts c =
      Costs("gemm { m: 512 n: 512 k: 64 dtype: \"fp32\" flops_per_s: 5e9 }\n");
  const CostModel cm = Tiny(&c);
  const int l = 1;
  ASSERT_EQ(cm.layers()[l], LayerKind::kRecurrence);
  double gemm = 0;
  for (const Gemm& g : LayerGemms(cm.model(), LayerKind::kRecurrence)) gemm += 2 * 512 * g.n * g.k;
  const double fwd = cm.ForwardFlops(l, 0, 512);
  const double min_bytes_s = 0;  // compute-bound at 512 tokens (checked below)
  const double expected = gemm / 5e9 + (fwd - gemm) / 10e9;
  EXPECT_NEAR(cm.ForwardTime(l, 0, 512), std::max(expected, min_bytes_s), 1e-12 * expected);
  // Backward: every GEMM twice (input and weight gradients).
  const double bwd = cm.BackwardFlops(l, 0, 512);
  EXPECT_NEAR(cm.BackwardTime(l, 0, 512), 2 * gemm / 5e9 + (bwd - 2 * gemm) / 10e9,
              1e-9 * bwd / 10e9);
  EXPECT_GT(cm.ForwardTime(l, 0, 512), Tiny(nullptr).ForwardTime(l, 0, 512));
}

TEST(KernelCosts, IntraNodeAllReducesTakeTheMeasuredBusBandwidth) {
  // One point: bus bandwidth 1 GB/s at every size. A block at TP 2 over s
  // tokens all-reduces its [s, h] float32 output twice in forward:
  // 2 * 2 (n - 1) / n * bytes / busbw.
  const pb::KernelCosts c =
      Costs("all_reduce { ranks: 8 bytes: 1024 bus_bandwidth_bytes_per_s: 1e9 }\n");
  const CostModel cm = Tiny(&c, 2);
  const double bytes = 256.0 * 64 * 4;
  EXPECT_NEAR(cm.TensorParallelForwardCommTime(1, 256), 2 * (2.0 * 1 / 2) * bytes / 1e9, 1e-15);
  EXPECT_NE(cm.TensorParallelForwardCommTime(1, 256), Tiny(nullptr, 2).TensorParallelForwardCommTime(1, 256));
}

TEST(KernelCosts, MalformedTablesNameTheFieldOrTheLine) {
  pb::ClusterSpec cluster;
  const Status parse = scenario::ParseTextProto(
      "name: \"x\"\nkernel_costs {\n  gemm { m: 1 n: 2 k: 3 flops: 4 }\n}\n", "my-cluster.textproto",
      &cluster);
  ASSERT_FALSE(parse.ok());
  EXPECT_EQ(parse.message().rfind("my-cluster.textproto:3:", 0), 0u) << parse.message();

  pb::KernelCosts c;
  c.add_sources("s");
  pb::GemmPoint* g = c.add_gemm();
  g->set_m(1);
  g->set_n(1);
  g->set_k(1);
  g->set_dtype("fp16");
  g->set_flops_per_s(0);
  EXPECT_EQ(ValidateKernelCosts(c).message(),
            "cluster.kernel_costs.gemm[0].flops_per_s must be > 0 and finite (got 0.000000)");
  g->set_flops_per_s(1e12);
  g->set_dtype("fp8");
  EXPECT_EQ(ValidateKernelCosts(c).message(),
            "cluster.kernel_costs.gemm[0].dtype: unknown 'fp8' (known: fp16, bf16, fp32, tf32, fp64)");
  g->set_dtype("bf16");
  g->set_source(3);
  EXPECT_EQ(ValidateKernelCosts(c).message(),
            "cluster.kernel_costs.gemm[0].source: 3 names no entry of cluster.kernel_costs.sources "
            "(1 given)");
  g->set_source(0);
  c.add_attention()->set_seq_len(1024);
  EXPECT_NE(ValidateKernelCosts(c).message().find("cluster.kernel_costs.attention[0].head_dim"),
            std::string::npos);
  pb::ClusterSpec bad = *ClusterPreset("cpu");
  *bad.mutable_kernel_costs() = c;
  EXPECT_NE(ValidateCluster(bad).message().find("attention[0]"), std::string::npos);
}

TEST(KernelCosts, TheA100PresetCarriesItsSourcedTable) {
  const pb::ClusterSpec a100 = *ClusterPreset("a100-80gb-nvlink");
  ASSERT_TRUE(a100.has_kernel_costs());
  const pb::KernelCosts& c = a100.kernel_costs();
  EXPECT_TRUE(ValidateKernelCosts(c).ok());
  ASSERT_GE(c.sources_size(), 1);
  EXPECT_NE(c.sources(0).find("https://github.com/Azure/AI-benchmarking-guide"), std::string::npos);
  EXPECT_EQ(c.gemm_size(), 8);
  EXPECT_EQ(c.all_reduce_size(), 24);
  const KernelRates r(c);
  EXPECT_EQ(c.attention_size(), 1 + 8 * 3);  // Azure's one, fla's 8 lengths x 3 passes
  ASSERT_GE(c.sources_size(), 2);
  EXPECT_NE(c.sources(1).find("flash-linear-attention"), std::string::npos);
  // fla's 16384-token forward: 91.346947 ms for 2 * 8 * 16384^2 * 32 * 128 FLOPs.
  EXPECT_NEAR(*r.Attention(16384, 128, false) / (2.0 * 8 * 16384.0 * 16384 * 32 * 128 / 91.346947e-3),
              1.0, 1e-3);
  EXPECT_EQ(c.recurrence_size(), 0);  // none found: the curve stays
  EXPECT_EQ(*r.Gemm(8192, 8192, 8192, 2), 253.7e12);
  EXPECT_EQ(*r.AllReduceBusBandwidth(1073741824, 8), 228.10e9);
}

}  // namespace
}  // namespace stateflow::models

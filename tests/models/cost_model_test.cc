// CostModel: the Cost_i identity, attention's growth with the chunk start,
// recompute, TP, precision defaults, efficiency curve, times and state bytes.
// Expected values come from the model's fields and the formulas of
// docs/cost-model.md, recomputed here.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "models/cost_model.h"
#include "models/layer_formulas.h"

namespace stateflow::models {
namespace {

CostModel MakeModel(const std::string& preset, int tp = 1, int mbs = 1,
                    Recompute rc = Recompute::kNone,
                    const std::string& cluster = "a100-80gb-nvlink") {
  CostModelOptions o;
  o.tensor_size = tp;
  o.microbatch_size = mbs;
  o.recompute = rc;
  Result<CostModel> cm = CostModel::Make(*ModelPreset(preset), {},
                                         *ClusterPreset(cluster), o);
  EXPECT_TRUE(cm.ok()) << cm.status().message();
  return *std::move(cm);
}

int FirstLayerOf(const CostModel& cm, LayerKind kind) {
  for (int l = 0; l < cm.num_layers(); ++l) {
    if (cm.layers()[l] == kind) return l;
  }
  return -1;
}

// ---- the paper's Cost_i ----

TEST(CostModel, ChunkCostIdentity) {
  std::mt19937_64 rng(42);
  struct Case {
    const char* preset;
    int tp, mbs;
  };
  for (const Case& k : {Case{"gdn-hybrid-3b", 1, 1}, Case{"gdn-hybrid-15b", 2, 3},
                        Case{"mamba3-hybrid-32b", 4, 1}, Case{"gdn-3b", 1, 2},
                        Case{"mamba3-15b", 1, 1}, Case{"gdn-hybrid-tiny", 2, 2}}) {
    const CostModel cm = MakeModel(k.preset, k.tp, k.mbs);
    for (int trial = 0; trial < 50; ++trial) {
      int first = static_cast<int>(rng() % (cm.num_layers() + 1));
      int last = static_cast<int>(rng() % (cm.num_layers() + 1));
      if (first > last) std::swap(first, last);
      const std::int64_t c = 128 * static_cast<std::int64_t>(rng() % 512);
      const std::int64_t s = 1 + static_cast<std::int64_t>(rng() % 32768);
      double total = 0;
      for (int l = first; l < last; ++l) {
        total += cm.ForwardFlops(l, c, s) + cm.BackwardFlops(l, c, s);
      }
      const schedule::ChunkCostCoefficients w = cm.ChunkCoefficients(first, last);
      const double sd = static_cast<double>(s), cd = static_cast<double>(c);
      const double predicted = w.per_token * sd + w.per_pair * (cd * sd + sd * sd / 2);
      EXPECT_NEAR(total, predicted, 1e-12 * std::max(1.0, total))
          << k.preset << " layers [" << first << ", " << last << ") c " << c
          << " s " << s;
    }
  }
}

TEST(CostModel, RecurrentModelsHaveNoPairTerm) {
  const CostModel cm = MakeModel("mamba3-32b");
  EXPECT_EQ(cm.ChunkCoefficients(0, cm.num_layers()).per_pair, 0.0);
  const CostModel hybrid = MakeModel("mamba3-hybrid-32b");
  EXPECT_GT(hybrid.ChunkCoefficients(0, hybrid.num_layers()).per_pair, 0.0);
}

// ---- attention grows with c; recurrence does not ----

TEST(CostModel, AttentionFlopsGrowWithChunkStart) {
  for (int tp : {1, 4}) {
    const int mbs = 2;
    const CostModel cm = MakeModel("gdn-hybrid-32b", tp, mbs);
    const pb::ModelSpec& m = cm.model();
    const int l = FirstLayerOf(cm, LayerKind::kAttention);
    ASSERT_GE(l, 0);
    const std::int64_t s = 4096, c1 = 8192, c2 = 3 * 8192;
    // Q K^T and P V: 2 matmuls of 2 FLOPs per multiply-add, per pair per head.
    const double per_pair_fwd =
        4.0 * m.attn_heads() * m.attn_head_dim() / tp;
    const double extra_pairs = double(c2 - c1) * s;
    const double fwd_growth = cm.ForwardFlops(l, c2, s) - cm.ForwardFlops(l, c1, s);
    EXPECT_NEAR(fwd_growth, mbs * per_pair_fwd * extra_pairs, 1e-9 * fwd_growth);
    // FlashAttention-style backward: 5 pair matmuls = 2.5x the forward's 2.
    const double bwd_growth =
        cm.BackwardFlops(l, c2, s) - cm.BackwardFlops(l, c1, s);
    EXPECT_NEAR(bwd_growth / fwd_growth, 2.5, 1e-12);
    // The s^2/2 pairs inside the chunk: doubling s adds s^2 pairs beyond 2x.
    const double quad =
        cm.ForwardFlops(l, 0, 2 * s) - 2 * cm.ForwardFlops(l, 0, s);
    EXPECT_NEAR(quad, mbs * per_pair_fwd * double(s) * s, 1e-9 * quad);

    const int r = FirstLayerOf(cm, LayerKind::kRecurrence);
    EXPECT_EQ(cm.ForwardFlops(r, c1, s), cm.ForwardFlops(r, c2, s));
    EXPECT_NEAR(cm.ForwardFlops(r, 0, 2 * s), 2 * cm.ForwardFlops(r, 0, s),
                1e-12 * cm.ForwardFlops(r, 0, 2 * s));
  }
}

// Dense FLOPs ~ 2 x parameters per token forward (the matmuls), backward ~ 2x
// forward; the recurrence and elementwise terms add a few percent.
TEST(CostModel, MatmulFlopsFollowTheParameterRule) {
  for (const char* preset : {"gdn-3b", "mamba3-15b", "gdn-32b"}) {
    const CostModel cm = MakeModel(preset);
    double fwd = 0, bwd = 0;
    const std::int64_t s = 2048;
    for (int l = 0; l < cm.num_layers(); ++l) {
      fwd += cm.ForwardFlops(l, 0, s);
      bwd += cm.BackwardFlops(l, 0, s);
    }
    const double matmul_params = ModelParamCount(cm.model()) - cm.ParamCount(0);
    const double ratio = fwd / (2.0 * matmul_params * s);
    EXPECT_GT(ratio, 1.0) << preset;
    EXPECT_LT(ratio, 1.06) << preset;
    EXPECT_GT(bwd / fwd, 2.0) << preset;
    EXPECT_LT(bwd / fwd, 2.1) << preset;
  }
}

// ---- recompute ----

// The GDN layer's saved tensors (docs/cost-model.md), per token:
//   replicated: block input, norm-1 output, residual sum, norm-2 output (4h)
//   split by TP: q,k,v conv inputs and outputs, decay input a, log decay g
//     and beta (3n), recurrence output, output gate, gated-norm output
//     (3 n dv), SwiGLU gate and up (2m; the product is recomputed)
//   fp32: two norm rstd (replicated), q/k/output norm statistics (3n, split).
double GdnStoredPerToken(const pb::ModelSpec& m, int tp, double act) {
  const double h = m.hidden_size(), n = m.num_heads();
  const double qkv = n * (2.0 * m.head_dim_k() + m.head_dim_v());
  const double split = 2 * qkv + 3 * n + 3 * n * m.head_dim_v() + 2.0 * m.mlp_size();
  return (4 * h + split / tp) * act + (2 + 3 * n / tp) * 4;
}

TEST(CostModel, RecomputeKeepsOnlyTheLayerInput) {
  const int tp = 2, mbs = 3;
  const std::int64_t s = 1000;
  const CostModel none = MakeModel("gdn-15b", tp, mbs, Recompute::kNone);
  const CostModel full = MakeModel("gdn-15b", tp, mbs, Recompute::kFull);
  const pb::ModelSpec& m = none.model();
  const double act = none.precision().activation_bytes();
  const int l = 5;
  ASSERT_EQ(none.layers()[l], LayerKind::kRecurrence);
  EXPECT_NEAR(none.StoredActivationBytes(l, s),
              mbs * s * GdnStoredPerToken(m, tp, act), 1e-6);
  EXPECT_DOUBLE_EQ(full.StoredActivationBytes(l, s),
                   double(mbs) * s * m.hidden_size() * act);
  // What full recompute no longer stores, forward now makes and drops, and
  // backward makes again.
  const double dropped =
      none.StoredActivationBytes(l, s) - full.StoredActivationBytes(l, s);
  EXPECT_NEAR(full.ForwardWorkspaceBytes(l, s) - none.ForwardWorkspaceBytes(l, s),
              dropped, 1e-6 * dropped);
  EXPECT_NEAR(full.BackwardWorkspaceBytes(l, s) - none.BackwardWorkspaceBytes(l, s),
              dropped, 1e-6 * dropped);
  // Backward replays the forward.
  EXPECT_EQ(none.RecomputeFlops(l, 0, s), 0.0);
  EXPECT_EQ(full.RecomputeFlops(l, 0, s), full.ForwardFlops(l, 0, s));
  EXPECT_NEAR(full.BackwardTime(l, 0, s) - none.BackwardTime(l, 0, s),
              none.ForwardTime(l, 0, s), 1e-15);
  // Embedding and head are outside the recompute region.
  for (int e : {0, none.num_layers() - 1}) {
    EXPECT_FALSE(full.Recomputed(e));
    EXPECT_EQ(full.RecomputeFlops(e, 0, s), 0.0);
    EXPECT_EQ(full.StoredActivationBytes(e, s), none.StoredActivationBytes(e, s));
  }
}

TEST(CostModel, AttentionStoresQueryOutputAndLseNotKv) {
  const int tp = 2;
  const std::int64_t s = 512;
  const CostModel cm = MakeModel("gdn-hybrid-15b", tp, 1);
  const pb::ModelSpec& m = cm.model();
  const double act = cm.precision().activation_bytes();
  const int l = FirstLayerOf(cm, LayerKind::kAttention);
  const double q = double(m.attn_heads()) * m.attn_head_dim();
  const double per_token = (4.0 * m.hidden_size() + (2 * q + 2.0 * m.mlp_size()) / tp) * act +
                           (2 + double(m.attn_heads()) / tp) * 4;
  EXPECT_NEAR(cm.StoredActivationBytes(l, s), s * per_token, 1e-6);
  const double kv_heads = double(m.attn_heads()) / m.gqa_group_size();
  EXPECT_DOUBLE_EQ(cm.KvBytesPerToken(l), 2 * kv_heads * m.attn_head_dim() * act / tp);
  EXPECT_DOUBLE_EQ(cm.KvGradBytesPerToken(l), 2 * kv_heads * m.attn_head_dim() * 4.0 / tp);
  EXPECT_EQ(cm.KvBytesPerToken(l - 1), 0.0);
  EXPECT_EQ(cm.BoundaryStateBytes(l), 0.0);
}

// ---- TP ----

// FLOPs divide by TP but for the projection columns every rank computes
// whole (Gemm::replicated: Mamba-3's B, C and angles, KDA's low-rank downs),
// which each rank pays in full; parameters split by TP but for those every
// rank keeps whole (norms, row-parallel biases, what no head owns), as the
// backend.
TEST(CostModel, TensorParallelDividesFlopsAndSplitWeights) {
  for (const char* name : {"gdn-hybrid-32b", "mamba3-hybrid-15b", "deltanet-1.3b", "kda-hybrid-15b"}) {
    SCOPED_TRACE(name);
    const CostModel one = MakeModel(name, 1);
    const CostModel four = MakeModel(name, 4);
    const std::vector<LayerKind> kinds = LayerList(one.model());
    for (int l = 0; l < one.num_layers(); ++l) {
      // Per token of the microbatch: 2 n k forward, 4 n k backward.
      double replicated = 0;
      for (const Gemm& g : LayerGemms(one.model(), kinds[static_cast<std::size_t>(l)])) {
        replicated += 2 * g.replicated * g.k;
      }
      const bool mixer_with_replicas =
          kinds[static_cast<std::size_t>(l)] == LayerKind::kRecurrence &&
          (std::string(name).rfind("mamba3", 0) == 0 || std::string(name).rfind("kda", 0) == 0);
      EXPECT_EQ(replicated > 0, mixer_with_replicas);
      const double tokens = one.options().microbatch_size * 1024.0;
      const double extra = tokens * replicated * (1 - 1.0 / 4);
      EXPECT_NEAR(four.ForwardFlops(l, 4096, 1024),
                  one.ForwardFlops(l, 4096, 1024) / 4 + extra,
                  1e-12 * one.ForwardFlops(l, 4096, 1024));
      EXPECT_NEAR(four.BackwardFlops(l, 4096, 1024),
                  one.BackwardFlops(l, 4096, 1024) / 4 + 2 * extra,
                  1e-12 * one.BackwardFlops(l, 4096, 1024));
      // A small part of the layer (the projections to the state's d_state
      // and the angles).
      EXPECT_LE(extra, 0.05 * one.ForwardFlops(l, 4096, 1024));
      EXPECT_DOUBLE_EQ(four.ParamCount(l),
                       LayerParamCountPerTensorRank(one.model(), kinds[static_cast<std::size_t>(l)], 4));
      // Whole on every rank: 3/4 of them counted again, a small part.
      const double whole = (four.ParamCount(l) * 4 - one.ParamCount(l)) / 3;
      if (kinds[static_cast<std::size_t>(l)] == LayerKind::kEmbedding) {
        EXPECT_EQ(whole, 0);
      } else {
        EXPECT_GT(whole, 0);
        EXPECT_LT(whole, 0.01 * one.ParamCount(l));
      }
      EXPECT_DOUBLE_EQ(four.WeightBytes(l), four.ParamCount(l) * four.precision().weight_bytes());
      EXPECT_DOUBLE_EQ(four.OptimizerBytes(l),
                       four.ParamCount(l) * four.precision().optimizer_bytes());
    }
  }
}

// ---- precision, parameters ----

TEST(CostModel, PrecisionDefaultsAndParameterBytes) {
  const CostModel cm = MakeModel("mamba3-3b");
  EXPECT_EQ(cm.precision().weight_bytes(), 2);
  EXPECT_EQ(cm.precision().gradient_bytes(), 4);
  EXPECT_EQ(cm.precision().optimizer_bytes(), 12);
  EXPECT_EQ(cm.precision().activation_bytes(), 2);
  double params = 0;
  for (int l = 0; l < cm.num_layers(); ++l) {
    params += cm.ParamCount(l);
    EXPECT_EQ(cm.WeightBytes(l), 2 * cm.ParamCount(l));
    EXPECT_EQ(cm.GradientBytes(l), 4 * cm.ParamCount(l));
    EXPECT_EQ(cm.OptimizerBytes(l), 12 * cm.ParamCount(l));
  }
  EXPECT_DOUBLE_EQ(params, ModelParamCount(cm.model()));

  pb::PrecisionSpec p;
  p.set_activation_bytes(4);
  p.set_gradient_bytes(-2);
  Result<CostModel> bad = CostModel::Make(cm.model(), p, cm.cluster(), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("precision.gradient_bytes"), std::string::npos);
  p.set_gradient_bytes(8);
  Result<CostModel> fp32 = CostModel::Make(cm.model(), p, cm.cluster(), {});
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(fp32->precision().activation_bytes(), 4);
  EXPECT_EQ(fp32->GradientBytes(3), 8 * fp32->ParamCount(3));
}

TEST(CostModel, MakeErrorsNameTheField) {
  const pb::ModelSpec m = *ModelPreset("gdn-tiny");
  const pb::ClusterSpec c = *ClusterPreset("cpu");
  CostModelOptions o;
  o.microbatch_size = 0;
  Result<CostModel> r = CostModel::Make(m, {}, c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("parallel.microbatch_size"), std::string::npos);
  o = {};
  o.tensor_size = 3;
  r = CostModel::Make(m, {}, c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("parallel.tensor_size (3)"), std::string::npos);
  pb::ClusterSpec bad = c;
  bad.mutable_device()->set_peak_flops(0);
  r = CostModel::Make(m, {}, bad, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cluster.device.peak_flops"), std::string::npos);
}

TEST(CostModel, ParseRecompute) {
  EXPECT_EQ(*ParseRecompute(""), Recompute::kNone);
  EXPECT_EQ(*ParseRecompute("none"), Recompute::kNone);
  EXPECT_EQ(*ParseRecompute("full"), Recompute::kFull);
  Result<Recompute> bad = ParseRecompute("selective");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("schedule.recompute"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'selective'"), std::string::npos);
  EXPECT_EQ(RecomputeName(Recompute::kFull), "full");
}

// ---- efficiency and times ----

TEST(CostModel, EfficiencyIsPiecewiseLinearInLogTokens) {
  const CostModel cm = MakeModel("gdn-3b");
  const auto& pts = cm.cluster().device().efficiency();
  ASSERT_GE(pts.size(), 2);
  for (const auto& p : pts) EXPECT_NEAR(cm.Efficiency(p.tokens()), p.efficiency(), 1e-12);
  for (int i = 1; i < pts.size(); ++i) {
    // The geometric mean of two neighbours sits halfway in log(tokens).
    const double mid = std::sqrt(pts[i - 1].tokens() * pts[i].tokens());
    EXPECT_NEAR(cm.Efficiency(mid), (pts[i - 1].efficiency() + pts[i].efficiency()) / 2, 1e-12);
  }
  EXPECT_EQ(cm.Efficiency(1), pts[0].efficiency());
  EXPECT_EQ(cm.Efficiency(0), pts[0].efficiency());
  EXPECT_EQ(cm.Efficiency(1e9), pts[pts.size() - 1].efficiency());

  pb::ClusterSpec flat = cm.cluster();
  flat.mutable_device()->clear_efficiency();
  Result<CostModel> no_curve = CostModel::Make(cm.model(), {}, flat, {});
  EXPECT_EQ(no_curve->Efficiency(300), 1.0);
}

// The efficiency curve: the A100 preset without its kernel costs (the
// curve's fallback role; kernel_costs_test.cc tests the tables).
TEST(CostModel, TimeIsFlopsOverEffectivePeakWhenComputeBound) {
  const int mbs = 2;
  pb::ClusterSpec curve_only = *ClusterPreset("a100-80gb-nvlink");
  curve_only.clear_kernel_costs();
  CostModelOptions o;
  o.microbatch_size = mbs;
  const CostModel cm = *CostModel::Make(*ModelPreset("gdn-3b"), {}, curve_only, o);
  const pb::DeviceSpec& d = cm.cluster().device();
  const int l = 3;
  const std::int64_t s = 4096;
  const double tokens = double(s) * mbs;
  const double compute = cm.ForwardFlops(l, 0, s) / (d.peak_flops() * cm.Efficiency(tokens));
  const double floor = (cm.WeightBytes(l) + 2 * tokens * cm.model().hidden_size() * 2) /
                       d.memory_bandwidth_bytes_per_s();
  ASSERT_GT(compute, floor);
  EXPECT_DOUBLE_EQ(cm.ForwardTime(l, 0, s), compute);
}

// The backward split into I and W (issue 27): without kernel tables W is
// the weight-gradient GEMMs' 2 t n k FLOPs per linear at the effective peak,
// the embedding's W its whole backward, the head's nothing (its dW is made
// in the loss path's slices, in I); I = backward - W is never negative;
// W is the same at any chunk start (it has no attention term); what I keeps
// for W is each linear's input and output gradient, t (k + n) elements.
TEST(CostModel, WeightGradientsAreTheLinearsDw) {
  pb::ClusterSpec curve_only = *ClusterPreset("a100-80gb-nvlink");
  curve_only.clear_kernel_costs();
  for (const char* preset : {"gdn-3b", "mamba3-hybrid-32b", "gdn-hybrid-15b"}) {
    for (int tp : {1, 2}) {
      CostModelOptions o;
      o.microbatch_size = 2;
      o.tensor_size = tp;
      const CostModel cm = *CostModel::Make(*ModelPreset(preset), {}, curve_only, o);
      const std::int64_t s = 4096;
      const double t = 2.0 * s;
      const double rate = cm.cluster().device().peak_flops() * cm.Efficiency(t);
      const double act = cm.precision().activation_bytes();
      for (LayerKind kind : {LayerKind::kRecurrence, LayerKind::kAttention}) {
        const int l = FirstLayerOf(cm, kind);
        if (l < 0) continue;
        SCOPED_TRACE(std::string(preset) + " tp " + std::to_string(tp) + " layer " +
                     std::to_string(l));
        // A tensor rank's share of each GEMM (TensorShard: the replicated
        // columns whole), in its time and in its W store, as the backend.
        double dw = 0, kept = 0;
        for (const Gemm& whole : LayerGemms(cm.model(), kind)) {
          const Gemm shard = TensorShard(whole, tp);
          dw += 2 * t * shard.n * shard.k;
          kept += t * (shard.k + shard.n) * act;
        }
        EXPECT_NEAR(cm.WeightGradTime(l, 0, s), dw / rate, 1e-12 * dw / rate);
        EXPECT_LT(cm.WeightGradTime(l, 0, s), cm.BackwardTime(l, 0, s));
        EXPECT_EQ(cm.WeightGradTime(l, 8192, s), cm.WeightGradTime(l, 0, s));
        EXPECT_NEAR(cm.WeightGradRetainedBytes(l, s), kept, 1e-9 * kept);
      }
      const int head = FirstLayerOf(cm, LayerKind::kHead);
      EXPECT_EQ(cm.WeightGradTime(head, 0, s), 0);
      EXPECT_EQ(cm.WeightGradRetainedBytes(head, s), 0);
      const int e = FirstLayerOf(cm, LayerKind::kEmbedding);
      EXPECT_EQ(cm.WeightGradTime(e, 0, s), cm.BackwardTime(e, 0, s));
      EXPECT_EQ(cm.WeightGradRetainedBytes(e, s), t * cm.model().hidden_size() * act);
    }
  }
  // With the kernel tables (H100) and under recompute, for every kind and a
  // range of lengths: 0 <= W <= the backward.
  for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
    const CostModel cm = MakeModel("gdn-hybrid-3b", 1, 1, rc, "h100-80gb-nvlink");
    for (int l = 0; l < cm.num_layers(); ++l) {
      for (std::int64_t s : {1, 128, 4096, 65536}) {
        const double w = cm.WeightGradTime(l, 0, s), b = cm.BackwardTime(l, 0, s);
        if (cm.layers()[l] != LayerKind::kHead) {
          EXPECT_GT(w, 0) << l << " " << s;
        }
        EXPECT_LE(w, b) << l << " " << s;
      }
    }
  }
}

TEST(CostModel, TimeHasAWeightStreamingFloor) {
  pb::ClusterSpec c = *ClusterPreset("a100-80gb-nvlink");
  c.clear_kernel_costs();                    // rates from peak * efficiency
  c.mutable_device()->set_peak_flops(1e30);  // compute is free
  Result<CostModel> cm = CostModel::Make(*ModelPreset("gdn-3b"), {}, c, {});
  ASSERT_TRUE(cm.ok());
  const int l = 2;
  const std::int64_t s = 256;
  const double act_row = double(s) * cm->model().hidden_size() * 2;
  const double bw = c.device().memory_bandwidth_bytes_per_s();
  EXPECT_NEAR(cm->ForwardTime(l, 0, s), (cm->WeightBytes(l) + 2 * act_row) / bw, 1e-18);
  EXPECT_NEAR(cm->BackwardTime(l, 0, s),
              (cm->WeightBytes(l) + 2 * cm->GradientBytes(l) + 2 * act_row) / bw, 1e-18);
}

// ---- boundary states, logits, boundary activations ----

TEST(CostModel, BoundaryStateIsTheBackendsState) {
  const int tp = 2, mbs = 3;
  const CostModel gdn = MakeModel("gdn-3b", tp, mbs);
  const pb::ModelSpec& g = gdn.model();
  const double act = 2;
  const double state = double(g.num_heads()) * g.head_dim_k() * g.head_dim_v() * 4;
  const double tail = (g.conv_width() - 1.0) * g.num_heads() *
                      (2.0 * g.head_dim_k() + g.head_dim_v()) * act;
  EXPECT_DOUBLE_EQ(gdn.BoundaryStateBytes(1), mbs * (state + tail) / tp);
  EXPECT_EQ(gdn.BoundaryStateBytes(0), 0.0);
  EXPECT_EQ(gdn.BoundaryStateBytes(gdn.num_layers() - 1), 0.0);

  // Mamba-3: the official decode state (backend/layers/mamba3_layer.h): the
  // running angles (heads x 32 of d_state 128) and the SSM state in fp32, the
  // last k (heads x d_state) and v (heads x head dim) in activation precision.
  const CostModel mamba = MakeModel("mamba3-3b", tp, 1);
  const pb::ModelSpec& m = mamba.model();
  const double heads = m.num_heads(), p = m.head_dim_v(), n = m.state_dim();
  const double angles = n / 4;  // rope_fraction 0.5, one angle per pair
  const double mstate = heads * (angles + p * n) * 4;
  const double carry = heads * (n + p) * act;
  EXPECT_DOUBLE_EQ(mamba.BoundaryStateBytes(1), (mstate + carry) / tp);
}

TEST(CostModel, LogitsAndBoundaryActivations) {
  const int tp = 4, mbs = 2;
  const CostModel cm = MakeModel("gdn-32b", tp, mbs);
  const std::int64_t s = 3000;
  const int head = cm.num_layers() - 1;
  // One fp32 slice of 128 vocabulary columns (of the V / TP on this rank),
  // and in the backward its bf16 d(logits) (the default 2-byte activations).
  ASSERT_GT(cm.model().vocab_size() / tp, 128);
  EXPECT_DOUBLE_EQ(cm.LogitsBytes(head, s), double(mbs) * s * 128 * (4 + 2));
  EXPECT_EQ(cm.LogitsBytes(1, s), 0.0);
  EXPECT_DOUBLE_EQ(cm.BoundaryActivationBytes(s), double(mbs) * s * cm.model().hidden_size() * 2);
  EXPECT_EQ(cm.StoredActivationBytes(0, s), 0.0);  // the token ids stay in the batch
  // A vocabulary narrower than a slice is one slice.
  const CostModel tiny = MakeModel("gdn-tiny", 2, 1);
  EXPECT_DOUBLE_EQ(tiny.LogitsBytes(tiny.num_layers() - 1, 10),
                   10.0 * tiny.model().vocab_size() / 2 * (4 + 2));
}

// Mamba-3's backward workspace grows by one replayed fp32 state per head
// (P x d_state) with each kernel block of 64 tokens, beside the per-token
// tensors (backend Mamba3CoreBackwardWorkspaceSize): the step from 64 to 65
// tokens is one state plus one token's tensors.
TEST(CostModel, MambaWorkspaceCountsKernelBlocks) {
  const CostModel cm = MakeModel("mamba3-3b");
  const pb::ModelSpec& m = cm.model();
  const double state = double(m.num_heads()) * m.head_dim_v() * m.state_dim() * 4;
  const double per_token = (cm.BackwardWorkspaceBytes(1, 128) - cm.BackwardWorkspaceBytes(1, 64) -
                            state) / 64;  // one more block, 64 more tokens
  EXPECT_GT(per_token, 0);
  EXPECT_NEAR(cm.BackwardWorkspaceBytes(1, 65) - cm.BackwardWorkspaceBytes(1, 64),
              state + per_token, 1e-6 * state);
  EXPECT_GT(cm.BackwardWorkspaceBytes(1, 128), cm.ForwardWorkspaceBytes(1, 128));
}

// float64 keeps statistics and states in float64 too; bf16 keeps them fp32.
TEST(CostModel, StatisticsAreFp32OrWider) {
  pb::PrecisionSpec f64 = *PrecisionForDtype("float64");
  EXPECT_EQ(f64.weight_bytes(), 8);
  EXPECT_EQ(f64.gradient_bytes(), 8);
  EXPECT_EQ(f64.optimizer_bytes(), 16);  // AdamW's m and v
  EXPECT_EQ(f64.activation_bytes(), 8);
  EXPECT_EQ(PrecisionForDtype("")->activation_bytes(), 4);
  Result<pb::PrecisionSpec> bad = PrecisionForDtype("float16");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train.dtype"), std::string::npos);
  Result<CostModel> cm = CostModel::Make(*ModelPreset("gdn-tiny"), f64,
                                         *ClusterPreset("cpu"), CostModelOptions{});
  ASSERT_TRUE(cm.ok());
  const pb::ModelSpec& m = cm->model();
  const double H = m.num_heads(), K = m.head_dim_k(), V = m.head_dim_v();
  EXPECT_DOUBLE_EQ(cm->BoundaryStateBytes(1),
                   (H * K * V + (m.conv_width() - 1.0) * H * (2 * K + V)) * 8);
  // Every saved element in float64: 4C + 2F + 2 + 4 HK + 5 HV + 6 H per token
  // (backend/layers/gdn_layer.h, GdnLayerSaved::NumelPerToken).
  const double C = m.hidden_size(), F = m.mlp_size();
  EXPECT_DOUBLE_EQ(cm->StoredActivationBytes(1, 10),
                   10 * (4 * C + 2 * F + 2 + 4 * H * K + 5 * H * V + 6 * H) * 8);
}

// ---- the state transition (docs/cost-model.md, section 2.4) ----

// A GDN model of 4 heads of d_k = d_v = 128 on a device of 1 TFLOP/s with a
// flat efficiency, so that times are FLOPs / 1e12.
CostModel StModel(int compute_units, bool overlap, int tile = 64) {
  pb::ModelSpec model = *ModelPreset("gdn-3b");
  model.set_num_heads(4);
  model.set_head_dim_k(128);
  model.set_head_dim_v(128);
  pb::ClusterSpec cluster = *ClusterPreset("a100-80gb-nvlink");
  cluster.mutable_device()->set_peak_flops(1e12);
  cluster.mutable_device()->clear_efficiency();
  cluster.mutable_device()->set_compute_units(compute_units);
  CostModelOptions o;
  o.st_overlap = overlap;
  o.st_tile = tile;
  Result<CostModel> cm = CostModel::Make(model, {}, cluster, o);
  EXPECT_TRUE(cm.ok()) << cm.status().message();
  return *std::move(cm);
}

// By hand, per token (4 heads, C = 64, d_k = d_v = 128):
//   Pre = 4 (2 64 128 + 63 256)         = 130048
//   ST  = 4 (4 128 128)                 = 262144
//   Out = 4 (2 128 128 + 4 64 128)      = 262144
// s = 1024 tokens at 1e12 FLOP/s: Pre 1.33169152e-4 s, ST and Out
// 2.68435456e-4 s each. Tiles: 4 heads x 128 / 64 = 8.
TEST(CostModel, StateTransitionStBound) {
  // 32 units: u = 8 / 32 = 0.25, so the ST takes 4 x 2.68435456e-4 s and
  // exposes X = 3 x 2.68435456e-4 = 8.05306368e-4 s beyond the FLOP count.
  // Overlap: X exceeds both Pre and Out, so each window hides half of them:
  // X - (1.33169152e-4 + 2.68435456e-4) / 2 = 6.04504064e-4 s.
  const CostModel off = StModel(32, false), on = StModel(32, true), none = StModel(0, false);
  const int l = FirstLayerOf(off, LayerKind::kRecurrence);
  const StTiming t = off.StateTransition(l, 1024, false);
  EXPECT_DOUBLE_EQ(t.coverage, 0.25);
  EXPECT_NEAR(t.before_s, 1.33169152e-4, 1e-15);
  EXPECT_NEAR(t.st_s, 2.68435456e-4, 1e-15);
  EXPECT_NEAR(t.after_s, 2.68435456e-4, 1e-15);
  EXPECT_NEAR(t.exposed_s, 8.05306368e-4, 1e-15);
  EXPECT_NEAR(on.StateTransition(l, 1024, false).exposed_s, 6.04504064e-4, 1e-15);
  EXPECT_NEAR(off.ForwardTime(l, 0, 1024) - none.ForwardTime(l, 0, 1024), 8.05306368e-4, 1e-12);
  EXPECT_NEAR(on.ForwardTime(l, 0, 1024) - none.ForwardTime(l, 0, 1024), 6.04504064e-4, 1e-12);
  // Smaller tiles cover more units: B_V = 16 gives 32 tiles, u = 1, nothing exposed.
  EXPECT_EQ(StModel(32, false, 16).StateTransition(l, 1024, false).exposed_s, 0.0);
  EXPECT_EQ(none.StateTransition(l, 1024, false).exposed_s, 0.0);
}

TEST(CostModel, StateTransitionPreBound) {
  // 10 units: u = 0.8, X = (1 - 0.8) / 0.8 x 2.68435456e-4 = 6.7108864e-5 s,
  // below Pre and Out: overlap hides all of it.
  const CostModel off = StModel(10, false), on = StModel(10, true);
  const int l = FirstLayerOf(off, LayerKind::kRecurrence);
  EXPECT_NEAR(off.StateTransition(l, 1024, false).exposed_s, 6.7108864e-5, 1e-15);
  EXPECT_NEAR(on.StateTransition(l, 1024, false).exposed_s, 0.0, 1e-18);
}

// The closed form against the two-segment schedule composed window by window:
// Pre1 -> (ST1 || Pre2) -> (ST2 || Out1) -> Out2, a window taking
// max(x, w + u x) for ST time x at coverage u beside parallel work w.
TEST(CostModel, StateTransitionMatchesTwoSegmentSchedule) {
  for (int units : {8, 9, 12, 16, 24, 40, 64, 132}) {
    for (bool backward : {false, true}) {
      for (std::int64_t s : {64, 1000, 4096}) {
        const CostModel off = StModel(units, false), on = StModel(units, true);
        const int l = FirstLayerOf(off, LayerKind::kRecurrence);
        const StTiming t = off.StateTransition(l, s, backward);
        const double B = t.before_s, S = t.st_s, A = t.after_s, u = t.coverage;
        const double x = S / (2 * u);
        const double seq = B + S / u + A;
        const double overlapped =
            B / 2 + std::max(x, B / 2 + u * x) + std::max(x, A / 2 + u * x) + A / 2;
        const double flop_count = B + S + A;
        EXPECT_NEAR(t.exposed_s, seq - flop_count, 1e-12 * seq);
        EXPECT_NEAR(on.StateTransition(l, s, backward).exposed_s, overlapped - flop_count,
                    1e-12 * seq)
            << units << " " << backward << " " << s;
        EXPECT_LE(overlapped, seq);
      }
    }
  }
}

// ---- the terms of a pass (simulate --explain) ----

// The hand-worked ST-bound case above, term by term: the forward's ST
// exposed and hidden are StateTransition's; its kernel time is the FLOP
// count at 1 TFLOP/s (compute-bound); without TP there is no all-reduce.
TEST(CostModel, PassTermsOfTheStBoundCase) {
  const CostModel off = StModel(32, false), on = StModel(32, true), none = StModel(0, false);
  const int l = FirstLayerOf(off, LayerKind::kRecurrence);
  const PassTerms t_off = off.ForwardTerms(l, 0, 1024), t_on = on.ForwardTerms(l, 0, 1024);
  EXPECT_NEAR(t_off.st_exposed_s, 8.05306368e-4, 1e-15);
  EXPECT_EQ(t_off.st_hidden_s, 0.0);
  EXPECT_NEAR(t_on.st_exposed_s, 6.04504064e-4, 1e-15);
  EXPECT_NEAR(t_on.st_hidden_s, 8.05306368e-4 - 6.04504064e-4, 1e-15);
  EXPECT_GT(t_off.compute_s, 0.0);
  EXPECT_EQ(t_off.memory_s, 0.0);
  EXPECT_EQ(t_off.tp_comm_s, 0.0);
  EXPECT_EQ(t_off.recompute_s, 0.0);
  // The kernel terms do not depend on the ST model.
  EXPECT_EQ(t_off.compute_s, none.ForwardTerms(l, 0, 1024).compute_s);
}

// For every layer kind, pass, recompute mode, TP and ST setting: total_s is
// ForwardTime / BackwardTime bit for bit, and the terms add up to it; the
// kernel time counts under exactly one bound; a recomputed backward carries
// its forward replay, term by term.
TEST(CostModel, PassTermsAddUpToTheTimes) {
  int exposed_cases = 0;  // the loops must reach u < 1 with overlap on
  for (const char* preset : {"gdn-hybrid-15b", "mamba3-hybrid-15b"}) {
    for (Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
      for (int tp : {1, 4}) {
        for (int units : {0, 108}) {
          for (bool overlap : {false, true}) {
            SCOPED_TRACE(std::string(preset) + " recompute " +
                         std::string(RecomputeName(recompute)) + " tp " + std::to_string(tp) +
                         " units " + std::to_string(units) + " overlap " +
                         std::to_string(overlap));
            pb::ClusterSpec cluster = *ClusterPreset("a100-80gb-nvlink");
            cluster.mutable_device()->set_compute_units(units);
            CostModelOptions o;
            o.tensor_size = tp;
            o.recompute = recompute;
            o.st_overlap = overlap;
            Result<CostModel> cm = CostModel::Make(*ModelPreset(preset), {}, cluster, o);
            ASSERT_TRUE(cm.ok()) << cm.status().message();
            for (LayerKind kind : {LayerKind::kEmbedding, LayerKind::kRecurrence,
                                   LayerKind::kAttention, LayerKind::kHead}) {
              const int l = FirstLayerOf(*cm, kind);
              for (std::int64_t c : {0, 6144}) {
                const PassTerms f = cm->ForwardTerms(l, c, 2048);
                const PassTerms b = cm->BackwardTerms(l, c, 2048);
                EXPECT_EQ(f.total_s, cm->ForwardTime(l, c, 2048));
                EXPECT_EQ(b.total_s, cm->BackwardTime(l, c, 2048));
                for (const PassTerms& t : {f, b}) {
                  EXPECT_NEAR(t.compute_s + t.memory_s + t.st_exposed_s + t.tp_comm_s,
                              t.total_s, 1e-12 * t.total_s);
                  EXPECT_GT(t.total_s, 0.0);
                }
                EXPECT_TRUE(f.compute_s == 0 || f.memory_s == 0);
                EXPECT_EQ(f.recompute_s, 0.0);
                EXPECT_EQ(f.tp_comm_s, cm->TensorParallelForwardCommTime(l, 2048));
                const StTiming st = cm->StateTransition(l, 2048, false);
                EXPECT_EQ(f.st_exposed_s, st.exposed_s);
                EXPECT_EQ(f.st_hidden_s, st.hidden_s);
                if (kind != LayerKind::kRecurrence || units == 0) {
                  EXPECT_EQ(f.st_exposed_s + f.st_hidden_s + b.st_exposed_s + b.st_hidden_s, 0.0);
                } else {
                  // Exposed when the ST's tiles leave units idle (u < 1).
                  EXPECT_EQ(f.st_exposed_s + f.st_hidden_s > 0, st.coverage < 1);
                  EXPECT_EQ(f.st_hidden_s > 0, overlap && st.coverage < 1);
                  if (overlap && st.coverage < 1) ++exposed_cases;
                }
                if (cm->Recomputed(l)) {
                  EXPECT_EQ(b.recompute_s, f.total_s);
                  const StTiming own = cm->StateTransition(l, 2048, true);
                  EXPECT_NEAR(b.st_exposed_s, own.exposed_s + f.st_exposed_s,
                              1e-15 + 1e-12 * b.st_exposed_s);
                  EXPECT_NEAR(b.tp_comm_s,
                              cm->TensorParallelBackwardCommTime(l, 2048) + f.tp_comm_s,
                              1e-12 * b.total_s);
                } else {
                  EXPECT_EQ(b.recompute_s, 0.0);
                  EXPECT_EQ(b.tp_comm_s, cm->TensorParallelBackwardCommTime(l, 2048));
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(exposed_cases, 0);
}

// The embedding's forward moves more bytes than it computes: its kernel time
// is the bytes floor, counted under memory.
TEST(CostModel, PassTermsCountABytesBoundPassUnderMemory) {
  Result<CostModel> cm = CostModel::Make(*ModelPreset("gdn-3b"), {},
                                         *ClusterPreset("a100-80gb-nvlink"), {});
  ASSERT_TRUE(cm.ok()) << cm.status().message();
  const int e = FirstLayerOf(*cm, LayerKind::kEmbedding);
  const PassTerms t = cm->ForwardTerms(e, 0, 8192);
  EXPECT_EQ(t.compute_s, 0.0);
  EXPECT_DOUBLE_EQ(t.memory_s, cm->MinForwardBytes(e, 8192) /
                                   cm->cluster().device().memory_bandwidth_bytes_per_s());
}

}  // namespace
}  // namespace stateflow::models

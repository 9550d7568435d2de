// Presets: they validate, follow the paper's "Model Configurations", and their
// parameter counts match a reference count written here weight by weight.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "models/family.h"
#include "models/model.h"

namespace stateflow::models {
namespace {

// ---- reference parameter count: the weight tensors of each layer ----

struct Shape {
  double rows, cols;
};

double Sum(std::initializer_list<Shape> tensors) {
  double total = 0;
  for (const Shape& t : tensors) total += t.rows * t.cols;
  return total;
}

double RefMlpAndNorms(const pb::ModelSpec& m) {
  const double h = m.hidden_size(), f = m.mlp_size();
  if (m.mlp() == "gelu") {  // DeltaNet: up, down with biases; two LayerNorms
    return Sum({{h, f}, {f, h}, {1, f}, {1, h},  // up, down, their biases
                {2, h}, {2, h}});                // pre-mixer and pre-MLP LayerNorm
  }
  return Sum({{h, f}, {h, f}, {f, h},  // gate, up, down
              {1, h}, {1, h}});        // pre-mixer and pre-MLP RMSNorm
}

double RefGdnMixer(const pb::ModelSpec& m) {
  const double h = m.hidden_size(), n = m.num_heads();
  const double kd = n * m.head_dim_k(), vd = n * m.head_dim_v();
  if (m.decay() == "none") {  // DeltaNet: one h -> 4h projection, no decay
    return Sum({{h, kd + kd + vd + vd},                 // q, k, v, output gate
                {h, n},                                 // b
                {double(m.conv_width()), kd + kd + vd},  // depthwise conv
                {1, double(m.head_dim_v())},            // output norm
                {vd, h}, {1, h}});                      // o_proj and its bias
  }
  return Sum({{h, kd}, {h, kd}, {h, vd},           // q, k, v
              {h, n}, {h, n}, {1, n}, {1, n},      // a, b, A_log, dt_bias
              {double(m.conv_width()), kd + kd + vd},      // depthwise conv
              {h, vd}, {1, double(m.head_dim_v())},  // output gate, norm
              {vd, h}});                           // o_proj
}

// backend/layers/mamba3_layer.h: one B/C group, rope_fraction 0.5 (angles
// per head: state/2 rounded down to even, halved), no short convolution.
double RefMambaMixer(const pb::ModelSpec& m) {
  const double h = m.hidden_size(), n = m.num_heads();
  const double inner = n * m.head_dim_v(), st = m.state_dim();
  const int half = m.state_dim() / 2;
  const double angles = (half - half % 2) / 2;
  return Sum({{h, inner}, {h, inner}, {h, st}, {h, st},  // z, x, B, C
              {h, n}, {h, n}, {h, n}, {h, angles},       // dt, A, trapezoid, angles
              {2, n},                                     // dt_bias, D
              {2, st}, {2, n * st},                       // B/C norms; biases per head
              {inner, h}});                               // out_proj
}

// backend/layers/kda_layer.h: Kimi Linear's KDA mixer, the decay and the
// output gate low rank (rank = head_dim_v), the output gate with a bias.
double RefKdaMixer(const pb::ModelSpec& m) {
  const double h = m.hidden_size(), n = m.num_heads(), r = m.head_dim_v();
  const double kd = n * m.head_dim_k(), vd = n * m.head_dim_v();
  return Sum({{h, kd}, {h, kd}, {h, vd},                // q, k, v
              {h, r}, {r, kd},                          // f_proj.0, f_proj.1
              {h, n},                                   // b
              {h, r}, {r, vd}, {1, vd},                 // g_proj.0, g_proj.1 and its bias
              {1, n}, {1, kd},                          // A_log, dt_bias (per channel)
              {double(m.conv_width()), kd + kd + vd},   // depthwise conv
              {1, r},                                   // output norm
              {vd, h}});                                // o_proj
}

double RefAttentionMixer(const pb::ModelSpec& m) {
  const double h = m.hidden_size();
  const double q = double(m.attn_heads()) * m.attn_head_dim();
  const double kv = q / m.gqa_group_size();
  return Sum({{h, q}, {h, kv}, {h, kv}, {q, h}});
}

double RefModelParams(const pb::ModelSpec& m) {
  const double h = m.hidden_size(), vocab = m.vocab_size();
  const double final_norm = m.norm() == "layernorm" ? 2 * h : h;
  double total = vocab * h + final_norm + (m.untied_embeddings() ? vocab * h : 0);
  const bool hybrid = m.layer_pattern() == "hybrid";
  for (uint32_t j = 0; j < m.num_layers(); ++j) {
    // Hybrid: every (period + 1)-th block counted from 1 is attention.
    const bool attention =
        hybrid && (j % (m.hybrid_period() + 1)) == m.hybrid_period();
    double mixer = attention ? RefAttentionMixer(m)
                   : m.architecture() == "mamba3" ? RefMambaMixer(m)
                   : m.architecture() == "kda"    ? RefKdaMixer(m)
                                                  : RefGdnMixer(m);
    total += mixer + RefMlpAndNorms(m);
  }
  return total;
}

TEST(ModelPresets, AllValidateAndAreUnique) {
  std::set<std::string> seen;
  for (const std::string& name : ModelPresetNames()) {
    SCOPED_TRACE(name);
    Result<pb::ModelSpec> m = ModelPreset(name);
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_EQ(m->name(), name);
    EXPECT_TRUE(ValidateModel(*m).ok()) << ValidateModel(*m).message();
    EXPECT_TRUE(seen.insert(name).second);
  }
  for (const char* name :
       {"gdn-3b", "gdn-15b", "gdn-32b", "mamba3-3b", "mamba3-15b",
        "mamba3-32b", "gdn-hybrid-3b", "gdn-hybrid-15b", "gdn-hybrid-32b",
        "mamba3-hybrid-3b", "mamba3-hybrid-15b", "mamba3-hybrid-32b",
        "gdn-tiny", "gdn-small", "gdn-hybrid-tiny", "mamba3-tiny"}) {
    EXPECT_TRUE(seen.count(name)) << name;
  }
}

// Every registered family has the two tiny presets the backend's tests run
// (tests/family_presets.h), of its own architecture.
TEST(ModelPresets, EveryFamilyHasTinyPresets) {
  for (const Family* f : Families()) {
    for (const std::string suffix : {"-tiny", "-hybrid-tiny"}) {
      const std::string name = std::string(f->name()) + suffix;
      Result<pb::ModelSpec> m = ModelPreset(name);
      ASSERT_TRUE(m.ok()) << name << ": " << m.status().message();
      EXPECT_EQ(m->architecture(), f->name()) << name;
      EXPECT_EQ(m->layer_pattern(), suffix == "-tiny" ? "recurrent" : "hybrid") << name;
    }
  }
}

TEST(ModelPresets, UnknownNameListsTheKnownOnes) {
  Result<pb::ModelSpec> m = ModelPreset("gdn-7b");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'gdn-7b'"), std::string::npos);
  for (const std::string& name : ModelPresetNames()) {
    EXPECT_NE(m.status().message().find(name), std::string::npos) << name;
  }
}

// The paper: 32/40/64 layers, hidden 2560/5120/6144, 20/40/64 GDN and
// attention heads, 80/160/192 Mamba-3 heads of dim 64 and state 128,
// vocabulary 50,304, untied, 3:1 hybrids with GQA groups 4/5/4.
TEST(ModelPresets, FollowThePaper) {
  struct Size {
    const char* suffix;
    uint32_t layers, hidden, heads, ssm_heads, gqa;
  };
  for (const Size& z : {Size{"3b", 32, 2560, 20, 80, 4},
                        Size{"15b", 40, 5120, 40, 160, 5},
                        Size{"32b", 64, 6144, 64, 192, 4}}) {
    for (const std::string family :
         {"gdn-", "mamba3-", "gdn-hybrid-", "mamba3-hybrid-"}) {
      SCOPED_TRACE(family + z.suffix);
      Result<pb::ModelSpec> m = ModelPreset(family + z.suffix);
      ASSERT_TRUE(m.ok());
      EXPECT_EQ(m->num_layers(), z.layers);
      EXPECT_EQ(m->hidden_size(), z.hidden);
      EXPECT_EQ(m->vocab_size(), 50304u);
      EXPECT_TRUE(m->untied_embeddings());
      EXPECT_EQ(m->conv_width(), 4u);
      // SwiGLU size: 8/3 hidden rounded up to 256.
      EXPECT_EQ(m->mlp_size() % 256, 0u);
      EXPECT_GE(3.0 * m->mlp_size(), 8.0 * z.hidden);
      EXPECT_LT(3.0 * (m->mlp_size() - 256), 8.0 * z.hidden);
      if (m->architecture() == "mamba3") {
        EXPECT_EQ(m->num_heads(), z.ssm_heads);
        EXPECT_EQ(m->head_dim_v(), 64u);
        EXPECT_EQ(m->state_dim(), 128u);
        EXPECT_EQ(m->num_heads() * m->head_dim_v(), 2 * z.hidden);  // expand 2
      } else {
        EXPECT_EQ(m->num_heads(), z.heads);
        EXPECT_EQ(m->num_heads() * m->head_dim_k(), z.hidden);
      }
      if (family.find("hybrid") != std::string::npos) {
        EXPECT_EQ(m->layer_pattern(), "hybrid");
        EXPECT_EQ(m->hybrid_period(), 3u);
        EXPECT_EQ(m->attn_heads(), z.heads);
        EXPECT_EQ(m->attn_heads() * m->attn_head_dim(), z.hidden);
        EXPECT_EQ(m->gqa_group_size(), z.gqa);
      }
    }
  }
}

// DeltaNet at the published runs' sizes: 24 layers of hidden 2048 with 16
// heads of 128, and 32 of 2560 with 32 heads of 80, MLP 4 h, vocabulary
// 50,304; 13 h^2 + h heads + 22 h + head_dim per layer (the structure's
// count), LayerNorm (2 h) and an untied output layer at the end.
TEST(ModelPresets, DeltaNetFollowsThePublishedRuns) {
  struct Size {
    const char* name;
    uint32_t layers, hidden, heads;
  };
  for (const Size& z : {Size{"deltanet-1.3b", 24, 2048, 16}, Size{"deltanet-2.7b", 32, 2560, 32},
                        Size{"deltanet-tiny", 4, 64, 2}}) {
    SCOPED_TRACE(z.name);
    Result<pb::ModelSpec> m = ModelPreset(z.name);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->architecture(), "gdn");
    EXPECT_EQ(m->decay(), "none");
    EXPECT_EQ(m->norm(), "layernorm");
    EXPECT_EQ(m->mlp(), "gelu");
    EXPECT_TRUE(m->mlp_bias() && m->out_proj_bias() && m->untied_embeddings());
    EXPECT_EQ(m->num_layers(), z.layers);
    EXPECT_EQ(m->hidden_size(), z.hidden);
    EXPECT_EQ(m->num_heads(), z.heads);
    EXPECT_EQ(m->head_dim_k() * z.heads, z.hidden);
    EXPECT_EQ(m->head_dim_v(), m->head_dim_k());
    EXPECT_EQ(m->mlp_size(), 4 * z.hidden);
    EXPECT_EQ(m->conv_width(), 4u);
    if (std::string(z.name) != "deltanet-tiny") {
      EXPECT_EQ(m->vocab_size(), 50304u);
    }
    const double h = z.hidden, n = z.heads, d = h / n, v = m->vocab_size();
    const double per_layer = 13 * h * h + h * n + 22 * h + d;
    EXPECT_DOUBLE_EQ(ModelParamCount(*m), z.layers * per_layer + v * h + 2 * h + v * h);
  }
  // The nominal sizes count the layers (the two 50,304 x h embeddings come
  // on top: 1.52 B and 2.99 B in all).
  for (const auto& [name, nominal] : {std::pair<const char*, double>{"deltanet-1.3b", 1.3e9},
                                      {"deltanet-2.7b", 2.7e9}}) {
    const pb::ModelSpec m = *ModelPreset(name);
    const double layers = m.num_layers() * LayerParamCount(m, LayerKind::kRecurrence);
    EXPECT_NEAR(layers / nominal, 1.0, 0.02) << name;
  }
}

TEST(ModelPresets, ParameterCountsMatchTheReference) {
  for (const std::string& name : ModelPresetNames()) {
    SCOPED_TRACE(name);
    pb::ModelSpec m = *ModelPreset(name);
    EXPECT_DOUBLE_EQ(ModelParamCount(m), RefModelParams(m));
  }
}

// Near the nominal sizes, and Mamba-3 slightly larger than GDN (the paper).
TEST(ModelPresets, ParameterCountsNearNominal) {
  for (const auto& [suffix, nominal] :
       {std::pair<const char*, double>{"3b", 3e9}, {"15b", 15e9},
        {"32b", 32e9}}) {
    const double gdn = ModelParamCount(*ModelPreset(std::string("gdn-") + suffix));
    const double mamba =
        ModelParamCount(*ModelPreset(std::string("mamba3-") + suffix));
    EXPECT_NEAR(gdn / nominal, 1.0, 0.06) << suffix;
    EXPECT_NEAR(mamba / nominal, 1.0, 0.10) << suffix;
    EXPECT_GT(mamba, gdn) << suffix;
    EXPECT_LT(mamba, 1.15 * gdn) << suffix;
  }
}

TEST(ModelPresets, HybridPatternIsThreeToOne) {
  pb::ModelSpec m = *ModelPreset("gdn-hybrid-3b");
  std::vector<LayerKind> layers = LayerList(m);
  ASSERT_EQ(layers.size(), m.num_layers() + 2);
  EXPECT_EQ(layers.front(), LayerKind::kEmbedding);
  EXPECT_EQ(layers.back(), LayerKind::kHead);
  // Expected pattern built by counting: three R then one A, repeated.
  int run = 0, attention = 0;
  for (size_t l = 1; l + 1 < layers.size(); ++l) {
    const LayerKind expected =
        run == 3 ? LayerKind::kAttention : LayerKind::kRecurrence;
    EXPECT_EQ(layers[l], expected) << "layer " << l;
    run = run == 3 ? 0 : run + 1;
    attention += layers[l] == LayerKind::kAttention;
  }
  EXPECT_EQ(attention, 8);
}

TEST(ModelPresets, HybridPatternOtherPeriods) {
  pb::ModelSpec m = *ModelPreset("gdn-hybrid-tiny");
  m.set_num_layers(12);
  for (uint32_t period : {1u, 2u, 5u, 7u, 20u}) {
    m.set_hybrid_period(period);
    std::vector<LayerKind> layers = LayerList(m);
    for (uint32_t j = 0; j < m.num_layers(); ++j) {
      // j + 1 blocks so far; attention when they fill whole (period+1) groups.
      const bool attention = (j + 1) % (period + 1) == 0;
      EXPECT_EQ(layers[j + 1] == LayerKind::kAttention, attention)
          << "period " << period << " block " << j;
      EXPECT_EQ(IsAttentionLayer(m, j), attention);
    }
  }
  m.set_layer_pattern("recurrent");
  for (uint32_t j = 0; j < m.num_layers(); ++j) EXPECT_FALSE(IsAttentionLayer(m, j));
}

TEST(ClusterPresets, AllValidate) {
  for (const std::string& name : ClusterPresetNames()) {
    SCOPED_TRACE(name);
    Result<pb::ClusterSpec> c = ClusterPreset(name);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->name(), name);
    EXPECT_TRUE(ValidateCluster(*c).ok()) << ValidateCluster(*c).message();
  }
  Result<pb::ClusterSpec> a100 = ClusterPreset("a100-80gb-nvlink");
  EXPECT_EQ(a100->device().memory_capacity_bytes(), 80.0 * (1ull << 30));
  EXPECT_EQ(a100->devices_per_node(), 8u);
  // The GPU presets (issue 28): 8 per node, their device and links, and the
  // public kernel costs the H100 and H200 carry (an attention point and the
  // 24-size NCCL all-reduce curve of 8 GPUs); the A100 40 GB shares the
  // 80 GB part's table.
  for (const char* name : {"a100-40gb-nvlink", "h100-80gb-nvlink", "h200-141gb-nvlink",
                           "b200-180gb-nvlink"}) {
    SCOPED_TRACE(name);
    Result<pb::ClusterSpec> c = ClusterPreset(name);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->devices_per_node(), 8u);
    EXPECT_GT(c->device().peak_flops(), 300e12);
    EXPECT_EQ(c->pipeline_link().bandwidth_bytes_per_s(), c->intra_node_link().bandwidth_bytes_per_s());
  }
  for (const char* name : {"h100-80gb-nvlink", "h200-141gb-nvlink"}) {
    SCOPED_TRACE(name);
    const pb::KernelCosts k = ClusterPreset(name)->kernel_costs();
    EXPECT_EQ(k.all_reduce_size(), 24);
    EXPECT_EQ(k.attention_size(), 1);
    EXPECT_EQ(k.gemm_size(), 0);  // the public table is FP8
    EXPECT_EQ(k.sources_size(), 1);
    EXPECT_EQ(k.all_reduce(23).bytes(), 8.0 * (1ull << 30));
  }
  EXPECT_EQ(ClusterPreset("a100-40gb-nvlink")->kernel_costs().SerializeAsString(),
            a100->kernel_costs().SerializeAsString());
  EXPECT_EQ(ClusterPreset("b200-180gb-nvlink")->kernel_costs().all_reduce_size(), 0);
  EXPECT_EQ(ClusterPreset("h100-80gb-nvlink")->device().memory_capacity_bytes(), 80e9);
  EXPECT_EQ(ClusterPreset("h200-141gb-nvlink")->device().memory_capacity_bytes(), 141e9);
  Result<pb::ClusterSpec> bad = ClusterPreset("h100");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a100-80gb-nvlink"), std::string::npos);
  EXPECT_NE(bad.status().message().find("cpu"), std::string::npos);
}

}  // namespace
}  // namespace stateflow::models

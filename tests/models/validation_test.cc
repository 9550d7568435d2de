// ValidateModel / ValidateCluster: one case per bad field, each checking that
// the message names the field (and, for divisibility, both fields).
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "models/model.h"

namespace stateflow::models {
namespace {

struct ModelCase {
  std::string name;  // test name suffix
  std::function<void(pb::ModelSpec*)> mutate;
  int tensor_size;
  std::vector<std::string> message_parts;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

class BadModel : public testing::TestWithParam<ModelCase> {};

TEST_P(BadModel, MessageNamesTheField) {
  const ModelCase& c = GetParam();
  pb::ModelSpec m = *ModelPreset("gdn-hybrid-3b");
  ASSERT_TRUE(ValidateModel(m, 1).ok());
  c.mutate(&m);
  Status s = ValidateModel(m, c.tensor_size);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidInput);
  for (const std::string& part : c.message_parts) {
    EXPECT_NE(s.message().find(part), std::string::npos)
        << "'" << s.message() << "' lacks '" << part << "'";
  }
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

ModelCase Zero(const std::string& field,
               std::function<void(pb::ModelSpec*)> mutate) {
  return {field + "_zero", std::move(mutate), 1,
          {"model." + field + " must be in [1, ", "(got 0)"}};
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadModel,
    testing::Values(
        Zero("num_layers", [](pb::ModelSpec* m) { m->set_num_layers(0); }),
        Zero("hidden_size", [](pb::ModelSpec* m) { m->set_hidden_size(0); }),
        Zero("num_heads", [](pb::ModelSpec* m) { m->set_num_heads(0); }),
        Zero("head_dim_k", [](pb::ModelSpec* m) { m->set_head_dim_k(0); }),
        Zero("head_dim_v", [](pb::ModelSpec* m) { m->set_head_dim_v(0); }),
        Zero("conv_width", [](pb::ModelSpec* m) { m->set_conv_width(0); }),
        Zero("mlp_size", [](pb::ModelSpec* m) { m->set_mlp_size(0); }),
        Zero("vocab_size", [](pb::ModelSpec* m) { m->set_vocab_size(0); }),
        Zero("attn_heads", [](pb::ModelSpec* m) { m->set_attn_heads(0); }),
        Zero("attn_head_dim",
             [](pb::ModelSpec* m) { m->set_attn_head_dim(0); }),
        Zero("gqa_group_size",
             [](pb::ModelSpec* m) { m->set_gqa_group_size(0); }),
        ModelCase{"state_dim_zero_mamba3",
                  [](pb::ModelSpec* m) {
                    m->set_architecture("mamba3");
                    m->set_state_dim(0);
                  },
                  1,
                  {"model.state_dim must be in [1, "}},
        ModelCase{"architecture_unknown",
                  [](pb::ModelSpec* m) { m->set_architecture("rwkv"); }, 1,
                  {"model.architecture", "'rwkv'", "gdn", "mamba3"}},
        ModelCase{"architecture_empty",
                  [](pb::ModelSpec* m) { m->clear_architecture(); }, 1,
                  {"model.architecture"}},
        ModelCase{"layer_pattern_unknown",
                  [](pb::ModelSpec* m) { m->set_layer_pattern("mixed"); }, 1,
                  {"model.layer_pattern", "'mixed'", "recurrent", "hybrid"}},
        ModelCase{"hybrid_period_zero",
                  [](pb::ModelSpec* m) { m->set_hybrid_period(0); }, 1,
                  {"model.hybrid_period", "must be in [1, ", "(got 0)"}},
        ModelCase{"attn_head_dim_odd",
                  [](pb::ModelSpec* m) { m->set_attn_head_dim(127); }, 1,
                  {"model.attn_head_dim (127) must be even"}},
        ModelCase{"gqa_not_dividing_heads",
                  [](pb::ModelSpec* m) { m->set_gqa_group_size(3); }, 1,
                  {"model.attn_heads (20)", "model.gqa_group_size (3)"}},
        ModelCase{"heads_not_divisible_by_tp", [](pb::ModelSpec*) {}, 3,
                  {"model.num_heads (20)", "parallel.tensor_size (3)"}},
        ModelCase{"attn_heads_not_divisible_by_tp",
                  [](pb::ModelSpec* m) { m->set_num_heads(24); }, 3,
                  {"model.attn_heads (20)", "parallel.tensor_size (3)"}},
        ModelCase{"kv_heads_not_divisible_by_tp", [](pb::ModelSpec*) {}, 2,
                  {"model.gqa_group_size", "(5)", "parallel.tensor_size (2)"}},
        ModelCase{"tensor_size_zero", [](pb::ModelSpec*) {}, 0,
                  {"parallel.tensor_size must be >= 1"}},
        ModelCase{"norm_unknown", [](pb::ModelSpec* m) { m->set_norm("batchnorm"); }, 1,
                  {"model.norm", "'batchnorm'", "rmsnorm", "layernorm"}},
        ModelCase{"mlp_unknown", [](pb::ModelSpec* m) { m->set_mlp("relu"); }, 1,
                  {"model.mlp", "'relu'", "swiglu", "gelu"}},
        ModelCase{"decay_unknown", [](pb::ModelSpec* m) { m->set_decay("linear"); }, 1,
                  {"model.decay", "'linear'", "gated", "none"}},
        ModelCase{"layernorm_in_a_hybrid",
                  [](pb::ModelSpec* m) { m->set_norm("layernorm"); }, 1,
                  {"model.norm", "layernorm", "gdn family's recurrent models only", "'hybrid'"}},
        ModelCase{"gelu_in_mamba3",
                  [](pb::ModelSpec* m) {
                    m->set_architecture("mamba3");
                    m->set_layer_pattern("recurrent");
                    m->set_state_dim(128);
                    m->set_mlp("gelu");
                  },
                  1, {"model.mlp", "gelu", "'mamba3'"}},
        ModelCase{"out_proj_bias_in_a_hybrid",
                  [](pb::ModelSpec* m) { m->set_out_proj_bias(true); }, 1,
                  {"model.out_proj_bias"}},
        ModelCase{"mlp_bias_with_swiglu",
                  [](pb::ModelSpec* m) {
                    m->set_layer_pattern("recurrent");
                    m->set_mlp_bias(true);
                  },
                  1, {"model.mlp_bias", "gelu MLP only"}},
        ModelCase{"no_decay_in_kda",
                  [](pb::ModelSpec* m) {
                    m->set_architecture("kda");
                    m->set_decay("none");
                  },
                  1, {"model.decay", "'none'", "gdn", "'kda'"}}),
    [](const testing::TestParamInfo<ModelCase>& info) {
      return info.param.name;
    });

TEST(ValidateModel, RecurrentIgnoresAttentionFieldsAndEmptyPatternIsRecurrent) {
  pb::ModelSpec m = *ModelPreset("gdn-3b");
  m.clear_layer_pattern();
  m.set_gqa_group_size(7);  // would not divide attn_heads; unused here
  EXPECT_TRUE(ValidateModel(m, 4).ok()) << ValidateModel(m, 4).message();
  for (LayerKind k : LayerList(m)) EXPECT_NE(k, LayerKind::kAttention);
}

TEST(ValidateModel, Mamba3NeedsNoKeyHeadDim) {
  pb::ModelSpec m = *ModelPreset("mamba3-3b");
  EXPECT_EQ(m.head_dim_k(), 0u);
  EXPECT_TRUE(ValidateModel(m, 1).ok());
}

// ---- cluster ----

struct ClusterCase {
  std::string name;
  std::function<void(pb::ClusterSpec*)> mutate;
  std::string message_part;
};

void PrintTo(const ClusterCase& c, std::ostream* os) { *os << c.name; }

class BadCluster : public testing::TestWithParam<ClusterCase> {};

TEST_P(BadCluster, MessageNamesTheField) {
  pb::ClusterSpec c = *ClusterPreset("a100-80gb-nvlink");
  ASSERT_TRUE(ValidateCluster(c).ok());
  GetParam().mutate(&c);
  Status s = ValidateCluster(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(GetParam().message_part), std::string::npos)
      << "'" << s.message() << "' lacks '" << GetParam().message_part << "'";
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadCluster,
    testing::Values(
        ClusterCase{"peak_flops",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->set_peak_flops(0);
                    },
                    "cluster.device.peak_flops must be in [1, "},
        ClusterCase{"bandwidth",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->set_memory_bandwidth_bytes_per_s(-1);
                    },
                    "cluster.device.memory_bandwidth_bytes_per_s must be in [1, "},
        ClusterCase{"capacity",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->set_memory_capacity_bytes(0);
                    },
                    "cluster.device.memory_capacity_bytes must be in [1, "},
        ClusterCase{"efficiency_tokens",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->mutable_efficiency(0)->set_tokens(0);
                    },
                    "cluster.device.efficiency[0].tokens must be in [1, "},
        ClusterCase{"efficiency_above_one",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->mutable_efficiency(2)->set_efficiency(
                          1.5);
                    },
                    "cluster.device.efficiency[2].efficiency must be in (0, 1]"},
        ClusterCase{"efficiency_zero",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->mutable_efficiency(1)->set_efficiency(
                          0);
                    },
                    "cluster.device.efficiency[1].efficiency must be in (0, 1]"},
        ClusterCase{"efficiency_unsorted",
                    [](pb::ClusterSpec* c) {
                      c->mutable_device()->mutable_efficiency(3)->set_tokens(
                          100);
                    },
                    "cluster.device.efficiency[3].tokens must be > "
                    "efficiency[2].tokens"},
        ClusterCase{"pipeline_bandwidth",
                    [](pb::ClusterSpec* c) {
                      c->mutable_pipeline_link()->set_bandwidth_bytes_per_s(0);
                    },
                    "cluster.pipeline_link.bandwidth_bytes_per_s must be in [1, "},
        ClusterCase{"pipeline_latency",
                    [](pb::ClusterSpec* c) {
                      c->mutable_pipeline_link()->set_latency_s(-1e-6);
                    },
                    "cluster.pipeline_link.latency_s must be in [0, 3600] (got -1e-06)"},
        ClusterCase{"intra_node_bandwidth",
                    [](pb::ClusterSpec* c) { c->clear_intra_node_link(); },
                    "cluster.intra_node_link.bandwidth_bytes_per_s must be in [1, "},
        ClusterCase{"inter_node_bandwidth",
                    [](pb::ClusterSpec* c) {
                      c->mutable_inter_node_link()->set_bandwidth_bytes_per_s(0);
                    },
                    "cluster.inter_node_link.bandwidth_bytes_per_s must be in [1, "},
        ClusterCase{"devices_per_node",
                    [](pb::ClusterSpec* c) { c->set_devices_per_node(0); },
                    "cluster.devices_per_node must be in [1, "}),
    [](const testing::TestParamInfo<ClusterCase>& info) {
      return info.param.name;
    });

TEST(ValidateCluster, NoEfficiencyPointsIsFine) {
  pb::ClusterSpec c = *ClusterPreset("cpu");
  c.mutable_device()->clear_efficiency();
  EXPECT_TRUE(ValidateCluster(c).ok());
}

}  // namespace
}  // namespace stateflow::models

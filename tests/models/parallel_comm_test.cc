// Tensor- and data-parallel communication in the cost model, on small cases
// worked out by hand from the formulas of docs/cost-model.md, section 5:
//   ring all-reduce of b bytes over n ranks: 2 (n-1)/n b / bandwidth + 2 (n-1) latency
//   block: 2 all-reduces of [t, h] forward, 2 backward; embedding: 1 forward;
//   head: 3 of t fp32 values forward, 1 of [t, h] backward;
//   DP: one all-reduce of the stage's gradient bytes, intra-node when
//   TP * DP <= devices_per_node, else inter-node.
#include <gtest/gtest.h>

#include "models/cost_model.h"

namespace stateflow::models {
namespace {

constexpr double kLatencyS = 1e-6;
constexpr double kBandwidth = 1e9;      // bytes/s, intra-node
constexpr double kInterLatencyS = 1e-5;
constexpr double kInterBandwidth = 1e8;  // bytes/s, inter-node

pb::LinkSpec Link(double latency_s, double bandwidth) {
  pb::LinkSpec link;
  link.set_latency_s(latency_s);
  link.set_bandwidth_bytes_per_s(bandwidth);
  return link;
}

// The CPU preset with round link numbers; `free_links` makes TP
// communication negligible (to isolate it as a difference of times).
pb::ClusterSpec Cluster(bool free_links = false) {
  pb::ClusterSpec c = *ClusterPreset("cpu");
  *c.mutable_intra_node_link() =
      free_links ? Link(0, 1e30) : Link(kLatencyS, kBandwidth);
  *c.mutable_inter_node_link() = Link(kInterLatencyS, kInterBandwidth);
  c.set_devices_per_node(8);
  return c;
}

CostModel Make(int tp, int dp, Recompute rc = Recompute::kNone, bool free_links = false) {
  CostModelOptions o;
  o.tensor_size = tp;
  o.data_size = dp;
  o.recompute = rc;
  // gdn-hybrid-tiny (h = 64) with 4 GDN heads and 4 K/V heads, so that TP
  // can be 2 or 4.
  pb::ModelSpec model = *ModelPreset("gdn-hybrid-tiny");
  model.set_num_heads(4);
  model.set_gqa_group_size(1);
  Result<CostModel> cm = CostModel::Make(model, {}, Cluster(free_links), o);
  EXPECT_TRUE(cm.ok()) << cm.status().message();
  return *std::move(cm);
}

int First(const CostModel& cm, LayerKind kind) {
  for (int l = 0; l < cm.num_layers(); ++l) {
    if (cm.layers()[l] == kind) return l;
  }
  return -1;
}

TEST(RingAllReduce, HandWorkedCases) {
  const pb::LinkSpec link = Link(kLatencyS, kBandwidth);
  // n = 2: each rank sends and receives half the buffer twice.
  EXPECT_DOUBLE_EQ(RingAllReduceTime(1000, 2, link), 1000 / 1e9 + 2e-6);
  // n = 4: 2 * 3/4 * 8000 B / 1e9 B/s = 12 us, plus 6 latencies.
  EXPECT_DOUBLE_EQ(RingAllReduceTime(8000, 4, link), 12e-6 + 6e-6);
  EXPECT_EQ(RingAllReduceTime(8000, 1, link), 0.0);
}

TEST(TensorParallelComm, PerLayerKindAndPass) {
  const std::int64_t s = 1000;
  const double h = 64, act = 2;
  const double rows = s * h * act;  // [t, h] in bf16: 128,000 bytes
  for (int tp : {2, 4}) {
    SCOPED_TRACE("TP=" + std::to_string(tp));
    const CostModel cm = Make(tp, 1);
    const double n = tp;
    const double ring_rows = 2 * (n - 1) / n * rows / kBandwidth + 2 * (n - 1) * kLatencyS;
    const double ring_ce = 2 * (n - 1) / n * (s * 4.0) / kBandwidth + 2 * (n - 1) * kLatencyS;
    for (LayerKind kind : {LayerKind::kRecurrence, LayerKind::kAttention}) {
      const int l = First(cm, kind);
      EXPECT_DOUBLE_EQ(cm.TensorParallelForwardCommTime(l, s), 2 * ring_rows);
      EXPECT_DOUBLE_EQ(cm.TensorParallelBackwardCommTime(l, s), 2 * ring_rows);
    }
    const int emb = First(cm, LayerKind::kEmbedding), head = First(cm, LayerKind::kHead);
    EXPECT_DOUBLE_EQ(cm.TensorParallelForwardCommTime(emb, s), ring_rows);
    EXPECT_EQ(cm.TensorParallelBackwardCommTime(emb, s), 0.0);
    EXPECT_DOUBLE_EQ(cm.TensorParallelForwardCommTime(head, s), 3 * ring_ce);
    EXPECT_DOUBLE_EQ(cm.TensorParallelBackwardCommTime(head, s), ring_rows);
  }
  const CostModel one = Make(1, 1);
  for (int l = 0; l < one.num_layers(); ++l) {
    EXPECT_EQ(one.TensorParallelForwardCommTime(l, s), 0.0);
    EXPECT_EQ(one.TensorParallelBackwardCommTime(l, s), 0.0);
  }
}

// The communication is part of each pass's time; a recompute replay pays the
// forward's all-reduces again.
TEST(TensorParallelComm, AddedToPassTimes) {
  const std::int64_t c = 2048, s = 1000;
  for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
    const CostModel slow = Make(2, 1, rc);
    const CostModel free = Make(2, 1, rc, /*free_links=*/true);
    for (int l = 0; l < slow.num_layers(); ++l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const double fwd = slow.TensorParallelForwardCommTime(l, s);
      const double bwd = slow.TensorParallelBackwardCommTime(l, s) +
                         (slow.Recomputed(l) ? fwd : 0.0);
      EXPECT_NEAR(slow.ForwardTime(l, c, s) - free.ForwardTime(l, c, s), fwd, 1e-15);
      EXPECT_NEAR(slow.BackwardTime(l, c, s) - free.BackwardTime(l, c, s), bwd, 1e-15);
    }
  }
}

TEST(DataParallelSync, RingOverTheStagesGradients) {
  // TP 1 x DP 4 = 4 devices <= 8 per node: intra-node.
  const CostModel intra = Make(1, 4);
  EXPECT_EQ(&intra.DataParallelLink(), &intra.cluster().intra_node_link());
  double grad_bytes = 0;  // layers [1, 3): two blocks, fp32 gradients
  for (int l = 1; l < 3; ++l) {
    grad_bytes += LayerParamCount(intra.model(), intra.layers()[l]) * 4.0;
  }
  EXPECT_DOUBLE_EQ(intra.DataParallelSyncTime(1, 3),
                   2 * 3.0 / 4 * grad_bytes / kBandwidth + 2 * 3 * kLatencyS);

  // TP 2 x DP 8 = 16 devices > 8 per node: inter-node; gradients per TP rank.
  const CostModel inter = Make(2, 8);
  EXPECT_EQ(&inter.DataParallelLink(), &inter.cluster().inter_node_link());
  double tp_grad_bytes = 0;  // the split parameters halved, the whole ones whole
  for (int l = 1; l < 3; ++l) {
    tp_grad_bytes += LayerParamCountPerTensorRank(inter.model(), inter.layers()[l], 2) * 4.0;
  }
  EXPECT_LT(tp_grad_bytes, 0.51 * grad_bytes);
  EXPECT_DOUBLE_EQ(inter.DataParallelSyncTime(1, 3),
                   2 * 7.0 / 8 * tp_grad_bytes / kInterBandwidth + 2 * 7 * kInterLatencyS);

  EXPECT_EQ(Make(2, 1).DataParallelSyncTime(0, 3), 0.0);
}

CostModel MakeDistributed(int dp) {
  CostModelOptions o;
  o.data_size = dp;
  o.distributed_optimizer = true;
  pb::ModelSpec model = *ModelPreset("gdn-hybrid-tiny");  // as Make's
  model.set_num_heads(4);
  model.set_gqa_group_size(1);
  Result<CostModel> cm = CostModel::Make(model, {}, Cluster(), o);
  EXPECT_TRUE(cm.ok()) << cm.status().message();
  return *std::move(cm);
}

TEST(DataParallelSync, DistributedOptimizerReduceScattersGradientsAndGathersWeights) {
  // Default precision: bf16 weights (2 bytes), fp32 gradients (4 bytes).
  const CostModel cm = MakeDistributed(4);
  double params = 0;
  for (int l = 1; l < 3; ++l) params += cm.ParamCount(l);
  const double half_ring = 3.0 / 4 / kBandwidth;  // (n-1)/n per byte, n = 4
  EXPECT_DOUBLE_EQ(cm.DataParallelSyncTime(1, 3),
                   (half_ring * params * 4 + 3 * kLatencyS) +
                       (half_ring * params * 2 + 3 * kLatencyS));
  EXPECT_EQ(MakeDistributed(1).DataParallelSyncTime(1, 3), 0.0);
}

TEST(DataParallelSync, DistributedOptimizerShardsTheStagesOptimizerState) {
  const CostModel plain = Make(1, 4), sharded = MakeDistributed(4);
  for (const auto& [first, last] : {std::pair{0, 1}, {1, 3}, {0, plain.num_layers()}}) {
    double params = 0, bytes = 0;
    for (int l = first; l < last; ++l) {
      params += plain.ParamCount(l);
      bytes += plain.OptimizerBytes(l);
    }
    EXPECT_EQ(plain.StageOptimizerBytes(first, last), bytes);
    const auto n = static_cast<std::int64_t>(params);
    EXPECT_EQ(sharded.StageOptimizerBytes(first, last), double((n + 3) / 4) * 12.0)
        << first << ".." << last;
  }
  // DP 1: nothing to shard.
  EXPECT_EQ(MakeDistributed(1).StageOptimizerBytes(1, 3), plain.StageOptimizerBytes(1, 3));
}

TEST(ShardOf, ContiguousShardsCoverEveryElementOnceLargestFirst) {
  for (std::int64_t n : {0, 1, 5, 7, 64, 1001}) {
    for (int replicas : {1, 2, 3, 4, 8}) {
      std::int64_t next = 0;
      for (int d = 0; d < replicas; ++d) {
        const Shard s = ShardOf(n, replicas, d);
        EXPECT_EQ(s.begin, next) << n << " " << replicas << " " << d;
        EXPECT_LE(s.count, ShardOf(n, replicas, 0).count);
        EXPECT_GE(s.count, n / replicas);
        next = s.begin + s.count;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(DataParallelSync, ZeroDataSizeIsAnErrorNamingTheField) {
  CostModelOptions o;
  o.data_size = 0;
  Result<CostModel> cm = CostModel::Make(*ModelPreset("gdn-tiny"), {}, Cluster(), o);
  ASSERT_FALSE(cm.ok());
  EXPECT_NE(cm.status().message().find("parallel.data_size"), std::string::npos);
}

}  // namespace
}  // namespace stateflow::models

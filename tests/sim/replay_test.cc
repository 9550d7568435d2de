// Replaying a measured CostTable: the idealised formulas come back exactly
// from a table with one known cost per chunk; interpolation is linear in
// tokens; a table that does not fit the scenario is refused with a reason.
#include <gtest/gtest.h>

#include "models/model.h"
#include "sim/cost_table.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {

using ::stateflow::testing::MustResolve;
namespace {

pb::Scenario TinyScenario(int stages, int microbatches, std::int64_t seq_len) {
  pb::Scenario s;
  s.set_name("replay-test");
  *s.mutable_model() = *models::ModelPreset("gdn-tiny");
  *s.mutable_cluster() = *models::ClusterPreset("cpu");
  s.mutable_parallel()->set_pipeline_size(stages);
  s.mutable_parallel()->set_tensor_size(1);
  s.mutable_parallel()->set_data_size(1);
  s.mutable_parallel()->set_microbatch_size(1);
  s.mutable_parallel()->set_microbatches(microbatches);
  s.set_seq_len(seq_len);
  return s;
}

pb::ScheduleSpec Stateflow(int chunks) {
  pb::ScheduleSpec spec;
  spec.set_policy(chunks == 1 ? "1f1b" : "stateflow");
  spec.set_chunks(chunks);
  spec.set_granularity(1);
  spec.set_recompute("none");
  return spec;
}

void AddSample(pb::CostTable* t, const std::string& kind, const std::string& pass,
               double tokens, double seconds) {
  pb::CostSample* s = t->add_samples();
  s->set_layer_kind(kind);
  s->set_pass(pass);
  s->set_recompute("none");
  s->set_tokens(tokens);
  s->set_median_s(seconds);
}

// Embedding and head free, each block's forward x and backward 2x at
// `tokens`, a free link.
pb::CostTable KnownCosts(const pb::ModelSpec& model, double tokens, double x) {
  pb::CostTable t;
  *t.mutable_model() = model;
  for (const char* kind : {"embedding", "head"}) {
    AddSample(&t, kind, "forward", tokens, 0.0);
    AddSample(&t, kind, "backward", tokens, 0.0);
  }
  AddSample(&t, "recurrence", "forward", tokens, x);
  AddSample(&t, "recurrence", "backward", tokens, 2 * x);
  t.mutable_link()->set_latency_s(0);
  t.mutable_link()->set_bandwidth_bytes_per_s(1e300);
  return t;
}

TEST(Replay, OneKnownCostPerChunkGivesTheIdealisedFormulas) {
  // gdn-tiny has 4 blocks: with free embedding and head, P = 2 puts 2 blocks
  // on each stage and P = 4 one.
  for (int P : {2, 4}) {
    for (int M : {1, 3, 4}) {
      for (int N : {1, 2, 4, 8}) {
        SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M) + " N=" +
                     std::to_string(N));
        const std::int64_t T = 64 * N;
        const pb::Scenario s = TinyScenario(P, M, T);
        const int blocks_per_stage = 4 / P;
        // Per chunk and stage: forward 1/N, backward 2/N, as the uniform source.
        const double x = 1.0 / (N * blocks_per_stage);
        Result<CostTableIndex> index =
            CostTableIndex::Make(KnownCosts(s.model(), 64, x), "known");
        ASSERT_TRUE(index.ok()) << index.status().message();
        Result<Simulation> sim = Simulate(MustResolve(s), Stateflow(N), {.costs = &*index});
        ASSERT_TRUE(sim.ok()) << sim.status().message();
        for (const auto& layers : sim->config.placement->stage_layers) {
          // The assumption above: blocks spread evenly.
          const int blocks = layers.last - layers.first - (layers.first == 0) -
                             (layers.last == 4 + 2);
          ASSERT_EQ(blocks, blocks_per_stage);
        }
        EXPECT_EQ(sim->report.cost_model(), "replay");
        EXPECT_NEAR(sim->report.step_time_s(), (M * N + P - 1) * 3.0 / N, 1e-9);
      }
    }
  }
}

TEST(Replay, InterpolatesLinearlyInTokensAndAddsTheOptimizer) {
  const pb::Scenario s = TinyScenario(1, 1, 96);
  pb::CostTable t = KnownCosts(s.model(), 64, 1.0);
  AddSample(&t, "embedding", "forward", 128, 0.0);
  AddSample(&t, "embedding", "backward", 128, 0.0);
  AddSample(&t, "head", "forward", 128, 0.0);
  AddSample(&t, "head", "backward", 128, 0.0);
  AddSample(&t, "recurrence", "forward", 128, 3.0);
  AddSample(&t, "recurrence", "backward", 128, 6.0);
  t.set_optimizer_s_per_param(1e-6);
  Result<CostTableIndex> index = CostTableIndex::Make(t, "interp");
  ASSERT_TRUE(index.ok()) << index.status().message();
  Result<Simulation> sim = Simulate(MustResolve(s), Stateflow(1), {.costs = &*index});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  // 96 tokens is halfway: forward 2 and backward 4 per block, 4 blocks.
  const double params = models::ModelParamCount(s.model());
  EXPECT_NEAR(sim->report.step_time_s(), 4 * (2.0 + 4.0) + 1e-6 * params, 1e-9);
  EXPECT_NEAR(sim->report.stages(0).busy_s(), 24.0, 1e-12);
}

TEST(Replay, RefusesWhatItCannotAnswer) {
  const pb::Scenario s = TinyScenario(2, 2, 256);
  const pb::CostTable good = KnownCosts(s.model(), 64, 1.0);
  {  // Chunks of 128 tokens, measured only at 64.
    Result<CostTableIndex> index = CostTableIndex::Make(good, "narrow.textproto");
    ASSERT_TRUE(index.ok());
    Result<Simulation> sim = Simulate(MustResolve(s), Stateflow(2), {.costs = &*index});
    ASSERT_FALSE(sim.ok());
    EXPECT_NE(sim.status().message().find("outside the measured range [64, 64]"),
              std::string::npos) << sim.status().message();
    EXPECT_NE(sim.status().message().find("narrow.textproto"), std::string::npos);
  }
  {  // A layer kind missing.
    pb::CostTable t = good;
    t.mutable_samples()->DeleteSubrange(2, 2);  // the head's samples
    Result<CostTableIndex> index = CostTableIndex::Make(t, "nohead");
    ASSERT_TRUE(index.ok());
    Result<Simulation> sim = Simulate(MustResolve(TinyScenario(2, 2, 128)), Stateflow(2), {.costs = &*index});
    ASSERT_FALSE(sim.ok());
    EXPECT_NE(sim.status().message().find("no head forward samples"), std::string::npos)
        << sim.status().message();
  }
  {  // A negative time.
    pb::CostTable t = good;
    t.mutable_samples(5)->set_median_s(-1);
    Result<CostTableIndex> index = CostTableIndex::Make(t, "neg");
    ASSERT_FALSE(index.ok());
    EXPECT_NE(index.status().message().find("samples[5].median_s"), std::string::npos)
        << index.status().message();
  }
  {  // An unknown pass.
    pb::CostTable t = good;
    t.mutable_samples(0)->set_pass("sideways");
    Result<CostTableIndex> index = CostTableIndex::Make(t, "pass");
    ASSERT_FALSE(index.ok());
    EXPECT_NE(index.status().message().find("samples[0].pass"), std::string::npos);
  }
  {  // Another model.
    pb::CostTable t = good;
    t.mutable_model()->set_hidden_size(128);
    Status st = CheckCostTableModel(t, s.model(), "other.textproto", 1);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("model.hidden_size"), std::string::npos) << st.message();
    EXPECT_TRUE(CheckCostTableModel(good, s.model(), "same", 1).ok());
  }
  {  // Another microbatch size (a table without one was measured at 1).
    Status st = CheckCostTableModel(good, s.model(), "b1.textproto", 2);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("microbatch_size 1"), std::string::npos) << st.message();
    pb::CostTable t = good;
    t.set_microbatch_size(2);
    EXPECT_TRUE(CheckCostTableModel(t, s.model(), "b2", 2).ok());
  }
}

// One table per stage: stage 0's blocks take x = 1 forward and 2 backward,
// stage 1's twice that. 1F1B with P = 2, M = 1 (two blocks per stage, free
// embedding, head and link): F on stage 0 (2), F on stage 1 (4), B on stage
// 1 (8), B on stage 0 (4): 18.
// A table measured at TP 2 replayed at TP 2 and DP 2: the layers' measured
// times, plus each layer's TP all-reduces and the DP gradient all-reduce from
// the cluster's links (the cost model's); a table at TP 1 is refused there.
TEST(Replay, AddsTensorAndDataParallelCommunicationFromTheCluster) {
  pb::Scenario s = TinyScenario(1, 1, 64);
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  s.mutable_parallel()->set_tensor_size(2);
  s.mutable_parallel()->set_data_size(2);
  pb::CostTable t = KnownCosts(s.model(), 64, 1e-3);
  t.set_tensor_size(2);
  Result<CostTableIndex> index = CostTableIndex::Make(t, "tp2");
  ASSERT_TRUE(index.ok()) << index.status().message();
  Result<Simulation> sim = Simulate(MustResolve(s), Stateflow(1), {.costs = &*index});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  const models::CostModel& cm = sim->config.placement->cost_model;
  double comm = 0;
  for (int l = 0; l < cm.num_layers(); ++l) {
    comm += cm.TensorParallelForwardCommTime(l, 64) + cm.TensorParallelBackwardCommTime(l, 64);
  }
  const double sync = cm.DataParallelSyncTime(0, cm.num_layers());
  ASSERT_GT(comm, 0);
  ASSERT_GT(sync, 0);
  // P = M = N = 1: every action in a row, then the all-reduce (no optimizer
  // time in the table).
  EXPECT_NEAR(sim->report.step_time_s(), 4 * 3e-3 + comm + sync, 1e-12);

  t.set_tensor_size(0);  // measured at TP 1
  Result<CostTableIndex> tp1 = CostTableIndex::Make(t, "tp1.textproto");
  ASSERT_TRUE(tp1.ok());
  Result<Simulation> refused = Simulate(MustResolve(s), Stateflow(1), {.costs = &*tp1});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tp1.textproto: measured at TP 1, the configuration's TP is 2"),
            std::string::npos) << refused.status().message();
}

TEST(Replay, EachStageItsOwnTable) {
  const pb::Scenario s = TinyScenario(2, 1, 64);
  Result<CostTableIndex> slow = CostTableIndex::Make(KnownCosts(s.model(), 64, 2.0), "slow");
  Result<CostTableIndex> fast = CostTableIndex::Make(KnownCosts(s.model(), 64, 1.0), "fast");
  ASSERT_TRUE(slow.ok() && fast.ok());
  std::vector<const CostTableIndex*> per_stage = {&*fast, &*slow};
  Result<Simulation> sim = Simulate(MustResolve(s), Stateflow(1), {.stage_costs = &per_stage});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_NEAR(sim->report.step_time_s(), 18.0, 1e-12);
  EXPECT_NEAR(sim->report.stages(0).busy_s(), 6.0, 1e-12);
  EXPECT_NEAR(sim->report.stages(1).busy_s(), 12.0, 1e-12);
  per_stage.push_back(&*fast);
  sim = Simulate(MustResolve(s), Stateflow(1), {.stage_costs = &per_stage});
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("3 cost tables for 2 stages"), std::string::npos)
      << sim.status().message();
}

// A run's own action times replace the table's: 1F1B, P = 2, M = 2 with
// stage 1 twice as slow as stage 0 (forward 1 and 2, backward 2 and 4) and
// an optimizer step of 0.5 on each stage: the critical path is F0 on stage 0
// (1), then stage 1's F0 B0 F1 B1 (2 + 4 + 2 + 4), then B1 on stage 0 (2),
// then the optimizer (0.5): 15.5, whatever the table says.
TEST(Replay, MeasuredActionTimesReplaceTheTable) {
  const pb::Scenario s = TinyScenario(2, 2, 64);
  Result<CostTableIndex> index = CostTableIndex::Make(KnownCosts(s.model(), 64, 7.0), "known");
  ASSERT_TRUE(index.ok()) << index.status().message();
  MeasuredDurations measured;
  measured.optimizer_s = {0.5, 0.5};
  for (int r = 0; r < 2; ++r) {
    for (int a = 0; a < 2; ++a) {
      measured.action_s[{r, schedule::Pass::kForward, a, 0}] = 1.0 + r;
      measured.action_s[{r, schedule::Pass::kBackward, a, 0}] = 2.0 * (1 + r);
    }
  }
  Result<Simulation> sim =
      Simulate(MustResolve(s), Stateflow(1), {.costs = &*index, .durations = &measured});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  EXPECT_EQ(sim->report.cost_model(), "measured-run");
  EXPECT_NEAR(sim->report.step_time_s(), 15.5, 1e-12);
  EXPECT_NEAR(sim->report.stages(1).busy_s(), 12.0, 1e-12);

  // An action the run did not time is named.
  measured.action_s.erase({1, schedule::Pass::kBackward, 1, 0});
  sim = Simulate(MustResolve(s), Stateflow(1), {.costs = &*index, .durations = &measured});
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("of stage 1"), std::string::npos)
      << sim.status().message();
  measured.optimizer_s = {0.5};
  sim = Simulate(MustResolve(s), Stateflow(1), {.costs = &*index, .durations = &measured});
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("optimizer"), std::string::npos);
}

}  // namespace
}  // namespace stateflow::sim

// The step's terms (sim/explain.h, `simulate --explain`): each stage's terms
// add up to the busy time the engine ran; busy, sync, optimizer and idle add
// up to the step; the stages' sums equal the per-kind sums of one microbatch
// times M (two aggregations of the same terms, one over the plan's actions,
// one over the partition); the state transition's rows agree with the
// passes' terms; times that are not the analytic model's are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/model.h"
#include "sim/explain.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {
namespace {

using ::stateflow::testing::MustResolve;

struct Case {
  const char* model;
  const char* policy;
  int chunks;
  const char* recompute;
  int tp, dp, compute_units;
  bool overlap;
};

pb::Scenario ScenarioOf(const Case& c) {
  pb::Scenario s;
  s.set_name("explain-test");
  *s.mutable_model() = *models::ModelPreset(c.model);
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  s.mutable_cluster()->mutable_device()->set_compute_units(c.compute_units);
  s.mutable_parallel()->set_pipeline_size(4);
  s.mutable_parallel()->set_tensor_size(c.tp);
  s.mutable_parallel()->set_data_size(c.dp);
  s.mutable_parallel()->set_microbatches(6);
  s.set_seq_len(32768);
  pb::ScheduleSpec* spec = s.mutable_schedule();
  spec->set_policy(c.policy);
  spec->set_chunks(c.chunks);
  spec->set_alpha(c.chunks > 1 ? 0.5 : 0);
  spec->set_recompute(c.recompute);
  spec->set_st_overlap(c.overlap);
  return s;
}

double Sum(const pb::TimeTerms& t) {
  return t.compute_s() + t.memory_s() + t.st_exposed_s() + t.tp_comm_s();
}

TEST(Explain, TermsAddUpToTheEngineAndToThePerKindSums) {
  const Case cases[] = {
      {"gdn-15b", "stateflow", 4, "full", 4, 1, 108, true},
      {"gdn-15b", "stateflow", 4, "none", 4, 1, 108, false},
      {"gdn-hybrid-15b", "stateflow", 8, "full", 4, 2, 108, true},
      {"mamba3-hybrid-15b", "1f1b", 1, "full", 1, 1, 0, false},
      {"mamba3-15b", "gpipe", 2, "none", 8, 4, 132, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + " " + c.policy + " N " + std::to_string(c.chunks) +
                 " recompute " + c.recompute + " TP " + std::to_string(c.tp) + " DP " +
                 std::to_string(c.dp) + " units " + std::to_string(c.compute_units));
    const scenario::ResolvedScenario r = MustResolve(ScenarioOf(c));
    Result<Simulation> sim = Simulate(r, r.proto().schedule());
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    Result<pb::Explanation> e = Explain(*sim);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const double step = sim->engine.step_time_s;
    ASSERT_EQ(e->stages_size(), 4);

    double stages_total = 0, stages_recompute = 0, stages_st = 0, stages_tp = 0;
    for (const pb::StageTerms& s : e->stages()) {
      const StageResult& engine = sim->engine.stages[s.stage()];
      EXPECT_NEAR(s.busy().total_s(), engine.busy_s, 1e-9 * engine.busy_s);
      EXPECT_NEAR(Sum(s.busy()), s.busy().total_s(), 1e-9 * s.busy().total_s());
      EXPECT_GE(s.idle_s(), 0.0);
      EXPECT_NEAR(s.busy().total_s() + s.sync_s() + s.optimizer_s() + s.idle_s(), step,
                  1e-9 * step);
      EXPECT_EQ(s.sync_s() > 0, c.dp > 1);
      stages_total += s.busy().total_s();
      stages_recompute += s.busy().recompute_s();
      stages_st += s.busy().st_exposed_s();
      stages_tp += s.busy().tp_comm_s();
    }
    // The same terms aggregated over the partition: M microbatches of one
    // layer of each kind times its layer count.
    double kinds_total = 0, kinds_recompute = 0, kinds_st = 0, kinds_tp = 0;
    int layers = 0;
    for (const pb::LayerKindTerms& k : e->kinds()) {
      layers += static_cast<int>(k.layers());
      const double m = 6.0 * k.layers();
      kinds_total += m * (k.forward().total_s() + k.backward().total_s());
      kinds_recompute += m * k.backward().recompute_s();
      kinds_st += m * (k.forward().st_exposed_s() + k.backward().st_exposed_s());
      kinds_tp += m * (k.forward().tp_comm_s() + k.backward().tp_comm_s());
      EXPECT_EQ(k.forward().recompute_s(), 0.0);
      EXPECT_EQ(k.backward().recompute_s() > 0,
                std::string(c.recompute) == "full" && k.kind() != "embedding" &&
                    k.kind() != "head");
      if (k.kind() != "recurrence" || c.compute_units == 0) {
        EXPECT_FALSE(k.has_st_forward());
        EXPECT_FALSE(k.has_st_backward());
        continue;
      }
      // The ST rows are the passes' ST terms; a recomputed backward's also
      // holds its forward replay's.
      const pb::StateTransitionTerms& f = k.st_forward();
      const pb::StateTransitionTerms& b = k.st_backward();
      EXPECT_NEAR(f.exposed_s(), k.forward().st_exposed_s(), 1e-15);
      EXPECT_NEAR(f.hidden_s(), k.forward().st_hidden_s(), 1e-15);
      const double replays = std::string(c.recompute) == "full" ? 1 : 0;
      EXPECT_NEAR(b.exposed_s() + replays * f.exposed_s(), k.backward().st_exposed_s(),
                  1e-12 * k.backward().total_s());
      for (const pb::StateTransitionTerms& t : {f, b}) {
        EXPECT_NEAR(t.exposed_without_overlap_s() - t.hidden_s(), t.exposed_s(),
                    1e-12 * t.exposed_without_overlap_s());
        EXPECT_EQ(t.hidden_s() > 0, c.overlap && e->st_coverage() < 1);
        EXPECT_GT(t.pre_s(), 0.0);
        EXPECT_GT(t.st_s(), 0.0);
      }
      EXPECT_GT(e->st_tiles(), 0.0);
      EXPECT_DOUBLE_EQ(e->st_coverage(), std::min(1.0, e->st_tiles() / c.compute_units));
    }
    EXPECT_EQ(layers, sim->config.placement->cost_model.num_layers());
    EXPECT_NEAR(stages_total, kinds_total, 1e-9 * kinds_total);
    EXPECT_NEAR(stages_recompute, kinds_recompute, 1e-9 * kinds_total);
    EXPECT_NEAR(stages_st, kinds_st, 1e-9 * kinds_total);
    EXPECT_NEAR(stages_tp, kinds_tp, 1e-9 * kinds_total);
    EXPECT_EQ(stages_tp > 0, c.tp > 1);
  }
}

// Split-and-overlap moves time from the ST's exposed term to its hidden
// one and changes nothing else: the kernel and TP terms of every stage are
// the same with overlap on and off, and on + hidden = off.
TEST(Explain, OverlapMovesExposedTimeToHidden) {
  Case c{"gdn-15b", "stateflow", 4, "full", 4, 1, 108, false};
  const scenario::ResolvedScenario off = MustResolve(ScenarioOf(c));
  c.overlap = true;
  const scenario::ResolvedScenario on = MustResolve(ScenarioOf(c));
  Result<Simulation> a = Simulate(off, off.proto().schedule());
  Result<Simulation> b = Simulate(on, on.proto().schedule());
  ASSERT_TRUE(a.ok() && b.ok());
  Result<pb::Explanation> ea = Explain(*a), eb = Explain(*b);
  ASSERT_TRUE(ea.ok() && eb.ok());
  for (int r = 0; r < 4; ++r) {
    const pb::TimeTerms& x = ea->stages(r).busy();
    const pb::TimeTerms& y = eb->stages(r).busy();
    EXPECT_EQ(x.compute_s(), y.compute_s());
    EXPECT_EQ(x.memory_s(), y.memory_s());
    EXPECT_EQ(x.tp_comm_s(), y.tp_comm_s());
    EXPECT_EQ(x.st_hidden_s(), 0.0);
    EXPECT_GT(y.st_hidden_s(), 0.0);
    EXPECT_NEAR(y.st_exposed_s() + y.st_hidden_s(), x.st_exposed_s(), 1e-12 * x.total_s());
  }
  EXPECT_LT(b->engine.step_time_s, a->engine.step_time_s);
}

// DeviceSpec.action_overhead_s: every F and B of a stage takes that much
// longer, the explanation's stages carry it as a term of its own, and a
// one-stage step (no bubble to absorb it) grows by exactly 2 M N of it.
TEST(Explain, PerActionOverheadIsOneTermPerAction) {
  for (int P : {1, 4}) {
    pb::Scenario s = ScenarioOf({"gdn-3b", "stateflow", 4, "none", 1, 1, 0, false});
    s.mutable_parallel()->set_pipeline_size(P);
    const scenario::ResolvedScenario zero = MustResolve(s);
    s.mutable_cluster()->mutable_device()->set_action_overhead_s(250e-6);
    const scenario::ResolvedScenario with = MustResolve(s);
    Result<Simulation> a = Simulate(zero, zero.proto().schedule());
    Result<Simulation> b = Simulate(with, with.proto().schedule());
    ASSERT_TRUE(a.ok() && b.ok());
    const double actions_per_stage = 2.0 * 6 * 4;  // F and B of M = 6 microbatches, N = 4
    for (int r = 0; r < P; ++r) {
      EXPECT_NEAR(b->engine.stages[r].busy_s - a->engine.stages[r].busy_s,
                  actions_per_stage * 250e-6, 1e-12);
    }
    if (P == 1) {
      EXPECT_NEAR(b->engine.step_time_s - a->engine.step_time_s, actions_per_stage * 250e-6,
                  1e-12);
    } else {
      EXPECT_GT(b->engine.step_time_s, a->engine.step_time_s + actions_per_stage * 250e-6);
    }
    Result<pb::Explanation> e = Explain(*b);  // its own check: terms add up to the engine's
    ASSERT_TRUE(e.ok()) << e.status().message();
    for (const pb::StageTerms& stage : e->stages()) {
      EXPECT_NEAR(stage.busy().overhead_s(), actions_per_stage * 250e-6, 1e-12);
    }
    for (const pb::LayerKindTerms& k : e->kinds()) EXPECT_EQ(k.forward().overhead_s(), 0.0);
  }
  pb::Scenario bad = ScenarioOf({"gdn-3b", "stateflow", 4, "none", 1, 1, 0, false});
  bad.mutable_cluster()->mutable_device()->set_action_overhead_s(-1e-6);
  Result<scenario::ResolvedScenario> refused = scenario::Resolve(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cluster.device.action_overhead_s must be in [0, 1]"),
            std::string::npos) << refused.status().message();
}

TEST(Explain, RefusesTimesThatAreNotTheAnalyticModels) {
  pb::Scenario s = ScenarioOf({"gdn-15b", "stateflow", 4, "full", 4, 1, 0, false});
  s.set_cost_model("uniform");
  const scenario::ResolvedScenario r = MustResolve(s);
  Result<Simulation> sim = Simulate(r, r.proto().schedule());
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  Result<pb::Explanation> e = Explain(*sim);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("'uniform'"), std::string::npos) << e.status().message();
  EXPECT_EQ(e.status().message().find('\n'), std::string::npos);
}

}  // namespace
}  // namespace stateflow::sim

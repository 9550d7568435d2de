// Replaying a measured CostTable: the idealised formulas come back exactly
// from a table with one known cost per chunk; interpolation is linear in
// tokens; a table that does not fit the scenario is refused with a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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
// times, plus each layer's TP all-reduces from the cluster's intra-node link
// (the cost model's) and the DP gradient all-reduce as a ring on the table's
// measured link; a table at TP 1 is refused there.
// The TP sums and the DP all-reduce of a replayed table are charged on the
// links the table measured: the sums on tensor_link (the sums timed), else
// on link (the ping-pong); the DP ring on link. Not the cluster's NVLink.
TEST(Replay, AddsTensorAndDataParallelCommunicationOnTheTablesLinks) {
  pb::Scenario s = TinyScenario(1, 1, 64);
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  s.mutable_parallel()->set_tensor_size(2);
  s.mutable_parallel()->set_data_size(2);
  pb::CostTable t = KnownCosts(s.model(), 64, 1e-3);
  t.set_tensor_size(2);
  t.mutable_link()->set_latency_s(1e-5);  // measured; P = 1 sends nothing
  t.mutable_link()->set_bandwidth_bytes_per_s(1e9);
  Result<CostTableIndex> index = CostTableIndex::Make(t, "tp2");
  ASSERT_TRUE(index.ok()) << index.status().message();
  Result<Simulation> sim = Simulate(MustResolve(s), Stateflow(1), {.costs = &*index});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  const models::CostModel& cm = sim->config.placement->cost_model;
  const auto comm_on = [&](const pb::LinkSpec& link) {
    double comm = 0;
    for (int l = 0; l < cm.num_layers(); ++l) {
      comm += cm.TensorParallelForwardCommTime(l, 64, &link) +
              cm.TensorParallelBackwardCommTime(l, 64, &link);
    }
    return comm;
  };
  const double comm = comm_on(t.link());
  // The DP all-reduce: a ring on the link the table measured, as the
  // pipeline's transfers (not the cluster's NVLink).
  const double sync = cm.DataParallelSyncTime(0, cm.num_layers(), &t.link());
  ASSERT_GT(comm, 0);
  ASSERT_GT(sync, 0);
  ASSERT_NE(sync, cm.DataParallelSyncTime(0, cm.num_layers()));
  ASSERT_NE(comm, comm_on(cm.cluster().intra_node_link()));
  // P = M = N = 1: every action in a row, then the all-reduce (no optimizer
  // time in the table).
  EXPECT_NEAR(sim->report.step_time_s(), 4 * 3e-3 + comm + sync, 1e-12);

  // With the sums timed: on tensor_link.
  t.mutable_tensor_link()->set_latency_s(3e-5);
  t.mutable_tensor_link()->set_bandwidth_bytes_per_s(2e8);
  Result<CostTableIndex> timed = CostTableIndex::Make(t, "tp2-timed");
  ASSERT_TRUE(timed.ok()) << timed.status().message();
  Result<Simulation> with_sums = Simulate(MustResolve(s), Stateflow(1), {.costs = &*timed});
  ASSERT_TRUE(with_sums.ok()) << with_sums.status().message();
  EXPECT_NEAR(with_sums->report.step_time_s(), 4 * 3e-3 + comm_on(t.tensor_link()) + sync, 1e-12);
  t.mutable_tensor_link()->set_bandwidth_bytes_per_s(0);
  Result<CostTableIndex> bad = CostTableIndex::Make(t, "tp2-bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tensor_link.bandwidth_bytes_per_s must be > 0"),
            std::string::npos)
      << bad.status().message();
  t.clear_tensor_link();

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

namespace stateflow::sim {
namespace {

// ---- the recurrence core's measured phases and schedule.st_overlap ----------

// Split-and-overlap of sequentially measured phases, window by window (the
// model the replay must reproduce, written out here on its own): two equal
// segments, Pre1 -> (ST1 || Pre2) -> (ST2 || Out1) -> Out2, where a window
// with ST time x at coverage u beside parallel work w takes max(x, w + u x).
double OverlappedCore(double pre, double st, double out, double u) {
  return pre / 2 + std::max(st / 2, pre / 2 + u * st / 2) +
         std::max(st / 2, out / 2 + u * st / 2) + out / 2;
}

struct PhaseTimes {
  double pre, st, out;
  double Sequential() const { return pre + st + out; }
};

// gdn-tiny's 4 blocks on one stage, N = 1, free embedding, head and link: a
// step is 4 (forward + backward) of one block. Each block's passes are the
// sequential phases' sums (median_s), the phases given; the table measured
// with st_overlap `table_overlap`.
pb::CostTable PhasedCosts(const pb::ModelSpec& model, PhaseTimes f, PhaseTimes b,
                          bool table_overlap, double u) {
  pb::CostTable t = KnownCosts(model, 64, 0);
  for (pb::CostSample& s : *t.mutable_samples()) {
    if (s.layer_kind() != "recurrence") continue;
    const PhaseTimes& p = s.pass() == "forward" ? f : b;
    s.set_median_s(table_overlap ? OverlappedCore(p.pre, p.st, p.out, u) : p.Sequential());
    s.set_pre_s(p.pre);
    s.set_st_s(p.st);
    s.set_out_s(p.out);
  }
  t.set_st_overlap(table_overlap);
  return t;
}

// u = tiles / compute_units: gdn-tiny's 2 heads x ceil(32 / 64) value tiles
// over 4 units: 0.5.
pb::Scenario PhasedScenario(std::uint32_t compute_units) {
  pb::Scenario s = TinyScenario(1, 1, 64);
  s.mutable_cluster()->mutable_device()->set_compute_units(compute_units);
  return s;
}

Result<double> ReplayedStep(const pb::Scenario& s, const pb::CostTable& t, bool overlap,
                            const std::string& source = "phased.textproto") {
  SF_ASSIGN_OR_RETURN(CostTableIndex index, CostTableIndex::Make(t, source));
  pb::ScheduleSpec spec = Stateflow(1);
  spec.set_st_overlap(overlap);
  SF_ASSIGN_OR_RETURN(Simulation sim, Simulate(MustResolve(s), spec, {.costs = &index}));
  return sim.report.step_time_s();
}

// An ST-bound chunk (the ST's idle share exceeds Pre and Out: overlap hides
// them) and a Pre-bound one (Pre and Out exceed it: overlap hides the idle
// share), predicted in both directions from the phases, against the window
// model; equal modes leave the measured time as it is.
TEST(ReplayPhases, OverlapFromMeasuredPhasesMatchesTheWindowModel) {
  const double u = 0.5;
  const pb::Scenario s = PhasedScenario(4);
  struct Case {
    const char* name;
    PhaseTimes f, b;
  };
  const Case cases[] = {
      {"ST-bound", {0.1, 1.0, 0.2}, {0.3, 1.5, 0.1}},
      {"Pre-bound", {2.0, 1.0, 2.0}, {3.0, 1.0, 1.5}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const double seq = 4 * (c.f.Sequential() + c.b.Sequential());
    const double ovl = 4 * (OverlappedCore(c.f.pre, c.f.st, c.f.out, u) +
                            OverlappedCore(c.b.pre, c.b.st, c.b.out, u));
    EXPECT_LT(ovl, seq);
    for (bool table_overlap : {false, true}) {
      const pb::CostTable t = PhasedCosts(s.model(), c.f, c.b, table_overlap, u);
      Result<double> off = ReplayedStep(s, t, false);
      Result<double> on = ReplayedStep(s, t, true);
      ASSERT_TRUE(off.ok()) << off.status().message();
      ASSERT_TRUE(on.ok()) << on.status().message();
      EXPECT_NEAR(*off, seq, 1e-12) << "table overlap " << table_overlap;
      EXPECT_NEAR(*on, ovl, 1e-12) << "table overlap " << table_overlap;
    }
  }
  // The saving in closed form for the ST-bound forward: X = (1 - u) ST = 0.5,
  // min(0.1, X) / 2 + min(0.2, X) / 2 = 0.15; Pre-bound: 0.25 + 0.25.
  EXPECT_NEAR(models::MeasuredStOverlapSaving(0.1, 1.0, 0.2, u), 0.15, 1e-15);
  EXPECT_NEAR(models::MeasuredStOverlapSaving(2.0, 1.0, 2.0, u), 0.5, 1e-15);
}

// Without compute_units the ST covers the device (u = 1): nothing idle beside
// it, so overlap predicts the sequential time; a recomputed backward also
// saves on the forward it re-runs.
TEST(ReplayPhases, FullCoverageHidesNothingAndRecomputeSavesTwice) {
  const PhaseTimes f{0.1, 1.0, 0.2}, b{0.3, 1.5, 0.1};
  const pb::Scenario none = PhasedScenario(0);
  const pb::CostTable t = PhasedCosts(none.model(), f, b, false, 1.0);
  Result<double> on = ReplayedStep(none, t, true);
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_NEAR(*on, 4 * (f.Sequential() + b.Sequential()), 1e-12);

  const double u = 0.5;
  const pb::Scenario s = PhasedScenario(4);
  pb::CostTable full = PhasedCosts(s.model(), f, b, false, u);
  for (pb::CostSample& x : *full.mutable_samples()) {
    x.set_recompute("full");
    // A recomputed block's backward re-runs its forward.
    if (x.layer_kind() == "recurrence" && x.pass() == "backward") {
      x.set_median_s(x.median_s() + f.Sequential());
    }
  }
  ASSERT_TRUE(CostTableIndex::Make(full, "full").ok());
  pb::ScheduleSpec spec = Stateflow(1);
  spec.set_recompute("full");
  spec.set_st_overlap(true);
  Result<CostTableIndex> index = CostTableIndex::Make(full, "full");
  Result<Simulation> sim = Simulate(MustResolve(s), spec, {.costs = &*index});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  const double fo = OverlappedCore(f.pre, f.st, f.out, u);
  EXPECT_NEAR(sim->report.step_time_s(), 4 * (fo + fo + OverlappedCore(b.pre, b.st, b.out, u)),
              1e-12);
}

// A table without phases (written before them) replays as before when the
// modes agree, and is refused in one line naming it when they differ.
TEST(ReplayPhases, OldTablesReplayAsBeforeAndCannotPredictTheOtherMode) {
  const pb::Scenario s = PhasedScenario(4);
  const pb::CostTable old = KnownCosts(s.model(), 64, 1.0);
  Result<double> off = ReplayedStep(s, old, false, "old.textproto");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_NEAR(*off, 4 * 3.0, 1e-12);
  Result<double> on = ReplayedStep(s, old, true, "old.textproto");
  ASSERT_FALSE(on.ok());
  const std::string& m = on.status().message();
  EXPECT_NE(m.find("old.textproto"), std::string::npos) << m;
  EXPECT_NE(m.find("st_overlap off"), std::string::npos) << m;
  EXPECT_NE(m.find("st_overlap on"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  // The same table recorded as overlapped: equal modes replay it as measured.
  pb::CostTable overlapped = old;
  overlapped.set_st_overlap(true);
  Result<double> same = ReplayedStep(s, overlapped, true, "old.textproto");
  ASSERT_TRUE(same.ok()) << same.status().message();
  EXPECT_NEAR(*same, 4 * 3.0, 1e-12);
}

// Phases are checked: not negative or non-finite, only on recurrence
// samples; the error names the file and the sample.
TEST(ReplayPhases, BadPhasesAreRefusedNamingTheSample) {
  const pb::Scenario s = PhasedScenario(4);
  const pb::CostTable good = PhasedCosts(s.model(), {1, 1, 1}, {1, 1, 1}, false, 0.5);
  ASSERT_TRUE(CostTableIndex::Make(good, "t.textproto").ok());
  int recurrence = -1, head = -1;
  for (int k = 0; k < good.samples_size(); ++k) {
    if (good.samples(k).layer_kind() == "recurrence" && recurrence < 0) recurrence = k;
    if (good.samples(k).layer_kind() == "head" && head < 0) head = k;
  }
  pb::CostTable negative = good;
  negative.mutable_samples(recurrence)->set_st_s(-1);
  Result<CostTableIndex> n = CostTableIndex::Make(negative, "t.textproto");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("t.textproto"), std::string::npos);
  EXPECT_NE(n.status().message().find("samples[" + std::to_string(recurrence) + "].st_s"),
            std::string::npos)
      << n.status().message();
  pb::CostTable misplaced = good;
  misplaced.mutable_samples(head)->set_pre_s(0.5);
  Result<CostTableIndex> m = CostTableIndex::Make(misplaced, "t.textproto");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("samples[" + std::to_string(head) + "].pre_s"),
            std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("head sample"), std::string::npos);
  pb::CostTable nan = good;
  nan.mutable_samples(recurrence)->set_out_s(std::nan(""));
  EXPECT_FALSE(CostTableIndex::Make(nan, "t.textproto").ok());
}

}  // namespace
}  // namespace stateflow::sim

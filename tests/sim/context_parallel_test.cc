// Context parallelism in the planner (issue 26, item 4): each chunk's
// tokens split over CP devices, recurrent boundary states passed along a
// chain, attention's K/V in a ring (models/cost_model.h,
// ContextParallelCommTime; docs/cost-model.md, "Context parallelism").
// Against the closed form in the idealised case (a flat efficiency, one
// stage, one microbatch, one chunk), the memory of CP at T against no CP at
// T / CP, and the one-line errors.
#include <gtest/gtest.h>

#include "backend/train/train_setup.h"
#include "models/cost_model.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {
namespace {

using ::stateflow::testing::MustResolve;

constexpr double kLatencyS = 2e-6;
constexpr double kBandwidth = 5e9;

pb::Scenario CpScenario(const std::string& preset, int cp, std::int64_t seq_len, int chunks = 1,
                        int stages = 1, int microbatches = 1) {
  pb::Scenario s;
  s.set_name("cp-test");
  *s.mutable_model() = *models::ModelPreset(preset);
  pb::ClusterSpec cluster = *models::ClusterPreset("cpu");
  cluster.mutable_device()->clear_efficiency();  // flat: peak at every size
  for (pb::LinkSpec* link : {cluster.mutable_intra_node_link(), cluster.mutable_inter_node_link(),
                             cluster.mutable_pipeline_link()}) {
    link->set_latency_s(kLatencyS);
    link->set_bandwidth_bytes_per_s(kBandwidth);
  }
  cluster.set_devices_per_node(8);
  *s.mutable_cluster() = cluster;
  pb::ParallelSpec* par = s.mutable_parallel();
  par->set_pipeline_size(stages);
  par->set_microbatches(microbatches);
  par->set_context_size(cp);
  s.set_seq_len(seq_len);
  pb::ScheduleSpec* sched = s.mutable_schedule();
  sched->set_policy(chunks == 1 ? "1f1b" : "stateflow");
  sched->set_chunks(chunks);
  sched->set_granularity(1);
  sched->set_recompute("none");
  return s;
}

Simulation Sim(const pb::Scenario& s) {
  Result<Simulation> sim = Simulate(MustResolve(s), s.schedule());
  EXPECT_TRUE(sim.ok()) << sim.status().message();
  return std::move(sim).value();
}

// One stage, one microbatch, one chunk: the step is every layer's forward
// and backward on one device's T / CP tokens, plus per recurrence layer its
// extra FLOPs (the zero-state contribution and the transition) and a ring
// all-gather of CP - 1 steps each way, plus the gradient all-reduce over the
// CP devices.
TEST(ContextParallel, ReproducesTheClosedFormInTheIdealisedCase) {
  const std::int64_t T = 1024;
  for (int cp : {2, 4, 8}) {
    const Simulation sim = Sim(CpScenario("gdn-tiny", cp, T));
    const models::CostModel& cm = sim.config.placement->cost_model;
    // The same model without CP, on T / CP tokens.
    const Simulation local = Sim(CpScenario("gdn-tiny", 1, T / cp));
    const models::CostModel& one = local.config.placement->cost_model;
    double expected = 0, grads = 0;
    for (int l = 0; l < cm.num_layers(); ++l) {
      expected += one.ForwardTime(l, 0, T / cp) + one.BackwardTime(l, 0, T / cp);
      grads += cm.GradientBytes(l);
      if (cm.layers()[l] != models::LayerKind::kRecurrence) continue;
      const double peak = cm.cluster().device().peak_flops();
      expected += (cm.ContextParallelExtraFlops(l, T / cp, false) +
                   cm.ContextParallelExtraFlops(l, T / cp, true)) / peak;
      expected += 2 * (cp - 1) * (kLatencyS + cm.ContextParallelStateBytes(l) / kBandwidth);
      // The all-gathered bytes: the state and its conv tail, and the delta
      // rule's d_k x d_k fp32 transition a head.
      const double k = cm.model().head_dim_k();
      EXPECT_EQ(cm.ContextParallelStateBytes(l),
                cm.BoundaryStateBytes(l) + cm.model().num_heads() * k * k * 4);
      EXPECT_GT(cm.ContextParallelExtraFlops(l, T / cp, false), 0);
    }
    expected += models::RingAllReduceTime(grads, cp, cm.cluster().intra_node_link());
    EXPECT_NEAR(sim.report.step_time_s(), expected, 1e-12 * expected) << "CP " << cp;
    EXPECT_LT(sim.report.step_time_s(), Sim(CpScenario("gdn-tiny", 1, T)).report.step_time_s());
  }
}

// Per device, CP at T holds what no CP holds at T / CP: every activation,
// workspace and message of a chunk, and the K/V buffer, at the device's
// tokens; weights, gradients and optimizer state whole.
TEST(ContextParallel, EachDeviceHoldsItsShareOfEveryChunk) {
  for (const char* preset : {"gdn-tiny", "gdn-hybrid-tiny", "mamba3-hybrid-tiny"}) {
    for (int chunks : {1, 2}) {
      const Simulation cp = Sim(CpScenario(preset, 4, 1024, chunks, 2, 3));
      const Simulation local = Sim(CpScenario(preset, 1, 256, chunks, 2, 3));
      ASSERT_EQ(cp.report.stages_size(), local.report.stages_size());
      for (int r = 0; r < cp.report.stages_size(); ++r) {
        EXPECT_EQ(cp.report.stages(r).peak_memory_bytes(),
                  local.report.stages(r).peak_memory_bytes())
            << preset << " N=" << chunks << " stage " << r;
      }
    }
  }
}

// Attention's ring: CP - 1 steps of the K/V of (c + s) / CP tokens (the
// backward's also their gradient), hidden behind the pass's compute where
// it fits; contiguous shards leave the last device the most causal work.
TEST(ContextParallel, AttentionRingAndItsBalance) {
  pb::Scenario s = CpScenario("gdn-hybrid-tiny", 4, 4096);
  const Simulation zigzag_sim = Sim(s);
  const models::CostModel& zigzag = zigzag_sim.config.placement->cost_model;
  s.mutable_parallel()->set_context_contiguous(true);
  const Simulation contiguous_sim = Sim(s);
  const models::CostModel& contiguous = contiguous_sim.config.placement->cost_model;
  int attention = -1;
  for (int l = 0; l < zigzag.num_layers(); ++l) {
    if (zigzag.layers()[l] == models::LayerKind::kAttention) attention = l;
  }
  ASSERT_GE(attention, 0);
  const double kv = zigzag.KvBytesPerToken(attention), dkv = zigzag.KvGradBytesPerToken(attention);
  // A chunk at c = 1024 of s = 2048: the ring carries (1024 + 2048) / 4 tokens a step.
  const double fwd_ring = 3 * (kLatencyS + 768 * kv / kBandwidth);
  const double bwd_ring = 3 * (kLatencyS + 768 * (kv + dkv) / kBandwidth);
  EXPECT_DOUBLE_EQ(zigzag.ContextParallelCommTime(attention, 1024, 2048, false, 0), fwd_ring);
  EXPECT_DOUBLE_EQ(zigzag.ContextParallelCommTime(attention, 1024, 2048, true, 0), bwd_ring);
  EXPECT_DOUBLE_EQ(zigzag.ContextParallelCommTime(attention, 1024, 2048, false, fwd_ring / 4),
                   fwd_ring * 3 / 4);
  EXPECT_EQ(zigzag.ContextParallelCommTime(attention, 1024, 2048, false, 1.0), 0.0);
  EXPECT_GT(contiguous.ForwardTime(attention, 0, 4096), zigzag.ForwardTime(attention, 0, 4096));
  // Other layers' terms do not depend on the split.
  EXPECT_EQ(contiguous.ForwardTime(1, 0, 4096), zigzag.ForwardTime(1, 0, 4096));
}

// Mamba-3's transition over a span is a decay: one value a head.
TEST(ContextParallel, Mamba3AllGathersItsStateAndADecayPerHead) {
  const Simulation sim = Sim(CpScenario("mamba3-tiny", 2, 256));
  const models::CostModel& cm = sim.config.placement->cost_model;
  for (int l = 0; l < cm.num_layers(); ++l) {
    if (cm.layers()[l] != models::LayerKind::kRecurrence) continue;
    EXPECT_EQ(cm.ContextParallelStateBytes(l),
              cm.BoundaryStateBytes(l) + cm.model().num_heads() * 4.0);
  }
}

TEST(ContextParallel, BadConfigurationsAreOneLineNamingTheField) {
  // Chunks shorter than CP: a device without tokens.
  const pb::Scenario short_chunks = CpScenario("gdn-tiny", 8, 64, 16);
  Result<Simulation> sim = Simulate(MustResolve(short_chunks), short_chunks.schedule());
  ASSERT_FALSE(sim.ok());
  EXPECT_EQ(sim.status().message(),
            "parallel.context_size 8 exceeds chunk 0's 4 tokens (schedule.chunks 16): every CP "
            "device needs a token of every chunk");
  // The backend does not run it.
  const pb::Scenario cp = CpScenario("gdn-tiny", 2, 64);
  Result<backend::TrainSetup> setup = backend::MakeTrainSetup(MustResolve(cp), nullptr);
  ASSERT_FALSE(setup.ok());
  EXPECT_NE(setup.status().message().find("parallel.context_size"), std::string::npos);
  // Out of range.
  pb::Scenario huge = cp;
  huge.mutable_parallel()->set_context_size(5000);
  Result<scenario::ResolvedScenario> resolved = scenario::Resolve(huge);
  ASSERT_FALSE(resolved.ok());
  EXPECT_NE(resolved.status().message().find("parallel.context_size"), std::string::npos);
}

}  // namespace
}  // namespace stateflow::sim

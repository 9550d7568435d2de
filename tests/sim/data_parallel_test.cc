// Data parallelism in the simulator (each stage all-reduces its gradients
// after its last action; the step ends with the slowest stage's all-reduce),
// and the prepared entry point giving the same results as Simulate.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/train/train_setup.h"
#include "models/model.h"
#include "sim/cost_source.h"
#include "sim/engine.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {

using ::stateflow::testing::MustResolve;
namespace {

pb::Scenario Scenario(int stages, int microbatches, int data_size) {
  pb::Scenario s;
  s.set_name("dp-test");
  *s.mutable_model() = *models::ModelPreset("gdn-hybrid-tiny");
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  // The link model's ring all-reduce (the measured all-reduce table of the
  // preset's kernel costs: tests/models/kernel_costs_test.cc).
  s.mutable_cluster()->clear_kernel_costs();
  s.mutable_parallel()->set_pipeline_size(stages);
  s.mutable_parallel()->set_tensor_size(1);
  s.mutable_parallel()->set_data_size(data_size);
  s.mutable_parallel()->set_microbatch_size(1);
  s.mutable_parallel()->set_microbatches(microbatches);
  s.set_seq_len(4096);
  s.set_cost_model("analytic");
  return s;
}

pb::ScheduleSpec Schedule(const std::string& policy, int chunks, double alpha) {
  pb::ScheduleSpec spec;
  spec.set_policy(policy);
  spec.set_chunks(chunks);
  spec.set_alpha(alpha);
  spec.set_granularity(128);
  spec.set_recompute("full");
  return spec;
}

TEST(DataParallel, StepEndsWithTheSlowestStagesGradientAllReduce) {
  for (int dp : {2, 4, 16}) {
    SCOPED_TRACE("DP=" + std::to_string(dp));
    const pb::Scenario one = Scenario(3, 4, 1), many = Scenario(3, 4, dp);
    Result<Simulation> a = Simulate(MustResolve(one), Schedule("stateflow", 4, 0.5));
    Result<Simulation> b = Simulate(MustResolve(many), Schedule("stateflow", 4, 0.5));
    ASSERT_TRUE(a.ok()) << a.status().message();
    ASSERT_TRUE(b.ok()) << b.status().message();
    // The link: intra-node while TP * DP fits in a node (8 per node).
    const pb::LinkSpec& link = dp <= 8 ? many.cluster().intra_node_link()
                                       : many.cluster().inter_node_link();
    // Gradient bytes per stage, from the layer list and fp32 gradients.
    const std::vector<models::LayerKind> layers = models::LayerList(many.model());
    double expected_step = 0;
    for (int r = 0; r < 3; ++r) {
      double grad_bytes = 0;
      for (int l = b->config.placement->stage_layers[r].first; l < b->config.placement->stage_layers[r].last; ++l) {
        grad_bytes += models::LayerParamCount(many.model(), layers[l]) * 4.0;
      }
      const double sync = 2.0 * (dp - 1) / dp * grad_bytes / link.bandwidth_bytes_per_s() +
                          2.0 * (dp - 1) * link.latency_s();
      EXPECT_NEAR(b->engine.stages[r].sync_s, sync, 1e-12 * (1 + sync));
      // Each replica's compute is unchanged by DP.
      EXPECT_EQ(b->engine.stages[r].end_s, a->engine.stages[r].end_s);
      expected_step = std::max(expected_step, a->engine.stages[r].end_s + sync);
    }
    EXPECT_NEAR(b->report.step_time_s(), expected_step, 1e-12 * expected_step);
    EXPECT_GT(b->report.step_time_s(), a->report.step_time_s());
    // Throughput counts every replica's tokens.
    EXPECT_NEAR(b->report.tokens_per_s(), dp * 4 * 4096 / expected_step,
                1e-9 * b->report.tokens_per_s());
    EXPECT_EQ(b->report.data_size(), static_cast<std::uint32_t>(dp));
  }
}

// parallel.overlap_grad_reduce (Megatron-Core's bucketing on pipeline rank
// 0): the first stage's buckets all-reduce during its last backward, each
// when its lowest layer's backward ends, one after another; the other
// stages keep the whole sync after their last action.
struct OverlapRun {
  Result<Simulation> sim;
  double final_start_s = 0;          // stage 0's last backward
  schedule::Action final_action;
};
OverlapRun RunOverlap(pb::Scenario s, bool overlap, std::uint64_t bucket) {
  s.mutable_parallel()->set_overlap_grad_reduce(overlap);
  s.mutable_parallel()->set_grad_bucket_size(bucket);
  OverlapRun out{Simulate(MustResolve(s), Schedule("stateflow", 4, 0.5), {.record_timeline = true}),
                 0.0, {}};
  if (out.sim.ok()) {
    for (const Slice& slice : out.sim->engine.stages[0].slices) {
      if (slice.action.pass == schedule::Pass::kBackward) {
        out.final_start_s = slice.start_s;
        out.final_action = slice.action;
      }
    }
  }
  return out;
}

TEST(DataParallel, OverlapGradReduceBucketsTheFirstStagesSyncDuringItsLastBackward) {
  constexpr int kDp = 4;
  // The paper's 3B hybrid: layers of tens of millions of parameters, whose
  // all-reduces are bandwidth-bound (a tiny model's are latency-bound: see
  // the next test).
  pb::Scenario base = Scenario(3, 4, kDp);
  *base.mutable_model() = *models::ModelPreset("gdn-hybrid-3b");
  const pb::LinkSpec& link = base.cluster().intra_node_link();
  const auto ring = [&](double bytes) {
    return 2.0 * (kDp - 1) / kDp * bytes / link.bandwidth_bytes_per_s() +
           2.0 * (kDp - 1) * link.latency_s();
  };
  const OverlapRun off = RunOverlap(base, false, 0);
  const OverlapRun per_layer = RunOverlap(base, true, 1);  // a bucket per layer
  const OverlapRun one = RunOverlap(base, true, std::uint64_t{1} << 50);  // one bucket
  ASSERT_TRUE(off.sim.ok() && per_layer.sim.ok() && one.sim.ok());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(per_layer.sim->engine.stages[r].end_s, off.sim->engine.stages[r].end_s);
    if (r > 0) {
      EXPECT_EQ(per_layer.sim->engine.stages[r].sync_s, off.sim->engine.stages[r].sync_s);
    }
  }
  // Stage 0 ends with B(0, 3, 0): its gradients are final after it.
  EXPECT_EQ(per_layer.final_action, (schedule::Action{0, schedule::Pass::kBackward, 3, 0}));
  const double end0 = off.sim->engine.stages[0].end_s;
  const double full = off.sim->engine.stages[0].sync_s;
  // One bucket is ready when the backward ends: nothing hidden.
  EXPECT_NEAR(one.sim->engine.stages[0].sync_s, full, 1e-12 * full);
  // A bucket per layer: each ready when its layer's backward ends (layers
  // from the last down; no fixed cost per action in this preset).
  const models::CostModel& cm = per_layer.sim->config.placement->cost_model;
  const models::StageLayers layers = per_layer.sim->config.placement->stage_layers[0];
  const schedule::Partition& part = per_layer.sim->config.partition;
  double ready = per_layer.final_start_s, comm_end = 0;
  for (int l = layers.last - 1; l >= layers.first; --l) {
    ready += cm.BackwardTime(l, part.start(0), part.length(0));
    comm_end = std::max(ready, comm_end) + ring(cm.GradientBytes(l));
  }
  const double exposed = std::max(0.0, comm_end - end0);
  EXPECT_NEAR(per_layer.sim->engine.stages[0].sync_s, exposed, 1e-12 * full);
  EXPECT_LT(exposed, full);  // something was hidden
  // The embedding, the last layer whose backward ends, is never hidden.
  EXPECT_GE(exposed, ring(cm.GradientBytes(layers.first)) * (1 - 1e-12));
  EXPECT_LE(per_layer.sim->report.step_time_s(), off.sim->report.step_time_s());

  // The distributed optimizer: reduce-scatters overlapped, the all-gather after.
  pb::Scenario zero = base;
  zero.mutable_parallel()->set_distributed_optimizer(true);
  const OverlapRun zero_off = RunOverlap(zero, false, 0);
  const OverlapRun zero_one = RunOverlap(zero, true, std::uint64_t{1} << 50);
  ASSERT_TRUE(zero_off.sim.ok() && zero_one.sim.ok());
  const double zero_full = zero_off.sim->engine.stages[0].sync_s;
  EXPECT_NEAR(zero_one.sim->engine.stages[0].sync_s, zero_full, 1e-12 * zero_full);

  // DP 1: nothing to sync, overlapped or not.
  const OverlapRun alone = RunOverlap(Scenario(3, 4, 1), true, 1);
  ASSERT_TRUE(alone.sim.ok());
  EXPECT_EQ(alone.sim->engine.stages[0].sync_s, 0.0);

  // The reference engine agrees, bit for bit.
  SimSetup setup{&cm, per_layer.sim->config.placement->stage_layers, part, 4};
  auto costs = MakeAnalyticCostSource(setup);
  Result<EngineResult> by_events = RunPlanByEvents(per_layer.sim->config.plan, *costs);
  Result<EngineResult> dataflow = RunPlan(per_layer.sim->config.plan, *costs);
  ASSERT_TRUE(by_events.ok() && dataflow.ok());
  EXPECT_EQ(by_events->stages[0].sync_s, dataflow->stages[0].sync_s);
  EXPECT_EQ(by_events->step_time_s, dataflow->step_time_s);
  EXPECT_EQ(dataflow->stages[0].sync_s, per_layer.sim->engine.stages[0].sync_s);
}

// Buckets cost a latency each: a tiny model's per-layer buckets expose more
// than its one all-reduce after the backward.
TEST(DataParallel, SmallBucketsOfATinyModelAreLatencyBound) {
  const pb::Scenario tiny = Scenario(3, 4, 4);
  const OverlapRun off = RunOverlap(tiny, false, 0);
  const OverlapRun per_layer = RunOverlap(tiny, true, 1);
  ASSERT_TRUE(off.sim.ok() && per_layer.sim.ok());
  EXPECT_GT(per_layer.sim->engine.stages[0].sync_s, off.sim->engine.stages[0].sync_s);
}

TEST(DataParallel, TheBackendRefusesTheOverlapInOneLine) {
  pb::Scenario s = Scenario(2, 2, 2);
  *s.mutable_model() = *models::ModelPreset("gdn-tiny");
  s.mutable_parallel()->set_overlap_grad_reduce(true);
  Result<backend::TrainSetup> setup = backend::MakeTrainSetup(MustResolve(s), nullptr);
  ASSERT_FALSE(setup.ok());
  EXPECT_NE(setup.status().message().find("parallel.overlap_grad_reduce"), std::string::npos)
      << setup.status().message();
}

TEST(VirtualStages, TheBackendSetupHasEveryModelStagesLayers) {
  pb::Scenario s = Scenario(2, 2, 1);
  *s.mutable_model() = *models::ModelPreset("gdn-small");
  s.mutable_schedule()->set_policy("interleaved");
  s.mutable_schedule()->set_virtual_stages(2);
  Result<backend::TrainSetup> setup = backend::MakeTrainSetup(MustResolve(s), nullptr);
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  ASSERT_EQ(setup->stage_layers.size(), 4u);  // P v model stages, in layer order
  for (std::size_t k = 1; k < 4; ++k) {
    EXPECT_EQ(setup->stage_layers[k].first, setup->stage_layers[k - 1].last);
  }
  // And a scenario asking for them with another policy is refused naming the field.
  pb::Scenario other = s;
  other.mutable_schedule()->set_policy("stateflow");
  Result<scenario::ResolvedScenario> r = scenario::Resolve(other);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("schedule.virtual_stages must be 1 for policy stateflow"),
            std::string::npos)
      << r.status().message();
}

TEST(DataParallel, ABucketSizeOutOfRangeNamesTheField) {
  pb::Scenario s = Scenario(2, 2, 2);
  s.mutable_parallel()->set_overlap_grad_reduce(true);
  s.mutable_parallel()->set_grad_bucket_size(std::uint64_t{1} << 60);
  Result<Simulation> sim = Simulate(MustResolve(s), Schedule("stateflow", 2, 0.5));
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("parallel.grad_bucket_size"), std::string::npos)
      << sim.status().message();
}

TEST(SimulateConfigured, OnePlacementSameReportAsSimulateForManySchedules) {
  pb::Scenario s = Scenario(4, 2, 1);
  Result<std::shared_ptr<const scenario::Placement>> placement =
      scenario::Place(MustResolve(s), Schedule("stateflow", 1, 0));
  ASSERT_TRUE(placement.ok()) << placement.status().message();
  const auto fast_path = [&](const pb::Scenario& sc, const pb::ScheduleSpec& spec) {
    const scenario::ResolvedScenario resolved = MustResolve(sc);
    Result<scenario::Configuration> config =
        scenario::ConfigurePlaced(resolved, *placement, spec);
    return config.ok() ? SimulateConfigured(resolved, *config)
                       : Result<Simulation>(config.status());
  };
  for (int m : {1, 3}) {
    s.mutable_parallel()->set_microbatches(m);
    for (const pb::ScheduleSpec& spec :
         {Schedule("1f1b", 1, 0), Schedule("stateflow", 4, 0), Schedule("stateflow", 8, 1.25),
          Schedule("gpipe", 2, 0.3)}) {
      SCOPED_TRACE(spec.policy() + " N=" + std::to_string(spec.chunks()) +
                   " M=" + std::to_string(m));
      Result<Simulation> direct = Simulate(MustResolve(s), spec);
      Result<Simulation> fast = fast_path(s, spec);
      ASSERT_TRUE(direct.ok()) << direct.status().message();
      ASSERT_TRUE(fast.ok()) << fast.status().message();
      EXPECT_EQ(direct->report.SerializeAsString(), fast->report.SerializeAsString());
    }
  }
  // Placed for another recompute mode or P: refused, not silently wrong.
  pb::ScheduleSpec none = Schedule("stateflow", 2, 0);
  none.set_recompute("none");
  EXPECT_FALSE(fast_path(s, none).ok());
  s.mutable_parallel()->set_pipeline_size(2);
  EXPECT_FALSE(fast_path(s, Schedule("stateflow", 2, 0)).ok());
}

}  // namespace
}  // namespace stateflow::sim

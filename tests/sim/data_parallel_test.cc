// Data parallelism in the simulator (each stage all-reduces its gradients
// after its last action; the step ends with the slowest stage's all-reduce),
// and the prepared entry point giving the same results as Simulate.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/model.h"
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

// scenario/configure.h: the one configuration step. N comes from the
// partition, a given plan is checked once (shape, precedence), the precision
// can be the run's, and the simulator and the backend configure the same run.
#include "scenario/configure.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "backend/train/train_setup.h"
#include "models/placement.h"
#include "schedule/policies.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::scenario {
namespace {

using ::stateflow::testing::MustResolve;

pb::Scenario Hybrid(int stages, int microbatches, int chunks, double alpha) {
  pb::Scenario s;
  s.set_model_preset("gdn-hybrid-tiny");
  s.set_cluster_preset("cpu");
  s.mutable_parallel()->set_pipeline_size(stages);
  s.mutable_parallel()->set_microbatches(microbatches);
  s.set_seq_len(1024);
  s.mutable_schedule()->set_chunks(chunks);
  s.mutable_schedule()->set_alpha(alpha);
  s.mutable_schedule()->set_granularity(16);
  return s;
}

TEST(Configure, PlansThePolicyOverThePartitionsChunks) {
  for (const auto& [P, M, N, alpha] : std::vector<std::tuple<int, int, int, double>>{
           {1, 1, 1, 0.0}, {2, 3, 4, 0.5}, {4, 2, 8, 1.0}, {2, 1, 3, 1.25}}) {
    SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M) + " N=" +
                 std::to_string(N) + " alpha=" + std::to_string(alpha));
    const ResolvedScenario s = MustResolve(Hybrid(P, M, N, alpha));
    Result<Configuration> c = Configure(s, s.proto().schedule());
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->partition.num_chunks(), N);
    EXPECT_EQ(c->partition.boundaries().back(), 1024);
    Result<schedule::Partition> direct =
        models::PartitionFor(c->placement->cost_model, 1024, s.proto().schedule());
    ASSERT_TRUE(direct.ok());
    EXPECT_EQ(c->partition.boundaries(), direct->boundaries());
    EXPECT_EQ(c->plan, *schedule::MakePlan("stateflow", P, M, N));
    ASSERT_EQ(static_cast<int>(c->placement->stage_layers.size()), P);
    EXPECT_EQ(c->schedule.chunks(), static_cast<std::uint32_t>(N));
  }
}

TEST(Configure, ChecksAGivenPlanOnce) {
  const ResolvedScenario s = MustResolve(Hybrid(2, 2, 4, 0));
  const schedule::Plan good = *schedule::MakePlan("gpipe", 2, 2, 4);
  Result<Configuration> c = Configure(s, s.proto().schedule(), {.plan = &good});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->plan, good);

  const schedule::Plan other = *schedule::MakePlan("stateflow", 2, 2, 8);
  Result<Configuration> shape = Configure(s, s.proto().schedule(), {.plan = &other});
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.status().message(),
            "plan is for stages 2 microbatches 2 chunks 8 but the scenario has "
            "parallel.pipeline_size 2, parallel.microbatches 2, schedule.chunks 4");

  // The last stage's first two actions swapped: a backward before its forward.
  std::vector<std::vector<schedule::Action>> lists = good.per_stage();
  std::swap(lists[1].front(), lists[1].back());
  const schedule::Plan broken("gpipe", 2, 2, 4, lists);
  EXPECT_FALSE(Configure(s, s.proto().schedule(), {.plan = &broken}).ok());
}

TEST(Configure, CountsBytesInTheGivenPrecision) {
  const ResolvedScenario s = MustResolve(Hybrid(2, 1, 2, 0));
  Result<Configuration> own = Configure(s, s.proto().schedule());
  const pb::PrecisionSpec fp64 = *models::PrecisionForDtype("float64");
  Result<Configuration> run = Configure(s, s.proto().schedule(), {.precision = &fp64});
  ASSERT_TRUE(own.ok() && run.ok());
  const double own_bytes = own->placement->cost_model.WeightBytes(1);
  const double run_bytes = run->placement->cost_model.WeightBytes(1);
  EXPECT_EQ(run_bytes, own->placement->cost_model.ParamCount(1) * fp64.weight_bytes());
  EXPECT_NE(own_bytes, run_bytes);
  // Placement depends on FLOPs only: the same stages either way.
  ASSERT_EQ(own->placement->stage_layers.size(), run->placement->stage_layers.size());
  for (std::size_t r = 0; r < own->placement->stage_layers.size(); ++r) {
    EXPECT_EQ(own->placement->stage_layers[r].first, run->placement->stage_layers[r].first);
    EXPECT_EQ(own->placement->stage_layers[r].last, run->placement->stage_layers[r].last);
  }
}

TEST(ConfigurePlaced, RefusesAPlacementForAnotherShape) {
  const ResolvedScenario s = MustResolve(Hybrid(2, 1, 2, 0));
  Result<std::shared_ptr<const Placement>> placed = Place(s, s.proto().schedule());
  ASSERT_TRUE(placed.ok());
  pb::ScheduleSpec full = s.proto().schedule();
  full.set_recompute("full");
  Result<Configuration> c = ConfigurePlaced(s, *placed, full);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInternal);
  pb::ParallelSpec deeper = s.proto().parallel();
  deeper.set_pipeline_size(4);
  EXPECT_FALSE(ConfigurePlaced(*s.WithParallel(deeper), *placed, s.proto().schedule()).ok());
}

TEST(PlanCache, MakesEachPlanOnceAndGivesMakePlansPlan) {
  PlanCache plans;
  for (const std::string& policy : schedule::PolicyNames()) {
    for (int n : {1, 3}) {
      Result<schedule::Plan> made = schedule::MakePlan(policy, 3, 4, n);
      Result<const schedule::Plan*> first = plans.Get(policy, 3, 4, n);
      Result<const schedule::Plan*> again = plans.Get(policy, 3, 4, n);
      ASSERT_EQ(made.ok(), first.ok()) << policy << " N=" << n;
      if (!made.ok()) {
        EXPECT_EQ(first.status().message(), made.status().message());
        continue;
      }
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(*first, *again) << "made twice: " << policy;
      EXPECT_EQ(**first, *made) << policy;
    }
  }
  EXPECT_FALSE(plans.Get("no-such-policy", 2, 2, 2).ok());
}

TEST(PlanCache, ConfiguresWhatConfigurePlacedMakesForEveryAlpha) {
  PlanCache plans;
  for (double alpha : {0.0, 0.5, 1.0}) {
    const ResolvedScenario s = MustResolve(Hybrid(2, 3, 4, alpha));
    Result<std::shared_ptr<const Placement>> placed = Place(s, s.proto().schedule());
    ASSERT_TRUE(placed.ok());
    Result<Configuration> own = ConfigurePlaced(s, *placed, s.proto().schedule());
    Result<Configuration> memo =
        ConfigurePlaced(s, *placed, s.proto().schedule(), /*plan=*/nullptr, &plans);
    ASSERT_TRUE(own.ok() && memo.ok());
    EXPECT_EQ(memo->plan, own->plan);
    EXPECT_EQ(memo->partition.boundaries(), own->partition.boundaries());
  }
  EXPECT_EQ(plans.size(), 1u);  // one (policy, P, M, N) for the three alphas
}

TEST(OneRoad, TheSimulatorAndTheBackendConfigureTheSameRun) {
  pb::Scenario raw = Hybrid(2, 3, 4, 0.5);
  raw.set_model_preset("gdn-tiny");
  raw.mutable_train()->set_dtype("float64");
  const ResolvedScenario s = MustResolve(raw);
  Result<sim::Simulation> simulated = sim::Simulate(s, s.proto().schedule());
  Result<backend::TrainSetup> setup = backend::MakeTrainSetup(s, nullptr);
  ASSERT_TRUE(simulated.ok()) << simulated.status().message();
  ASSERT_TRUE(setup.ok()) << setup.status().message();
  EXPECT_EQ(simulated->config.plan, setup->plan);
  EXPECT_EQ(simulated->config.partition.boundaries(), setup->partition.boundaries());
  ASSERT_EQ(simulated->config.placement->stage_layers.size(), setup->stage_layers.size());
  for (std::size_t r = 0; r < setup->stage_layers.size(); ++r) {
    EXPECT_EQ(simulated->config.placement->stage_layers[r].first, setup->stage_layers[r].first);
    EXPECT_EQ(simulated->config.placement->stage_layers[r].last, setup->stage_layers[r].last);
  }
}

}  // namespace
}  // namespace stateflow::scenario

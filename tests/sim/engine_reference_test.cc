// The engine (a dataflow over the plan's per-stage orders) against the
// reference discrete-event engine (RunPlanByEvents): same doubles, bit for
// bit, for every policy over a grid of (P, M, N) (and v for interleaved:
// model stages on one stage hand over without a link), with random durations,
// transfer times and memory effects, with and without the timeline; the same
// error for a plan that deadlocks and for a bad time.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "models/model.h"
#include "schedule/partition.h"
#include "schedule/policies.h"
#include "sim/cost_source.h"
#include "sim/engine.h"

namespace stateflow::sim {
namespace {

using schedule::Action;
using schedule::Pass;

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Random costs per (stage, pass, microbatch, chunk), drawn once: durations
// from 0 (some exactly 0, so ends tie with starts), transfers that are
// sometimes slower than compute (so links queue), memory that grows and
// shrinks by class.
class RandomCosts final : public CostSource {
 public:
  RandomCosts(const schedule::Plan& plan, std::uint32_t seed)
      : p_(plan.model_stages()), m_(plan.microbatches()), n_(plan.chunks()) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const std::size_t size = static_cast<std::size_t>(p_) * m_ * n_ * 3;
    duration_.resize(size);
    latency_.resize(size);
    occupancy_.resize(size);
    memory_.resize(size);
    for (std::size_t k = 0; k < size; ++k) {
      duration_[k] = u(rng) < 0.1 ? 0.0 : u(rng) * 3.0;
      occupancy_[k] = u(rng) * 2.0;
      latency_[k] = occupancy_[k] + u(rng) * 0.5;
      ClassBytes start{}, end{};
      for (int c = 0; c < kNumBufferClasses; ++c) {
        start[c] = u(rng) < 0.5 ? 0.0 : std::floor(u(rng) * 100.0);
        end[c] = u(rng) < 0.5 ? 0.0 : -std::floor(u(rng) * 100.0);
      }
      memory_[k] = MemoryEffect{MemoryDelta(start), MemoryDelta(end)};
    }
    for (int r = 0; r < p_; ++r) {
      sync_.push_back(u(rng));
      ClassBytes s{};
      s[0] = std::floor(u(rng) * 1000.0);
      static_.push_back(s);
    }
  }
  std::string name() const override { return "random"; }
  double Duration(const Action& a) const override { return duration_[Key(a)]; }
  double TransferLatency(const Action& a) const override { return latency_[Key(a)]; }
  double TransferOccupancy(const Action& a) const override { return occupancy_[Key(a)]; }
  double GradientSyncTime(int stage) const override { return sync_[stage]; }
  ClassBytes StaticBytes(int stage) const override { return static_[stage]; }
  const MemoryEffect& Memory(const Action& a) const override { return memory_[Key(a)]; }

  // Makes one action's duration `seconds`.
  void SetDuration(const Action& a, double seconds) { duration_[Key(a)] = seconds; }

 private:
  std::size_t Key(const Action& a) const {
    return ((static_cast<std::size_t>(a.stage) * m_ + a.microbatch) * n_ + a.chunk) * 3 +
           static_cast<std::size_t>(a.pass);
  }
  int p_, m_, n_;
  std::vector<double> duration_, latency_, occupancy_, sync_;
  std::vector<MemoryEffect> memory_;
  std::vector<ClassBytes> static_;
};

void ExpectSameClassBytes(const ClassBytes& a, const ClassBytes& b, const std::string& where) {
  for (int c = 0; c < kNumBufferClasses; ++c) {
    EXPECT_TRUE(SameBits(a[c], b[c])) << where << " class " << c << ": " << a[c] << " vs " << b[c];
  }
}

void ExpectSameResult(const EngineResult& got, const EngineResult& want, const std::string& where) {
  EXPECT_TRUE(SameBits(got.step_time_s, want.step_time_s))
      << where << ": step " << got.step_time_s << " vs " << want.step_time_s;
  EXPECT_EQ(got.num_events, want.num_events) << where;
  ASSERT_EQ(got.stages.size(), want.stages.size()) << where;
  for (std::size_t r = 0; r < got.stages.size(); ++r) {
    const StageResult& g = got.stages[r];
    const StageResult& w = want.stages[r];
    const std::string at = where + " stage " + std::to_string(r);
    EXPECT_TRUE(SameBits(g.busy_s, w.busy_s)) << at;
    EXPECT_TRUE(SameBits(g.end_s, w.end_s)) << at << ": end " << g.end_s << " vs " << w.end_s;
    EXPECT_TRUE(SameBits(g.sync_s, w.sync_s)) << at;
    EXPECT_TRUE(SameBits(g.optimizer_s, w.optimizer_s)) << at;
    EXPECT_TRUE(SameBits(g.peak_bytes, w.peak_bytes)) << at;
    EXPECT_TRUE(SameBits(g.peak_time_s, w.peak_time_s)) << at;
    ExpectSameClassBytes(g.peak_by_class, w.peak_by_class, at + " peak");
    ASSERT_EQ(g.slices.size(), w.slices.size()) << at;
    for (std::size_t k = 0; k < g.slices.size(); ++k) {
      EXPECT_EQ(g.slices[k].action, w.slices[k].action) << at << " slice " << k;
      EXPECT_TRUE(SameBits(g.slices[k].start_s, w.slices[k].start_s)) << at << " slice " << k;
      EXPECT_TRUE(SameBits(g.slices[k].end_s, w.slices[k].end_s)) << at << " slice " << k;
    }
    ASSERT_EQ(g.memory.size(), w.memory.size()) << at;
    for (std::size_t k = 0; k < g.memory.size(); ++k) {
      EXPECT_TRUE(SameBits(g.memory[k].time_s, w.memory[k].time_s)) << at << " sample " << k;
      ExpectSameClassBytes(g.memory[k].bytes, w.memory[k].bytes,
                           at + " sample " + std::to_string(k));
    }
  }
}

TEST(EngineReference, EveryPolicyGivesTheEventEnginesDoublesBitForBit) {
  std::uint32_t seed = 1;
  int compared = 0;
  for (const std::string& policy : schedule::PolicyNames()) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 5, 8}) {
        for (int n : {1, 2, 4, 7}) {
          for (int v : {1, 2, 3}) {
          if (v > 1 && !schedule::VirtualStagesFree(policy) && !(policy == "zbv" && v == 2)) {
            continue;
          }
          Result<schedule::Plan> plan = schedule::MakePlan(policy, p, m, n, v);
          // 1f1b at N > 1; interleaved with P not dividing M N; zbv at v = 1
          if (!plan.ok()) continue;
          const RandomCosts costs(*plan, seed++);
          for (bool timeline : {false, true}) {
            const std::string where = policy + " P=" + std::to_string(p) + " M=" +
                                      std::to_string(m) + " N=" + std::to_string(n) +
                                      " v=" + std::to_string(v) + (timeline ? " timeline" : "");
            Result<EngineResult> got = RunPlan(*plan, costs, {.record_timeline = timeline});
            Result<EngineResult> want =
                RunPlanByEvents(*plan, costs, {.record_timeline = timeline});
            ASSERT_TRUE(got.ok()) << where << ": " << got.status().message();
            ASSERT_TRUE(want.ok()) << where << ": " << want.status().message();
            ExpectSameResult(*got, *want, where);
            ++compared;
          }
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 300);
}

TEST(EngineReference, ADeadlockIsTheSameErrorNamingTheStuckStage) {
  // Stage 1 wants microbatch 1's forward before microbatch 0's, whose input
  // stage 0 sends first; stage 0 waits for microbatch 0's backward: stuck.
  const schedule::Plan plan(
      "bad", 2, 2, 1,
      {{{0, Pass::kForward, 0, 0}, {0, Pass::kBackward, 0, 0}, {0, Pass::kForward, 1, 0},
        {0, Pass::kBackward, 1, 0}},
       {{1, Pass::kForward, 1, 0}, {1, Pass::kBackward, 1, 0}, {1, Pass::kForward, 0, 0},
        {1, Pass::kBackward, 0, 0}}});
  const RandomCosts costs(plan, 7);
  Result<EngineResult> got = RunPlan(plan, costs);
  Result<EngineResult> want = RunPlanByEvents(plan, costs);
  ASSERT_FALSE(got.ok());
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(got.status().message(), want.status().message());
  EXPECT_NE(got.status().message().find("stage 0 waits forever at step 1"), std::string::npos)
      << got.status().message();
}

// The analytic source's tables (which the engine reads directly) give what
// its per-action answers give (which the reference engine asks), for a split
// backward too: I and W durations and memory, bit for bit.
TEST(EngineReference, TheAnalyticTablesOfASplitBackwardAreItsAnswers) {
  models::CostModelOptions o;
  o.recompute = models::Recompute::kNone;
  Result<models::CostModel> cm = models::CostModel::Make(
      *models::ModelPreset("gdn-hybrid-tiny"), {}, *models::ClusterPreset("h100-80gb-nvlink"), o);
  ASSERT_TRUE(cm.ok()) << cm.status().message();
  for (const std::string policy : {"zb-h1", "zb-h2", "stateflow"}) {
    const int P = 3, M = 4, N = 3;
    Result<schedule::Plan> plan = schedule::MakePlan(policy, P, M, N);
    ASSERT_TRUE(plan.ok());
    const int L = cm->num_layers();
    std::vector<models::StageLayers> layers;
    for (int r = 0; r < P; ++r) layers.push_back({r * L / P, (r + 1) * L / P});
    Result<schedule::Partition> partition = schedule::MakeFromBoundaries({0, 256, 640, 768});
    ASSERT_TRUE(partition.ok()) << partition.status().message();
    SimSetup setup{&*cm, layers, *partition, M};
    setup.split_backward = schedule::SplitsBackward(*plan);
    EXPECT_EQ(setup.split_backward, policy != "stateflow");
    const std::unique_ptr<CostSource> costs = MakeAnalyticCostSource(setup);
    ASSERT_NE(costs->Tables(), nullptr);
    // I + W is the whole backward (the preset has no fixed per-action cost).
    setup.split_backward = false;
    const std::unique_ptr<CostSource> whole = MakeAnalyticCostSource(setup);
    for (int r = 0; r < P; ++r) {
      for (int i = 0; i < N; ++i) {
        const Action b{r, Pass::kBackward, 0, i}, w{r, Pass::kWeight, 0, i};
        const double sum = costs->Duration(b) + costs->Duration(w);
        EXPECT_NEAR(sum, whole->Duration(b), 1e-12 * whole->Duration(b)) << policy;
        if (policy != "stateflow") {
          EXPECT_GT(costs->Duration(w), 0) << policy;
        }
      }
    }
    for (bool timeline : {false, true}) {
      Result<EngineResult> got = RunPlan(*plan, *costs, {.record_timeline = timeline});
      Result<EngineResult> want = RunPlanByEvents(*plan, *costs, {.record_timeline = timeline});
      ASSERT_TRUE(got.ok() && want.ok());
      ExpectSameResult(*got, *want, policy);
    }
  }
}

TEST(EngineReference, ABadDurationIsTheSameErrorNamingTheAction) {
  Result<schedule::Plan> plan = schedule::MakePlan("stateflow", 3, 4, 2);
  ASSERT_TRUE(plan.ok());
  RandomCosts costs(*plan, 11);
  costs.SetDuration({2, Pass::kBackward, 3, 1}, -1.0);
  Result<EngineResult> got = RunPlan(*plan, costs);
  Result<EngineResult> want = RunPlanByEvents(*plan, costs);
  ASSERT_FALSE(got.ok());
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(got.status().message(), want.status().message());
  EXPECT_NE(got.status().message().find("a duration of -1"), std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace stateflow::sim

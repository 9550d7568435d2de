#include "schedule/greedy.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/validator.h"
#include "tests/schedule/plan_testing.h"

namespace stateflow::schedule {
namespace {

using Choice = Result<std::optional<Action>>;

// StateFlow's 1F1B over chunk units written as a policy: stage r wants its
// warm-up forwards (StateflowWarmupForwards) in (microbatch, chunk) order,
// then a backward and a forward alternately while forwards remain, then the
// backwards, each microbatch last chunk first; it waits until the action it
// wants is ready.
ChoosePolicy StateflowAsPolicy(int P, int M, int N) {
  return [=](int r, int step, const std::vector<Action>& ready) -> Choice {
    const long long units = static_cast<long long>(M) * N;
    const long long w = StateflowWarmupForwards(P, M, N, r);
    long long nf = 0, nb = 0;  // what stage r issued so far, from its step
    if (step <= w) {
      nf = step;
    } else {
      const long long after = step - w;  // B F B F ... then B only
      nb = (after + 1) / 2;
      nf = w + after / 2;
      if (nf > units) {
        nb += nf - units;
        nf = units;
      }
    }
    Action want;
    if (nf < w || (nf < units && (step - w) % 2 == 1)) {
      want = {.stage = r, .pass = Pass::kForward, .microbatch = static_cast<int>(nf / N),
              .chunk = static_cast<int>(nf % N)};
    } else {
      want = {.stage = r, .pass = Pass::kBackward, .microbatch = static_cast<int>(nb / N),
              .chunk = N - 1 - static_cast<int>(nb % N)};
    }
    for (const Action& a : ready) {
      if (a == want) return std::optional<Action>(a);
    }
    return std::optional<Action>();  // wait for it
  };
}

TEST(PlanFromPolicy, AStateflowPolicyMakesMakePlansStateflowPlan) {
  for (int P : {1, 2, 3, 4, 8}) {
    for (int M : {1, 2, 5}) {
      for (int N : {1, 2, 4}) {
        Result<Plan> greedy = PlanFromPolicy(P, M, N, StateflowAsPolicy(P, M, N),
                                             {.policy_name = "stateflow"});
        ASSERT_TRUE(greedy.ok()) << greedy.status().message();
        Result<Plan> made = MakePlan("stateflow", P, M, N);
        ASSERT_TRUE(made.ok());
        EXPECT_EQ(*greedy, *made) << "P=" << P << " M=" << M << " N=" << N << "\n"
                                  << PlanGrid(*greedy) << "\n" << PlanGrid(*made);
      }
    }
  }
}

TEST(PlanFromPolicy, AnyChoiceAmongTheReadyGivesAValidPlan) {
  std::mt19937 rng(11);
  for (int P : {1, 2, 4}) {
    for (int M : {1, 3}) {
      for (int N : {1, 2, 3}) {
        const ChoosePolicy random = [&rng](int, int, const std::vector<Action>& ready) -> Choice {
          return std::optional<Action>(ready[rng() % ready.size()]);
        };
        Result<Plan> plan = PlanFromPolicy(P, M, N, random);
        ASSERT_TRUE(plan.ok()) << plan.status().message();
        EXPECT_TRUE(ValidatePlan(*plan).ok());
        EXPECT_TRUE(testing::BruteForceValid(*plan));
        EXPECT_EQ(plan->policy(), "custom");
      }
    }
  }
}

TEST(PlanFromPolicy, ReadyListsAreBackwardsFirstThenForwardsInOrder) {
  std::vector<std::string> seen;
  const ChoosePolicy last = [&seen](int r, int step, const std::vector<Action>& ready) -> Choice {
    if (r == 0 && step == 0) {
      for (const Action& a : ready) seen.push_back(ToString(a));
    }
    return std::optional<Action>(ready.back());
  };
  ASSERT_TRUE(PlanFromPolicy(2, 3, 2, last).ok());
  // At time 0 stage 0 may start chunk 0 of every microbatch.
  EXPECT_EQ(seen, (std::vector<std::string>{"0F0.0", "0F1.0", "0F2.0"}));
}

TEST(PlanFromPolicy, ForwardFirstIsGpipesOrderOnTheFirstStage) {
  const ChoosePolicy forwards_first = [](int, int, const std::vector<Action>& ready) -> Choice {
    for (const Action& a : ready) {
      if (a.pass == Pass::kForward) return std::optional<Action>(a);
    }
    return std::optional<Action>(ready.front());
  };
  Result<Plan> plan = PlanFromPolicy(3, 2, 2, forwards_first);
  ASSERT_TRUE(plan.ok());
  // Stage 0: all four forwards before any backward.
  for (int k = 0; k < 4; ++k) EXPECT_EQ(plan->stage(0)[k].pass, Pass::kForward);
}

TEST(PlanFromPolicy, AChoiceNotReadyIsRefusedNamingStageAndStep) {
  const ChoosePolicy wrong = [](int r, int step, const std::vector<Action>& ready) -> Choice {
    if (r == 1 && step == 0) {
      return std::optional<Action>(Action{.stage = 1, .pass = Pass::kBackward});
    }
    return std::optional<Action>(ready.front());
  };
  Result<Plan> plan = PlanFromPolicy(2, 1, 1, wrong);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "policy chose 1B0.0 on stage 1 at step 0, which is not ready there (ready: 1F0.0)");
}

TEST(PlanFromPolicy, APolicyThatWaitsForeverDeadlocks) {
  // Stage 1 never takes a backward: stage 0 cannot either.
  const ChoosePolicy no_backward = [](int, int, const std::vector<Action>& ready) -> Choice {
    for (const Action& a : ready) {
      if (a.pass == Pass::kForward) return std::optional<Action>(a);
    }
    return std::optional<Action>();
  };
  Result<Plan> plan = PlanFromPolicy(2, 2, 1, no_backward);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "policy deadlocks: every stage is idle and waits, 4 actions left; stage 1 at step 2 "
            "waited with ready: 1B0.0 1B1.0");
}

TEST(PlanFromPolicy, PolicyErrorsAndBadArgumentsAreOneLine) {
  const ChoosePolicy fails = [](int, int, const std::vector<Action>&) -> Choice {
    return Status::Invalid("no idea");
  };
  Result<Plan> plan = PlanFromPolicy(2, 1, 1, fails);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "policy on stage 0 at step 0: no idea");
  const ChoosePolicy first = [](int, int, const std::vector<Action>& ready) -> Choice {
    return std::optional<Action>(ready.front());
  };
  EXPECT_EQ(PlanFromPolicy(0, 1, 1, first).status().message(),
            "stages (parallel.pipeline_size) must be >= 1, got 0");
  EXPECT_EQ(PlanFromPolicy(1, 1, 0, first).status().message(),
            "chunks (schedule.chunks) must be >= 1, got 0");
  EXPECT_EQ(PlanFromPolicy(1, 1, 1, first, {.forward_time = 0}).status().message(),
            "forward_time must be a finite number > 0, got 0.000000");
  EXPECT_EQ(PlanFromPolicy(1, 1, 1, first, {.policy_name = "my policy"}).status().message(),
            "policy name 'my policy' must be one token (no whitespace or '#')");
}

// With split_backward each B leaves its W ready on its stage, listed after
// the forwards, oldest B first; taking the ready list's front (B, F, then W)
// gives a valid split plan with one W per B; a policy that never runs W
// deadlocks once only W passes are left.
TEST(PlanFromPolicy, ASplitBackwardListsEachWAfterItsB) {
  const GreedyOptions split{.backward_time = 1, .split_backward = true, .weight_time = 1};
  int weights_seen = 0;
  const ChoosePolicy first = [&](int r, int, const std::vector<Action>& ready) -> Choice {
    bool after_forwards = false;
    for (const Action& a : ready) {
      EXPECT_EQ(a.stage, r);
      if (a.pass == Pass::kWeight) {
        after_forwards = true;
        ++weights_seen;
      } else {
        EXPECT_FALSE(after_forwards) << ToString(a) << " after a W";
      }
    }
    return std::optional<Action>(ready.front());
  };
  Result<Plan> plan = PlanFromPolicy(3, 4, 2, first, split);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(SplitsBackward(*plan));
  EXPECT_EQ(plan->num_actions(), 3u * 3 * 4 * 2);
  EXPECT_TRUE(ValidatePlan(*plan).ok());
  EXPECT_GT(weights_seen, 0);
  const ChoosePolicy never_w = [](int, int, const std::vector<Action>& ready) -> Choice {
    if (ready.front().pass == Pass::kWeight) return std::optional<Action>();
    return std::optional<Action>(ready.front());
  };
  Result<Plan> stuck = PlanFromPolicy(2, 1, 1, never_w, split);
  ASSERT_FALSE(stuck.ok());
  EXPECT_NE(stuck.status().message().find("policy deadlocks"), std::string::npos)
      << stuck.status().message();
  EXPECT_NE(stuck.status().message().find("W0.0"), std::string::npos) << stuck.status().message();
  EXPECT_EQ(PlanFromPolicy(1, 1, 1, first, {.split_backward = true, .weight_time = -1})
                .status()
                .message(),
            "weight_time must be a finite number > 0, got -1.000000");
}

// With virtual stages the executor plays every model stage: a random choice
// among the ready actions gives a valid plan in either placement, each
// stage listing only its own model stages (loop: s mod P; v: r and 2P-1-r),
// and a ready list runs the stage's model stages from the last in the layer
// order to the first: at P = 1 in a V the second model stage's forward of a
// unit is ready as soon as the first's has run, and listed before it.
TEST(PlanFromPolicy, VirtualStagesInALoopOrAV) {
  std::mt19937 rng(27);
  const ChoosePolicy random = [&rng](int, int, const std::vector<Action>& ready) -> Choice {
    return std::optional<Action>(ready[rng() % ready.size()]);
  };
  for (const StagePlacement placement : {StagePlacement::kLoop, StagePlacement::kVShape}) {
    for (int P : {1, 2, 3}) {
      for (int M : {1, 3}) {
        for (int N : {1, 2}) {
          for (const bool split : {false, true}) {
            const int v = placement == StagePlacement::kVShape ? 2 : 3;
            Result<Plan> plan = PlanFromPolicy(
                P, M, N, random,
                {.split_backward = split, .virtual_stages = v, .placement = placement});
            ASSERT_TRUE(plan.ok()) << plan.status().message();
            EXPECT_EQ(plan->virtual_stages(), v);
            EXPECT_EQ(plan->placement(), placement);
            EXPECT_EQ(plan->num_actions(), (split ? 3u : 2u) * P * v * M * N);
            EXPECT_TRUE(ValidatePlan(*plan).ok()) << ValidatePlan(*plan).message();
            for (int r = 0; r < P; ++r) {
              for (const Action& a : plan->stage(r)) EXPECT_EQ(plan->RankOf(a.stage), r);
            }
          }
        }
      }
    }
  }
  std::vector<std::string> seen;
  const ChoosePolicy watch = [&seen](int, int step, const std::vector<Action>& ready) -> Choice {
    if (step == 1) {
      for (const Action& a : ready) seen.push_back(ToString(a));
    }
    return std::optional<Action>(ready.back());
  };
  ASSERT_TRUE(PlanFromPolicy(1, 2, 1, watch,
                             {.virtual_stages = 2, .placement = StagePlacement::kVShape})
                  .ok());
  // Step 0 took the last ready action, 0F1.0; then model stage 1 may run
  // microbatch 1, model stage 0 microbatch 0.
  EXPECT_EQ(seen, (std::vector<std::string>{"1F1.0", "0F0.0"}));
  EXPECT_EQ(PlanFromPolicy(2, 1, 1, random, {.virtual_stages = 3,
                                             .placement = StagePlacement::kVShape})
                .status()
                .message(),
            "placement v needs virtual_stages 2, got 3");
  EXPECT_EQ(PlanFromPolicy(2, 1, 1, random, {.virtual_stages = 0}).status().message(),
            "virtual_stages must be in [1, 64], got 0");
}

}  // namespace
}  // namespace stateflow::schedule

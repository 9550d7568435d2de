// Model-based tests: ValidatePlan against the brute-force checker of
// plan_testing.h on random valid plans and random mutations of them.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "schedule/plan.h"
#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/validator.h"
#include "tests/schedule/plan_testing.h"

namespace stateflow::schedule {
namespace {

using testing::BruteForceValid;
using testing::Mutate;
using testing::RandomValidPlan;

TEST(ModelTest, RandomValidPlansAreAccepted) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    const int P = std::uniform_int_distribution<int>(1, 4)(rng);
    const int M = std::uniform_int_distribution<int>(1, 3)(rng);
    const int N = std::uniform_int_distribution<int>(1, 4)(rng);
    const bool with_weight = trial % 3 == 0;
    const Plan plan = RandomValidPlan(P, M, N, with_weight, rng);
    ASSERT_TRUE(BruteForceValid(plan)) << PlanGrid(plan);
    const Status status = ValidatePlan(plan);
    EXPECT_TRUE(status.ok()) << status.message();
  }
}

// Random plans, from a policy or drawn at random, edited one to three
// times: the validator and the brute-force checker must agree on every one,
// and both outcomes must be common enough for the agreement to mean something.
TEST(ModelTest, ValidatorAgreesWithBruteForceOnMutatedPlans) {
  std::mt19937 rng(2024);
  int valid = 0, invalid = 0, deadlocks = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int P = std::uniform_int_distribution<int>(1, 4)(rng);
    const int M = std::uniform_int_distribution<int>(1, 3)(rng);
    const int N = std::uniform_int_distribution<int>(1, 3)(rng);
    Plan plan;
    if (trial % 2 == 0) {
      const std::string& policy = PolicyNames()[trial / 2 % 3];
      plan = *MakePlan(policy, P, M, policy == "1f1b" ? 1 : N);
    } else {
      plan = RandomValidPlan(P, M, N, trial % 5 == 1, rng);
    }
    const int edits = std::uniform_int_distribution<int>(0, 3)(rng);
    for (int e = 0; e < edits; ++e) plan = Mutate(plan, rng);
    const bool expected = BruteForceValid(plan);
    const Status status = ValidatePlan(plan);
    ASSERT_EQ(status.ok(), expected)
        << "trial " << trial << ": brute force says " << (expected ? "valid" : "invalid")
        << ", validator says: " << (status.ok() ? "ok" : status.message()) << "\n"
        << PlanGrid(plan);
    (expected ? valid : invalid) += 1;
    if (!status.ok() && status.message().rfind("deadlock:", 0) == 0) ++deadlocks;
  }
  EXPECT_GT(valid, 600);
  EXPECT_GT(invalid, 600);
  EXPECT_GT(deadlocks, 10);
}

}  // namespace
}  // namespace stateflow::schedule

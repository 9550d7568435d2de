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

void ExpectRoundTrip(const Plan& plan) {
  const std::string text = PlanToText(plan);
  Result<Plan> back = ParsePlanText(text, "roundtrip.plan");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  EXPECT_EQ(*back, plan) << text;
  EXPECT_EQ(PlanToText(*back), text);
}

TEST(PlanTextTest, HeaderExample) {
  Result<Plan> plan = MakePlan("stateflow", 2, 1, 2);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(PlanToText(*plan),
            "plan stateflow stages 2 microbatches 1 chunks 2\n"
            "stage 0: 0F0.0 0F0.1 0B0.1 0B0.0\n"
            "stage 1: 1F0.0 1F0.1 1B0.1 1B0.0\n");
}

TEST(PlanTextTest, PolicyPlansRoundTrip) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const int P = std::uniform_int_distribution<int>(1, 12)(rng);
    const int M = std::uniform_int_distribution<int>(1, 16)(rng);
    const int N = std::uniform_int_distribution<int>(1, 12)(rng);
    for (const std::string& policy : PolicyNames()) {
      Result<Plan> plan =
          MakePlan(policy, P, M, policy == "1f1b" ? 1 : N, DefaultVirtualStages(policy));
      ASSERT_TRUE(plan.ok());
      ExpectRoundTrip(*plan);
    }
  }
}

// Random plans, valid or not (parsing does not validate), with W actions.
TEST(PlanTextTest, RandomAndMutatedPlansRoundTrip) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 200; ++trial) {
    const int P = std::uniform_int_distribution<int>(1, 4)(rng);
    const int M = std::uniform_int_distribution<int>(1, 3)(rng);
    const int N = std::uniform_int_distribution<int>(1, 3)(rng);
    Plan plan = testing::RandomValidPlan(P, M, N, trial % 2 == 0, rng);
    ExpectRoundTrip(plan);
    Plan mutated = testing::Mutate(plan, rng);
    bool stages_match = true;  // the text form cannot hold an action on a foreign line
    for (int r = 0; r < P; ++r)
      for (const Action& x : mutated.stage(r)) stages_match = stages_match && x.stage == r;
    if (stages_match) ExpectRoundTrip(mutated);
  }
}

TEST(PlanTextTest, CommentsBlankLinesAndSpacingParse) {
  const std::string text =
      "# a hand-written plan\n"
      "\n"
      "plan custom stages 2 microbatches 1 chunks 1   # header\n"
      "  stage 0 :\t0F0.0   0B0.0\r\n"
      "stage 1: 1F0.0 1B0.0# the rest\n";
  Result<Plan> plan = ParsePlanText(text);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->policy(), "custom");
  EXPECT_EQ(plan->stage(0), (std::vector<Action>{{0, Pass::kForward, 0, 0},
                                                 {0, Pass::kBackward, 0, 0}}));
  EXPECT_EQ(plan->stage(1).size(), 2u);
  EXPECT_TRUE(ValidatePlan(*plan).ok());
}

TEST(PlanTextTest, ParseErrorsNameSourceLineAndColumn) {
  const std::string header = "plan p stages 2 microbatches 1 chunks 1\n";
  struct Case {
    std::string text;
    std::string expected;  // the whole message
  };
  const Case cases[] = {
      {"", "f.plan:1:1: empty plan: expected the header 'plan <policy> stages <P> microbatches "
           "<M> chunks <N>'"},
      {"# nothing\n\n", "f.plan:3:1: empty plan: expected the header 'plan <policy> stages <P> "
                        "microbatches <M> chunks <N>'"},
      {"stage 0: 0F0.0\n", "f.plan:1:1: expected the header 'plan <policy> stages <P> "
                           "microbatches <M> chunks <N>', got 'stage'"},
      {"plan\n", "f.plan:1:5: expected a policy name after 'plan'"},
      {"plan p stagez 2\n", "f.plan:1:8: expected 'stages', got 'stagez'"},
      {"plan p stages 0 microbatches 1 chunks 1\n", "f.plan:1:15: stages must be an integer >= 1"},
      {"plan p stages 2 microbatches x chunks 1\n",
       "f.plan:1:30: microbatches must be an integer >= 1"},
      {"plan p stages 2 microbatches 1\n",
       "f.plan:1:31: header ends early: expected 'chunks <count>'"},
      {"plan p stages 2 microbatches 1 chunks\n", "f.plan:1:38: chunks must be an integer >= 1"},
      {"plan p stages 2 microbatches 1 chunks 1 extra\n",
       "f.plan:1:41: unexpected 'extra' after the header"},
      {header + "stage 0: 0F0.0 0B0.0\n",
       "f.plan:3:1: expected 2 stage lines (header says stages 2), found 1"},
      {header + "stage 0: 0F0.0 0X0.0\n",
       "f.plan:2:16: bad action '0X0.0': pass must be F, B or W"},
      {header + "stage 1: 1F0.0\n",
       "f.plan:2:7: expected stage 0, got stage 1 (stage lines list stages 0..1 in order, once "
       "each)"},
      {header + "stage 0: 0F0.0\nstage 0: 0F0.0\n",
       "f.plan:3:7: expected stage 1, got stage 0 (stage lines list stages 0..1 in order, once "
       "each)"},
      {header + "stage 0:\nstage 1:\nstage 2: 2F0.0\n",
       "f.plan:4:7: stage 2 out of range: header says stages 2"},
      {header + "stage 0 0F0.0\n",
       "f.plan:2:7: expected 'stage <r>:' with a colon after the stage number"},
      {header + "stage -1:\n", "f.plan:2:7: stage number must be an integer >= 0, got '-1'"},
      {header + "stages 0:\n", "f.plan:2:1: expected 'stage 0:', got 'stages'"},
      {header + "stage 0: 0F0.0 1F0.0\n",
       "f.plan:2:16: action 1F0.0 names stage 1 on the line of stage 0"},
      {header + "stage 0: 0F1.0\n",
       "f.plan:2:10: action 0F1.0 has microbatch 1 but the header says microbatches 1"},
      {header + "stage 0: 0F0.0 0B0.3\n",
       "f.plan:2:16: action 0B0.3 has chunk 3 but the header says chunks 1"},
      {"plan p stages 1 microbatches 1000000 chunks 1000000\n",
       "f.plan:1:17: microbatches * chunks exceeds the limit " + std::to_string(kMaxUnitsPerStage)},
  };
  for (const Case& c : cases) {
    Result<Plan> plan = ParsePlanText(c.text, "f.plan");
    ASSERT_FALSE(plan.ok()) << c.text;
    EXPECT_EQ(plan.status().message(), c.expected) << c.text;
    EXPECT_EQ(plan.status().code(), Status::Code::kInvalidInput);
  }
}

TEST(PlanTextTest, DefaultSourceName) {
  Result<Plan> plan = ParsePlanText("bogus");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message().rfind("<plan>:1:1: ", 0), 0u) << plan.status().message();
}

}  // namespace
}  // namespace stateflow::schedule

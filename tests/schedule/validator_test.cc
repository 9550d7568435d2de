#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schedule/plan.h"
#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/validator.h"

namespace stateflow::schedule {
namespace {

using Lists = std::vector<std::vector<Action>>;

Action F(int r, int a, int i) { return Action{r, Pass::kForward, a, i}; }
Action B(int r, int a, int i) { return Action{r, Pass::kBackward, a, i}; }
Action W(int r, int a, int i) { return Action{r, Pass::kWeight, a, i}; }

Lists StateflowLists(int P, int M, int N) {
  Result<Plan> plan = MakePlan("stateflow", P, M, N);
  EXPECT_TRUE(plan.ok());
  return plan->per_stage();
}

Plan Remake(int P, int M, int N, Lists lists) {
  return Plan("edited", P, M, N, std::move(lists));
}

std::size_t StepOf(const std::vector<Action>& list, const Action& x) {
  const auto it = std::find(list.begin(), list.end(), x);
  EXPECT_NE(it, list.end()) << ToString(x);
  return static_cast<std::size_t>(it - list.begin());
}

// The message is one line; the grid (and, for a deadlock, the stages
// blocked behind it) is its detail.
std::string FirstLine(const Status& status) {
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  return status.message();
}
std::string Whole(const Status& status) {
  return status.detail().empty() ? status.message() : status.message() + "\n" + status.detail();
}

// The checks every located error shares: invalid input, and a first line
// that names the stage, step, microbatch and chunk by itself.
void ExpectLocated(const Status& status, const std::string& rule) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Status::Code::kInvalidInput);
  const std::string first = FirstLine(status);
  for (const std::string& part : {std::string("stage "), std::string(" step "),
                                  std::string("microbatch "), std::string("chunk "), rule}) {
    EXPECT_NE(first.find(part), std::string::npos) << "'" << first << "' lacks '" << part << "'";
  }
  EXPECT_NE(status.detail().find('['), std::string::npos) << "no marked step in the grid";
}

TEST(ValidatorTest, PoliciesPass) {
  for (const std::string& policy : PolicyNames()) {
    Result<Plan> plan = MakePlan(policy, 4, 3, policy == "1f1b" ? 1 : 3, DefaultVirtualStages(policy));
    ASSERT_TRUE(plan.ok());
    const Status status = ValidatePlan(*plan);
    EXPECT_TRUE(status.ok()) << policy << ": " << status.message();
  }
}

TEST(ValidatorTest, SwappedForwardsBreakRule2) {
  Lists lists = StateflowLists(3, 2, 3);
  std::vector<Action>& s1 = lists[1];
  const std::size_t k0 = StepOf(s1, F(1, 0, 0)), k1 = StepOf(s1, F(1, 0, 1));
  std::swap(s1[k0], s1[k1]);
  const Status status = ValidatePlan(Remake(3, 2, 3, lists));
  ExpectLocated(status, "rule 2: F(r,a,i-1) < F(r,a,i)");
  EXPECT_EQ(FirstLine(status), "stage 1 step " + std::to_string(k0) +
                                   ": 1F0.1 runs before 1F0.0 (step " + std::to_string(k1) +
                                   "), breaking rule 2: F(r,a,i-1) < F(r,a,i) "
                                   "(microbatch 0, chunk 1)");
  EXPECT_NE(status.detail().find("[1F0.1]"), std::string::npos) << status.message();
}

TEST(ValidatorTest, BackwardBeforeItsForwardBreaksRule3) {
  Lists lists = StateflowLists(3, 2, 3);
  std::vector<Action>& s2 = lists[2];
  const Action b = B(2, 1, 2);
  s2.erase(s2.begin() + static_cast<std::ptrdiff_t>(StepOf(s2, b)));
  const std::size_t k = StepOf(s2, F(2, 1, 2));
  s2.insert(s2.begin() + static_cast<std::ptrdiff_t>(k), b);
  const Status status = ValidatePlan(Remake(3, 2, 3, lists));
  ExpectLocated(status, "rule 3: F(r,a,i) < B(r,a,i)");
  EXPECT_EQ(FirstLine(status).rfind("stage 2 step " + std::to_string(k) + ": 2B1.2 runs before 2F1.2", 0), 0u)
      << status.message();
}

TEST(ValidatorTest, SwappedBackwardsOfOneMicrobatchBreakRule5) {
  Lists lists = StateflowLists(3, 2, 3);
  std::vector<Action>& s0 = lists[0];
  const std::size_t k2 = StepOf(s0, B(0, 1, 2)), k1 = StepOf(s0, B(0, 1, 1));
  std::swap(s0[k2], s0[k1]);
  const Status status = ValidatePlan(Remake(3, 2, 3, lists));
  ExpectLocated(status, "rule 5: B(r,a,i+1) < B(r,a,i)");
  EXPECT_EQ(FirstLine(status).rfind("stage 0 step " + std::to_string(k2) + ": 0B1.1 runs before 0B1.2", 0), 0u)
      << status.message();
}

TEST(ValidatorTest, MissingAction) {
  Lists lists = StateflowLists(3, 2, 3);
  lists[1].erase(lists[1].begin() + static_cast<std::ptrdiff_t>(StepOf(lists[1], B(1, 0, 2))));
  const Status status = ValidatePlan(Remake(3, 2, 3, lists));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("stage 1: missing action 1B0.2 (microbatch 0, chunk 2)", 0), 0u)
      << status.message();
}

TEST(ValidatorTest, DuplicateActionAddedOrReplacingAnother) {
  {
    Lists lists = StateflowLists(3, 2, 3);
    lists[1].push_back(F(1, 0, 0));
    const Status status = ValidatePlan(Remake(3, 2, 3, lists));
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(FirstLine(status), "stage 1 step " + std::to_string(lists[1].size() - 1) +
                                     ": duplicate action 1F0.0 (first at step 0)");
  }
  {
    Lists lists = StateflowLists(3, 2, 3);
    lists[1].back() = F(1, 1, 1);  // same length, so the flat index finds it
    const Status status = ValidatePlan(Remake(3, 2, 3, lists));
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(FirstLine(status), "stage 1 step " + std::to_string(lists[1].size() - 1) +
                                     ": duplicate action 1F1.1 (first at step " +
                                     std::to_string(StepOf(lists[1], F(1, 1, 1))) + ")");
  }
}

// Stage 0 runs B0 before F1, stage 1 runs F1 before F0: each waits on the
// other across stages.
TEST(ValidatorTest, CrossStageCycleIsADeadlockNamingRules1And4) {
  Lists lists = {{F(0, 0, 0), B(0, 0, 0), F(0, 1, 0), B(0, 1, 0)},
                 {F(1, 1, 0), F(1, 0, 0), B(1, 0, 0), B(1, 1, 0)}};
  const Status status = ValidatePlan(Remake(2, 2, 1, lists));
  ExpectLocated(status, "rule 4: B(r+1,a,i) < B(r,a,i)");
  EXPECT_EQ(FirstLine(status),
            "deadlock: stage 0 step 1 waits for 1B0.0 (rule 4: B(r+1,a,i) < B(r,a,i)) before "
            "running 0B0.0 (microbatch 0, chunk 0), but stage 1 step 0 waits for 0F1.0 (rule 1: "
            "F(r-1,a,i) < F(r,a,i)) before running 1F1.0 (microbatch 1, chunk 0)");
  EXPECT_NE(status.detail().find("[0B0.0]"), std::string::npos) << status.message();
}

TEST(ValidatorTest, ChunkLevelCrossStageDeadlock) {
  // Stage 1 runs its backwards before stage 0 ran enough forwards for it:
  // stage 0 runs 0B0.1 (needs 1B0.1) before 0F0.1 (which 1F0.1 needs).
  Lists lists = {{F(0, 0, 0), B(0, 0, 1), F(0, 0, 1), B(0, 0, 0)},
                 {F(1, 0, 0), F(1, 0, 1), B(1, 0, 1), B(1, 0, 0)}};
  // 0B0.1 before 0F0.1 breaks rule 3 on stage 0 already; the validator says so.
  Status status = ValidatePlan(Remake(2, 1, 2, lists));
  ExpectLocated(status, "rule 3");
  // A purely cross-stage version: stage 0 finishes microbatch 0 before
  // starting microbatch 1, stage 1 starts microbatch 1 first.
  lists = {{F(0, 0, 0), F(0, 0, 1), B(0, 0, 1), B(0, 0, 0), F(0, 1, 0), F(0, 1, 1),
            B(0, 1, 1), B(0, 1, 0)},
           {F(1, 1, 0), F(1, 1, 1), F(1, 0, 0), F(1, 0, 1), B(1, 0, 1), B(1, 0, 0),
            B(1, 1, 1), B(1, 1, 0)}};
  status = ValidatePlan(Remake(2, 2, 2, lists));
  ExpectLocated(status, "rule 4");
  EXPECT_EQ(FirstLine(status).rfind("deadlock: stage 0 step 2", 0), 0u) << status.message();
  EXPECT_NE(FirstLine(status).find("but stage 1 step 0 waits for 0F1.0 (rule 1: F(r-1,a,i) < "
                                   "F(r,a,i))"),
            std::string::npos)
      << status.message();
}

// A deadlock between stages 1 and 2 of a deep pipeline: the first line names
// that pair, the other blocked stages are listed after it, the grid is a
// window.
TEST(ValidatorTest, DeadlockInADeepPipelineNamesThePair) {
  const int P = 30, M = 8, N = 8;
  Lists lists = StateflowLists(P, M, N);
  // Stage 2 runs all forwards of microbatch 5 first; stage 1 runs them only
  // after its warm-up of N + P - 2 = 36 forwards (microbatch 5 starts at
  // forward 40) and a backward, which waits for stage 2.
  ASSERT_LT(StateflowWarmupForwards(P, M, N, 1), 5 * N);
  std::vector<Action> moved, rest;
  for (const Action& x : lists[2]) {
    (x.pass == Pass::kForward && x.microbatch == 5 ? moved : rest).push_back(x);
  }
  moved.insert(moved.end(), rest.begin(), rest.end());
  lists[2] = moved;
  const Status status = ValidatePlan(Remake(P, M, N, lists));
  ExpectLocated(status, "rule 4");
  const std::string first = FirstLine(status);
  EXPECT_EQ(first.rfind("deadlock: stage 1 step ", 0), 0u) << first;
  EXPECT_NE(first.find("(rule 4: B(r+1,a,i) < B(r,a,i))"), std::string::npos) << first;
  EXPECT_NE(first.find("but stage 2 step "), std::string::npos) << first;
  EXPECT_NE(first.find("(rule 1: F(r-1,a,i) < F(r,a,i))"), std::string::npos) << first;
  EXPECT_NE(status.detail().find("more stages blocked behind them:"), std::string::npos);
  EXPECT_NE(status.detail().find("... and "), std::string::npos);  // over 16 others
  EXPECT_LT(Whole(status).size(), 12000u);
}

Lists WithWeights(const Lists& lists) {
  Lists out(lists.size());
  for (std::size_t r = 0; r < lists.size(); ++r) {
    for (const Action& x : lists[r]) {
      out[r].push_back(x);
      if (x.pass == Pass::kBackward) out[r].push_back(W(x.stage, x.microbatch, x.chunk));
    }
  }
  return out;
}

TEST(ValidatorTest, WeightPasses) {
  const Lists with_w = WithWeights(StateflowLists(3, 2, 3));
  const Status ok = ValidatePlan(Remake(3, 2, 3, with_w));
  EXPECT_TRUE(ok.ok()) << ok.message();

  // A W before its B.
  Lists early = with_w;
  std::vector<Action>& s1 = early[1];
  s1.erase(s1.begin() + static_cast<std::ptrdiff_t>(StepOf(s1, W(1, 0, 1))));
  const std::size_t k = StepOf(s1, B(1, 0, 1));
  s1.insert(s1.begin() + static_cast<std::ptrdiff_t>(k), W(1, 0, 1));
  Status status = ValidatePlan(Remake(3, 2, 3, early));
  ExpectLocated(status, "B(r,a,i) < W(r,a,i)");
  EXPECT_EQ(FirstLine(status).rfind("stage 1 step " + std::to_string(k) + ": 1W0.1 runs before 1B0.1", 0), 0u)
      << status.message();

  // W is all or none: one missing W is a missing action.
  Lists missing = with_w;
  missing[2].erase(missing[2].begin() + static_cast<std::ptrdiff_t>(StepOf(missing[2], W(2, 1, 0))));
  status = ValidatePlan(Remake(3, 2, 3, missing));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("stage 2: missing action 2W1.0", 0), 0u) << status.message();
  EXPECT_NE(status.message().find("since the plan has W actions"), std::string::npos);

  // A stage without any W while others have them.
  Lists one_stage = with_w;
  one_stage[0] = StateflowLists(3, 2, 3)[0];
  status = ValidatePlan(Remake(3, 2, 3, one_stage));
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("stage 0: missing action 0W0.0", 0), 0u) << status.message();
}

TEST(ValidatorTest, StructuralErrors) {
  struct Case {
    const char* name;
    Plan plan;
    const char* expected_start;
  };
  Lists wrong_stage = StateflowLists(3, 2, 2);
  wrong_stage[1][0].stage = 2;
  Lists bad_microbatch = StateflowLists(3, 2, 2);
  bad_microbatch[2][3].microbatch = 5;
  Lists bad_chunk = StateflowLists(3, 2, 2);
  bad_chunk[0][1].chunk = -1;
  Lists bad_pass = StateflowLists(3, 2, 2);
  bad_pass[0][2].pass = static_cast<Pass>(7);
  const Case cases[] = {
      {"stages", Remake(0, 2, 2, {}), "plan stages must be >= 1, got 0"},
      {"microbatches", Remake(1, 0, 2, {{}}), "plan microbatches must be >= 1, got 0"},
      {"chunks", Remake(1, 2, -3, {{}}), "plan chunks must be >= 1, got -3"},
      {"lists", Remake(3, 2, 2, StateflowLists(2, 2, 2)), "plan has 2 stage lists but stages is 3"},
      {"limit", Remake(1, 1 << 20, 1 << 20, {{}}), "plan microbatches * chunks = "},
      {"wrong stage", Remake(3, 2, 2, wrong_stage),
       "stage 1 step 0: action 2F0.0 names stage 2 but is in the list of stage 1"},
      {"microbatch", Remake(3, 2, 2, bad_microbatch),
       "stage 2 step 3: action 2F5.0 has microbatch 5, outside [0, 2)"},
      {"chunk", Remake(3, 2, 2, bad_chunk), "stage 0 step 1: action 0F0.-1 has chunk -1, outside [0, 2)"},
      {"pass", Remake(3, 2, 2, bad_pass), "stage 0 step 2: action has an invalid pass value 7"},
  };
  for (const Case& c : cases) {
    const Status status = ValidatePlan(c.plan);
    ASSERT_FALSE(status.ok()) << c.name;
    EXPECT_EQ(status.message().rfind(c.expected_start, 0), 0u) << c.name << ": " << status.message();
  }
}

// A header claiming a huge M N with short lists is reported as a missing
// action without allocating M N slots.
TEST(ValidatorTest, HugeClaimedSizeWithShortListsIsMissingActions) {
  const Plan plan = Remake(1, 100000, 1000, {{F(0, 0, 0), B(0, 0, 0)}});
  const Status status = ValidatePlan(plan);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message().rfind("stage 0: missing action 0F0.1", 0), 0u) << status.message();
}

// In a big plan the message shows only a window of the grid around the bad
// step, so it stays readable.
TEST(ValidatorTest, BigPlanMessageShowsAWindow) {
  const int P = 40, M = 64, N = 8;
  Lists lists = StateflowLists(P, M, N);
  std::vector<Action>& s = lists[20];
  const std::size_t k0 = StepOf(s, F(20, 30, 4)), k1 = StepOf(s, F(20, 30, 5));
  std::swap(s[k0], s[k1]);
  const Status status = ValidatePlan(Remake(P, M, N, lists));
  ExpectLocated(status, "rule 2");
  const std::string message = Whole(status);
  const long long lines = std::count(message.begin(), message.end(), '\n') + 1;
  EXPECT_LE(lines, 1 + 1 + 1 + 17) << message;  // first line, window line, header, 17 stages
  EXPECT_NE(message.find("steps " + std::to_string(k0 - 8) + ".." + std::to_string(k0 + 8) +
                         " of " + std::to_string(2 * M * N) + ", stages 12..28 of 40"),
            std::string::npos)
      << message;
  EXPECT_LT(message.size(), 6000u);
}

TEST(ValidatorTest, GridMarksAndAligns) {
  Result<Plan> plan = MakePlan("stateflow", 2, 1, 2);
  ASSERT_TRUE(plan.ok());
  const Action mark = B(1, 0, 1);
  const std::string grid = PlanGrid(*plan, &mark);
  // Stage 1: F0.0 F0.1 B0.1 B0.0; stage 0: F0.0 F0.1 B0.1 B0.0 (warm-up 2 both).
  EXPECT_EQ(grid,
            "step     0      1      2      3\n"
            "stage 0  0F0.0  0F0.1  0B0.1  0B0.0\n"
            "stage 1  1F0.0  1F0.1 [1B0.1] 1B0.0\n");
  const std::string window = PlanGrid(*plan, &mark, GridWindow{1, 1, 2, 5});
  EXPECT_EQ(window,
            "steps 2..3 of 4, stages 1..1 of 2\n"
            "step     2      3\n"
            "stage 1 [1B0.1] 1B0.0\n");
}

}  // namespace
}  // namespace stateflow::schedule

// ---- virtual stages -------------------------------------------------------

namespace stateflow::schedule {
namespace {

// An interleaved plan with its lists edited.
Plan Edited(const Plan& plan, Lists lists) {
  return Plan(plan.policy(), plan.stages(), plan.microbatches(), plan.chunks(), std::move(lists),
              plan.virtual_stages(), plan.placement());
}

std::size_t IndexOf(const std::vector<Action>& list, const Action& x) {
  return static_cast<std::size_t>(std::find(list.begin(), list.end(), x) - list.begin());
}

TEST(ValidatorVirtualStages, ABackwardBeforeItsForwardOnTheSameModelStage) {
  Result<Plan> plan = MakePlan("interleaved", 2, 4, 1, 2);
  ASSERT_TRUE(plan.ok());
  Lists lists = plan->per_stage();
  // Rank 1's first backward is of model stage 3 (its last); move it first.
  std::vector<Action>& rank1 = lists[1];
  const auto first_b = std::find_if(rank1.begin(), rank1.end(),
                                    [](const Action& x) { return x.pass == Pass::kBackward; });
  ASSERT_NE(first_b, rank1.end());
  EXPECT_EQ(first_b->stage, 3);
  std::rotate(rank1.begin(), first_b, first_b + 1);
  const Status s = ValidatePlan(Edited(*plan, lists));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rule 3"), std::string::npos) << s.message();
}

TEST(ValidatorVirtualStages, AnActionOnTheWrongStageNamesThePlacement) {
  Result<Plan> plan = MakePlan("interleaved", 2, 2, 1, 2);
  ASSERT_TRUE(plan.ok());
  Lists lists = plan->per_stage();
  lists[0][0].stage = 1;  // model stage 1 sits on stage 1
  const Status s = ValidatePlan(Edited(*plan, lists));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("names model stage 1, which placement loop puts on stage 1, but is "
                             "in the list of stage 0"),
            std::string::npos)
      << s.message();
}

TEST(ValidatorVirtualStages, TwoModelStagesOnOneRankKeepRule1ByPosition) {
  // P = 1, v = 2: model stages 0 and 1 both on stage 0.
  Result<Plan> plan = MakePlan("interleaved", 1, 2, 1, 2);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(ValidatePlan(*plan).ok());
  Lists lists = plan->per_stage();
  std::vector<Action>& only = lists[0];
  const std::size_t f0 = IndexOf(only, {0, Pass::kForward, 0, 0});
  const std::size_t f1 = IndexOf(only, {1, Pass::kForward, 0, 0});
  ASSERT_LT(f0, f1);
  std::swap(only[f0], only[f1]);
  const Status s = ValidatePlan(Edited(*plan, lists));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rule 1"), std::string::npos) << s.message();
}

TEST(ValidatorVirtualStages, ACycleThroughTheLoopNamesEveryStageOfIt) {
  // P = 3, v = 2: stage 0 starts with model stage 3's forward (waits for
  // stage 2's model stage 2), stage 2 with model stage 2's (waits for stage
  // 1), stage 1 with model stage 1's (waits for stage 0's model stage 0,
  // which is behind model stage 3's on stage 0).
  Result<Plan> plan = MakePlan("interleaved", 3, 3, 1, 2);
  ASSERT_TRUE(plan.ok());
  Lists lists = plan->per_stage();
  std::vector<Action>& rank0 = lists[0];
  const std::size_t f3 = IndexOf(rank0, {3, Pass::kForward, 0, 0});
  ASSERT_LT(f3, rank0.size());
  std::rotate(rank0.begin(), rank0.begin() + static_cast<std::ptrdiff_t>(f3),
              rank0.begin() + static_cast<std::ptrdiff_t>(f3) + 1);
  const Status s = ValidatePlan(Edited(*plan, lists));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("deadlock: a cycle of 3 stages"), std::string::npos) << s.message();
}

TEST(ValidatorVirtualStages, TheTextFormRoundTripsAndChecksThePlacement) {
  Result<Plan> plan = MakePlan("interleaved", 2, 2, 2, 3);
  ASSERT_TRUE(plan.ok());
  const std::string text = PlanToText(*plan);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "plan interleaved stages 2 microbatches 2 chunks 2 virtual_stages 3 placement loop");
  Result<Plan> back = ParsePlanText(text, "p.plan");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, *plan);
  // Model stage 1 on stage 0's line.
  Result<Plan> wrong = ParsePlanText(
      "plan x stages 2 microbatches 1 chunks 1 virtual_stages 2 placement loop\n"
      "stage 0: 1F0.0\nstage 1: 1F0.0\n",
      "w.plan");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(),
            "w.plan:2:10: action 1F0.0 names model stage 1, which placement loop puts on stage 1, "
            "on the line of stage 0");
  Result<Plan> v3 = ParsePlanText(
      "plan x stages 2 microbatches 1 chunks 1 virtual_stages 3 placement v\n", "v.plan");
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.status().message().find("placement v needs virtual_stages 2"), std::string::npos)
      << v3.status().message();
}

}  // namespace
}  // namespace stateflow::schedule

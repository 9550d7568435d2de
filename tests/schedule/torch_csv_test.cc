#include "schedule/torch_csv.h"

#include <gtest/gtest.h>

#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/validator.h"

namespace stateflow::schedule {
namespace {

// torch's ScheduleGPipe and Schedule1F1B for 2 ranks and 2 microbatches, as
// its _dump_csv writes them (one row per rank).
constexpr char k1F1B[] = "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";

TEST(TorchCsv, OurPlansRoundTrip) {
  for (const char* policy : {"gpipe", "1f1b", "stateflow"}) {
    for (int N : {1, 3}) {
      if (std::string(policy) == "1f1b" && N != 1) continue;
      Result<Plan> plan = MakePlan(policy, 4, 3, N);
      ASSERT_TRUE(plan.ok());
      const std::string csv = PlanToTorchCsv(*plan);
      Result<Plan> back = ParseTorchCsv(csv, "x.csv", N, policy);
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(*back, *plan) << csv;
      EXPECT_TRUE(LooksLikeTorchCsv(csv));
      EXPECT_FALSE(LooksLikeTorchCsv(PlanToText(*plan)));
    }
  }
}

// Torch's multi-stage schedules: a rank's row names several model stages.
// Our interleaved (a loop) and zbv (a V) plans go out and come back with
// their v and placement, and read as valid plans.
TEST(TorchCsv, VirtualStagesRoundTripInALoopAndAV) {
  struct Case {
    const char* policy;
    int P, M, N, v;
    StagePlacement placement;
  };
  for (const Case& c : {Case{"interleaved", 2, 4, 1, 2, StagePlacement::kLoop},
                        Case{"interleaved", 3, 3, 2, 3, StagePlacement::kLoop},
                        Case{"interleaved", 4, 4, 1, 4, StagePlacement::kLoop},
                        Case{"zbv", 2, 4, 1, 2, StagePlacement::kVShape},
                        Case{"zbv", 4, 8, 2, 2, StagePlacement::kVShape},
                        Case{"zbv", 1, 2, 2, 2, StagePlacement::kVShape}}) {
    SCOPED_TRACE(std::string(c.policy) + " P " + std::to_string(c.P));
    Result<Plan> plan = MakePlan(c.policy, c.P, c.M, c.N, c.v);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const std::string csv = PlanToTorchCsv(*plan);
    Result<Plan> back = ParseTorchCsv(csv, "x.csv", c.N, c.policy);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->virtual_stages(), c.v);
    // At P = 1 the V is also a loop; the loop is taken.
    EXPECT_EQ(back->placement(), c.P == 1 ? StagePlacement::kLoop : c.placement);
    if (c.P > 1) {
      EXPECT_EQ(*back, *plan) << csv;
    }
    EXPECT_TRUE(ValidatePlan(*back).ok()) << ValidatePlan(*back).message();
  }
}

// Written by hand as torch lays them out: stages 0 and 2 on rank 0, 1 and
// 3 on rank 1 (torch's Interleaved1F1B, 2 ranks, 2 microbatches), and the
// V of ZBVZeroBubble (stages 0 and 3 on rank 0, 1 and 2 on rank 1) with
// split backwards, idle cells and communication actions.
TEST(TorchCsv, TorchsMultiStageLayoutsAreALoopAndAV) {
  const char loop[] =
      "0F0,0F1,2F0,,2F1,2B0,2B1,0B0,0B1\n"
      ",1F0,1F1,3F0,3B0,3F1,3B1,1B0,1B1\n";
  Result<Plan> a = ParseTorchCsv(loop, "loop.csv", 1);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->virtual_stages(), 2);
  EXPECT_EQ(a->placement(), StagePlacement::kLoop);
  EXPECT_EQ(a->ModelStageOf(0, 1), 2);
  EXPECT_TRUE(ValidatePlan(*a).ok()) << ValidatePlan(*a).message();
  const char v[] =
      "0F0,,,3F0,3I0,3W0,0I0,0W0\n"
      "1F0,2F0,2I0,1SEND_B0,2W0,1I0,1W0\n";
  Result<Plan> b = ParseTorchCsv(v, "v.csv", 1);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->virtual_stages(), 2);
  EXPECT_EQ(b->placement(), StagePlacement::kVShape);
  EXPECT_EQ(b->ModelStageOf(0, 1), 3);
  EXPECT_TRUE(ValidatePlan(*b).ok()) << ValidatePlan(*b).message();
  EXPECT_EQ(PlanToTorchCsv(*b), "0F0,3F0,3I0,3W0,0I0,0W0\n1F0,2F0,2I0,2W0,1I0,1W0\n");
  // The input-gradient backward written B beside its W, as the CSVs of
  // torch's own tests write it: the same plan.
  Result<Plan> c = ParseTorchCsv("0F0,3F0,3B0,3W0,0B0,0W0\n1F0,2F0,2B0,2W0,1B0,1W0\n", "b.csv", 1);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c, *b);
}

TEST(TorchCsv, TorchsOneFOneBIsOurs) {
  Result<Plan> plan = ParseTorchCsv(k1F1B, "1f1b.csv", 1, "1f1b");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(*plan, *MakePlan("1f1b", 2, 2, 1));
  // Chunks: torch's microbatch m is our unit (m / N, m % N).
  Result<Plan> chunked = ParseTorchCsv(k1F1B, "1f1b.csv", 2, "t");
  ASSERT_TRUE(chunked.ok());
  EXPECT_EQ(chunked->microbatches(), 1);
  EXPECT_EQ(ToString(chunked->stage(0)[1]), "0F0.1");
}

TEST(TorchCsv, SplitBackwardsAreIAndWAndIdleCellsAndCommsAreSkipped) {
  // ZB-H1's shape for 2 ranks, 2 microbatches (B split into I and W), with
  // idle steps and torch's communication actions as written by its lowering.
  const char csv[] = "0F0,0F1,,0I0,0W0,0I1,0W1\n1F0,1SEND_B0,1I0,1F1,1I1,1W0,1W1\n";
  Result<Plan> plan = ParseTorchCsv(csv, "zb.csv", 1, "zb-h1");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(ValidatePlan(*plan).ok()) << ValidatePlan(*plan).message();
  EXPECT_EQ(PlanGrid(*plan).find("SEND"), std::string::npos);
  EXPECT_EQ(PlanToTorchCsv(*plan), "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n");
}

TEST(TorchCsv, BadInputIsOneLineNamingRowAndCell) {
  auto message = [](const char* csv, int N = 1) {
    return ParseTorchCsv(csv, "s.csv", N).status().message();
  };
  EXPECT_EQ(message("0F0,0X1\n"),
            "s.csv:1:2: '0X1' is not a torch action (<stage><F|I|B|W><microbatch>, e.g. 0F3)");
  EXPECT_EQ(message("0F0,0B0\n0F1\n"),
            "s.csv:2:1: action 0F1 is on stage 0 but its row is rank 1: with 2 ranks and 2 model "
            "stages, stage s runs on rank s mod 2");
  EXPECT_EQ(message("0F0,2F0\n1F0\n"),
            "s.csv:1:2: action 2F0 names stage 2, so the plan has 3 model stages: not the same "
            "number on each of its 2 ranks (rows)");
  // Neither a loop nor a V: the first cell off the placement the cells
  // before it fit (3 is in the V on rank 0; 1 then is on rank 0 too).
  EXPECT_EQ(message("0F0,3F0,1F0\n2F0\n"),
            "s.csv:1:3: action 1F0 is on stage 1 but its row is rank 0: with 2 ranks and 4 model "
            "stages, stage s runs on rank s mod 2 (a loop) or, in a V, stages r and 3 - r on "
            "rank r");
  EXPECT_EQ(message("0F0,3F0\n1F0,5F0\n"),
            "s.csv:1:2: action 3F0 is on stage 3 but its row is rank 0: with 2 ranks and 6 model "
            "stages, stage s runs on rank s mod 2");
  EXPECT_EQ(message("0F\n"), "s.csv:1:1: action 0F names no microbatch");
  EXPECT_EQ(message("0F0,0B0,0F1,0I1,0W1\n"),
            "s.csv: mixes backwards written B (first at s.csv:1:2) with backwards written I (first "
            "at s.csv:1:4): a plan splits every backward or none");
  // B beside W is read as I; a backward without its W is the validator's.
  Result<Plan> partial = ParseTorchCsv("0F0,0B0,0W0,0F1,0B1\n", "s.csv", 1);
  ASSERT_TRUE(partial.ok()) << partial.status().message();
  EXPECT_NE(ValidatePlan(*partial).message().find("missing action 0W1.0"), std::string::npos)
      << ValidatePlan(*partial).message();
  EXPECT_EQ(message("0F0,0F1,0F2\n", 2),
            "s.csv: 3 torch microbatches are not 2 chunks each of whole microbatches");
  EXPECT_EQ(message("\n\n"), "s.csv: no rows (one row of actions per rank)");
  EXPECT_EQ(message("0UNSHARD\n"), "s.csv: no compute actions (F, I, B, W)");
  // Well-formed but out of order: the validator names the rule.
  Result<Plan> swapped = ParseTorchCsv("0B0,0F0\n", "s.csv", 1);
  ASSERT_TRUE(swapped.ok());
  EXPECT_NE(ValidatePlan(*swapped).message().find("rule 3"), std::string::npos);
}

}  // namespace
}  // namespace stateflow::schedule

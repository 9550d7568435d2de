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
            "s.csv:2:1: action 0F1 is on stage 0 but its row is rank 1: one model stage per "
            "rank only (virtual stages: issue 27)");
  EXPECT_EQ(message("0F\n"), "s.csv:1:1: action 0F names no microbatch");
  EXPECT_EQ(message("0F0,0B0,0F1,0I1,0W1\n"),
            "s.csv: mixes full backwards (B, first at s.csv:1:2) with split ones (I and W, first "
            "at s.csv:1:4): a plan splits every backward or none");
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

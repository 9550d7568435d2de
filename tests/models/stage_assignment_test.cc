// AssignStages against brute-force enumeration of every contiguous cut.
#include <algorithm>
#include <functional>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "models/model.h"

namespace stateflow::models {
namespace {

double StageCost(const std::vector<double>& costs, const StageLayers& st) {
  double total = 0;
  for (int l = st.first; l < st.last; ++l) total += costs[l];
  return total;
}

double MaxStageCost(const std::vector<double>& costs,
                    const std::vector<StageLayers>& stages) {
  double worst = 0;
  for (const StageLayers& st : stages) worst = std::max(worst, StageCost(costs, st));
  return worst;
}

// Tries every set of stages-1 cut points among the layer list's inner
// boundaries 2..n-2 (so that stage 0 holds the embedding and a block, and the
// last stage a block and the head); returns the smallest maximum stage cost.
double BruteForceBest(const std::vector<double>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  std::vector<int> cut(stages - 1);
  double best = std::numeric_limits<double>::infinity();
  // Recursive enumeration of increasing cut points.
  std::function<void(int, int)> rec = [&](int k, int from) {
    if (k == stages - 1) {
      std::vector<StageLayers> st(stages);
      int start = 0;
      for (int r = 0; r < stages; ++r) {
        st[r].first = start;
        st[r].last = r + 1 < stages ? cut[r] : n;
        start = st[r].last;
      }
      best = std::min(best, MaxStageCost(costs, st));
      return;
    }
    for (int c = from; c <= n - 2; ++c) {
      cut[k] = c;
      rec(k + 1, c + 1);
    }
  };
  rec(0, 2);
  return best;
}

void ExpectWellFormed(const std::vector<StageLayers>& st, int num_layers) {
  ASSERT_FALSE(st.empty());
  EXPECT_EQ(st.front().first, 0);
  EXPECT_EQ(st.back().last, num_layers);
  for (size_t r = 0; r < st.size(); ++r) {
    if (r > 0) {
      EXPECT_EQ(st[r].first, st[r - 1].last);
    }
    // At least one block: [first, last) minus the embedding and head.
    const int blocks = (st[r].last - st[r].first) - (st[r].first == 0) -
                       (st[r].last == num_layers);
    EXPECT_GE(blocks, 1) << "stage " << r;
  }
}

TEST(AssignStages, ExactAgainstBruteForceIntegerCosts) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    const int blocks = 1 + static_cast<int>(rng() % 9);
    const int stages = 1 + static_cast<int>(rng() % blocks);
    std::vector<double> costs(blocks + 2);
    for (double& c : costs) c = static_cast<double>(rng() % 20);
    Result<std::vector<StageLayers>> st = AssignStages(costs, stages);
    ASSERT_TRUE(st.ok()) << st.status().message();
    ASSERT_EQ(static_cast<int>(st->size()), stages);
    ExpectWellFormed(*st, blocks + 2);
    EXPECT_EQ(MaxStageCost(costs, *st), BruteForceBest(costs, stages))
        << "trial " << trial << " blocks " << blocks << " stages " << stages;
  }
}

TEST(AssignStages, ExactAgainstBruteForceRealCosts) {
  std::mt19937_64 rng(777);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int blocks = 2 + static_cast<int>(rng() % 8);
    const int stages = 1 + static_cast<int>(rng() % blocks);
    std::vector<double> costs(blocks + 2);
    for (double& c : costs) c = u(rng);
    Result<std::vector<StageLayers>> st = AssignStages(costs, stages);
    ASSERT_TRUE(st.ok());
    ExpectWellFormed(*st, blocks + 2);
    const double best = BruteForceBest(costs, stages);
    EXPECT_NEAR(MaxStageCost(costs, *st), best, 1e-12 * best);
  }
}

TEST(AssignStages, PaperScaleIsOneBlockPerStageAndFast) {
  // 64 blocks on 64 stages: each stage exactly one block.
  std::vector<double> costs(66, 1.0);
  Result<std::vector<StageLayers>> st = AssignStages(costs, 64);
  ASSERT_TRUE(st.ok());
  ExpectWellFormed(*st, 66);
  EXPECT_EQ(MaxStageCost(costs, *st), 2.0);  // a block plus embedding or head
}

TEST(AssignStages, HeavyHeadGetsItsOwnStageWithOneBlock) {
  // Uniform blocks, a head as heavy as 10 blocks: the last stage keeps one.
  std::vector<double> costs(34, 1.0);
  costs.back() = 10.0;
  Result<std::vector<StageLayers>> st = AssignStages(costs, 4);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->back().last - st->back().first, 2);
  // The remaining 31 blocks plus the embedding on 3 stages: ceil(32/3) = 11.
  EXPECT_EQ(MaxStageCost(costs, *st), 11.0);
}

TEST(AssignStages, Errors) {
  std::vector<double> costs(6, 1.0);  // 4 blocks
  Result<std::vector<StageLayers>> too_many = AssignStages(costs, 5);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("parallel.pipeline_size (5)"),
            std::string::npos);
  EXPECT_NE(too_many.status().message().find("model.num_layers (4)"),
            std::string::npos);
  EXPECT_FALSE(AssignStages(costs, 0).ok());
  costs[3] = -1;
  Result<std::vector<StageLayers>> negative = AssignStages(costs, 2);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("layer_costs[3]"),
            std::string::npos);
  EXPECT_FALSE(AssignStages({1.0, 1.0}, 1).ok());
}

}  // namespace
}  // namespace stateflow::models

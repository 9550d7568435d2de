#include "schedule/partition.h"

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stateflow::schedule {
namespace {

// Reference model, written independently of partition.cc: Acc by its
// definition, its inverse by bisection.
double RefAcc(double c, const ChunkCostCoefficients& k) {
  return k.per_token * c + k.per_pair * c * c / 2;
}

std::vector<double> RefBalanced(std::int64_t T, int N, const ChunkCostCoefficients& k) {
  std::vector<double> c(N + 1);
  for (int i = 0; i <= N; ++i) {
    const double target = RefAcc(static_cast<double>(T), k) * i / N;
    double lo = 0, hi = static_cast<double>(T);
    for (int iter = 0; iter < 200; ++iter) {
      const double mid = (lo + hi) / 2;
      (RefAcc(mid, k) < target ? lo : hi) = mid;
    }
    c[i] = (lo + hi) / 2;
  }
  return c;
}

// (1 - alpha) i T / N + alpha c_i^balanced, from the reference model.
std::vector<double> RefInterpolated(std::int64_t T, int N, double alpha,
                                    const ChunkCostCoefficients& k) {
  const std::vector<double> h = RefBalanced(T, N, k);
  std::vector<double> c(N + 1);
  for (int i = 0; i <= N; ++i) {
    c[i] = (1 - alpha) * (static_cast<double>(i) * T / N) + alpha * h[i];
  }
  return c;
}

std::string Describe(std::int64_t T, int N, double alpha, const ChunkCostCoefficients& k,
                     int g) {
  return "T=" + std::to_string(T) + " N=" + std::to_string(N) + " alpha=" +
         std::to_string(alpha) + " W_tok=" + std::to_string(k.per_token) +
         " W_soft=" + std::to_string(k.per_pair) + " g=" + std::to_string(g);
}

// The partition's own structural promises.
void ExpectWellFormed(const Partition& p, std::int64_t T, int N, int g, const std::string& what) {
  ASSERT_EQ(p.num_chunks(), N) << what;
  EXPECT_EQ(p.start(0), 0) << what;
  EXPECT_EQ(p.seq_len(), T) << what;
  for (int i = 0; i < N; ++i) EXPECT_GT(p.length(i), 0) << what << " chunk " << i;
  for (int i = 1; i < N; ++i) EXPECT_EQ(p.start(i) % g, 0) << what << " boundary " << i;
  EXPECT_TRUE(MakeFromBoundaries(p.boundaries()).ok()) << what;
}

const ChunkCostCoefficients kCoefficientSets[] = {
    {1.0, 0.0}, {1.0, 1e-6}, {1.0, 1e-4}, {1.0, 1e-2}, {3.5, 2e-3}, {0.0, 1.0}};

TEST(PartitionTest, AlphaZeroIsEqualRoundedToGranularity) {
  const std::int64_t lengths[] = {65536, 100003, 32768, 4096, 1000};
  const int counts[] = {1, 2, 3, 7, 8};
  const int granularities[] = {1, 64, 128};
  for (std::int64_t T : lengths) {
    for (int N : counts) {
      for (int g : granularities) {
        for (const ChunkCostCoefficients& k : kCoefficientSets) {
          const std::string what = Describe(T, N, 0.0, k, g);
          Result<Partition> p = MakePartition(T, N, 0.0, k, g);
          ASSERT_TRUE(p.ok()) << what << ": " << p.status().message();
          ExpectWellFormed(*p, T, N, g, what);
          for (int i = 1; i < N; ++i) {
            // Nearest multiple of g to i T / N, halves up, in integers.
            const std::int64_t num = static_cast<std::int64_t>(i) * T;
            const std::int64_t den = static_cast<std::int64_t>(N) * g;
            EXPECT_EQ(p->start(i), (2 * num + den) / (2 * den) * g) << what << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(PartitionTest, PerPairZeroMakesBalancedEqual) {
  for (int N : {1, 2, 5, 16}) {
    EXPECT_EQ(BalancedBoundaries(65536, N, {2.0, 0.0}), EqualBoundaries(65536, N));
    for (double alpha : {0.5, 1.0, 1.25, 3.0}) {
      Result<Partition> p = MakePartition(65536, N, alpha, {2.0, 0.0}, 128);
      Result<Partition> equal = MakePartition(65536, N, 0.0, {2.0, 0.0}, 128);
      ASSERT_TRUE(p.ok() && equal.ok());
      EXPECT_EQ(p->boundaries(), equal->boundaries()) << "N=" << N << " alpha=" << alpha;
    }
  }
}

TEST(PartitionTest, EqualBoundariesAreITOverN) {
  const std::vector<double> c = EqualBoundaries(1000, 8);
  ASSERT_EQ(c.size(), 9u);
  for (int i = 0; i <= 8; ++i) EXPECT_DOUBLE_EQ(c[i], 125.0 * i);
}

// The closed form solves Acc(c_i) = (i/N) Acc(T) to rounding error, also
// when W_soft << W_tok (where the textbook root formula cancels) and when
// W_tok = 0.
TEST(PartitionTest, BalancedBoundariesSolveTheQuadraticAccurately) {
  const double ratios[] = {1e-16, 1e-12, 1e-8, 1e-4, 1.0, 1e4, 1e12};
  for (double ratio : ratios) {
    for (const ChunkCostCoefficients k : {ChunkCostCoefficients{1.0, ratio},
                                          ChunkCostCoefficients{0.0, ratio}}) {
      const std::int64_t T = 131072;
      const int N = 16;
      const std::vector<double> c = BalancedBoundaries(T, N, k);
      ASSERT_EQ(c.size(), static_cast<std::size_t>(N + 1));
      EXPECT_EQ(c[0], 0.0);
      EXPECT_EQ(c[N], static_cast<double>(T));
      const double total = RefAcc(static_cast<double>(T), k);
      for (int i = 1; i < N; ++i) {
        EXPECT_GT(c[i], c[i - 1]);
        EXPECT_NEAR(RefAcc(c[i], k), total * i / N, 1e-14 * total)
            << "W_tok=" << k.per_token << " W_soft=" << k.per_pair << " i=" << i;
      }
    }
  }
}

// At granularity 1 the boundaries are the real ones c_i(alpha), rounded to
// the nearest integer, compared with the bisection reference.
TEST(PartitionTest, GranularityOneGivesTheRoundedRealBoundaries) {
  const double alphas[] = {0.0, 0.3, 1.0, 1.25};
  for (const ChunkCostCoefficients& k : kCoefficientSets) {
    for (double alpha : alphas) {
      for (int N : {2, 5, 8, 13}) {
        const std::int64_t T = 50021;
        const std::string what = Describe(T, N, alpha, k, 1);
        Result<Partition> p = MakePartition(T, N, alpha, k, 1);
        ASSERT_TRUE(p.ok()) << what << ": " << p.status().message();
        ExpectWellFormed(*p, T, N, 1, what);
        const std::vector<double> c = RefInterpolated(T, N, alpha, k);
        for (int i = 1; i < N; ++i) {
          EXPECT_LE(std::abs(static_cast<double>(p->start(i)) - c[i]), 0.5 + 1e-6)
              << what << " i=" << i << " real " << c[i];
          const double frac = c[i] - std::floor(c[i]);
          if (std::abs(frac - 0.5) > 1e-6) {
            EXPECT_EQ(p->start(i), std::llround(c[i])) << what << " i=" << i;
          }
        }
      }
    }
  }
}

// With alpha = 1, Cost_i = Acc(T) / N up to the rounding of both ends of the
// chunk: moving a boundary by at most g/2 changes Acc by at most
// Acc'(c + g/2) g/2 with Acc'(c) = W_tok + W_soft c.
TEST(PartitionTest, BalancedCostsAreEqualWithinTheRoundingBound) {
  int checked = 0;
  for (std::int64_t T : {32768LL, 65536LL, 100003LL, 131072LL}) {
    for (int N : {2, 4, 8, 16, 32}) {
      for (int g : {1, 64, 128}) {
        for (const ChunkCostCoefficients& k : kCoefficientSets) {
          const std::string what = Describe(T, N, 1.0, k, g);
          const std::vector<double> h = RefBalanced(T, N, k);
          bool separated = true;  // every real chunk >= 2g: no repair needed
          for (int i = 0; i < N; ++i) separated = separated && h[i + 1] - h[i] >= 2.0 * g;
          if (!separated) continue;
          Result<Partition> p = MakePartition(T, N, 1.0, k, g);
          ASSERT_TRUE(p.ok()) << what << ": " << p.status().message();
          ExpectWellFormed(*p, T, N, g, what);
          const double ideal = RefAcc(static_cast<double>(T), k) / N;
          auto slack = [&](int i) {  // bound on |Acc(c_i) - Acc(h_i)|
            if (i == 0 || i == N) return 0.0;
            return (k.per_token + k.per_pair * (h[i] + g / 2.0)) * g / 2.0;
          };
          for (int i = 0; i < N; ++i) {
            EXPECT_LE(std::abs(static_cast<double>(p->start(i)) - h[i]), g / 2.0 + 1e-6);
            EXPECT_LE(std::abs(p->ChunkCost(i, k) - ideal),
                      slack(i) + slack(i + 1) + 1e-9 * ideal)
                << what << " chunk " << i;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(PartitionTest, BalancingNarrowsTheCostSpreadOfHybrids) {
  const ChunkCostCoefficients k{1.0, 1e-3};
  auto spread = [&](double alpha) {
    Result<Partition> p = MakePartition(65536, 8, alpha, k, 128);
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (int i = 0; i < 8; ++i) {
      lo = std::min(lo, p->ChunkCost(i, k));
      hi = std::max(hi, p->ChunkCost(i, k));
    }
    return hi - lo;
  };
  EXPECT_LT(spread(1.0), spread(0.5));
  EXPECT_LT(spread(0.5), spread(0.0));
}

TEST(PartitionTest, ChunkCostIsTheDifferenceOfAccumulatedCosts) {
  const ChunkCostCoefficients k{2.0, 3e-3};
  Result<Partition> p = MakePartition(10000, 6, 0.7, k, 64);
  ASSERT_TRUE(p.ok());
  double sum = 0;
  for (int i = 0; i < 6; ++i) {
    const double c = static_cast<double>(p->start(i));
    const double next = static_cast<double>(p->start(i) + p->length(i));
    EXPECT_NEAR(p->ChunkCost(i, k), RefAcc(next, k) - RefAcc(c, k), 1e-9 * RefAcc(next, k));
    sum += p->ChunkCost(i, k);
  }
  EXPECT_NEAR(sum, RefAcc(10000, k), 1e-12 * RefAcc(10000, k));
}

// alpha > 1 (up to absurd values) and random shapes always give a valid
// partition; boundaries that need no repair are the rounded real ones.
TEST(PartitionTest, AlphaAboveOneAlwaysGivesAValidPartition) {
  std::mt19937 rng(1234);
  const double alphas[] = {1.0, 1.25, 2.0, 5.0, 100.0, 1e6, 1e300};
  for (int trial = 0; trial < 300; ++trial) {
    const int g = std::uniform_int_distribution<int>(1, 256)(rng);
    const int N = std::uniform_int_distribution<int>(1, 40)(rng);
    const std::int64_t T =
        std::uniform_int_distribution<std::int64_t>((N - 1) * static_cast<std::int64_t>(g) + 1,
                                                    300000)(rng);
    const ChunkCostCoefficients& k = kCoefficientSets[trial % 6];
    for (double alpha : alphas) {
      const std::string what = Describe(T, N, alpha, k, g);
      Result<Partition> p = MakePartition(T, N, alpha, k, g);
      ASSERT_TRUE(p.ok()) << what << ": " << p.status().message();
      ExpectWellFormed(*p, T, N, g, what);
      const std::vector<double> c = RefInterpolated(T, N, alpha, k);
      bool needs_repair = false;
      std::vector<double> rounded(N + 1);
      for (int i = 1; i < N; ++i) {
        rounded[i] = std::round(c[i] / g) * g;
        needs_repair = needs_repair || rounded[i] <= rounded[i - 1] ||
                       rounded[i] >= static_cast<double>(T) ||
                       std::abs(c[i] / g - std::floor(c[i] / g) - 0.5) < 1e-6;
      }
      if (needs_repair || alpha > 100) continue;
      for (int i = 1; i < N; ++i) {
        EXPECT_EQ(static_cast<double>(p->start(i)), rounded[i]) << what << " i=" << i;
      }
    }
  }
}

// A huge alpha pushes every inner boundary past T; the documented repair
// clamps them to the last multiple K g below T and spreads them downward,
// leaving N - 2 chunks of exactly g and a last chunk of T - K g.
TEST(PartitionTest, HugeAlphaSaturatesAtTheEnd) {
  const std::int64_t T = 65536;
  const int N = 8, g = 128;
  const ChunkCostCoefficients k{1.0, 1e-4};
  const double alpha = 1e6;
  const std::vector<double> c = RefInterpolated(T, N, alpha, k);
  for (int i = 1; i < N; ++i) ASSERT_GT(c[i], static_cast<double>(T)) << "precondition";
  Result<Partition> p = MakePartition(T, N, alpha, k, g);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const std::int64_t K = (T - 1) / g;
  for (int i = 1; i < N; ++i) EXPECT_EQ(p->start(i), (K - (N - 1 - i)) * g) << "i=" << i;
}

TEST(PartitionTest, FeasibilityIsExactlyNMinusOneInnerMultiples) {
  for (int g : {1, 2, 128}) {
    for (int N : {1, 2, 4, 9}) {
      // The smallest T with N - 1 multiples of g strictly inside (0, T).
      const std::int64_t T = static_cast<std::int64_t>(N - 1) * g + 1;
      Result<Partition> p = MakePartition(T, N, 0.5, {1.0, 1e-3}, g);
      ASSERT_TRUE(p.ok()) << "T=" << T << " N=" << N << " g=" << g;
      ExpectWellFormed(*p, T, N, g, "minimal T");
      if (T - 1 >= 1 && N > 1) {
        Result<Partition> too_short = MakePartition(T - 1, N, 0.5, {1.0, 1e-3}, g);
        ASSERT_FALSE(too_short.ok()) << "T=" << T - 1 << " N=" << N << " g=" << g;
        EXPECT_NE(too_short.status().message().find("cannot be cut"), std::string::npos);
      }
    }
  }
}

TEST(PartitionTest, BadInputsNameTheField) {
  struct Case {
    std::int64_t seq_len;
    int chunks;
    double alpha;
    ChunkCostCoefficients k;
    int granularity;
    const char* field;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Case cases[] = {
      {0, 4, 0.5, {1, 0}, 128, "seq_len"},
      {-5, 4, 0.5, {1, 0}, 128, "seq_len"},
      {4096, 0, 0.5, {1, 0}, 128, "schedule.chunks"},
      {4096, -1, 0.5, {1, 0}, 128, "schedule.chunks"},
      {4096, 4, -0.1, {1, 0}, 128, "schedule.alpha"},
      {4096, 4, nan, {1, 0}, 128, "schedule.alpha"},
      {4096, 4, inf, {1, 0}, 128, "schedule.alpha"},
      {4096, 4, 0.5, {1, 0}, 0, "schedule.granularity"},
      {4096, 4, 0.5, {1, 0}, -128, "schedule.granularity"},
      {4096, 4, 0.5, {-1, 0}, 128, "per_token"},
      {4096, 4, 0.5, {nan, 0}, 128, "per_token"},
      {4096, 4, 0.5, {1, -1e-3}, 128, "per_pair"},
      {4096, 4, 0.5, {1, inf}, 128, "per_pair"},
      {4096, 4, 0.5, {0, 0}, 128, "per_token"},
      {300, 4, 0.5, {1, 0}, 128, "seq_len 300 cannot be cut into 4 non-empty chunks at granularity 128"},
  };
  for (const Case& c : cases) {
    Result<Partition> p = MakePartition(c.seq_len, c.chunks, c.alpha, c.k, c.granularity);
    ASSERT_FALSE(p.ok()) << c.field;
    EXPECT_EQ(p.status().code(), Status::Code::kInvalidInput);
    EXPECT_NE(p.status().message().find(c.field), std::string::npos)
        << p.status().message() << " lacks " << c.field;
    EXPECT_EQ(p.status().message().find('\n'), std::string::npos);
  }
}

TEST(PartitionTest, FromBoundariesChecksItsInput) {
  Result<Partition> ok = MakeFromBoundaries({0, 100, 250, 300});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->num_chunks(), 3);
  EXPECT_EQ(ok->length(1), 150);
  struct Case {
    std::vector<std::int64_t> boundaries;
    const char* problem;
  };
  const Case cases[] = {
      {{}, "at least 2 values"},
      {{0}, "at least 2 values"},
      {{5, 10}, "boundaries[0] must be 0"},
      {{0, 10, 10}, "boundaries[2] = 10 must be greater than boundaries[1] = 10"},
      {{0, 5, 3}, "boundaries[2] = 3"},
  };
  for (const Case& c : cases) {
    Result<Partition> p = MakeFromBoundaries(c.boundaries);
    ASSERT_FALSE(p.ok()) << c.problem;
    EXPECT_NE(p.status().message().find(c.problem), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace stateflow::schedule

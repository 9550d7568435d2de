#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "schedule/plan.h"
#include "schedule/policies.h"
#include "schedule/validator.h"
#include "tests/schedule/plan_testing.h"

namespace stateflow::schedule {
namespace {

using testing::Describe;
using testing::PassPattern;

// Forwards before the first backward.
long long LeadingForwards(const std::vector<Action>& actions) {
  long long n = 0;
  while (n < static_cast<long long>(actions.size()) && actions[n].pass == Pass::kForward) ++n;
  return n;
}

// Most units whose forward has run and backward has not (the paper's count
// of retained chunk activations).
long long PeakInFlight(const std::vector<Action>& actions) {
  long long now = 0, peak = 0;
  for (const Action& x : actions) {
    now += x.pass == Pass::kForward ? 1 : -1;
    peak = std::max(peak, now);
  }
  return peak;
}

// The documented orders: forwards (microbatch, chunk) lexicographic;
// backwards microbatch by microbatch, last chunk first.
void ExpectDocumentedOrders(const Plan& plan, int r, const std::string& what) {
  std::vector<Action> forwards, backwards;
  for (const Action& x : plan.stage(r)) {
    (x.pass == Pass::kForward ? forwards : backwards).push_back(x);
  }
  const int M = plan.microbatches(), N = plan.chunks();
  ASSERT_EQ(forwards.size(), static_cast<std::size_t>(M * N)) << what;
  ASSERT_EQ(backwards.size(), static_cast<std::size_t>(M * N)) << what;
  for (int a = 0; a < M; ++a) {
    for (int i = 0; i < N; ++i) {
      EXPECT_EQ(forwards[a * N + i], (Action{r, Pass::kForward, a, i})) << what;
      EXPECT_EQ(backwards[a * N + i], (Action{r, Pass::kBackward, a, N - 1 - i})) << what;
    }
  }
}

struct Shape {
  int P, M, N;
};

// 300 seeded shapes with P in 1..12, M in 1..16, N in 1..12, plus the
// corners of that box.
std::vector<Shape> RandomShapes() {
  std::mt19937 rng(20240601);
  std::vector<Shape> shapes = {{1, 1, 1}, {12, 16, 12}, {12, 1, 1}, {1, 16, 12}, {12, 1, 12}};
  while (shapes.size() < 300) {
    shapes.push_back({std::uniform_int_distribution<int>(1, 12)(rng),
                      std::uniform_int_distribution<int>(1, 16)(rng),
                      std::uniform_int_distribution<int>(1, 12)(rng)});
  }
  return shapes;
}

TEST(PoliciesTest, StateflowOverRandomShapes) {
  for (const Shape& s : RandomShapes()) {
    const std::string what = Describe("stateflow", s.P, s.M, s.N);
    Result<Plan> plan = MakePlan("stateflow", s.P, s.M, s.N);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
    EXPECT_EQ(plan->policy(), "stateflow");
    const Status valid = ValidatePlan(*plan);
    ASSERT_TRUE(valid.ok()) << what << ": " << valid.message();
    const long long units = static_cast<long long>(s.M) * s.N;
    EXPECT_EQ(plan->num_actions(), static_cast<std::size_t>(2 * units * s.P)) << what;
    for (int r = 0; r < s.P; ++r) {
      const std::vector<Action>& actions = plan->stage(r);
      ASSERT_EQ(actions.size(), static_cast<std::size_t>(2 * units)) << what;
      const long long warmup = std::min(units, static_cast<long long>(s.N) + s.P - r - 1);
      EXPECT_EQ(LeadingForwards(actions), warmup) << what << " stage " << r;
      EXPECT_EQ(StateflowWarmupForwards(s.P, s.M, s.N, r), warmup) << what;
      // Warm-up, then (B F) while forwards remain, then the other backwards.
      std::string pattern(warmup, 'F');
      for (long long j = 0; j < units - warmup; ++j) pattern += "BF";
      pattern += std::string(warmup, 'B');
      EXPECT_EQ(PassPattern(actions), pattern) << what << " stage " << r;
      // The paper's memory bound: min(MN, N + P - r - 1) chunks retained.
      EXPECT_EQ(PeakInFlight(actions), warmup) << what << " stage " << r;
      ExpectDocumentedOrders(*plan, r, what);
    }
  }
}

TEST(PoliciesTest, GpipeOverRandomShapes) {
  for (const Shape& s : RandomShapes()) {
    const std::string what = Describe("gpipe", s.P, s.M, s.N);
    Result<Plan> plan = MakePlan("gpipe", s.P, s.M, s.N);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
    const Status valid = ValidatePlan(*plan);
    ASSERT_TRUE(valid.ok()) << what << ": " << valid.message();
    const long long units = static_cast<long long>(s.M) * s.N;
    for (int r = 0; r < s.P; ++r) {
      EXPECT_EQ(PassPattern(plan->stage(r)),
                std::string(units, 'F') + std::string(units, 'B')) << what;
      ExpectDocumentedOrders(*plan, r, what);
    }
  }
}

TEST(PoliciesTest, OneFOneBOverRandomShapesEqualsStateflowWithOneChunk) {
  for (const Shape& s : RandomShapes()) {
    const std::string what = Describe("1f1b", s.P, s.M, 1);
    Result<Plan> plan = MakePlan("1f1b", s.P, s.M, 1);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
    const Status valid = ValidatePlan(*plan);
    ASSERT_TRUE(valid.ok()) << what << ": " << valid.message();
    for (int r = 0; r < s.P; ++r) {
      // Conventional 1F1B keeps min(M, P - r) microbatches in flight.
      EXPECT_EQ(LeadingForwards(plan->stage(r)), std::min(s.M, s.P - r)) << what;
      EXPECT_EQ(PeakInFlight(plan->stage(r)), std::min(s.M, s.P - r)) << what;
      EXPECT_EQ(plan->stage(r).size(), static_cast<std::size_t>(2 * s.M)) << what;
    }
    Result<Plan> stateflow = MakePlan("stateflow", s.P, s.M, 1);
    ASSERT_TRUE(stateflow.ok());
    EXPECT_EQ(plan->per_stage(), stateflow->per_stage()) << what;
  }
}

TEST(PoliciesTest, SmallPlansAgreeWithTheBruteForceChecker) {
  for (const std::string& policy : PolicyNames()) {
    for (int P = 1; P <= 4; ++P) {
      for (int M = 1; M <= 3; ++M) {
        for (int N = 1; N <= 3; ++N) {
          if (policy == "1f1b" && N != 1) continue;
          // The brute-force checker knows one model stage per stage; zbv's
          // V is checked by ValidatePlan (ZbvOverShapesValidates).
          if (DefaultVirtualStages(policy) > 1) continue;
          Result<Plan> plan = MakePlan(policy, P, M, N);
          ASSERT_TRUE(plan.ok());
          EXPECT_TRUE(testing::BruteForceValid(*plan)) << Describe(policy, P, M, N);
        }
      }
    }
  }
}

TEST(PoliciesTest, PolicyNames) {
  EXPECT_EQ(PolicyNames(), (std::vector<std::string>{"gpipe", "1f1b", "stateflow", "interleaved",
                                                      "zb-h1", "zb-h2", "zbv", "zb-interleaved"}));
  for (const std::string& name : PolicyNames()) {
    Result<Plan> plan = MakePlan(name, 2, 2, 1, DefaultVirtualStages(name));
    ASSERT_TRUE(plan.ok()) << name;
    EXPECT_EQ(plan->policy(), name);
    EXPECT_EQ(plan->stages(), 2);
    EXPECT_EQ(plan->microbatches(), 2);
    EXPECT_EQ(plan->chunks(), 1);
  }
}

// Interleaved 1F1B (virtual stages in a loop) over (P, M, N, v) with M N a
// multiple of P: every plan validates, every model stage runs its units'
// forwards in (microbatch, chunk) order and its backwards microbatch by
// microbatch, last chunk first, and at N = 1 rank r runs Megatron-Core's
// 2 (P - r - 1) + (v - 1) P + 1 forwards before its first backward.
TEST(PoliciesTest, InterleavedOverShapesValidates) {
  int checked = 0;
  for (int P = 1; P <= 8; ++P) {
    for (int v = 2; v <= 4; ++v) {
      for (int M = 1; M <= 12; ++M) {
        for (int N : {1, 2, 3, 5, 8}) {
          if ((M * N) % P != 0) continue;
          const std::string what = Describe("interleaved", P, M, N) + " v=" + std::to_string(v);
          Result<Plan> plan = MakePlan("interleaved", P, M, N, v);
          ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
          EXPECT_EQ(plan->virtual_stages(), v);
          EXPECT_EQ(plan->placement(), StagePlacement::kLoop);
          const Status valid = ValidatePlan(*plan);
          ASSERT_TRUE(valid.ok()) << what << ": " << valid.message() << "\n" << valid.detail();
          for (int s = 0; s < P * v; ++s) {
            std::vector<Action> forwards, backwards;
            for (const Action& x : plan->stage(plan->RankOf(s))) {
              if (x.stage == s) (x.pass == Pass::kForward ? forwards : backwards).push_back(x);
            }
            ASSERT_EQ(forwards.size(), static_cast<std::size_t>(M * N)) << what;
            ASSERT_EQ(backwards.size(), static_cast<std::size_t>(M * N)) << what;
            for (int a = 0; a < M; ++a) {
              for (int i = 0; i < N; ++i) {
                EXPECT_EQ(forwards[a * N + i], (Action{s, Pass::kForward, a, i})) << what;
                EXPECT_EQ(backwards[a * N + i], (Action{s, Pass::kBackward, a, N - 1 - i})) << what;
              }
            }
          }
          if (N == 1) {
            for (int r = 0; r < P; ++r) {
              const long long megatron = std::min<long long>(
                  static_cast<long long>(M) * v, 2LL * (P - r - 1) + (v - 1) * P + 1);
              EXPECT_EQ(LeadingForwards(plan->stage(r)), megatron) << what << " rank " << r;
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

// Most units whose forward has run and whose W has not (what a split
// backward keeps alive: the activations until I, the W's inputs after).
long long PeakAwaitingWeight(const std::vector<Action>& actions) {
  long long now = 0, peak = 0;
  for (const Action& x : actions) {
    if (x.pass == Pass::kForward) peak = std::max(peak, ++now);
    if (x.pass == Pass::kWeight) --now;
  }
  return peak;
}

// The zero-bubble policies over (P, M, N): every plan validates, splits
// every backward (a W for every B, after it), runs StateFlow's orders
// (forwards by (microbatch, chunk), backwards microbatch by microbatch, last
// chunk first, W in its B's order), and keeps at most the documented units
// waiting for their W: N + P - 1 for zb-h1 (StateFlow-1F1B's first stage,
// so 1F1B's peak), N + 2 (P - 1) for zb-h2, reached once the step has that
// many units.
TEST(PoliciesTest, ZeroBubbleOverShapesValidates) {
  int checked = 0;
  for (const std::string policy : {"zb-h1", "zb-h2"}) {
    for (int P = 1; P <= 7; ++P) {
      for (int M = 1; M <= 9; ++M) {
        for (int N : {1, 2, 3, 4, 7}) {
          const std::string what = Describe(policy, P, M, N);
          Result<Plan> plan = MakePlan(policy, P, M, N);
          ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
          EXPECT_EQ(plan->policy(), policy);
          EXPECT_TRUE(SplitsBackward(*plan)) << what;
          const Status valid = ValidatePlan(*plan);
          ASSERT_TRUE(valid.ok()) << what << ": " << valid.message() << "\n" << valid.detail();
          const long long units = static_cast<long long>(M) * N;
          const long long limit = policy == "zb-h1" ? N + P - 1 : N + 2LL * (P - 1);
          long long highest = 0;
          for (int r = 0; r < P; ++r) {
            std::vector<Action> forwards, backwards, weights;
            for (const Action& x : plan->stage(r)) {
              (x.pass == Pass::kForward ? forwards
               : x.pass == Pass::kBackward ? backwards : weights).push_back(x);
            }
            ASSERT_EQ(forwards.size(), static_cast<std::size_t>(units)) << what;
            ASSERT_EQ(backwards.size(), static_cast<std::size_t>(units)) << what;
            ASSERT_EQ(weights.size(), static_cast<std::size_t>(units)) << what;
            for (int a = 0; a < M; ++a) {
              for (int i = 0; i < N; ++i) {
                EXPECT_EQ(forwards[a * N + i], (Action{r, Pass::kForward, a, i})) << what;
                EXPECT_EQ(backwards[a * N + i], (Action{r, Pass::kBackward, a, N - 1 - i})) << what;
                EXPECT_EQ(weights[a * N + i], (Action{r, Pass::kWeight, a, N - 1 - i})) << what;
              }
            }
            const long long peak = PeakAwaitingWeight(plan->stage(r));
            EXPECT_LE(peak, limit) << what << " stage " << r;
            highest = std::max(highest, peak);
          }
          EXPECT_EQ(highest, std::min(units, limit)) << what;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 7 * 9 * 5);
}

// ZB-H1's order in full for P = 3, M = 3, N = 1 (stage r holds back its
// first r W passes), as InternEvo's ZB-H1 runs it.
TEST(PoliciesTest, ZeroBubbleH1Order) {
  Result<Plan> plan = MakePlan("zb-h1", 3, 3, 1);
  ASSERT_TRUE(plan.ok());
  const auto text = [&](int r) {
    std::string out;
    for (const Action& x : plan->stage(r)) out += ToString(x) + " ";
    return out;
  };
  EXPECT_EQ(text(0), "0F0.0 0F1.0 0F2.0 0B0.0 0W0.0 0B1.0 0W1.0 0B2.0 0W2.0 ");
  EXPECT_EQ(text(1), "1F0.0 1F1.0 1B0.0 1F2.0 1B1.0 1W0.0 1B2.0 1W1.0 1W2.0 ");
  EXPECT_EQ(text(2), "2F0.0 2B0.0 2F1.0 2B1.0 2F2.0 2B2.0 2W0.0 2W1.0 2W2.0 ");
}

// ZBV (two model stages per stage in a V, the backward split) over (P, M,
// N): every plan validates, stage r holds model stages r and 2P - 1 - r and
// runs each one's F and B in the documented orders, and no stage holds more
// than 2 (N + P - 1) model-stage units awaiting their W (1F1B's
// activations), the most stage 0 holds once M N is large enough.
TEST(PoliciesTest, ZbvOverShapesValidates) {
  int checked = 0;
  for (int P = 1; P <= 6; ++P) {
    for (int M = 1; M <= 8; ++M) {
      for (int N : {1, 2, 3, 4, 7}) {
        const std::string what = Describe("zbv", P, M, N);
        Result<Plan> plan = MakePlan("zbv", P, M, N, 2);
        ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
        EXPECT_EQ(plan->policy(), "zbv");
        EXPECT_EQ(plan->virtual_stages(), 2);
        EXPECT_EQ(plan->placement(), StagePlacement::kVShape);
        EXPECT_TRUE(SplitsBackward(*plan)) << what;
        const Status valid = ValidatePlan(*plan);
        ASSERT_TRUE(valid.ok()) << what << ": " << valid.message() << "\n" << valid.detail();
        const long long units = static_cast<long long>(M) * N;
        const long long limit = 2LL * (N + P - 1);
        long long highest = 0;
        for (int r = 0; r < P; ++r) {
          for (const int s : {r, 2 * P - 1 - r}) {
            std::vector<Action> forwards, backwards, weights;
            for (const Action& x : plan->stage(r)) {
              if (x.stage != s) continue;
              (x.pass == Pass::kForward ? forwards
               : x.pass == Pass::kBackward ? backwards : weights).push_back(x);
            }
            ASSERT_EQ(forwards.size(), static_cast<std::size_t>(units)) << what << " s " << s;
            ASSERT_EQ(backwards.size(), static_cast<std::size_t>(units)) << what << " s " << s;
            ASSERT_EQ(weights.size(), static_cast<std::size_t>(units)) << what << " s " << s;
            for (int a = 0; a < M; ++a) {
              for (int i = 0; i < N; ++i) {
                EXPECT_EQ(forwards[a * N + i], (Action{s, Pass::kForward, a, i})) << what;
                EXPECT_EQ(backwards[a * N + i], (Action{s, Pass::kBackward, a, N - 1 - i})) << what;
              }
            }
          }
          EXPECT_EQ(plan->stage(r).size(), static_cast<std::size_t>(6 * units)) << what;
          const long long peak = PeakAwaitingWeight(plan->stage(r));
          EXPECT_LE(peak, limit) << what << " stage " << r;
          highest = std::max(highest, peak);
        }
        EXPECT_EQ(highest, std::min(2 * units, limit)) << what;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * 8 * 5);
}

// Interleaved zero bubble over (P, M, N, v): every plan validates (any M
// and N), places its model stages in a loop (model stage s on stage s mod
// P), splits every backward, runs each model stage's forwards in (microbatch,
// chunk) order and its backwards microbatch by microbatch, last chunk first,
// and keeps at most v (N + P - 1) model-stage units waiting for their W on
// any stage: StateFlow-1F1B's first stage's N + P - 1 whole-stage units.
TEST(PoliciesTest, ZbInterleavedOverShapesValidates) {
  int checked = 0;
  for (int P = 1; P <= 5; ++P) {
    for (int v = 1; v <= 4; ++v) {
      for (int M = 1; M <= 6; ++M) {
        for (int N : {1, 2, 3, 5}) {
          const std::string what = Describe("zb-interleaved", P, M, N) + " v=" + std::to_string(v);
          Result<Plan> plan = MakePlan("zb-interleaved", P, M, N, v);
          ASSERT_TRUE(plan.ok()) << what << ": " << plan.status().message();
          EXPECT_EQ(plan->virtual_stages(), v);
          EXPECT_EQ(plan->placement(), StagePlacement::kLoop);
          EXPECT_TRUE(SplitsBackward(*plan)) << what;
          const Status valid = ValidatePlan(*plan);
          ASSERT_TRUE(valid.ok()) << what << ": " << valid.message() << "\n" << valid.detail();
          const long long units = static_cast<long long>(M) * N;
          const long long limit = static_cast<long long>(v) * (N + P - 1);
          long long highest = 0;
          for (int r = 0; r < P; ++r) {
            for (int k = 0; k < v; ++k) {
              const int s = k * P + r;
              std::vector<Action> forwards, backwards;
              for (const Action& x : plan->stage(r)) {
                if (x.stage != s) continue;
                if (x.pass == Pass::kForward) forwards.push_back(x);
                if (x.pass == Pass::kBackward) backwards.push_back(x);
              }
              ASSERT_EQ(forwards.size(), static_cast<std::size_t>(units)) << what << " s " << s;
              ASSERT_EQ(backwards.size(), static_cast<std::size_t>(units)) << what << " s " << s;
              for (int a = 0; a < M; ++a) {
                for (int i = 0; i < N; ++i) {
                  EXPECT_EQ(forwards[a * N + i], (Action{s, Pass::kForward, a, i})) << what;
                  EXPECT_EQ(backwards[a * N + i], (Action{s, Pass::kBackward, a, N - 1 - i}))
                      << what;
                }
              }
            }
            const long long peak = PeakAwaitingWeight(plan->stage(r));
            EXPECT_LE(peak, limit) << what << " stage " << r;
            highest = std::max(highest, peak);
          }
          EXPECT_LE(highest, std::min(limit, v * units)) << what;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 4 * 6 * 4);
}

TEST(PoliciesTest, ZbvRefusals) {
  for (const int v : {1, 3}) {
    Result<Plan> plan = MakePlan("zbv", 4, 4, 1, v);
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.status().message().find("schedule.virtual_stages must be 2 for policy zbv"),
              std::string::npos)
        << plan.status().message();
  }
  EXPECT_EQ(DefaultVirtualStages("zbv"), 2);
  EXPECT_EQ(DefaultVirtualStages("zb-interleaved"), 2);
  EXPECT_TRUE(VirtualStagesFree("zb-interleaved"));
  EXPECT_TRUE(VirtualStagesFree("interleaved"));
  EXPECT_FALSE(VirtualStagesFree("zbv"));
  EXPECT_EQ(DefaultVirtualStages("interleaved"), 1);
  EXPECT_EQ(DefaultVirtualStages("stateflow"), 1);
}

TEST(PoliciesTest, InterleavedRefusals) {
  Result<Plan> odd = MakePlan("interleaved", 4, 3, 1, 2);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("a multiple of parallel.pipeline_size (4)"),
            std::string::npos)
      << odd.status().message();
  Result<Plan> other = MakePlan("stateflow", 4, 4, 1, 2);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("schedule.virtual_stages must be 1 for policy stateflow"),
            std::string::npos)
      << other.status().message();
  // v = 1: StateFlow's order under its own name.
  Result<Plan> one = MakePlan("interleaved", 3, 4, 2, 1);
  Result<Plan> stateflow = MakePlan("stateflow", 3, 4, 2);
  ASSERT_TRUE(one.ok() && stateflow.ok());
  EXPECT_EQ(one->per_stage(), stateflow->per_stage());
}

TEST(PoliciesTest, ErrorsNameTheField) {
  struct Case {
    const char* policy;
    int P, M, N;
    const char* field;
  };
  const Case cases[] = {
      {"zb", 4, 4, 4,
       "schedule.policy 'zb' is unknown (known: gpipe, 1f1b, stateflow, interleaved, zb-h1, "
       "zb-h2, zbv, zb-interleaved)"},
      {"", 4, 4, 4, "schedule.policy"},
      {"stateflow", 0, 4, 4, "stages"},
      {"stateflow", 4, 0, 4, "microbatches"},
      {"gpipe", 4, 4, -2, "chunks"},
      {"1f1b", 4, 4, 2, "schedule.chunks must be 1 for policy 1f1b"},
      {"stateflow", 4, 1 << 20, 1 << 20, "exceeds the limit"},
  };
  for (const Case& c : cases) {
    Result<Plan> plan = MakePlan(c.policy, c.P, c.M, c.N);
    ASSERT_FALSE(plan.ok()) << c.field;
    EXPECT_NE(plan.status().message().find(c.field), std::string::npos)
        << plan.status().message() << " lacks " << c.field;
  }
}

}  // namespace
}  // namespace stateflow::schedule

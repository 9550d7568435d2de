#include "schedule/action.h"

#include <climits>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace stateflow::schedule {
namespace {

TEST(ActionTest, TextFormOfTheHeaderExample) {
  const Action a{.stage = 2, .pass = Pass::kForward, .microbatch = 0, .chunk = 3};
  EXPECT_EQ(ToString(a), "2F0.3");
  Result<Action> parsed = ParseAction("2F0.3");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(*parsed, a);
}

TEST(ActionTest, RoundTripsEveryPassAndLargeNumbers) {
  const int values[] = {0, 1, 7, 10, 123, 99999, INT_MAX};
  const Pass passes[] = {Pass::kForward, Pass::kBackward, Pass::kWeight};
  for (Pass pass : passes) {
    for (int stage : values) {
      for (int microbatch : values) {
        for (int chunk : values) {
          const Action a{.stage = stage, .pass = pass, .microbatch = microbatch, .chunk = chunk};
          const std::string text = ToString(a);
          // The text is "<stage><letter><microbatch>.<chunk>", built independently.
          EXPECT_EQ(text, std::to_string(stage) + PassLetter(pass) + std::to_string(microbatch) +
                              "." + std::to_string(chunk));
          Result<Action> back = ParseAction(text);
          ASSERT_TRUE(back.ok()) << text << ": " << back.status().message();
          EXPECT_EQ(*back, a) << text;
        }
      }
    }
  }
}

TEST(ActionTest, PassLetters) {
  EXPECT_EQ(PassLetter(Pass::kForward), 'F');
  EXPECT_EQ(PassLetter(Pass::kBackward), 'B');
  EXPECT_EQ(PassLetter(Pass::kWeight), 'W');
}

TEST(ActionTest, ExactMessageForABadPass) {
  Result<Action> parsed = ParseAction("2X0.3");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "bad action '2X0.3': pass must be F, B or W");
  EXPECT_EQ(parsed.status().code(), Status::Code::kInvalidInput);
}

TEST(ActionTest, ParseErrorsNameTheTextAndTheProblem) {
  struct Case {
    const char* text;
    const char* problem;
  };
  const Case cases[] = {
      {"", "empty"},
      {"F0.3", "expected a stage number"},
      {"-1F0.3", "expected a stage number"},
      {"2", "expected a pass letter"},
      {"2f0.3", "pass must be F, B or W"},
      {"2F.3", "expected a microbatch number"},
      {"2F0", "expected '.' and a chunk number"},
      {"2F0,3", "expected '.' and a chunk number"},
      {"2F0.", "expected a chunk number"},
      {"2F0.-3", "expected a chunk number"},
      {"2F0.3x", "unexpected 'x' after the chunk number"},
      {"2F0.3 ", "unexpected ' ' after the chunk number"},
      {" 2F0.3", "expected a stage number"},
      {"99999999999F0.3", "stage number too large"},
      {"2F99999999999.3", "microbatch number too large"},
      {"2F0.99999999999", "chunk number too large"},
  };
  for (const Case& c : cases) {
    Result<Action> parsed = ParseAction(c.text);
    ASSERT_FALSE(parsed.ok()) << "'" << c.text << "' parsed";
    const std::string& message = parsed.status().message();
    EXPECT_EQ(message.rfind("bad action '" + std::string(c.text) + "': ", 0), 0u) << message;
    EXPECT_NE(message.find(c.problem), std::string::npos)
        << "'" << c.text << "': " << message << " lacks " << c.problem;
  }
}

TEST(ActionTest, OrderIsLexicographicInStagePassMicrobatchChunk) {
  const Action a{.stage = 0, .pass = Pass::kBackward, .microbatch = 0, .chunk = 0};
  const Action b{.stage = 1, .pass = Pass::kForward, .microbatch = 0, .chunk = 0};
  const Action c{.stage = 1, .pass = Pass::kForward, .microbatch = 0, .chunk = 1};
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(a, c);
}

TEST(ActionNeighboursTest, HeaderExamples) {
  EXPECT_EQ(InputFrom({.stage = 2, .pass = Pass::kBackward}, 4), 3);
  EXPECT_EQ(OutputTo({.stage = 3, .pass = Pass::kForward}, 4), std::nullopt);
}

// A simple model: forward data moves one stage up the pipeline, backward
// data one stage down, W data never moves; a neighbour outside [0, P) is none.
std::optional<int> Neighbour(int stage, int step, int stages) {
  const int s = stage + step;
  return s >= 0 && s < stages ? std::optional<int>(s) : std::nullopt;
}

TEST(ActionNeighboursTest, MatchTheDirectionOfEachPassOnEveryStage) {
  for (int P = 1; P <= 6; ++P) {
    for (int r = 0; r < P; ++r) {
      for (Pass pass : {Pass::kForward, Pass::kBackward, Pass::kWeight}) {
        const Action a{.stage = r, .pass = pass, .microbatch = 1, .chunk = 2};
        const int direction = pass == Pass::kForward ? 1 : pass == Pass::kBackward ? -1 : 0;
        const std::optional<int> in = direction == 0 ? std::nullopt : Neighbour(r, -direction, P);
        const std::optional<int> out = direction == 0 ? std::nullopt : Neighbour(r, direction, P);
        EXPECT_EQ(InputFrom(a, P), in) << ToString(a) << " P=" << P;
        EXPECT_EQ(OutputTo(a, P), out) << ToString(a) << " P=" << P;
      }
    }
  }
}

TEST(ActionNeighboursTest, EverySendHasItsReceiver) {
  for (int P = 1; P <= 6; ++P) {
    int sends = 0;
    for (int r = 0; r < P; ++r) {
      for (Pass pass : {Pass::kForward, Pass::kBackward, Pass::kWeight}) {
        const Action a{.stage = r, .pass = pass, .microbatch = 0, .chunk = 0};
        const std::optional<int> to = OutputTo(a, P);
        if (!to) continue;
        ++sends;
        Action received = a;
        received.stage = *to;
        EXPECT_EQ(InputFrom(received, P), r) << ToString(a) << " P=" << P;
      }
    }
    // P - 1 links, each carrying one forward and one backward message.
    EXPECT_EQ(sends, 2 * (P - 1)) << "P=" << P;
  }
}

}  // namespace
}  // namespace stateflow::schedule

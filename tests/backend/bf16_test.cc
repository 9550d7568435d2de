// bf16 (backend/device/bf16.h) against a rounding reference written the
// slow way: the two bf16 neighbours of a float compared in double, ties to
// the even mantissa. Every bf16 bit pattern, every float whose low half is a
// tie or next to one, a stride through all 2^32 floats, and the edges
// (zeros, subnormals, the overflow threshold, NaNs).
#include "backend/device/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace stateflow::backend {
namespace {

double Bf16Value(std::uint16_t b) {
  return static_cast<double>(FloatFromBits(static_cast<std::uint32_t>(b) << 16));
}

// The reference: among the bf16 values just below and just above f (by
// truncation, toward zero, and the next one away from zero), the nearer in
// double arithmetic, the even one on a tie. Beyond the largest finite bf16
// (0x7f7f) the upper neighbour is infinity, reached when f is at least half
// a last place above the largest (the IEEE rule for overflow).
std::uint16_t ReferenceRound(float f) {
  const std::uint32_t u = BitsOfFloat(f);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);  // toward zero
  if ((u & 0xffffu) == 0) return lo;                              // exact
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);   // away from zero
  const double x = std::fabs(static_cast<double>(f));
  const double a = std::fabs(Bf16Value(lo));
  double b;
  if ((hi & 0x7fffu) == 0x7f80u) {  // the next value is infinity
    b = a + (a - std::fabs(Bf16Value(static_cast<std::uint16_t>(lo - 1))));
  } else {
    b = std::fabs(Bf16Value(hi));
  }
  if (x - a < b - x) return lo;
  if (x - a > b - x) return hi;
  return (lo & 1u) ? hi : lo;
}

void ExpectRoundsLikeReference(std::uint32_t u) {
  const float f = FloatFromBits(u);
  if (std::isnan(f)) {
    const bf16 h(f);
    ASSERT_TRUE(std::isnan(static_cast<float>(h))) << std::hex << u;
    ASSERT_EQ(h.bits >> 15, u >> 31) << "sign of NaN " << std::hex << u;
    return;
  }
  ASSERT_EQ(bf16(f).bits, ReferenceRound(f)) << "float bits 0x" << std::hex << u;
}

TEST(Bf16Test, EveryBf16RoundTripsThroughFloat) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const bf16 h = bf16::FromBits(static_cast<std::uint16_t>(b));
    const float f = static_cast<float>(h);
    ASSERT_EQ(BitsOfFloat(f), b << 16);  // exact widening
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(bf16(f))));
    } else {
      ASSERT_EQ(bf16(f).bits, b) << std::hex << b;
    }
  }
}

TEST(Bf16Test, TiesAndTheirNeighboursRoundLikeTheReference) {
  // For every bf16 prefix: the low half at the tie (0x8000) and one either
  // side, and the extremes 0x0001 and 0xffff.
  for (std::uint32_t hi = 0; hi <= 0xffffu; ++hi) {
    for (std::uint32_t low : {0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      ExpectRoundsLikeReference((hi << 16) | low);
    }
  }
}

TEST(Bf16Test, AStrideThroughAllFloatsRoundsLikeTheReference) {
  // 2^32 / 4099 ~ a million floats, the stride odd and prime so that every
  // low-half value is visited at many exponents.
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
    ExpectRoundsLikeReference(static_cast<std::uint32_t>(u));
  }
}

TEST(Bf16Test, Edges) {
  EXPECT_EQ(bf16(0.0f).bits, 0x0000);
  EXPECT_EQ(bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(3.14159f).bits, 0x4049);  // 3.140625
  EXPECT_EQ(static_cast<float>(bf16(3.14159f)), 3.140625f);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16(inf).bits, 0x7f80);
  EXPECT_EQ(bf16(-inf).bits, 0xff80);
  // Largest finite bf16 0x7f7f = 3.3895314e38; half its last place above it
  // (0x7f7f8000 as float) ties to even: 0x7f7f is odd, so up to infinity;
  // just below the tie stays finite.
  EXPECT_EQ(bf16(FloatFromBits(0x7f7f7fffu)).bits, 0x7f7f);
  EXPECT_EQ(bf16(FloatFromBits(0x7f7f8000u)).bits, 0x7f80);
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7f80);
  // Subnormals round like any other float (no flush to zero).
  EXPECT_EQ(bf16(FloatFromBits(0x00010000u)).bits, 0x0001);
  EXPECT_EQ(bf16(FloatFromBits(0x00008000u)).bits, 0x0000);  // tie, even 0
  EXPECT_EQ(bf16(FloatFromBits(0x00018000u)).bits, 0x0002);  // tie, odd 1 -> 2
  // A NaN whose payload lives only in the dropped half stays a NaN (plain
  // truncation would turn 0x7f800001 into infinity), sign kept.
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(FloatFromBits(0x7f800001u)))));
  EXPECT_EQ(bf16(FloatFromBits(0xff800001u)).bits >> 15, 1);
}

}  // namespace
}  // namespace stateflow::backend

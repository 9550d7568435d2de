// bf16 (backend/device/bf16.h) against a rounding reference written the
// slow way: the two bf16 neighbours of a float compared in double, ties to
// the even mantissa. Every bf16 bit pattern, every float whose low half is a
// tie or next to one, a stride through all 2^32 floats, and the edges
// (zeros, subnormals, the overflow threshold, NaNs). Then the mixed-precision
// pieces built on it (grid_kernels/mixed.h, HostExec::GemmBf16) against
// float64 references and the float kernels.
#include "backend/device/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/device/grid_kernels/elementwise.h"
#include "backend/device/grid_kernels/mixed.h"
#include "backend/device/host_exec.h"

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

// A (rows, cols) matrix with leading dimension ld > cols, of bf16 values in
// about [-1, 1]; the padding holds NaNs so that a read past cols shows.
std::vector<bf16> RandomBf16(int64_t rows, int64_t cols, int64_t ld, std::mt19937_64* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16> x(static_cast<std::size_t>(rows * ld),
                      bf16(std::numeric_limits<float>::quiet_NaN()));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) x[r * ld + j] = bf16(u(*rng));
  }
  return x;
}

template <typename TC>
void CheckGemmBf16(bool ta, bool tb, float beta) {
  const int64_t M = 7, N = 9, K = 300;
  std::mt19937_64 rng(ta * 2 + tb + 10 * (beta != 0));
  const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K;
  const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = N + 2;
  const std::vector<bf16> A = RandomBf16(a_rows, a_cols, lda, &rng);
  const std::vector<bf16> B = RandomBf16(b_rows, b_cols, ldb, &rng);
  const std::vector<bf16> C0 = RandomBf16(M, N, ldc, &rng);
  std::vector<TC> C(C0.size());
  for (std::size_t i = 0; i < C.size(); ++i) C[i] = TC(static_cast<float>(C0[i]));
  const float alpha = 0.75f;
  HostExec{}.GemmBf16(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta,
                      C.data(), ldc);
  auto a = [&](int64_t i, int64_t k) {
    return static_cast<double>(static_cast<float>(ta ? A[k * lda + i] : A[i * lda + k]));
  };
  auto b = [&](int64_t k, int64_t j) {
    return static_cast<double>(static_cast<float>(tb ? B[j * ldb + k] : B[k * ldb + j]));
  };
  // Float accumulation of K products: |error| <= gamma_K sum |a b| (plus
  // the beta term's rounding); a bf16 C adds half its last place.
  const double u = std::ldexp(1.0, -24), gamma = (K + 2) * u / (1 - (K + 2) * u);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += a(i, k) * b(k, j);
        mag += std::fabs(a(i, k) * b(k, j));
      }
      const double c0 = static_cast<float>(C0[i * ldc + j]);
      ref = alpha * ref + beta * c0;
      mag = std::fabs(alpha) * mag + std::fabs(beta * c0);
      double bound = gamma * mag;
      if constexpr (std::is_same_v<TC, bf16>) bound += std::ldexp(std::fabs(ref) + bound, -8);
      const double got = static_cast<float>(C[i * ldc + j]);
      ASSERT_LE(std::fabs(got - ref), bound) << "C(" << i << ", " << j << ") ta " << ta
                                             << " tb " << tb << " beta " << beta;
    }
    for (int64_t j = N; j < ldc; ++j) {  // the padding is not written
      ASSERT_EQ(BitsOfFloat(static_cast<float>(C[i * ldc + j])),
                BitsOfFloat(static_cast<float>(TC(static_cast<float>(C0[i * ldc + j])))));
    }
  }
}

TEST(Bf16GemmTest, FloatAccumulationWithinItsBoundEveryTransposeAndBeta) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        CheckGemmBf16<float>(ta, tb, beta);
        CheckGemmBf16<bf16>(ta, tb, beta);
      }
    }
  }
}

TEST(Bf16GemmTest, AFloatCIsTheFloatGemmOfTheWidenedOperands) {
  // Widening is exact, so the bf16 GEMM into a float C is, bit for bit,
  // the float GEMM of the same values.
  const int64_t M = 5, N = 6, K = 33;
  std::mt19937_64 rng(3);
  const std::vector<bf16> A = RandomBf16(M, K, K, &rng), B = RandomBf16(K, N, N, &rng);
  std::vector<float> a(A.size()), b(B.size()), want(M * N), got(M * N);
  for (std::size_t i = 0; i < A.size(); ++i) a[i] = static_cast<float>(A[i]);
  for (std::size_t i = 0; i < B.size(); ++i) b[i] = static_cast<float>(B[i]);
  HostExec{}.Gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f,
                         want.data(), N);
  HostExec{}.GemmBf16(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                      got.data(), N);
  for (int64_t i = 0; i < M * N; ++i) ASSERT_EQ(BitsOfFloat(got[i]), BitsOfFloat(want[i]));
}

TEST(Bf16MixedTest, ConversionsRoundOnceAndWidenExactly) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, 3.14159f, 1e-40f, -2.5e38f, 65504.1f};
  std::vector<bf16> y(x.size());
  std::vector<float> back(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) grid::ToBf16Fn{y.data(), x.data()}(i);
  for (std::size_t i = 0; i < x.size(); ++i) grid::ToFloatFn{back.data(), y.data()}(i);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i].bits, bf16(x[i]).bits);
    EXPECT_EQ(BitsOfFloat(back[i]), static_cast<std::uint32_t>(y[i].bits) << 16);
  }
}

TEST(Bf16MixedTest, AdamWOnTheMasterIsTheFloatUpdateAndTheCopyItsRounding) {
  const int64_t n = 1000;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w(n), m(n), v(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    w[i] = d(rng), m[i] = 0.1f * d(rng), v[i] = std::fabs(d(rng)), g[i] = d(rng);
  }
  std::vector<float> w2 = w, m2 = m, v2 = v;
  std::vector<bf16> copy(n, bf16(std::numeric_limits<float>::quiet_NaN()));
  const float b1 = 0.9f, b2 = 0.95f, step = 1e-3f, isc = 1.3f, eps = 1e-8f, decay = 1e-5f;
  const grid::AdamWFn<float> plain{w.data(), m.data(), v.data(), g.data(), b1, 1 - b1, b2,
                                   1 - b2, step, isc, eps, decay};
  const grid::AdamWMasterFn mixed{w2.data(), m2.data(), v2.data(), g.data(), copy.data(),
                                  b1, 1 - b1, b2, 1 - b2, step, isc, eps, decay};
  for (int64_t i = 0; i < n; ++i) plain(i), mixed(i);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(BitsOfFloat(w2[i]), BitsOfFloat(w[i])) << i;
    ASSERT_EQ(BitsOfFloat(m2[i]), BitsOfFloat(m[i])) << i;
    ASSERT_EQ(BitsOfFloat(v2[i]), BitsOfFloat(v[i])) << i;
    ASSERT_EQ(copy[i].bits, bf16(w[i]).bits) << i;
  }
}

}  // namespace
}  // namespace stateflow::backend

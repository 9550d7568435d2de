// The KDA core's test inputs as a KDA layer makes them, for the CPU kernel's
// tests (kda_core_test.cc) and any other implementation of the core tested
// against its float64 reference.
//
//   std::mt19937_64 rng(7);
//   Buffers in = KdaLayerLikeInputs({.T = 130, .H = 2, .Dk = 8, .Dv = 6}, rng);
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>

#include "backend/kernels/gdn_prep.h"
#include "backend/kernels/kda_prep.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend::kernel_test {

struct KdaShape {
  int64_t T, H, Dk, Dv;
  std::string Name() const {
    std::ostringstream s;
    s << "T=" << T << " H=" << H << " Dk=" << Dk << " Dv=" << Dv;
    return s.str();
  }
};

// The core's inputs {q, k, v, g, beta, S_in}: q, k (T, H, Dk) L2-normalised
// (q scaled by Dk^-1/2), g (T, H, Dk) from the KDA gate with A_log and a
// per-channel dt_bias (decays from ~0.999 to ~e^-10 per token and channel),
// beta = sigmoid(b) (T, H), v (T, H, Dv), S_in (H, Dv, Dk).
inline Buffers KdaLayerLikeInputs(const KdaShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  const Buffer q_raw = RandomVector(rng, rows * s.Dk, -1, 1),
               k_raw = RandomVector(rng, rows * s.Dk, -1, 1),
               a = RandomVector(rng, rows * s.Dk, -4, 2),
               A_log = RandomVector(rng, s.H, 0, 2.7),
               dt_bias = RandomVector(rng, s.H * s.Dk, -2.5, -1.5),
               b = RandomVector(rng, rows, -3, 3);
  Buffer q(rows * s.Dk), k(rows * s.Dk), g(rows * s.Dk), beta(rows), rnorm(rows);
  L2NormForwardRef(q.data(), rnorm.data(), q_raw.data(), rows, s.Dk,
                   1.0 / std::sqrt(static_cast<double>(s.Dk)), 1e-6);
  L2NormForwardRef(k.data(), rnorm.data(), k_raw.data(), rows, s.Dk, 1.0, 1e-6);
  KdaGateForwardRef(g.data(), a.data(), A_log.data(), dt_bias.data(), s.T, s.H, s.Dk);
  SigmoidForwardRef(beta.data(), b.data(), rows);
  return {q, k, RandomVector(rng, rows * s.Dv, -1, 1), g, beta,
          RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5)};
}

}  // namespace stateflow::backend::kernel_test

// The GDN core's test inputs as a GDN layer makes them, shared by the CPU
// kernel's tests (gdn_core_test.cc) and the grid kernels' (grid_gdn_test.cc).
//
//   std::mt19937_64 rng(7);
//   Buffers in = LayerLikeInputs({.T = 130, .H = 2, .Dk = 8, .Dv = 6}, rng);
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>

#include "backend/kernels/gdn_prep.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend::kernel_test {

struct GdnShape {
  int64_t T, H, Dk, Dv;
  std::string Name() const {
    std::ostringstream s;
    s << "T=" << T << " H=" << H << " Dk=" << Dk << " Dv=" << Dv;
    return s.str();
  }
};

// The core's inputs {q, k, v, g, beta, S_in}: q, k L2-normalised (q scaled
// by Dk^-1/2), g from the gate with A_log and dt_bias (decays from ~0.999 to
// ~e^-10 per token), beta = sigmoid(b).
inline Buffers LayerLikeInputs(const GdnShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  const Buffer q_raw = RandomVector(rng, rows * s.Dk, -1, 1),
               k_raw = RandomVector(rng, rows * s.Dk, -1, 1),
               a = RandomVector(rng, rows, -4, 2),
               A_log = RandomVector(rng, s.H, 0, 2.7),
               dt_bias = Buffer(s.H, -2.0), b = RandomVector(rng, rows, -3, 3);
  Buffer q(rows * s.Dk), k(rows * s.Dk), g(rows), beta(rows), rnorm(rows);
  L2NormForwardRef(q.data(), rnorm.data(), q_raw.data(), rows, s.Dk,
                   1.0 / std::sqrt(static_cast<double>(s.Dk)), 1e-6);
  L2NormForwardRef(k.data(), rnorm.data(), k_raw.data(), rows, s.Dk, 1.0, 1e-6);
  GdnGateForwardRef(g.data(), a.data(), A_log.data(), dt_bias.data(), s.T, s.H);
  SigmoidForwardRef(beta.data(), b.data(), rows);
  return {q, k, RandomVector(rng, rows * s.Dv, -1, 1), g, beta,
          RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5)};
}

}  // namespace stateflow::backend::kernel_test

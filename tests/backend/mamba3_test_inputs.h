// The Mamba-3 core's test inputs, shared by the CPU kernel's tests
// (mamba3_core_test.cc) and the grid kernels' (grid_mamba3_test.cc).
// Inputs {q, k, v, a, gamma, beta, S_in, k_in, v_in}.
//
//   std::mt19937_64 rng(7);
//   Buffers in = LayerLikeInputs(Mamba3CoreShape{130, 2, 8, 6}, rng);
#pragma once

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend::kernel_test {

struct Mamba3CoreShape {
  int64_t T, H, Dk, Dv;
  std::string Name() const {
    std::ostringstream s;
    s << "T=" << T << " H=" << H << " Dk=" << Dk << " Dv=" << Dv;
    return s.str();
  }
};

inline const std::vector<std::string> kMamba3CoreInputs = {
    "q", "k", "v", "a", "gamma", "beta", "S_in", "k_in", "v_in"};
enum Mamba3CoreInput { kQ, kK, kV, kA, kGamma, kBeta, kSIn, kKIn, kVIn };

// Inputs as a Mamba-3 layer makes them: a = A dt with dt in [1e-3, 0.5] and
// A in [-3, -0.05] (decays from ~1 to ~e^-1.5 per token), lambda in (0, 1),
// gamma = lambda dt, beta = (1 - lambda) dt, unit-scale q, k (RMS-normalised
// plus a bias of 1 in the layer).
inline Buffers LayerLikeInputs(const Mamba3CoreShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  const Buffer dt = RandomVector(rng, rows, 1e-3, 0.5),
               A = RandomVector(rng, rows, -3, -0.05),
               lam = RandomVector(rng, rows, 0.02, 0.98);
  Buffer a(rows), gamma(rows), beta(rows);
  for (int64_t i = 0; i < rows; ++i) {
    a[i] = A[i] * dt[i];
    gamma[i] = lam[i] * dt[i];
    beta[i] = (1 - lam[i]) * dt[i];
  }
  return {RandomVector(rng, rows * s.Dk, -1.5, 1.5),
          RandomVector(rng, rows * s.Dk, -1.5, 1.5),
          RandomVector(rng, rows * s.Dv, -1, 1),
          a, gamma, beta,
          RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5),
          RandomVector(rng, s.H * s.Dk, -1, 1),
          RandomVector(rng, s.H * s.Dv, -1, 1)};
}

// Small unconstrained inputs for finite differences (gamma and beta of any
// sign: the kernel is checked as the function of its arguments it claims to
// be).
inline Buffers SmallInputs(const Mamba3CoreShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  return {RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dv, -1, 1),
          RandomVector(rng, rows, -0.8, -0.01),
          RandomVector(rng, rows, -0.5, 0.9),
          RandomVector(rng, rows, -0.5, 0.9),
          RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5),
          RandomVector(rng, s.H * s.Dk, -1, 1),
          RandomVector(rng, s.H * s.Dv, -1, 1)};
}

}  // namespace stateflow::backend::kernel_test

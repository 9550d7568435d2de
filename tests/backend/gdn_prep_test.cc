// The GDN preprocessing kernels (gate/log decay with A_log and dt_bias, beta,
// L2 normalisation with scale) against their float64 references, in float32
// and by central differences for every input and parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "backend/kernels/gdn_prep.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

class GdnGateCase : public KernelCase {
 public:
  GdnGateCase(int64_t T, int64_t H) : T_(T), H_(H) {}
  std::string Name() const override {
    return "gdn_gate T=" + std::to_string(T_) + " H=" + std::to_string(H_);
  }
  std::vector<std::string> InputNames() const override {
    return {"a", "A_log", "dt_bias"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    Buffer a = RandomVector(rng, T_ * H_, -3, 3);
    a[0] = 30.0;  // softplus's linear tail
    return {a, RandomVector(rng, H_, -1, 1), RandomVector(rng, H_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(GdnGateForward, GdnGateBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> a = Cast<T>(in[0]), A_log = Cast<T>(in[1]),
                         dt_bias = Cast<T>(in[2]);
    std::vector<T> g(T_ * H_);
    fwd(g.data(), a.data(), A_log.data(), dt_bias.data(), T_, H_);
    KernelRun r{{ToDouble(g)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dg = Cast<T>(douts[0]);
    std::vector<T> da(T_ * H_), dA_log(H_, T(0)), ddt(H_, T(0));
    bwd(da.data(), dA_log.data(), ddt.data(), dg.data(), a.data(),
        A_log.data(), dt_bias.data(), T_, H_);
    r.grads = {ToDouble(da), ToDouble(dA_log), ToDouble(ddt)};
    return r;
  }
  int64_t T_, H_;
};

class SigmoidCase : public KernelCase {
 public:
  explicit SigmoidCase(int64_t n) : n_(n) {}
  std::string Name() const override { return "gdn_beta n=" + std::to_string(n_); }
  std::vector<std::string> InputNames() const override { return {"b"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, n_, -5, 5)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(SigmoidForward, SigmoidBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> b = Cast<T>(in[0]);
    std::vector<T> beta(n_);
    fwd(beta.data(), b.data(), n_);
    KernelRun r{{ToDouble(beta)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dbeta = Cast<T>(douts[0]);
    std::vector<T> db(n_);
    bwd(db.data(), dbeta.data(), beta.data(), n_);
    r.grads = {ToDouble(db)};
    return r;
  }
  int64_t n_;
};

class L2NormCase : public KernelCase {
 public:
  L2NormCase(int64_t R, int64_t D, double scale) : R_(R), D_(D), scale_(scale) {}
  std::string Name() const override {
    std::ostringstream s;
    s << "l2norm R=" << R_ << " D=" << D_ << " scale=" << scale_;
    return s.str();
  }
  std::vector<std::string> InputNames() const override { return {"x"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, R_ * D_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(L2NormForward, L2NormBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]);
    std::vector<T> y(R_ * D_), rnorm(R_);
    fwd(y.data(), rnorm.data(), x.data(), R_, D_, T(scale_), T(1e-6));
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(R_ * D_);
    bwd(dx.data(), dy.data(), x.data(), rnorm.data(), R_, D_, T(scale_));
    r.grads = {ToDouble(dx)};
    return r;
  }
  int64_t R_, D_;
  double scale_;
};

TEST(GdnPrep, Gate) {
  CheckKernelCase(GdnGateCase(5, 3), 1);
  CheckKernelCase(GdnGateCase(1, 1), 2);
}

TEST(GdnPrep, Beta) { CheckKernelCase(SigmoidCase(12), 3); }

TEST(GdnPrep, L2Norm) {
  CheckKernelCase(L2NormCase(6, 8, 1.0 / std::sqrt(8.0)), 4);  // q
  CheckKernelCase(L2NormCase(3, 5, 1.0), 5);                   // k
}

// The gate is a log decay: g < 0, so alpha = exp(g) lies in (0, 1), and with
// A_log = 0, dt_bias = 0 it is -softplus(a).
TEST(GdnPrep, GateIsANegativeLogDecay) {
  const std::vector<double> a = {-2.0, 0.0, 3.0}, zero = {0.0};
  std::vector<double> g(3);
  GdnGateForward<double>(g.data(), a.data(), zero.data(), zero.data(), 3, 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_LT(g[i], 0.0);
    EXPECT_NEAR(g[i], -std::log1p(std::exp(a[i])), 1e-15);
  }
}

}  // namespace
}  // namespace stateflow::backend

// Test helpers for the CPU kernels: seeded random buffers, comparison by
// atol + rtol * |ref| and by normalised error over a whole tensor, central
// finite differences, and a small KernelCase harness (one struct per kernel
// configuration, in the spirit of ggml's test-backend-ops) that checks
//   1. the fast float64 kernel against the float64 reference (forward and
//      backward),
//   2. the float32 kernel against the float64 reference at float tolerances,
//   3. the float64 backward against central differences of the forward, for
//      every differentiable input and parameter.
// Not a general autograd: each case says how to run its own kernels.
//
//   std::mt19937_64 rng(7);
//   std::vector<double> x = RandomVector(rng, 12, -1.0, 1.0);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace stateflow::backend::testing {

using Buffer = std::vector<double>;
using Buffers = std::vector<Buffer>;

inline Buffer RandomVector(std::mt19937_64& rng, int64_t n, double lo,
                           double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Buffer out(n);
  for (double& x : out) x = dist(rng);
  return out;
}

template <typename T>
std::vector<T> Cast(const Buffer& x) {
  return std::vector<T>(x.begin(), x.end());
}

template <typename T>
Buffer ToDouble(const std::vector<T>& x) {
  return Buffer(x.begin(), x.end());
}

// ||a - b|| / max(||b||, tiny): the normalised error over a whole tensor.
inline double RelativeError(const Buffer& a, const Buffer& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// Every element within atol + rtol * |ref|, and the normalised error of the
// whole tensor below max_rel. The failure message names the tensor, the
// worst element and both errors.
inline ::testing::AssertionResult AllClose(const std::string& what,
                                           const Buffer& actual,
                                           const Buffer& ref, double atol,
                                           double rtol, double max_rel) {
  if (actual.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << actual.size() << " vs reference "
           << ref.size();
  }
  double worst = 0.0;  // largest |a - r| / (atol + rtol |r|)
  size_t worst_i = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::abs(actual[i] - ref[i]);
    const double ratio =
        diff == 0.0 ? 0.0 : diff / (atol + rtol * std::abs(ref[i]));
    if (!(ratio <= worst)) {  // also catches NaN
      worst = ratio;
      worst_i = i;
    }
  }
  const double rel = RelativeError(actual, ref);
  if (worst <= 1.0 && rel <= max_rel) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << what << ": normalised error " << rel << " (limit " << max_rel
          << ")";
  if (!ref.empty()) {
    failure << ", worst element " << worst_i << ": " << actual[worst_i]
            << " vs " << ref[worst_i] << " (" << worst
            << " x the tolerance)";
  }
  return failure;
}

// Central differences of f at x, one element at a time: (f(x+h) - f(x-h))/2h.
inline Buffer CentralDifferences(const std::function<double()>& f, Buffer* x,
                                 double h) {
  Buffer grad(x->size());
  for (size_t i = 0; i < x->size(); ++i) {
    const double saved = (*x)[i];
    (*x)[i] = saved + h;
    const double up = f();
    (*x)[i] = saved - h;
    const double down = f();
    (*x)[i] = saved;
    grad[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

inline double Dot(const Buffer& a, const Buffer& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

enum class Variant { kRef, kFast64, kFast32 };

inline const char* VariantName(Variant v) {
  switch (v) {
    case Variant::kRef: return "ref";
    case Variant::kFast64: return "fast<double>";
    case Variant::kFast32: return "fast<float>";
  }
  return "?";
}

// What one run of a kernel pair gives: its differentiable outputs and, when
// output gradients were passed, the gradient of every input (empty for inputs
// that are not differentiable, e.g. token ids).
struct KernelRun {
  Buffers outputs;
  Buffers grads;
};

// One kernel configuration. Name() prints the parameters so that a failure
// names its configuration.
class KernelCase {
 public:
  virtual ~KernelCase() = default;
  virtual std::string Name() const = 0;
  virtual std::vector<std::string> InputNames() const = 0;
  virtual Buffers MakeInputs(std::mt19937_64& rng) const = 0;
  // Forward; then, if douts is not empty, backward with d(outputs) = douts.
  virtual KernelRun Run(Variant variant, const Buffers& inputs,
                        const Buffers& douts) const = 0;
  // float32 tolerance (atol = rtol) against the float64 reference.
  virtual double Float32Tolerance() const { return 2e-5; }
};

// Inside KernelCase::Run(Variant variant, ...): runs the case's
// `RunWith<T>(forward, backward, args...)` with the reference pair
// (fwd##Ref, bwd##Ref), the float64 pair or the float32 pair.
#define SF_RUN_KERNEL_VARIANTS(fwd, bwd, ...)                                 \
  switch (variant) {                                                          \
    case ::stateflow::backend::testing::Variant::kRef:                        \
      return RunWith<double>(fwd##Ref, bwd##Ref, __VA_ARGS__);                \
    case ::stateflow::backend::testing::Variant::kFast64:                     \
      return RunWith<double>(fwd<double>, bwd<double>, __VA_ARGS__);          \
    case ::stateflow::backend::testing::Variant::kFast32:                     \
      return RunWith<float>(fwd<float>, bwd<float>, __VA_ARGS__);             \
  }                                                                           \
  return {}

// Runs checks 1-3 above on one case.
inline void CheckKernelCase(const KernelCase& c, uint64_t seed) {
  SCOPED_TRACE(c.Name());
  std::mt19937_64 rng(seed);
  Buffers inputs = c.MakeInputs(rng);
  const KernelRun probe = c.Run(Variant::kRef, inputs, {});
  Buffers douts;
  for (const Buffer& out : probe.outputs) {
    douts.push_back(RandomVector(rng, static_cast<int64_t>(out.size()), -1, 1));
  }
  const KernelRun ref = c.Run(Variant::kRef, inputs, douts);
  const std::vector<std::string> names = c.InputNames();
  for (Variant v : {Variant::kFast64, Variant::kFast32}) {
    const KernelRun run = c.Run(v, inputs, douts);
    const double tol = v == Variant::kFast64 ? 1e-12 : c.Float32Tolerance();
    const double max_rel = v == Variant::kFast64 ? 1e-12 : c.Float32Tolerance();
    for (size_t i = 0; i < ref.outputs.size(); ++i) {
      EXPECT_TRUE(AllClose(std::string(VariantName(v)) + " output " +
                               std::to_string(i),
                           run.outputs[i], ref.outputs[i], tol, tol, max_rel));
    }
    for (size_t i = 0; i < ref.grads.size(); ++i) {
      EXPECT_TRUE(AllClose(std::string(VariantName(v)) + " d" + names[i],
                           run.grads[i], ref.grads[i], tol, tol, max_rel));
    }
  }
  // Central differences of L = sum_o <douts_o, out_o> through the fast
  // float64 forward.
  const KernelRun fast = c.Run(Variant::kFast64, inputs, douts);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (fast.grads[i].empty()) continue;
    auto loss = [&] {
      const KernelRun r = c.Run(Variant::kFast64, inputs, {});
      double l = 0.0;
      for (size_t o = 0; o < r.outputs.size(); ++o) l += Dot(douts[o], r.outputs[o]);
      return l;
    };
    const Buffer numeric = CentralDifferences(loss, &inputs[i], 1e-6);
    EXPECT_TRUE(AllClose("finite differences d" + names[i], fast.grads[i],
                         numeric, 1e-7, 1e-6, 1e-6));
  }
}

}  // namespace stateflow::backend::testing

// The preamble of every kernel test, in one place: a kernel test opens its
// anonymous namespace with `using namespace stateflow::backend::kernel_test;`.
namespace stateflow::backend::kernel_test {
using testing::AllClose;
using testing::Buffer;
using testing::Buffers;
using testing::Cast;
using testing::CheckKernelCase;
using testing::KernelCase;
using testing::KernelRun;
using testing::RandomVector;
using testing::ToDouble;
using testing::Variant;
}  // namespace stateflow::backend::kernel_test


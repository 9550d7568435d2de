// The dense kernels (linear, RMSNorm, LayerNorm, SiLU, GELU, SwiGLU MLP,
// embedding, output layer + cross-entropy) against their float64 references, in float32, and
// by central differences (kernel_test_util.h). One small case struct per
// kernel; one line per configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "backend/kernels/embedding.h"
#include "backend/kernels/gelu.h"
#include "backend/kernels/layer_norm.h"
#include "backend/kernels/linear.h"
#include "backend/kernels/output_loss.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/kernels/silu.h"
#include "backend/kernels/swiglu_mlp.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

std::string Dims(std::initializer_list<std::pair<const char*, int64_t>> d) {
  std::ostringstream s;
  for (const auto& [name, value] : d) s << " " << name << "=" << value;
  return s.str();
}

// ---- linear ----------------------------------------------------------------

class LinearCase : public KernelCase {
 public:
  LinearCase(int64_t N, int64_t C, int64_t D, bool bias)
      : N_(N), C_(C), D_(D), bias_(bias) {}
  std::string Name() const override {
    return "linear" + Dims({{"N", N_}, {"C", C_}, {"D", D_}, {"bias", bias_}});
  }
  std::vector<std::string> InputNames() const override {
    return {"x", "w", "b"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, N_ * C_, -1, 1), RandomVector(rng, D_ * C_, -1, 1),
            RandomVector(rng, D_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(LinearForward, LinearBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]), w = Cast<T>(in[1]),
                         b = Cast<T>(in[2]);
    std::vector<T> y(N_ * D_);
    fwd(y.data(), x.data(), w.data(), bias_ ? b.data() : nullptr, N_, C_, D_);
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(N_ * C_), dw(D_ * C_, T(0)), db(D_, T(0));
    bwd(dx.data(), dw.data(), bias_ ? db.data() : nullptr, dy.data(),
        x.data(), w.data(), N_, C_, D_);
    r.grads = {ToDouble(dx), ToDouble(dw), bias_ ? ToDouble(db) : Buffer{}};
    return r;
  }
  int64_t N_, C_, D_;
  bool bias_;
};

// ---- RMSNorm ---------------------------------------------------------------

class RmsNormCase : public KernelCase {
 public:
  RmsNormCase(int64_t N, int64_t C) : N_(N), C_(C) {}
  std::string Name() const override { return "rmsnorm" + Dims({{"N", N_}, {"C", C_}}); }
  std::vector<std::string> InputNames() const override { return {"x", "w"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, N_ * C_, -2, 2), RandomVector(rng, C_, 0.5, 1.5)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(RmsNormForward, RmsNormBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]), w = Cast<T>(in[1]);
    std::vector<T> y(N_ * C_), rstd(N_);
    fwd(y.data(), rstd.data(), x.data(), w.data(), N_, C_, T(1e-5));
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(N_ * C_), dw(C_, T(0));
    bwd(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N_, C_);
    r.grads = {ToDouble(dx), ToDouble(dw)};
    return r;
  }
  int64_t N_, C_;
};

// ---- LayerNorm -------------------------------------------------------------

// offset != 0 shifts row 0 by it (values offset +- 2), rounded to float so
// that the float32 run sees the reference's inputs: a row whose variance
// E[x^2] - mean^2 would lose to cancellation.
class LayerNormCase : public KernelCase {
 public:
  LayerNormCase(int64_t N, int64_t C, bool bias, double offset = 0)
      : N_(N), C_(C), bias_(bias), offset_(offset) {}
  std::string Name() const override {
    return "layer_norm" + Dims({{"N", N_}, {"C", C_}, {"bias", bias_}}) +
           " offset=" + std::to_string(offset_);
  }
  std::vector<std::string> InputNames() const override { return {"x", "w", "b"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    Buffer x = RandomVector(rng, N_ * C_, -2, 2);
    for (int64_t c = 0; c < C_; ++c) {
      x[c] = static_cast<double>(static_cast<float>(x[c] + offset_));
    }
    return {x, RandomVector(rng, C_, 0.5, 1.5), RandomVector(rng, C_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(LayerNormForward, LayerNormBackward, in, douts);
  }
  // Row 0's float mean is off by up to ~C float roundings of |offset|
  // (summation of C terms), which y, dx and dw see times rstd w (rstd ~ 1 /
  // sqrt(4/3) for values uniform in +-2, w < 1.5): about C eps |offset|.
  // E[x^2] - mean^2 would be off by ~eps offset^2 in the variance instead.
  double Float32Tolerance() const override {
    return std::max(2e-5, static_cast<double>(C_) * FLT_EPSILON * std::abs(offset_));
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]), w = Cast<T>(in[1]), b = Cast<T>(in[2]);
    std::vector<T> y(N_ * C_), mean(N_), rstd(N_);
    fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
        bias_ ? b.data() : nullptr, N_, C_, T(1e-5));
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(N_ * C_), dw(C_, T(0)), db(C_, T(0));
    bwd(dx.data(), dw.data(), bias_ ? db.data() : nullptr, dy.data(), x.data(),
        w.data(), mean.data(), rstd.data(), N_, C_);
    r.grads = {ToDouble(dx), ToDouble(dw), bias_ ? ToDouble(db) : Buffer{}};
    return r;
  }
  int64_t N_, C_;
  bool bias_;
  double offset_;
};

// ---- SiLU ------------------------------------------------------------------

class SiluCase : public KernelCase {
 public:
  explicit SiluCase(int64_t n) : n_(n) {}
  std::string Name() const override { return "silu" + Dims({{"n", n_}}); }
  std::vector<std::string> InputNames() const override { return {"x"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    Buffer x = RandomVector(rng, n_, -6, 6);
    x[0] = 40.0;  // far tails: the stable sigmoid must not overflow
    x[1] = -40.0;
    return {x};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(SiluForward, SiluBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]);
    std::vector<T> y(n_);
    fwd(y.data(), x.data(), n_);
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(n_);
    bwd(dx.data(), dy.data(), x.data(), n_);
    r.grads = {ToDouble(dx)};
    return r;
  }
  int64_t n_;
};

// ---- GELU ------------------------------------------------------------------

class GeluCase : public KernelCase {
 public:
  explicit GeluCase(int64_t n) : n_(n) {}
  std::string Name() const override { return "gelu" + Dims({{"n", n_}}); }
  std::vector<std::string> InputNames() const override { return {"x"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    Buffer x = RandomVector(rng, n_, -6, 6);
    x[0] = 12.0;  // tails: Phi(x) rounds to 1 and to 0
    x[1] = -12.0;
    x[2] = 0.0;
    return {x};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(GeluForward, GeluBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]);
    std::vector<T> y(n_);
    fwd(y.data(), x.data(), n_);
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(n_);
    bwd(dx.data(), dy.data(), x.data(), n_);
    r.grads = {ToDouble(dx)};
    return r;
  }
  int64_t n_;
};

// ---- SwiGLU MLP ------------------------------------------------------------

class SwigluCase : public KernelCase {
 public:
  SwigluCase(int64_t N, int64_t C, int64_t F) : N_(N), C_(C), F_(F) {}
  std::string Name() const override {
    return "swiglu_mlp" + Dims({{"N", N_}, {"C", C_}, {"F", F_}});
  }
  std::vector<std::string> InputNames() const override {
    return {"x", "wg", "wu", "wd"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, N_ * C_, -1, 1), RandomVector(rng, F_ * C_, -1, 1),
            RandomVector(rng, F_ * C_, -1, 1), RandomVector(rng, C_ * F_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(SwigluMlpForward, SwigluMlpBackward, in, douts);
  }

 private:
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]), wg = Cast<T>(in[1]),
                         wu = Cast<T>(in[2]), wd = Cast<T>(in[3]);
    std::vector<T> y(N_ * C_), gate(N_ * F_), up(N_ * F_), h(N_ * F_);
    fwd(y.data(), gate.data(), up.data(), h.data(), x.data(), wg.data(),
        wu.data(), wd.data(), N_, C_, F_);
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dx(N_ * C_), dwg(F_ * C_, T(0)), dwu(F_ * C_, T(0)),
        dwd(C_ * F_, T(0)), ws(2 * N_ * F_);
    bwd(dx.data(), dwg.data(), dwu.data(), dwd.data(), ws.data(), dy.data(),
        gate.data(), up.data(), x.data(), wg.data(), wu.data(), wd.data(), N_,
        C_, F_);
    r.grads = {ToDouble(dx), ToDouble(dwg), ToDouble(dwu), ToDouble(dwd)};
    return r;
  }
  int64_t N_, C_, F_;
};

// ---- embedding -------------------------------------------------------------

class EmbeddingCase : public KernelCase {
 public:
  EmbeddingCase(std::vector<int32_t> ids, int64_t C, int64_t V)
      : ids_(std::move(ids)), C_(C), V_(V) {}
  std::string Name() const override {
    return "embedding" + Dims({{"N", N()}, {"C", C_}, {"V", V_}});
  }
  std::vector<std::string> InputNames() const override { return {"table"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, V_ * C_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(EmbeddingForward, EmbeddingBackward, in, douts);
  }

 private:
  int64_t N() const { return static_cast<int64_t>(ids_.size()); }
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> table = Cast<T>(in[0]);
    std::vector<T> y(N() * C_);
    fwd(y.data(), ids_.data(), table.data(), N(), C_, V_);
    KernelRun r{{ToDouble(y)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]);
    std::vector<T> dtable(V_ * C_, T(0));
    bwd(dtable.data(), dy.data(), ids_.data(), N(), C_, V_);
    r.grads = {ToDouble(dtable)};
    return r;
  }
  std::vector<int32_t> ids_;
  int64_t C_, V_;
};

// ---- output layer + cross-entropy ------------------------------------------

class OutputLossCase : public KernelCase {
 public:
  OutputLossCase(int64_t N, int64_t C, int64_t V, int64_t Vs)
      : N_(N), C_(C), V_(V), Vs_(Vs), targets_(N) {
    for (int64_t n = 0; n < N; ++n) targets_[n] = static_cast<int32_t>((7 * n + 3) % V);
    targets_[0] = static_cast<int32_t>(V - 1);  // in the last (narrow) slice
  }
  std::string Name() const override {
    return "output_loss" + Dims({{"N", N_}, {"C", C_}, {"V", V_}, {"Vs", Vs_}});
  }
  std::vector<std::string> InputNames() const override { return {"x", "w"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, N_ * C_, -2, 2), RandomVector(rng, V_ * C_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(OutputLossForward, OutputLossBackward, in, douts);
  }

 private:
  // Outputs: the per-token losses, then the returned mean (a 1-vector), which
  // must equal the mean of the losses.
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]), w = Cast<T>(in[1]);
    std::vector<T> losses(N_), lse(N_), logits(N_ * std::min(Vs_, V_));
    const double mean = fwd(losses.data(), lse.data(), logits.data(), x.data(),
                            w.data(), targets_.data(), N_, C_, V_, Vs_);
    KernelRun r{{ToDouble(losses), Buffer{mean}}, {}};
    if (douts.empty()) return r;
    // d(mean)/d(loss_n) = 1/N, so the mean's weight folds into dlosses.
    std::vector<T> dlosses(N_);
    for (int64_t n = 0; n < N_; ++n) {
      dlosses[n] = static_cast<T>(douts[0][n] + douts[1][0] / N_);
    }
    std::vector<T> dx(N_ * C_), dw(V_ * C_, T(0));
    bwd(dx.data(), dw.data(), logits.data(), dlosses.data(), lse.data(),
        x.data(), w.data(), targets_.data(), N_, C_, V_, Vs_);
    r.grads = {ToDouble(dx), ToDouble(dw)};
    return r;
  }
  int64_t N_, C_, V_, Vs_;
  std::vector<int32_t> targets_;  // (N)
};

TEST(DenseKernels, Linear) {
  CheckKernelCase(LinearCase(5, 7, 3, true), 1);
  CheckKernelCase(LinearCase(4, 3, 6, false), 2);
  CheckKernelCase(LinearCase(1, 1, 1, true), 3);
}

TEST(DenseKernels, RmsNorm) {
  CheckKernelCase(RmsNormCase(4, 8), 4);
  CheckKernelCase(RmsNormCase(1, 3), 5);
}

TEST(DenseKernels, LayerNorm) {
  CheckKernelCase(LayerNormCase(4, 8, true), 20);
  CheckKernelCase(LayerNormCase(1, 3, false), 21);
  CheckKernelCase(LayerNormCase(2, 5, true), 22);
  CheckKernelCase(LayerNormCase(3, 8, true, 1e3), 23);
}

// Row 0 around 1e3 +- 2 in float32: the saved statistics match the float64
// reference's. The variance about the mean keeps rstd within a few float
// roundings; E[x^2] - mean^2 would lose about eps 1e6 ~ 0.1 of a variance
// of ~1.3, an error of several percent in rstd.
TEST(DenseKernels, LayerNormVarianceIsStableForLargeMean) {
  constexpr int64_t R = 2, C = 16;
  constexpr double kOffset = 1e3;
  std::mt19937_64 rng(24);
  Buffer x = RandomVector(rng, R * C, -2, 2);
  for (int64_t c = 0; c < C; ++c) x[c] += kOffset;
  const std::vector<float> xf = Cast<float>(x);
  x = ToDouble(xf);  // both runs from the same values
  const Buffer w(C, 1.0), b(C, 0.0);
  Buffer y(R * C), mean(R), rstd(R);
  LayerNormForwardRef(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), R,
                      C, 1e-5);
  std::vector<float> yf(R * C), meanf(R), rstdf(R);
  const std::vector<float> wf = Cast<float>(w), bf = Cast<float>(b);
  LayerNormForward<float>(yf.data(), meanf.data(), rstdf.data(), xf.data(), wf.data(),
                          bf.data(), R, C, 1e-5f);
  // mean: C float roundings of a sum near C |offset|, relative to |offset|;
  // rstd and y: that error in x - mean, relative to the row's spread.
  const double tol = C * FLT_EPSILON;
  EXPECT_TRUE(AllClose("mean", ToDouble(meanf), mean, 0, tol, tol));
  EXPECT_TRUE(AllClose("rstd", ToDouble(rstdf), rstd, 0, tol * kOffset, tol * kOffset));
  EXPECT_TRUE(AllClose("y", ToDouble(yf), y, tol * kOffset, tol * kOffset, tol * kOffset));
}

TEST(DenseKernels, Silu) { CheckKernelCase(SiluCase(20), 6); }

TEST(DenseKernels, Gelu) { CheckKernelCase(GeluCase(40), 25); }

TEST(DenseKernels, SwigluMlp) {
  CheckKernelCase(SwigluCase(3, 6, 10), 7);
  CheckKernelCase(SwigluCase(1, 2, 3), 8);
}

TEST(DenseKernels, Embedding) {
  CheckKernelCase(EmbeddingCase({0, 3, 3, 5, 1, 3, 0}, 5, 6), 9);  // repeats
}

TEST(DenseKernels, OutputLossOverVocabularySlices) {
  // Slices: narrower last slice, exact division, width 1, whole vocabulary,
  // wider than the vocabulary.
  for (int64_t Vs : {4, 23, 1, 5, 50}) {
    CheckKernelCase(OutputLossCase(5, 6, Vs == 5 ? 20 : 23, Vs), 10 + Vs);
  }
}

// The fused loss is plain cross-entropy: with uniform logits (w = 0) every
// token's loss is log V, whatever the slice width.
TEST(DenseKernels, OutputLossOfUniformLogitsIsLogV) {
  const int64_t N = 3, C = 4, V = 11;
  std::vector<float> x(N * C, 0.5f), w(V * C, 0.0f), losses(N), lse(N),
      logits(N * 3);
  std::vector<int32_t> targets = {0, 5, 10};
  const double mean = OutputLossForward<float>(
      losses.data(), lse.data(), logits.data(), x.data(), w.data(),
      targets.data(), N, C, V, 3);
  EXPECT_NEAR(mean, std::log(static_cast<double>(V)), 1e-6);
  for (float l : losses) EXPECT_NEAR(l, std::log(static_cast<double>(V)), 1e-6);
}

// Large logits: the online logsumexp must not overflow in float32.
TEST(DenseKernels, OutputLossIsStableForLargeLogits) {
  const int64_t N = 2, C = 1, V = 6;
  std::vector<float> x = {100.0f, -100.0f}, w = {1, 2, 3, 4, 5, 6},
                     losses(N), lse(N), logits(N * 2);
  std::vector<int32_t> targets = {5, 0};
  OutputLossForward<float>(losses.data(), lse.data(), logits.data(), x.data(),
                           w.data(), targets.data(), N, C, V, 2);
  // Token 0: logits 100 * (1..6), target the largest: loss = log(1 + sum
  // e^{-100 j}) ~ e^-100; token 1 likewise with the target -100.
  for (float l : losses) {
    EXPECT_TRUE(std::isfinite(l));
    EXPECT_NEAR(l, 0.0, 1e-6);
  }
}

// Parameter gradients are accumulated, input gradients written: running the
// backward twice doubles dw and leaves dx unchanged.
TEST(DenseKernels, ParameterGradientsAccumulateInputGradientsAreWritten) {
  std::mt19937_64 rng(99);
  const int64_t N = 3, C = 4, D = 5;
  const Buffer x = RandomVector(rng, N * C, -1, 1),
               w = RandomVector(rng, D * C, -1, 1),
               dy = RandomVector(rng, N * D, -1, 1);
  Buffer dx(N * C, 7.0), dw(D * C, 0.0), db(D, 0.0);
  LinearBackward<double>(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                         w.data(), N, C, D);
  const Buffer dx1 = dx, dw1 = dw, db1 = db;
  LinearBackward<double>(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                         w.data(), N, C, D);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], dx1[i]);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw[i], 2 * dw1[i]);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_DOUBLE_EQ(db[i], 2 * db1[i]);
}

TEST(DenseKernels, CheckTokenIdsNamesTheBadPosition) {
  const std::vector<int32_t> ids = {1, 2, 9, -1};
  EXPECT_TRUE(CheckTokenIds(ids.data(), 2, 3).ok());
  const Status s = CheckTokenIds(ids.data(), 4, 5);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidInput);
  EXPECT_EQ(s.message(), "token 2: id 9 is outside the vocabulary [0, 5)");
}

}  // namespace
}  // namespace stateflow::backend

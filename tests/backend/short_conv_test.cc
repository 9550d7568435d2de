// The causal short convolution: against its float64 reference, in float32,
// by central differences (x, w and the incoming tail), and chunking exactness:
// a sequence run in pieces, with the tail handed over (pieces shorter than
// W-1 included), gives the outputs and gradients of one run.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "backend/kernels/short_conv.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

class ShortConvCase : public KernelCase {
 public:
  ShortConvCase(int64_t T, int64_t C, int64_t W, bool with_tail)
      : T_(T), C_(C), W_(W), with_tail_(with_tail) {}
  std::string Name() const override {
    std::ostringstream s;
    s << "short_conv T=" << T_ << " C=" << C_ << " W=" << W_
      << " tail_in=" << (with_tail_ ? "given" : "zeros");
    return s.str();
  }
  std::vector<std::string> InputNames() const override {
    return {"x", "w", "tail_in"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, T_ * C_, -1, 1), RandomVector(rng, W_ * C_, -1, 1),
            RandomVector(rng, (W_ - 1) * C_, -1, 1)};
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    SF_RUN_KERNEL_VARIANTS(ShortConvForward, ShortConvBackward, in, douts);
  }

 private:
  // Outputs y and tail_out; gradients dx, dw, dtail_in.
  template <typename T, typename F, typename B>
  KernelRun RunWith(F fwd, B bwd, const Buffers& in,
                    const Buffers& douts) const {
    const std::vector<T> x = Cast<T>(in[0]), w = Cast<T>(in[1]),
                         tail = Cast<T>(in[2]);
    const T* tail_in = with_tail_ ? tail.data() : nullptr;
    std::vector<T> y(T_ * C_), tail_out((W_ - 1) * C_);
    fwd(y.data(), tail_out.data(), x.data(), w.data(), tail_in, T_, C_, W_);
    KernelRun r{{ToDouble(y), ToDouble(tail_out)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dy = Cast<T>(douts[0]), dto = Cast<T>(douts[1]);
    std::vector<T> dx(T_ * C_), dw(W_ * C_, T(0)), dti((W_ - 1) * C_);
    bwd(dx.data(), dti.data(), dw.data(), dy.data(), dto.data(), x.data(),
        w.data(), tail_in, T_, C_, W_);
    r.grads = {ToDouble(dx), ToDouble(dw),
               with_tail_ ? ToDouble(dti) : Buffer{}};
    return r;
  }
  int64_t T_, C_, W_;
  bool with_tail_;
};

TEST(ShortConv, AgainstReferenceAndFiniteDifferences) {
  // Chunks longer, equal to and shorter than W-1 = 3; W = 1 (no tail) and 2.
  int seed = 0;
  for (int64_t T : {1, 2, 3, 4, 9}) {
    CheckKernelCase(ShortConvCase(T, 3, 4, true), ++seed);
    CheckKernelCase(ShortConvCase(T, 3, 4, false), ++seed);
  }
  CheckKernelCase(ShortConvCase(5, 2, 1, false), ++seed);
  CheckKernelCase(ShortConvCase(5, 2, 2, true), ++seed);
}

// The lag convention, spelled out on one channel: y_t = sum_j w_j x_{t-j}
// with x_{-1}, x_{-2}, x_{-3} = tail rows 2, 1, 0.
TEST(ShortConv, LagConventionOnOneChannel) {
  const std::vector<double> x = {1, 10, 100}, w = {1, 2, 3, 4},
                            tail = {1000, 10000, 100000};
  std::vector<double> y(3), tail_out(3);
  ShortConvForward<double>(y.data(), tail_out.data(), x.data(), w.data(),
                           tail.data(), 3, 1, 4);
  // y_0 = 1*x_0 + 2*x_{-1} + 3*x_{-2} + 4*x_{-3}
  EXPECT_EQ(y[0], 1 * 1 + 2 * 100000 + 3 * 10000 + 4 * 1000);
  EXPECT_EQ(y[2], 1 * 100 + 2 * 10 + 3 * 1 + 4 * 100000);
  EXPECT_EQ(tail_out, x);  // the last W-1 inputs
}

// One run over [0, T) against runs over consecutive pieces.
void CheckChunking(const std::vector<int64_t>& cuts, int64_t T, int64_t C,
                   int64_t W, uint64_t seed) {
  std::ostringstream name;
  name << "T=" << T << " cuts=";
  for (int64_t c : cuts) name << c << ",";
  SCOPED_TRACE(name.str());
  std::mt19937_64 rng(seed);
  const Buffer x = RandomVector(rng, T * C, -1, 1), w = RandomVector(rng, W * C, -1, 1),
               tail0 = RandomVector(rng, (W - 1) * C, -1, 1),
               dy = RandomVector(rng, T * C, -1, 1),
               dtail_end = RandomVector(rng, (W - 1) * C, -1, 1);
  Buffer y(T * C), tail_end((W - 1) * C), dx(T * C), dw(W * C, 0.0),
      dtail0((W - 1) * C);
  ShortConvForward<double>(y.data(), tail_end.data(), x.data(), w.data(),
                           tail0.data(), T, C, W);
  ShortConvBackward<double>(dx.data(), dtail0.data(), dw.data(), dy.data(),
                            dtail_end.data(), x.data(), w.data(), tail0.data(),
                            T, C, W);
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(T);
  const size_t pieces = bounds.size() - 1;
  std::vector<Buffer> tails(pieces + 1, Buffer((W - 1) * C));  // tails[i]: entering piece i
  tails[0] = tail0;
  Buffer y_p(T * C), dx_p(T * C), dw_p(W * C, 0.0);
  for (size_t i = 0; i < pieces; ++i) {
    const int64_t t0 = bounds[i], len = bounds[i + 1] - bounds[i];
    ShortConvForward<double>(y_p.data() + t0 * C, tails[i + 1].data(),
                             x.data() + t0 * C, w.data(), tails[i].data(), len,
                             C, W);
  }
  Buffer dtail = dtail_end;  // d(tail leaving the current piece)
  for (size_t i = pieces; i-- > 0;) {
    const int64_t t0 = bounds[i], len = bounds[i + 1] - bounds[i];
    Buffer dtail_in((W - 1) * C);
    ShortConvBackward<double>(dx_p.data() + t0 * C, dtail_in.data(), dw_p.data(),
                              dy.data() + t0 * C, dtail.data(), x.data() + t0 * C,
                              w.data(), tails[i].data(), len, C, W);
    dtail = dtail_in;
  }
  EXPECT_TRUE(AllClose("y", y_p, y, 1e-14, 1e-12, 1e-13));
  EXPECT_TRUE(AllClose("tail_out", tails[pieces], tail_end, 0, 0, 0));
  EXPECT_TRUE(AllClose("dx", dx_p, dx, 1e-14, 1e-12, 1e-13));
  EXPECT_TRUE(AllClose("dw", dw_p, dw, 1e-14, 1e-12, 1e-13));
  EXPECT_TRUE(AllClose("dtail_in", dtail, dtail0, 1e-14, 1e-12, 1e-13));
}

TEST(ShortConv, ChunkedSequenceEqualsOneRun) {
  CheckChunking({5}, 12, 3, 4, 1);
  CheckChunking({1, 3}, 12, 3, 4, 2);          // pieces of 1 and 2 < W-1
  CheckChunking({1, 2, 3, 4, 5}, 7, 2, 4, 3);  // all pieces of one token
  CheckChunking({2, 2, 9}, 12, 3, 4, 4);       // an empty piece
  CheckChunking({3, 6, 9}, 12, 3, 4, 5);       // pieces of exactly W-1
}

}  // namespace
}  // namespace stateflow::backend

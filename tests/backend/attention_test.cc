// The tiled causal attention kernel against its float64 reference (o, lse and
// every gradient, 1e-12 in float64, float32 looser), by central differences
// for q, k and v, with queries starting at a prefix (start > 0), GQA groups
// 1, 2 and 4, s and start not multiples of the tiles; a sequence run chunk by
// chunk (forward over the prefix, backward N-1..0 adding into dk, dv) equals
// one run; the same bits at any thread count; the FLOP count. And the rotary
// embedding: against its reference, its backward the transpose, positions
// absolute (chunking changes nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/kernels/attention.h"
#include "backend/kernels/rope.h"
#include "backend/threading.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h
using testing::Dot;

// One kernel call's shape: s queries from position `start`, tiles Br x Bc.
struct AttnShape {
  int64_t s, start, Hq, Hkv, d;
  int64_t Br = kAttentionQueryTile, Bc = kAttentionKeyTile;
  int64_t keys() const { return start + s; }
  std::string Name() const {
    std::ostringstream o;
    o << "s=" << s << " start=" << start << " Hq=" << Hq << " Hkv=" << Hkv
      << " d=" << d << " tiles=" << Br << "x" << Bc;
    return o.str();
  }
};

const std::vector<std::string> kInputNames = {"q", "k", "v"};

Buffers RandomInputs(const AttnShape& a, std::mt19937_64& rng, double scale = 1) {
  return {RandomVector(rng, a.s * a.Hq * a.d, -scale, scale),
          RandomVector(rng, a.keys() * a.Hkv * a.d, -scale, scale),
          RandomVector(rng, a.keys() * a.Hkv * a.d, -1, 1)};
}

// Forward, then (douts = {dO} given) backward into zeroed dk, dv:
// outputs {o, lse}, grads {dq, dk, dv}.
template <typename T>
KernelRun RunAttention(bool reference, const AttnShape& a, const Buffers& in,
                       const Buffers& douts) {
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]), v = Cast<T>(in[2]);
  std::vector<T> o(a.s * a.Hq * a.d), lse(a.s * a.Hq);
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      AttentionForwardRef(o.data(), lse.data(), q.data(), k.data(), v.data(),
                          a.s, a.start, a.Hq, a.Hkv, a.d);
    }
  }
  if (!reference) {
    AttentionForward<T>(o.data(), lse.data(), q.data(), k.data(), v.data(), a.s,
                        a.start, a.Hq, a.Hkv, a.d, a.Br, a.Bc);
  }
  KernelRun r{{ToDouble(o), ToDouble(lse)}, {}};
  if (douts.empty()) return r;
  const std::vector<T> dO = Cast<T>(douts[0]);
  std::vector<T> dq(q.size()), dk(k.size(), T(0)), dv(v.size(), T(0)), D(a.s * a.Hq);
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      AttentionBackwardRef(dq.data(), dk.data(), dv.data(), D.data(), dO.data(),
                           o.data(), lse.data(), q.data(), k.data(), v.data(),
                           a.s, a.start, a.Hq, a.Hkv, a.d);
    }
  }
  if (!reference) {
    AttentionBackward<T>(dq.data(), dk.data(), dv.data(), D.data(), dO.data(),
                         o.data(), lse.data(), q.data(), k.data(), v.data(),
                         a.s, a.start, a.Hq, a.Hkv, a.d, a.Br, a.Bc);
  }
  r.grads = {ToDouble(dq), ToDouble(dk), ToDouble(dv)};
  return r;
}

// The harness case (kernel_test_util.h). Its only differentiable output is
// o: the backward takes no d(lse) (the layer never uses lse but for the
// backward), so lse is compared separately (LseMatchesReference).
class AttentionCase : public KernelCase {
 public:
  explicit AttentionCase(AttnShape a) : a_(a) {}
  std::string Name() const override { return "attention " + a_.Name(); }
  std::vector<std::string> InputNames() const override { return kInputNames; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return RandomInputs(a_, rng);
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    KernelRun r = variant == Variant::kFast32
                      ? RunAttention<float>(false, a_, in, douts)
                      : RunAttention<double>(variant == Variant::kRef, a_, in, douts);
    r.outputs.resize(1);  // o only
    return r;
  }
  double Float32Tolerance() const override { return 1e-5; }

 private:
  AttnShape a_;
};

TEST(Attention, AgainstReferenceAndFiniteDifferences) {
  // GQA groups 1, 2, 4; tiles smaller than s and start, neither a multiple
  // of them; start 0 and > 0; one query; the default tiles with a partial
  // diagonal tile.
  CheckKernelCase(AttentionCase({13, 0, 2, 2, 4, 4, 5}), 1);
  CheckKernelCase(AttentionCase({11, 7, 4, 2, 6, 4, 3}), 2);
  CheckKernelCase(AttentionCase({9, 10, 4, 1, 4, 5, 4}), 3);
  CheckKernelCase(AttentionCase({1, 6, 2, 1, 8, 4, 4}), 4);
  CheckKernelCase(AttentionCase({19, 3, 4, 4, 2, 8, 8}), 5);
  CheckKernelCase(AttentionCase({7, 70, 2, 1, 4}), 6);
}

// lse (and o, gradients) at the default tiles, larger shapes, against the
// reference to 1e-12 in float64.
TEST(Attention, LseAndGradientsMatchReference) {
  for (const AttnShape& a : {AttnShape{70, 0, 4, 2, 16}, AttnShape{65, 53, 4, 1, 16},
                             AttnShape{130, 130, 2, 2, 8}, AttnShape{64, 64, 8, 2, 32}}) {
    SCOPED_TRACE(a.Name());
    std::mt19937_64 rng(a.s + a.start);
    const Buffers in = RandomInputs(a, rng, 2.0);
    const Buffers douts = {RandomVector(rng, a.s * a.Hq * a.d, -1, 1)};
    const KernelRun ref = RunAttention<double>(true, a, in, douts);
    const KernelRun fast = RunAttention<double>(false, a, in, douts);
    EXPECT_TRUE(AllClose("o", fast.outputs[0], ref.outputs[0], 1e-13, 1e-12, 1e-12));
    EXPECT_TRUE(AllClose("lse", fast.outputs[1], ref.outputs[1], 1e-13, 1e-12, 1e-12));
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(AllClose("d" + kInputNames[i], fast.grads[i], ref.grads[i],
                           1e-13, 1e-12, 1e-12));
    }
    const KernelRun f32 = RunAttention<float>(false, a, in, douts);
    EXPECT_TRUE(AllClose("float o", f32.outputs[0], ref.outputs[0], 1e-5, 1e-5, 1e-5));
    EXPECT_TRUE(AllClose("float lse", f32.outputs[1], ref.outputs[1], 1e-5, 1e-5, 1e-5));
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(AllClose("float d" + kInputNames[i], f32.grads[i], ref.grads[i],
                           1e-4, 1e-4, 1e-5));
    }
  }
}

// dk and dv are added to, dq is written.
TEST(Attention, BackwardAddsIntoDkDvAndWritesDq) {
  const AttnShape a{10, 5, 2, 1, 4, 4, 4};
  std::mt19937_64 rng(3);
  const Buffers in = RandomInputs(a, rng);
  const Buffer dO = RandomVector(rng, a.s * a.Hq * a.d, -1, 1);
  const KernelRun fresh = RunAttention<double>(false, a, in, {dO});
  Buffer o(a.s * a.Hq * a.d), lse(a.s * a.Hq), D(a.s * a.Hq);
  AttentionForward<double>(o.data(), lse.data(), in[0].data(), in[1].data(),
                           in[2].data(), a.s, a.start, a.Hq, a.Hkv, a.d, a.Br, a.Bc);
  Buffer dq(o.size(), 7.0);  // overwritten
  Buffer dk = RandomVector(rng, a.keys() * a.Hkv * a.d, -1, 1), dv = dk;
  const Buffer dk0 = dk, dv0 = dv;
  AttentionBackward<double>(dq.data(), dk.data(), dv.data(), D.data(), dO.data(),
                            o.data(), lse.data(), in[0].data(), in[1].data(),
                            in[2].data(), a.s, a.start, a.Hq, a.Hkv, a.d, a.Br, a.Bc);
  EXPECT_EQ(dq, fresh.grads[0]);
  for (size_t e = 0; e < dk.size(); ++e) {
    EXPECT_NEAR(dk[e], dk0[e] + fresh.grads[1][e], 1e-15) << e;
    EXPECT_NEAR(dv[e], dv0[e] + fresh.grads[2][e], 1e-15) << e;
  }
}

Buffer Rows(const Buffer& x, int64_t t0, int64_t t1, int64_t width) {
  return Buffer(x.begin() + t0 * width, x.begin() + t1 * width);
}

// A sequence of T tokens cut at `cuts`: chunk i's forward reads the K/V
// prefix 0..end_i; the backward runs the chunks N-1..0, each writing its dq
// rows and adding into the sequence-wide dk, dv. Equals one run (start 0,
// s = T) to 1e-12.
void CheckChunking(const AttnShape& whole, const std::vector<int64_t>& cuts,
                   uint64_t seed) {
  std::ostringstream name;
  name << whole.Name() << " cuts=";
  for (int64_t c : cuts) name << c << ",";
  SCOPED_TRACE(name.str());
  std::mt19937_64 rng(seed);
  const Buffers in = RandomInputs(whole, rng, 2.0);
  const Buffer dO = RandomVector(rng, whole.s * whole.Hq * whole.d, -1, 1);
  const KernelRun one = RunAttention<double>(false, whole, in, {dO});
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(whole.s);
  const int64_t qw = whole.Hq * whole.d, kw = whole.Hkv * whole.d;
  Buffer o, lse, dq(whole.s * qw), dk(whole.s * kw, 0.0), dv(whole.s * kw, 0.0);
  std::vector<Buffer> o_chunk, lse_chunk;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    AttnShape c = whole;
    c.start = bounds[i];
    c.s = bounds[i + 1] - bounds[i];
    o_chunk.emplace_back(c.s * qw);
    lse_chunk.emplace_back(c.s * whole.Hq);
    AttentionForward<double>(o_chunk[i].data(), lse_chunk[i].data(),
                             in[0].data() + c.start * qw, in[1].data(),
                             in[2].data(), c.s, c.start, c.Hq, c.Hkv, c.d, c.Br, c.Bc);
    o.insert(o.end(), o_chunk[i].begin(), o_chunk[i].end());
    lse.insert(lse.end(), lse_chunk[i].begin(), lse_chunk[i].end());
  }
  EXPECT_TRUE(AllClose("o", o, one.outputs[0], 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("lse", lse, one.outputs[1], 1e-13, 1e-12, 1e-12));
  for (size_t i = bounds.size() - 1; i-- > 0;) {
    AttnShape c = whole;
    c.start = bounds[i];
    c.s = bounds[i + 1] - bounds[i];
    Buffer D(c.s * c.Hq);
    AttentionBackward<double>(dq.data() + c.start * qw, dk.data(), dv.data(),
                              D.data(), dO.data() + c.start * qw,
                              o_chunk[i].data(), lse_chunk[i].data(),
                              in[0].data() + c.start * qw, in[1].data(),
                              in[2].data(), c.s, c.start, c.Hq, c.Hkv, c.d, c.Br, c.Bc);
  }
  EXPECT_TRUE(AllClose("dq", dq, one.grads[0], 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("dk", dk, one.grads[1], 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("dv", dv, one.grads[2], 1e-13, 1e-12, 1e-12));
}

TEST(Attention, ChunkedSequenceEqualsOneRun) {
  CheckChunking({200, 0, 4, 2, 16}, {64}, 1);           // at a tile boundary
  CheckChunking({200, 0, 4, 2, 16}, {70, 141}, 2);      // N = 3, off the tiles
  CheckChunking({150, 0, 4, 4, 8}, {1, 2, 77, 149}, 3); // one-token chunks
  CheckChunking({50, 0, 8, 2, 8, 4, 6}, {13, 33}, 4);   // small tiles
}

// Sets the kernels' thread count for one test and back to 1 after it.
class ScopedKernelThreads {
 public:
  explicit ScopedKernelThreads(int threads) { SetKernelThreads(threads); }
  ~ScopedKernelThreads() { SetKernelThreads(1); }
  ScopedKernelThreads(const ScopedKernelThreads&) = delete;
  ScopedKernelThreads& operator=(const ScopedKernelThreads&) = delete;
};

// The same bits at 1, 2 and 3 threads: one, two and three K/V heads (the
// backward's tasks), in float and double.
template <typename T>
void ExpectSameBitsAtAnyThreadCount(const AttnShape& a) {
  SCOPED_TRACE(a.Name());
  std::mt19937_64 rng(9);
  const Buffers in = RandomInputs(a, rng, 2.0);
  const Buffers douts = {RandomVector(rng, a.s * a.Hq * a.d, -1, 1)};
  SetKernelThreads(1);
  const KernelRun one = RunAttention<T>(false, a, in, douts);
  for (int threads : {2, 3}) {
    ScopedKernelThreads scoped(threads);
    const KernelRun run = RunAttention<T>(false, a, in, douts);
    EXPECT_EQ(run.outputs, one.outputs) << threads << " threads";
    EXPECT_EQ(run.grads, one.grads) << threads << " threads";
  }
}

TEST(Attention, SameBitsAtAnyThreadCount) {
  for (const AttnShape& a : {AttnShape{150, 40, 2, 1, 64}, AttnShape{150, 40, 4, 2, 16},
                             AttnShape{100, 0, 3, 3, 32}}) {
    ExpectSameBitsAtAnyThreadCount<double>(a);
    ExpectSameBitsAtAnyThreadCount<float>(a);
  }
}

// The FLOP count: 4 d Hq (forward) and 10 d Hq (backward) per causal pair,
// the pairs counted one by one here.
TEST(Attention, FlopCountIsPerCausalPair) {
  const int64_t s = 37, start = 11, Hq = 3, d = 8;
  double pairs = 0;
  for (int64_t i = 0; i < s; ++i) pairs += static_cast<double>(start + i + 1);
  const AttentionFlops f = CountAttentionFlops(s, start, Hq, d);
  EXPECT_DOUBLE_EQ(f.forward, 4.0 * d * Hq * pairs);
  EXPECT_DOUBLE_EQ(f.backward, 10.0 * d * Hq * pairs);
}

// ---- rotary embedding --------------------------------------------------------

// Forward and backward against the reference; the backward is the transpose
// (<dy, R x> = <R^T dy, x>); norms are kept; position 0 is the identity;
// rows rotated from pos0 equal the same rows of a longer run from 0.
TEST(Rope, AgainstReferenceAndItsTranspose) {
  const int64_t N = 9, H = 3, d = 8, pos0 = 1000;
  std::mt19937_64 rng(5);
  const Buffer x = RandomVector(rng, N * H * d, -1, 1), dy = RandomVector(rng, N * H * d, -1, 1);
  Buffer y_ref(x.size()), dx_ref(x.size());
  RopeForwardRef(y_ref.data(), x.data(), N, H, d, pos0);
  RopeBackwardRef(dx_ref.data(), dy.data(), N, H, d, pos0);
  Buffer y = x, dx = dy;
  RopeForward<double>(y.data(), N, H, d, pos0);
  RopeBackward<double>(dx.data(), N, H, d, pos0);
  EXPECT_TRUE(AllClose("y", y, y_ref, 1e-15, 1e-14, 1e-14));
  EXPECT_TRUE(AllClose("dx", dx, dx_ref, 1e-15, 1e-14, 1e-14));
  EXPECT_NEAR(Dot(dy, y), Dot(dx, x), 1e-12);
  for (int64_t r = 0; r < N * H; ++r) {  // a rotation keeps each head's norm
    const Buffer a = Rows(x, r, r + 1, d), b = Rows(y, r, r + 1, d);
    EXPECT_NEAR(Dot(a, a), Dot(b, b), 1e-12);
  }
  Buffer z = x;
  RopeForward<double>(z.data(), N, H, d, 0);
  EXPECT_EQ(Rows(z, 0, 1, H * d), Rows(x, 0, 1, H * d));  // position 0
  RopeBackward<double>(y.data(), N, H, d, pos0);            // inverse
  EXPECT_TRUE(AllClose("R^T R x", y, x, 1e-15, 1e-14, 1e-14));
  // Absolute positions: rows 4..8 from pos0 + 4 as a chunk of their own.
  Buffer whole = x, part = Rows(x, 4, N, H * d);
  RopeForward<double>(whole.data(), N, H, d, pos0);
  RopeForward<double>(part.data(), N - 4, H, d, pos0 + 4);
  EXPECT_EQ(part, Rows(whole, 4, N, H * d));
  std::vector<float> xf(x.begin(), x.end());
  RopeForward<float>(xf.data(), N, H, d, pos0);
  EXPECT_TRUE(AllClose("float y", ToDouble(xf), y_ref, 1e-6, 1e-6, 1e-6));
}

// The frequencies are base^(-2i/d) with base kRopeTheta = 10000: the first
// pair of a head turns by pos radians, the pair i by pos 10000^(-2i/d).
TEST(Rope, FrequenciesFromTheta) {
  const int64_t d = 4, pos = 3;
  // Pairs (x_0, x_2) = (1, 0), (x_1, x_3) = (1, 0). Not `Buffer x = {1, 1,
  // 0, 0}`: GCC 12.2 at -O2 -march=native (AVX-512) stores that list as four
  // 1s (docs/backend.md, known issues).
  Buffer x(4, 0.0);
  x[0] = 1;
  x[1] = 1;
  RopeForward<double>(x.data(), 1, 1, d, pos);
  const double a0 = pos, a1 = pos * std::pow(kRopeTheta, -2.0 / d);
  EXPECT_NEAR(x[0], std::cos(a0), 1e-15);
  EXPECT_NEAR(x[2], std::sin(a0), 1e-15);
  EXPECT_NEAR(x[1], std::cos(a1), 1e-15);
  EXPECT_NEAR(x[3], std::sin(a1), 1e-15);
}

}  // namespace
}  // namespace stateflow::backend

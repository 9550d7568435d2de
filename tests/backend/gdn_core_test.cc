// The chunkwise Gated DeltaNet core against the token-by-token float64
// recurrence (outputs, final state and every gradient, relative error under
// 1e-10 in float64, full and partial blocks), by central differences for every
// input including S_in, chunking exactness (a sequence run in pieces with the
// state handed over equals one run), any block size, and float32 agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/kernels/gdn_core.h"
#include "backend/kernels/gdn_prep.h"
#include "backend/threading.h"
#include "tests/backend/gdn_test_inputs.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

// Small unconstrained inputs for finite differences (k not normalised, so the
// kernel is checked as the function of its arguments that it claims to be).
Buffers SmallInputs(const GdnShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  return {RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dv, -1, 1),
          RandomVector(rng, rows, -0.8, -0.01),
          RandomVector(rng, rows, 0.05, 0.95),
          RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5)};
}

const std::vector<std::string> kInputNames = {"q", "k", "v", "g", "beta", "S_in"};

// Runs the core (forward, then backward if douts = {dO, dS_out} is given):
// outputs {o, S_out}, grads {dq, dk, dv, dg, dbeta, dS_in}.
template <typename T>
KernelRun RunCore(bool reference, const GdnShape& s, int64_t block,
                  const Buffers& in, const Buffers& douts) {
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]),
                       v = Cast<T>(in[2]), g = Cast<T>(in[3]),
                       beta = Cast<T>(in[4]), S_in = Cast<T>(in[5]);
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv,
                ns = s.H * s.Dv * s.Dk;
  std::vector<T> o(nv), S_out(ns);
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      GdnCoreForwardRef(o.data(), S_out.data(), q.data(), k.data(), v.data(),
                        g.data(), beta.data(), S_in.data(), s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (!reference) {
    GdnCoreForward<T>(o.data(), S_out.data(), q.data(), k.data(), v.data(),
                      g.data(), beta.data(), S_in.data(), s.T, s.H, s.Dk, s.Dv,
                      block);
  }
  KernelRun r{{ToDouble(o), ToDouble(S_out)}, {}};
  if (douts.empty()) return r;
  const std::vector<T> dO = Cast<T>(douts[0]), dS_out = Cast<T>(douts[1]);
  std::vector<T> dq(nk), dk(nk), dv(nv), dg(s.T * s.H), dbeta(s.T * s.H),
      dS_in(ns), ws(GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block));
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      GdnCoreBackwardRef(dq.data(), dk.data(), dv.data(), dg.data(),
                         dbeta.data(), dS_in.data(), ws.data(), dO.data(),
                         dS_out.data(), q.data(), k.data(), v.data(), g.data(),
                         beta.data(), S_in.data(), s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (!reference) {
    GdnCoreBackward<T>(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                       dS_in.data(), ws.data(), dO.data(), dS_out.data(),
                       q.data(), k.data(), v.data(), g.data(), beta.data(),
                       S_in.data(), s.T, s.H, s.Dk, s.Dv, block);
  }
  r.grads = {ToDouble(dq), ToDouble(dk), ToDouble(dv),
             ToDouble(dg), ToDouble(dbeta), ToDouble(dS_in)};
  return r;
}

Buffers RandomDouts(const GdnShape& s, std::mt19937_64& rng) {
  return {RandomVector(rng, s.T * s.H * s.Dv, -1, 1),
          RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1)};
}

// The harness case: fast vs reference, float32, central differences.
class GdnCoreCase : public KernelCase {
 public:
  GdnCoreCase(GdnShape s, int64_t block) : s_(s), block_(block) {}
  std::string Name() const override {
    return "gdn_core " + s_.Name() + " block=" + std::to_string(block_);
  }
  std::vector<std::string> InputNames() const override { return kInputNames; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return SmallInputs(s_, rng);
  }
  KernelRun Run(Variant variant, const Buffers& in,
                const Buffers& douts) const override {
    if (variant == Variant::kFast32) return RunCore<float>(false, s_, block_, in, douts);
    return RunCore<double>(variant == Variant::kRef, s_, block_, in, douts);
  }
  double Float32Tolerance() const override { return 1e-4; }

 private:
  GdnShape s_;
  int64_t block_;
};

TEST(GdnCore, AgainstReferenceAndFiniteDifferences) {
  // One partial block, several blocks with a partial last one, exact blocks.
  CheckKernelCase(GdnCoreCase({5, 2, 3, 4}, 64), 1);
  CheckKernelCase(GdnCoreCase({9, 2, 3, 4}, 4), 2);
  CheckKernelCase(GdnCoreCase({8, 1, 4, 2}, 4), 3);
  CheckKernelCase(GdnCoreCase({1, 1, 2, 3}, 64), 4);
}

// The chunkwise core equals the token-by-token recurrence to 1e-10 at the
// lengths around the block size T_C = 64.
void ExpectChunkwiseEqualsRecurrence(int64_t H) {
  for (int64_t T : {1, 5, 63, 64, 65, 130, 200}) {
    const GdnShape s{T, H, 16, 16};
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(100 + T);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const KernelRun ref = RunCore<double>(true, s, kGdnBlockSize, in, douts);
    const KernelRun fast = RunCore<double>(false, s, kGdnBlockSize, in, douts);
    EXPECT_TRUE(AllClose("o", fast.outputs[0], ref.outputs[0], 1e-13, 1e-10, 1e-10));
    EXPECT_TRUE(AllClose("S_out", fast.outputs[1], ref.outputs[1], 1e-13, 1e-10, 1e-10));
    for (size_t i = 0; i < kInputNames.size(); ++i) {
      EXPECT_TRUE(AllClose("d" + kInputNames[i], fast.grads[i], ref.grads[i],
                           1e-13, 1e-10, 1e-10));
    }
  }
}

TEST(GdnCore, ChunkwiseEqualsTokenByTokenRecurrence) {
  ExpectChunkwiseEqualsRecurrence(2);
}

// Any block size gives the same function: 1 (token by token through the
// chunkwise code), sizes that do and do not divide T, and one block.
TEST(GdnCore, EveryBlockSizeAgrees) {
  const GdnShape s{37, 1, 8, 6};
  std::mt19937_64 rng(7);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun ref = RunCore<double>(true, s, kGdnBlockSize, in, douts);
  for (int64_t block : {1, 2, 7, 37, 64}) {
    SCOPED_TRACE("block=" + std::to_string(block));
    const KernelRun fast = RunCore<double>(false, s, block, in, douts);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(AllClose("output " + std::to_string(i), fast.outputs[i],
                           ref.outputs[i], 1e-13, 1e-10, 1e-10));
    }
    for (size_t i = 0; i < kInputNames.size(); ++i) {
      EXPECT_TRUE(AllClose("d" + kInputNames[i], fast.grads[i], ref.grads[i],
                           1e-13, 1e-10, 1e-10));
    }
  }
}

// Slices [t0, t1) of a (T, H, D) buffer (or (T, H) when D = 1).
Buffer Rows(const Buffer& x, int64_t t0, int64_t t1, int64_t H, int64_t D) {
  return Buffer(x.begin() + t0 * H * D, x.begin() + t1 * H * D);
}

// A sequence cut at `cuts` and run piece by piece, with S handed forward and
// dS_in of each piece fed back as dS_out of the one before, equals one run.
void CheckCoreChunking(const GdnShape& s, const std::vector<int64_t>& cuts,
                       uint64_t seed) {
  std::ostringstream name;
  name << s.Name() << " cuts=";
  for (int64_t c : cuts) name << c << ",";
  SCOPED_TRACE(name.str());
  std::mt19937_64 rng(seed);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun whole = RunCore<double>(false, s, kGdnBlockSize, in, douts);
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(s.T);
  const size_t pieces = bounds.size() - 1;
  const std::vector<int64_t> widths = {s.Dk, s.Dk, s.Dv, 1, 1};
  // Forward: record each piece's entering state.
  std::vector<Buffer> states = {in[5]};
  Buffer o;
  for (size_t p = 0; p < pieces; ++p) {
    const GdnShape sp{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv};
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) in_p.push_back(Rows(in[i], bounds[p], bounds[p + 1], s.H, widths[i]));
    in_p.push_back(states[p]);
    const KernelRun r = RunCore<double>(false, sp, kGdnBlockSize, in_p, {});
    o.insert(o.end(), r.outputs[0].begin(), r.outputs[0].end());
    states.push_back(r.outputs[1]);
  }
  EXPECT_TRUE(AllClose("o", o, whole.outputs[0], 1e-13, 1e-10, 1e-10));
  EXPECT_TRUE(AllClose("S_out", states[pieces], whole.outputs[1], 1e-13, 1e-10, 1e-10));
  // Backward, last piece first.
  Buffers grads(5);
  Buffer dS = douts[1];
  for (size_t p = pieces; p-- > 0;) {
    const GdnShape sp{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv};
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) in_p.push_back(Rows(in[i], bounds[p], bounds[p + 1], s.H, widths[i]));
    in_p.push_back(states[p]);
    const KernelRun r = RunCore<double>(
        false, sp, kGdnBlockSize, in_p,
        {Rows(douts[0], bounds[p], bounds[p + 1], s.H, s.Dv), dS});
    for (size_t i = 0; i < 5; ++i) grads[i].insert(grads[i].begin(), r.grads[i].begin(), r.grads[i].end());
    dS = r.grads[5];
  }
  grads.push_back(dS);
  for (size_t i = 0; i < kInputNames.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], grads[i], whole.grads[i], 1e-13,
                         1e-10, 1e-10));
  }
}

TEST(GdnCore, ChunkedSequenceEqualsOneRun) {
  const GdnShape s{200, 1, 16, 16};
  CheckCoreChunking(s, {64}, 2);  // at a block boundary
  CheckCoreChunking(s, {100}, 3);
  CheckCoreChunking(s, {199}, 4);
  CheckCoreChunking(s, {30, 31, 130}, 5);  // a piece of one token
}

// Sets the kernels' thread count for one test and back to 1 after it.
class ScopedKernelThreads {
 public:
  explicit ScopedKernelThreads(int threads) { SetKernelThreads(threads); }
  ~ScopedKernelThreads() { SetKernelThreads(1); }
  ScopedKernelThreads(const ScopedKernelThreads&) = delete;
  ScopedKernelThreads& operator=(const ScopedKernelThreads&) = delete;
};

// LoopTeam: min(tasks, threads), but a team of at least two while threads
// > 1, so that the kernels' small products never run outside a parallel
// region (where Eigen would split each over the threads).
TEST(LoopTeam, NeverATeamOfOneWhileThreadsAreMany) {
  {
    ScopedKernelThreads one(1);
    EXPECT_EQ(LoopTeam(1), 1);
    EXPECT_EQ(LoopTeam(8), 1);
  }
  ScopedKernelThreads four(4);
  EXPECT_EQ(LoopTeam(0), 2);
  EXPECT_EQ(LoopTeam(1), 2);
  EXPECT_EQ(LoopTeam(3), 3);
  EXPECT_EQ(LoopTeam(100), 4);
}

// At T = 2 kernel threads, three heads on two lanes (each replaying its
// block states into its own slice of the workspace): still the recurrence
// to 1e-10, a chunked sequence still one run, and the same bits as T = 1
// (each head is computed by one thread in the same order either way).
TEST(GdnCore, TwoThreadsKeepExactness) {
  const GdnShape s{200, 3, 16, 16};
  std::mt19937_64 rng(11);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun one = RunCore<double>(false, s, kGdnBlockSize, in, douts);
  ScopedKernelThreads two(2);
  ASSERT_EQ(GdnCoreLanes(s.H), 2);
  ASSERT_EQ(GdnCoreLanes(1), 2);  // one head still runs inside a team (LoopTeam)
  ExpectChunkwiseEqualsRecurrence(3);
  CheckCoreChunking(s, {64}, 6);
  CheckCoreChunking(s, {30, 31, 130}, 7);
  const KernelRun run = RunCore<double>(false, s, kGdnBlockSize, in, douts);
  EXPECT_EQ(run.outputs, one.outputs);
  EXPECT_EQ(run.grads, one.grads);
}

// Split-and-overlap (GdnCoreForwardOverlapped) runs each block's Pre, ST and
// Out as tasks on 1 or 2 threads. With full blocks of >= 16 tokens every
// product takes Eigen's packed GEMM path: the same bits as the sequential
// forward, in float64 and float32, with more blocks than slots, one head and
// several, and a null entering state. A short partial last block (here 4
// tokens) takes Eigen's small-product path, whose last bit can follow the
// heap alignment of its temporaries (seen: 1 ulp on 2 of 1600 outputs, in
// either function): there 1e-13 relative.
template <typename T>
void ExpectOverlapSame(const GdnShape& s, int64_t block, bool null_state, double rel,
                       std::mt19937_64& rng) {
  const Buffers in = LayerLikeInputs(s, rng);
  std::vector<std::vector<T>> x;
  for (const Buffer& b : in) x.emplace_back(b.begin(), b.end());
  const T* S_in = null_state ? nullptr : x[5].data();
  std::vector<T> o1(s.T * s.H * s.Dv), S1(s.H * s.Dv * s.Dk);
  GdnCoreForward<T>(o1.data(), S1.data(), x[0].data(), x[1].data(), x[2].data(),
                    x[3].data(), x[4].data(), S_in, s.T, s.H, s.Dk, s.Dv, block);
  for (int threads : {1, 2}) {
    ScopedKernelThreads scoped(threads);
    std::vector<T> o2(o1.size(), T(-7)), S2(S1.size(), T(-7));
    GdnCoreForwardOverlapped<T>(o2.data(), S2.data(), x[0].data(), x[1].data(),
                                x[2].data(), x[3].data(), x[4].data(), S_in,
                                s.T, s.H, s.Dk, s.Dv, block);
    const std::string where = s.Name() + " block " + std::to_string(block) +
                              " threads " + std::to_string(threads);
    if (rel == 0) {
      EXPECT_EQ(o2, o1) << where;
      EXPECT_EQ(S2, S1) << where;
      continue;
    }
    for (const auto& [a, b] : {std::pair(&o1, &o2), std::pair(&S1, &S2)}) {
      for (size_t i = 0; i < a->size(); ++i) {
        ASSERT_NEAR((*a)[i], (*b)[i], rel * std::max(1.0, std::abs(double((*a)[i])))) << where;
      }
    }
  }
}

TEST(GdnCore, OverlapEqualsSequential) {
  std::mt19937_64 rng(15);
  ExpectOverlapSame<double>({256, 3, 16, 16}, kGdnBlockSize, false, 0, rng);
  ExpectOverlapSame<double>({144, 1, 8, 12}, 16, false, 0, rng);  // 9 blocks, 4 slots
  ExpectOverlapSame<double>({160, 2, 12, 8}, 16, true, 0, rng);
  ExpectOverlapSame<double>({0, 2, 4, 4}, 8, false, 0, rng);      // empty chunk
  ExpectOverlapSame<float>({320, 4, 16, 32}, kGdnBlockSize, false, 0, rng);
  ExpectOverlapSame<double>({100, 2, 12, 8}, 8, true, 1e-13, rng);  // last block: 4
  ExpectOverlapSame<double>({200, 3, 16, 16}, kGdnBlockSize, false, 1e-13, rng);
}

// The backward's split-and-overlap (GdnCoreBackwardOverlapped) against
// GdnCoreBackward, as the forward's: bit for bit with full blocks of >= 16
// tokens, 1e-13 relative with a short partial last block; null states (the
// sequence's start, its last chunk) included.
template <typename T>
void ExpectBackwardOverlapSame(const GdnShape& s, int64_t block, bool null_states, double rel,
                               std::mt19937_64& rng) {
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  std::vector<std::vector<T>> x;
  for (const Buffer& b : in) x.emplace_back(b.begin(), b.end());
  const std::vector<T> dO(douts[0].begin(), douts[0].end()), dS(douts[1].begin(), douts[1].end());
  const T* S_in = null_states ? nullptr : x[5].data();
  const T* dS_out = null_states ? nullptr : dS.data();
  const int64_t rows = s.T * s.H;
  auto run = [&](bool overlapped) {
    // dq, dk, dv, dg, dbeta, dS_in; garbage first, so every element is written.
    std::vector<std::vector<T>> g = {
        std::vector<T>(rows * s.Dk, T(-7)), std::vector<T>(rows * s.Dk, T(-7)),
        std::vector<T>(rows * s.Dv, T(-7)), std::vector<T>(rows, T(-7)),
        std::vector<T>(rows, T(-7)),        std::vector<T>(s.H * s.Dv * s.Dk, T(-7))};
    std::vector<T> ws(GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), T(-7));
    auto* f = overlapped ? &GdnCoreBackwardOverlapped<T> : &GdnCoreBackward<T>;
    f(g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(), ws.data(),
      dO.data(), dS_out, x[0].data(), x[1].data(), x[2].data(), x[3].data(), x[4].data(), S_in,
      s.T, s.H, s.Dk, s.Dv, block, 0);
    return g;
  };
  const std::vector<std::vector<T>> ref = run(false);
  for (int threads : {1, 2}) {
    ScopedKernelThreads scoped(threads);
    const std::vector<std::vector<T>> got = run(true);
    const std::string where = s.Name() + " block " + std::to_string(block) + " threads " +
                              std::to_string(threads);
    for (size_t t = 0; t < ref.size(); ++t) {
      if (rel == 0) {
        EXPECT_EQ(got[t], ref[t]) << where << " output " << t;
        continue;
      }
      for (size_t i = 0; i < ref[t].size(); ++i) {
        ASSERT_NEAR(got[t][i], ref[t][i], rel * std::max(1.0, std::abs(double(ref[t][i]))))
            << where << " output " << t;
      }
    }
  }
}

TEST(GdnCore, BackwardOverlapEqualsSequential) {
  std::mt19937_64 rng(16);
  ExpectBackwardOverlapSame<double>({256, 3, 16, 16}, kGdnBlockSize, false, 0, rng);
  ExpectBackwardOverlapSame<double>({144, 1, 8, 12}, 16, false, 0, rng);  // 9 blocks, 4 slots
  ExpectBackwardOverlapSame<double>({160, 2, 12, 8}, 16, true, 0, rng);
  ExpectBackwardOverlapSame<double>({0, 2, 4, 4}, 8, false, 0, rng);      // empty chunk
  ExpectBackwardOverlapSame<float>({320, 4, 16, 32}, kGdnBlockSize, false, 0, rng);
  ExpectBackwardOverlapSame<double>({100, 2, 12, 8}, 8, true, 1e-13, rng);  // last block: 4
  ExpectBackwardOverlapSame<double>({200, 3, 16, 16}, kGdnBlockSize, false, 1e-13, rng);
}

// The ST tile B_V (st_tile): the state's value rows split into tiles of B_V
// rows, each an independent chain through the blocks (GdnBlockSTRows; in the
// overlapped forward one task per tile). Against the untiled kernels: the
// same bits when the tile covers Dv, else within 1e-12 relative (the
// products are split); the overlapped kernels, forward and backward, on 1
// and 2 threads, the same bits as the sequential ones with the same tile.
// B_V = 1, 16, 64, 48 (does not divide 128) and 128 = Dv; one head of
// Dv = 128 at B_V = 64 is two parallel chains.
using CoreOutputs = std::vector<std::vector<double>>;  // o, S_out, dq, dk, dv, dg, dbeta, dS_in

CoreOutputs RunTiled(const GdnShape& s, int64_t block, int64_t tile, bool overlapped,
                     const Buffers& in, const Buffers& douts) {
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  CoreOutputs r = {Buffer(nv, -7), Buffer(ns, -7), Buffer(nk, -7), Buffer(nk, -7),
                   Buffer(nv, -7), Buffer(s.T * s.H, -7), Buffer(s.T * s.H, -7), Buffer(ns, -7)};
  auto fwd = overlapped ? &GdnCoreForwardOverlapped<double> : &GdnCoreForward<double>;
  fwd(r[0].data(), r[1].data(), in[0].data(), in[1].data(), in[2].data(), in[3].data(),
      in[4].data(), in[5].data(), s.T, s.H, s.Dk, s.Dv, block, tile);
  Buffer ws(GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), -7);
  auto bwd = overlapped ? &GdnCoreBackwardOverlapped<double> : &GdnCoreBackward<double>;
  bwd(r[2].data(), r[3].data(), r[4].data(), r[5].data(), r[6].data(), r[7].data(), ws.data(),
      douts[0].data(), douts[1].data(), in[0].data(), in[1].data(), in[2].data(), in[3].data(),
      in[4].data(), in[5].data(), s.T, s.H, s.Dk, s.Dv, block, tile);
  return r;
}

TEST(GdnCore, StTilesEqualUntiled) {
  for (const GdnShape& s : {GdnShape{128, 2, 16, 128}, GdnShape{96, 1, 8, 128}}) {
    std::mt19937_64 rng(21);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const int64_t block = 32;
    const CoreOutputs untiled = RunTiled(s, block, 0, false, in, douts);
    for (int64_t tile : {1, 16, 48, 64, 128}) {
      const std::string where = s.Name() + " st_tile " + std::to_string(tile);
      const CoreOutputs tiled = RunTiled(s, block, tile, false, in, douts);
      for (size_t t = 0; t < untiled.size(); ++t) {
        if (tile >= s.Dv) {
          EXPECT_EQ(tiled[t], untiled[t]) << where << " output " << t;
          continue;
        }
        double worst = 0;
        for (size_t i = 0; i < untiled[t].size(); ++i) {
          worst = std::max(worst, std::abs(tiled[t][i] - untiled[t][i]) /
                                      std::max(1.0, std::abs(untiled[t][i])));
        }
        EXPECT_LT(worst, 1e-12) << where << " output " << t;
      }
      for (int threads : {1, 2}) {
        ScopedKernelThreads scoped(threads);
        const CoreOutputs overlapped = RunTiled(s, block, tile, true, in, douts);
        for (size_t t = 0; t < tiled.size(); ++t) {
          EXPECT_EQ(overlapped[t], tiled[t])
              << where << " overlapped, threads " << threads << ", output " << t;
        }
      }
    }
  }
}

// Zero state in and no state gradient out (nullptr) mean zeros.
TEST(GdnCore, NullStatesMeanZeros) {
  const GdnShape s{20, 2, 4, 3};
  std::mt19937_64 rng(11);
  Buffers in = LayerLikeInputs(s, rng);
  std::fill(in[5].begin(), in[5].end(), 0.0);
  const KernelRun zeros = RunCore<double>(false, s, 8, in, {});
  Buffer o(s.T * s.H * s.Dv);
  GdnCoreForward<double>(o.data(), nullptr, in[0].data(), in[1].data(),
                         in[2].data(), in[3].data(), in[4].data(), nullptr, s.T,
                         s.H, s.Dk, s.Dv, 8);
  EXPECT_TRUE(AllClose("o", o, zeros.outputs[0], 0, 0, 0));
}

// An empty chunk hands the state through: S_out = S_in, dS_in = dS_out.
TEST(GdnCore, EmptyChunkPassesTheStateThrough) {
  const GdnShape s{0, 2, 3, 4};
  std::mt19937_64 rng(12);
  const Buffers in = SmallInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun r = RunCore<double>(false, s, kGdnBlockSize, in, douts);
  EXPECT_EQ(r.outputs[1], in[5]);
  EXPECT_EQ(r.grads[5], douts[1]);
}

// float32 agrees with the float64 reference at float tolerances, including
// strong decays (alpha ~ e^-10) and beta near 1 at a larger head size.
TEST(GdnCore, Float32AgreesWithFloat64) {
  for (const GdnShape& s : {GdnShape{130, 2, 32, 32}, GdnShape{70, 1, 64, 48}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(s.Dk);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const KernelRun ref = RunCore<double>(true, s, kGdnBlockSize, in, douts);
    const KernelRun f32 = RunCore<float>(false, s, kGdnBlockSize, in, douts);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(AllClose("output " + std::to_string(i), f32.outputs[i],
                           ref.outputs[i], 1e-4, 1e-3, 1e-5));
    }
    for (size_t i = 0; i < kInputNames.size(); ++i) {
      EXPECT_TRUE(AllClose("d" + kInputNames[i], f32.grads[i], ref.grads[i],
                           1e-4, 1e-3, 1e-5));
    }
  }
}

// The FLOP count is additive over blocks and linear in heads.
TEST(GdnCore, FlopCountIsPerBlock) {
  const GdnCoreFlops one = CountGdnCoreFlops(64, 1, 16, 8);
  const GdnCoreFlops tail = CountGdnCoreFlops(5, 1, 16, 8);
  const GdnCoreFlops both = CountGdnCoreFlops(69, 3, 16, 8);
  EXPECT_DOUBLE_EQ(both.forward, 3 * (one.forward + tail.forward));
  EXPECT_DOUBLE_EQ(both.backward, 3 * (one.backward + tail.backward));
  // One block of L = 64, Dk = 16, Dv = 8 by the header's formula.
  const double L = 64, dk = 16, dv = 8;
  EXPECT_DOUBLE_EQ(one.forward, 2 * L * L * dk + L * (L - 1) * (dk + dv) +
                                    4 * L * dk * dv + 2 * L * dk * dv +
                                    2 * L * L * dk + 2 * L * L * dv);
}

}  // namespace
}  // namespace stateflow::backend

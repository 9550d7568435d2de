// The chunkwise Mamba-3 core against the token-by-token float64 recurrence
// (outputs, the three leaving states and every gradient, relative error under
// 1e-10 in float64, full and partial blocks), by central differences for every
// input including every element of S_in, k_in and v_in, chunking exactness
// (a sequence run in pieces with the state handed over equals one run), any
// block size, thread counts, float32 agreement, and the split-and-overlap
// kernels (Mamba3CoreForwardOverlapped / BackwardOverlapped) against the
// sequential ones (bit for bit with full blocks) and the recurrence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/kernels/mamba3_core.h"
#include "backend/threading.h"
#include "tests/backend/kernel_test_util.h"
#include "tests/backend/mamba3_test_inputs.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

using Shape3 = Mamba3CoreShape;  // mamba3_test_inputs.h
const std::vector<std::string>& kInputNames = kMamba3CoreInputs;

// Runs the core (forward, then backward if douts = {dO, dS_out, dk_out,
// dv_out} is given).
template <typename T>
KernelRun RunCore(bool reference, const Shape3& s, int64_t block,
                  const Buffers& in, const Buffers& douts) {
  std::vector<std::vector<T>> x;
  for (const Buffer& b : in) x.push_back(Cast<T>(b));
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv,
                ns = s.H * s.Dv * s.Dk, nh = s.T * s.H;
  std::vector<T> o(nv), S_out(ns), k_out(s.H * s.Dk), v_out(s.H * s.Dv);
  auto fwd_args = [&](auto fn) {
    fn(o.data(), S_out.data(), k_out.data(), v_out.data(), x[kQ].data(),
       x[kK].data(), x[kV].data(), x[kA].data(), x[kGamma].data(),
       x[kBeta].data(), x[kSIn].data(), x[kKIn].data(), x[kVIn].data(), s.T,
       s.H, s.Dk, s.Dv);
  };
  if constexpr (std::is_same_v<T, double>) {
    if (reference) fwd_args(Mamba3CoreForwardRef);
  }
  if (!reference) {
    fwd_args([&](auto... args) { Mamba3CoreForward<T>(args..., block); });
  }
  KernelRun r{{ToDouble(o), ToDouble(S_out), ToDouble(k_out), ToDouble(v_out)}, {}};
  if (douts.empty()) return r;
  std::vector<std::vector<T>> d;
  for (const Buffer& b : douts) d.push_back(Cast<T>(b));
  std::vector<T> dq(nk), dk(nk), dv(nv), da(nh), dgamma(nh), dbeta(nh),
      dS_in(ns), dk_in(s.H * s.Dk), dv_in(s.H * s.Dv),
      ws(Mamba3CoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block));
  auto bwd_args = [&](auto fn) {
    fn(dq.data(), dk.data(), dv.data(), da.data(), dgamma.data(), dbeta.data(),
       dS_in.data(), dk_in.data(), dv_in.data(), ws.data(), d[0].data(),
       d[1].data(), d[2].data(), d[3].data(), x[kQ].data(), x[kK].data(),
       x[kV].data(), x[kA].data(), x[kGamma].data(), x[kBeta].data(),
       x[kSIn].data(), x[kKIn].data(), x[kVIn].data(), s.T, s.H, s.Dk, s.Dv);
  };
  if constexpr (std::is_same_v<T, double>) {
    if (reference) bwd_args(Mamba3CoreBackwardRef);
  }
  if (!reference) {
    bwd_args([&](auto... args) { Mamba3CoreBackward<T>(args..., block); });
  }
  r.grads = {ToDouble(dq),     ToDouble(dk),     ToDouble(dv),
             ToDouble(da),     ToDouble(dgamma), ToDouble(dbeta),
             ToDouble(dS_in),  ToDouble(dk_in),  ToDouble(dv_in)};
  return r;
}

Buffers RandomDouts(const Shape3& s, std::mt19937_64& rng) {
  return {RandomVector(rng, s.T * s.H * s.Dv, -1, 1),
          RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1),
          RandomVector(rng, s.H * s.Dk, -1, 1),
          RandomVector(rng, s.H * s.Dv, -1, 1)};
}

class Mamba3CoreCase : public KernelCase {
 public:
  Mamba3CoreCase(Shape3 s, int64_t block) : s_(s), block_(block) {}
  std::string Name() const override {
    return "mamba3_core " + s_.Name() + " block=" + std::to_string(block_);
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
  Shape3 s_;
  int64_t block_;
};

TEST(Mamba3Core, AgainstReferenceAndFiniteDifferences) {
  // One partial block, several blocks with a partial last one, exact blocks,
  // one token, blocks of one token.
  CheckKernelCase(Mamba3CoreCase({5, 2, 4, 3}, 64), 1);
  CheckKernelCase(Mamba3CoreCase({9, 2, 4, 3}, 4), 2);
  CheckKernelCase(Mamba3CoreCase({8, 1, 2, 5}, 4), 3);
  CheckKernelCase(Mamba3CoreCase({1, 1, 2, 3}, 64), 4);
  CheckKernelCase(Mamba3CoreCase({6, 1, 2, 2}, 1), 5);
}

void ExpectAllClose(const KernelRun& fast, const KernelRun& ref) {
  for (size_t i = 0; i < ref.outputs.size(); ++i) {
    EXPECT_TRUE(AllClose("output " + std::to_string(i), fast.outputs[i],
                         ref.outputs[i], 1e-13, 1e-10, 1e-10));
  }
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], fast.grads[i], ref.grads[i],
                         1e-13, 1e-10, 1e-10));
  }
}

// The chunkwise core equals the token-by-token recurrence to 1e-10 at the
// lengths around the block size T_C = 64.
void ExpectChunkwiseEqualsRecurrence(int64_t H) {
  for (int64_t T : {1, 5, 63, 64, 65, 130, 200}) {
    const Shape3 s{T, H, 16, 32};
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(100 + T);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    ExpectAllClose(RunCore<double>(false, s, kMamba3BlockSize, in, douts),
                   RunCore<double>(true, s, kMamba3BlockSize, in, douts));
  }
}

TEST(Mamba3Core, ChunkwiseEqualsTokenByTokenRecurrence) {
  ExpectChunkwiseEqualsRecurrence(2);
}

TEST(Mamba3Core, EveryBlockSizeAgrees) {
  const Shape3 s{37, 1, 8, 6};
  std::mt19937_64 rng(7);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun ref = RunCore<double>(true, s, kMamba3BlockSize, in, douts);
  for (int64_t block : {1, 2, 7, 37, 64}) {
    SCOPED_TRACE("block=" + std::to_string(block));
    ExpectAllClose(RunCore<double>(false, s, block, in, douts), ref);
  }
}

// Slices [t0, t1) of a (T, H, D) buffer (or (T, H) when D = 1).
Buffer Rows(const Buffer& x, int64_t t0, int64_t t1, int64_t H, int64_t D) {
  return Buffer(x.begin() + t0 * H * D, x.begin() + t1 * H * D);
}

// A sequence cut at `cuts` and run piece by piece, with (S, k, v) handed
// forward and each piece's d(state in) fed back as the d(state out) of the
// one before, equals one run.
void CheckCoreChunking(const Shape3& s, const std::vector<int64_t>& cuts,
                       uint64_t seed) {
  std::ostringstream name;
  name << s.Name() << " cuts=";
  for (int64_t c : cuts) name << c << ",";
  SCOPED_TRACE(name.str());
  std::mt19937_64 rng(seed);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun whole = RunCore<double>(false, s, kMamba3BlockSize, in, douts);
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(s.T);
  const size_t pieces = bounds.size() - 1;
  const std::vector<int64_t> widths = {s.Dk, s.Dk, s.Dv, 1, 1, 1};
  auto piece_inputs = [&](size_t p, const Buffers& state) {
    Buffers in_p;
    for (size_t i = 0; i < widths.size(); ++i) {
      in_p.push_back(Rows(in[i], bounds[p], bounds[p + 1], s.H, widths[i]));
    }
    in_p.insert(in_p.end(), state.begin(), state.end());
    return in_p;
  };
  std::vector<Buffers> states = {{in[kSIn], in[kKIn], in[kVIn]}};
  Buffer o;
  for (size_t p = 0; p < pieces; ++p) {
    const Shape3 sp{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv};
    const KernelRun r = RunCore<double>(false, sp, kMamba3BlockSize, piece_inputs(p, states[p]), {});
    o.insert(o.end(), r.outputs[0].begin(), r.outputs[0].end());
    states.push_back({r.outputs[1], r.outputs[2], r.outputs[3]});
  }
  EXPECT_TRUE(AllClose("o", o, whole.outputs[0], 1e-13, 1e-10, 1e-10));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(AllClose("state out " + std::to_string(i), states[pieces][i],
                         whole.outputs[1 + i], 1e-13, 1e-10, 1e-10));
  }
  Buffers grads(widths.size());
  Buffers dstate = {douts[1], douts[2], douts[3]};
  for (size_t p = pieces; p-- > 0;) {
    const Shape3 sp{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv};
    Buffers d_p = {Rows(douts[0], bounds[p], bounds[p + 1], s.H, s.Dv)};
    d_p.insert(d_p.end(), dstate.begin(), dstate.end());
    const KernelRun r = RunCore<double>(false, sp, kMamba3BlockSize, piece_inputs(p, states[p]), d_p);
    for (size_t i = 0; i < widths.size(); ++i) {
      grads[i].insert(grads[i].begin(), r.grads[i].begin(), r.grads[i].end());
    }
    dstate = {r.grads[kSIn], r.grads[kKIn], r.grads[kVIn]};
  }
  grads.insert(grads.end(), dstate.begin(), dstate.end());
  for (size_t i = 0; i < kInputNames.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], grads[i], whole.grads[i], 1e-13,
                         1e-10, 1e-10));
  }
}

TEST(Mamba3Core, ChunkedSequenceEqualsOneRun) {
  const Shape3 s{200, 1, 16, 8};
  CheckCoreChunking(s, {64}, 2);  // at a block boundary
  CheckCoreChunking(s, {100}, 3);
  CheckCoreChunking(s, {199}, 4);
  CheckCoreChunking(s, {30, 31, 130}, 5);  // a piece of one token
}

class ScopedKernelThreads {
 public:
  explicit ScopedKernelThreads(int threads) { SetKernelThreads(threads); }
  ~ScopedKernelThreads() { SetKernelThreads(1); }
  ScopedKernelThreads(const ScopedKernelThreads&) = delete;
  ScopedKernelThreads& operator=(const ScopedKernelThreads&) = delete;
};

// At 2 kernel threads (three heads on two lanes): still the recurrence, a
// chunked sequence still one run, and the same bits as at 1 thread.
TEST(Mamba3Core, TwoThreadsKeepExactness) {
  const Shape3 s{200, 3, 16, 8};
  std::mt19937_64 rng(11);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun one = RunCore<double>(false, s, kMamba3BlockSize, in, douts);
  const KernelRun one32 = RunCore<float>(false, s, kMamba3BlockSize, in, douts);
  ScopedKernelThreads two(2);
  ExpectChunkwiseEqualsRecurrence(3);
  CheckCoreChunking(s, {30, 31, 130}, 7);
  const KernelRun run = RunCore<double>(false, s, kMamba3BlockSize, in, douts);
  EXPECT_EQ(run.outputs, one.outputs);
  EXPECT_EQ(run.grads, one.grads);
  const KernelRun run32 = RunCore<float>(false, s, kMamba3BlockSize, in, douts);
  EXPECT_EQ(run32.outputs, one32.outputs);
  EXPECT_EQ(run32.grads, one32.grads);
}

// Split-and-overlap (Mamba3CoreForwardOverlapped / BackwardOverlapped) runs
// each block's Pre, ST and Out (backward: the replay's Pre and ST, OutAG, the
// ST chain, OutWG) as tasks on 1 or 2 threads. Every output of both
// directions (o and the three leaving states; the nine gradients, the
// entering state's three included; the replayed states in the workspace) is
// compared with the sequential kernel's: bit for bit when every block is a
// full one of >= 16 tokens (Eigen's packed products), else (a short partial
// last block's small products, whose last bit may follow the heap alignment
// of temporaries in either function) to `rel`. Garbage is written first, so
// every element must be written. null_states: the sequence's first chunk
// (S_in, k_in, v_in nullptr) and its last (dS_out, dk_out, dv_out nullptr).
template <typename T>
// The overlapped kernels (and, with `tiles`, the sequential and overlapped
// kernels at each ST tile B_V) against the sequential untiled ones: equal
// bit for bit when rel is 0, else within rel.
void ExpectOverlapSame(const Shape3& s, int64_t block, bool null_states,
                       double rel, uint64_t seed,
                       const std::vector<int64_t>& tiles = {0}) {
  std::mt19937_64 rng(seed);
  const Buffers in = LayerLikeInputs(s, rng), douts = RandomDouts(s, rng);
  std::vector<std::vector<T>> x, d;
  for (const Buffer& b : in) x.push_back(Cast<T>(b));
  for (const Buffer& b : douts) d.push_back(Cast<T>(b));
  auto state = [&](const std::vector<T>& b) { return null_states ? nullptr : b.data(); };
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, nh = s.T * s.H,
                ns = s.H * s.Dv * s.Dk;
  // {o, S_out, k_out, v_out, dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in,
  //  dv_in, workspace}.
  auto run = [&](bool overlapped, int64_t tile) {
    std::vector<std::vector<T>> r;
    for (int64_t n : {nv, ns, s.H * s.Dk, s.H * s.Dv, nk, nk, nv, nh, nh, nh, ns,
                      s.H * s.Dk, s.H * s.Dv,
                      Mamba3CoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block)}) {
      r.emplace_back(n, T(-7));
    }
    auto* fwd = overlapped ? &Mamba3CoreForwardOverlapped<T> : &Mamba3CoreForward<T>;
    fwd(r[0].data(), r[1].data(), r[2].data(), r[3].data(), x[kQ].data(), x[kK].data(),
        x[kV].data(), x[kA].data(), x[kGamma].data(), x[kBeta].data(), state(x[kSIn]),
        state(x[kKIn]), state(x[kVIn]), s.T, s.H, s.Dk, s.Dv, block, tile);
    auto* bwd = overlapped ? &Mamba3CoreBackwardOverlapped<T> : &Mamba3CoreBackward<T>;
    bwd(r[4].data(), r[5].data(), r[6].data(), r[7].data(), r[8].data(), r[9].data(),
        r[10].data(), r[11].data(), r[12].data(), r[13].data(), d[0].data(), state(d[1]),
        state(d[2]), state(d[3]), x[kQ].data(), x[kK].data(), x[kV].data(), x[kA].data(),
        x[kGamma].data(), x[kBeta].data(), state(x[kSIn]), state(x[kKIn]),
        state(x[kVIn]), s.T, s.H, s.Dk, s.Dv, block, tile);
    return r;
  };
  const std::vector<std::vector<T>> ref = run(false, 0);
  const std::vector<std::string> names = {
      "o", "S_out", "k_out", "v_out", "dq", "dk", "dv", "da", "dgamma",
      "dbeta", "dS_in", "dk_in", "dv_in", "workspace"};
  for (int64_t tile : tiles)
  for (bool overlapped : {false, true}) {
  if (tile == 0 && !overlapped) continue;  // the reference itself
  for (int threads : {1, 2}) {
    ScopedKernelThreads scoped(threads);
    const std::vector<std::vector<T>> got = run(overlapped, tile);
    for (size_t t = 0; t < ref.size(); ++t) {
      const std::string where = s.Name() + " block=" + std::to_string(block) +
                                " st_tile=" + std::to_string(tile) +
                                (overlapped ? " overlapped" : " sequential") +
                                " threads=" + std::to_string(threads) +
                                (null_states ? " null states " : " ") + names[t];
      if (rel == 0) {
        EXPECT_EQ(got[t], ref[t]) << where;
        continue;
      }
      for (size_t i = 0; i < ref[t].size(); ++i) {
        ASSERT_NEAR(got[t][i], ref[t][i], rel * std::max(1.0, std::abs(double(ref[t][i]))))
            << where << " element " << i;
      }
    }
  }
  }
}

TEST(Mamba3Core, OverlapEqualsSequential) {
  ExpectOverlapSame<double>({256, 3, 16, 32}, kMamba3BlockSize, false, 0, 21);
  ExpectOverlapSame<double>({256, 1, 16, 32}, kMamba3BlockSize, true, 0, 22);
  ExpectOverlapSame<double>({144, 1, 8, 12}, 16, false, 0, 23);   // 9 blocks, 4 slots
  ExpectOverlapSame<double>({160, 2, 12, 8}, 16, true, 0, 24);
  ExpectOverlapSame<double>({0, 2, 4, 4}, 8, false, 0, 25);       // empty chunk
  ExpectOverlapSame<float>({320, 2, 16, 32}, kMamba3BlockSize, false, 0, 26);
  // Short partial last blocks: 4, 3, 8 and 1 tokens; and a chunk of one.
  ExpectOverlapSame<double>({100, 2, 12, 8}, 16, true, 1e-12, 27);
  ExpectOverlapSame<double>({259, 1, 16, 32}, kMamba3BlockSize, false, 1e-12, 28);
  ExpectOverlapSame<double>({200, 3, 16, 16}, kMamba3BlockSize, false, 1e-12, 29);
  ExpectOverlapSame<double>({129, 2, 8, 8}, kMamba3BlockSize, true, 1e-12, 30);
  ExpectOverlapSame<double>({1, 3, 4, 5}, kMamba3BlockSize, false, 1e-12, 31);
}

// The ST tile B_V (st_tile): ST's state rows in tiles of B_V, tile by tile
// in the sequential kernels and one task per tile in the overlapped forward.
// Row i of S' and of the state leaving a block needs only row i before it,
// so every tile gives the untiled results; the backward's sums over rows (the
// carry's gradients) follow the tiles. Tiles of 1, 3, 8 rows, one short of
// Dv, Dv itself and beyond (untiled), with partial last tiles and blocks,
// against the untiled sequential kernel within 1e-12 (float64) and 1e-5
// (float32). A tile that dropped or repeated rows would be off by O(1).
TEST(Mamba3Core, StTilesEqualUntiled) {
  ExpectOverlapSame<double>({256, 2, 16, 32}, kMamba3BlockSize, false, 1e-12, 41,
                            {1, 3, 8, 31, 32, 40});
  ExpectOverlapSame<double>({144, 1, 8, 12}, 16, true, 1e-12, 42, {1, 5, 11});
  ExpectOverlapSame<double>({100, 3, 12, 8}, 16, false, 1e-12, 43, {3, 7});
  ExpectOverlapSame<double>({0, 2, 4, 4}, 8, false, 1e-12, 44, {1, 3});  // empty chunk
  ExpectOverlapSame<float>({192, 2, 16, 32}, kMamba3BlockSize, false, 1e-5, 45, {8, 12});
}

// The overlapped kernels against the token-by-token float64 recurrence, as
// the sequential ones (ExpectChunkwiseEqualsRecurrence), at 2 threads and
// lengths with short partial last blocks.
TEST(Mamba3Core, OverlapEqualsTokenByTokenRecurrence) {
  ScopedKernelThreads two(2);
  for (const Shape3& s : {Shape3{5, 2, 16, 32}, Shape3{65, 1, 16, 32},
                          Shape3{130, 3, 16, 32}, Shape3{200, 2, 8, 16}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(300 + s.T);
    const Buffers in = LayerLikeInputs(s, rng), douts = RandomDouts(s, rng);
    const KernelRun ref = RunCore<double>(true, s, kMamba3BlockSize, in, douts);
    Buffer o(s.T * s.H * s.Dv), S_out(s.H * s.Dv * s.Dk), k_out(s.H * s.Dk),
        v_out(s.H * s.Dv);
    Mamba3CoreForwardOverlapped<double>(
        o.data(), S_out.data(), k_out.data(), v_out.data(), in[kQ].data(),
        in[kK].data(), in[kV].data(), in[kA].data(), in[kGamma].data(),
        in[kBeta].data(), in[kSIn].data(), in[kKIn].data(), in[kVIn].data(), s.T,
        s.H, s.Dk, s.Dv);
    KernelRun got{{o, S_out, k_out, v_out}, {}};
    const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, nh = s.T * s.H;
    Buffers g = {Buffer(nk), Buffer(nk), Buffer(nv), Buffer(nh), Buffer(nh), Buffer(nh),
                 Buffer(s.H * s.Dv * s.Dk), Buffer(s.H * s.Dk), Buffer(s.H * s.Dv)};
    Buffer ws(Mamba3CoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv));
    Mamba3CoreBackwardOverlapped<double>(
        g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(),
        g[6].data(), g[7].data(), g[8].data(), ws.data(), douts[0].data(),
        douts[1].data(), douts[2].data(), douts[3].data(), in[kQ].data(), in[kK].data(),
        in[kV].data(), in[kA].data(), in[kGamma].data(), in[kBeta].data(),
        in[kSIn].data(), in[kKIn].data(), in[kVIn].data(), s.T, s.H, s.Dk, s.Dv);
    got.grads = g;
    ExpectAllClose(got, ref);
  }
}

// nullptr states mean zeros, in and out; an empty chunk hands them through.
TEST(Mamba3Core, NullAndEmpty) {
  const Shape3 s{20, 2, 4, 3};
  std::mt19937_64 rng(11);
  Buffers in = LayerLikeInputs(s, rng);
  for (int i : {kSIn, kKIn, kVIn}) std::fill(in[i].begin(), in[i].end(), 0.0);
  const KernelRun zeros = RunCore<double>(false, s, 8, in, {});
  Buffer o(s.T * s.H * s.Dv);
  Mamba3CoreForward<double>(o.data(), nullptr, nullptr, nullptr, in[kQ].data(),
                            in[kK].data(), in[kV].data(), in[kA].data(),
                            in[kGamma].data(), in[kBeta].data(), nullptr, nullptr,
                            nullptr, s.T, s.H, s.Dk, s.Dv, 8);
  EXPECT_TRUE(AllClose("o", o, zeros.outputs[0], 0, 0, 0));
  const Shape3 e{0, 2, 3, 4};
  const Buffers in0 = SmallInputs(e, rng);
  const Buffers d0 = RandomDouts(e, rng);
  const KernelRun r = RunCore<double>(false, e, kMamba3BlockSize, in0, d0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.outputs[1 + i], in0[kSIn + i]);
    EXPECT_EQ(r.grads[kSIn + i], d0[1 + i]);
  }
}

// float32 agrees with the float64 reference at float tolerances, at the
// paper's head shape (d_state 128, head dim 64) over three blocks.
TEST(Mamba3Core, Float32AgreesWithFloat64) {
  for (const Shape3& s : {Shape3{130, 2, 16, 32}, Shape3{150, 1, 128, 64}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(s.Dk);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const KernelRun ref = RunCore<double>(true, s, kMamba3BlockSize, in, douts);
    const KernelRun f32 = RunCore<float>(false, s, kMamba3BlockSize, in, douts);
    for (size_t i = 0; i < ref.outputs.size(); ++i) {
      EXPECT_TRUE(AllClose("output " + std::to_string(i), f32.outputs[i],
                           ref.outputs[i], 1e-4, 1e-3, 1e-5));
    }
    for (size_t i = 0; i < kInputNames.size(); ++i) {
      EXPECT_TRUE(AllClose("d" + kInputNames[i], f32.grads[i], ref.grads[i],
                           1e-4, 1e-3, 1e-5));
    }
  }
}

}  // namespace
}  // namespace stateflow::backend

// The chunkwise KDA core against the token-by-token float64 recurrence
// (outputs, final state and every gradient, relative error under 1e-12 in
// float64, full and partial blocks, every block size, strong per-channel
// decays), both backwards by central differences for every input including
// S_in, chunking exactness (a sequence run in pieces with the state handed
// over equals one run), ST tiles, split-and-overlap and the phases against
// the sequential core, float32 agreement, the FLOP count, and the KDA gate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/kernels/kda_core.h"
#include "backend/kernels/kda_prep.h"
#include "backend/threading.h"
#include "tests/backend/kda_test_inputs.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h, kda_test_inputs.h

// Small unconstrained inputs for finite differences (k not normalised, g of
// either sign, so the kernel is checked as the function of its arguments
// that it claims to be).
Buffers SmallInputs(const KdaShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  return {RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dv, -1, 1),
          RandomVector(rng, rows * s.Dk, -0.8, 0.1),
          RandomVector(rng, rows, 0.05, 0.95),
          RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5)};
}

// Layer-like inputs whose decays are strong: g in [-20, 0] per token and
// channel, half the channels near -20 (their cumulative log decay reaches
// about -1280 in a block of 64, so exp(-G) alone would overflow) and the
// others near 0.
Buffers StrongDecayInputs(const KdaShape& s, std::mt19937_64& rng) {
  Buffers in = KdaLayerLikeInputs(s, rng);
  std::uniform_real_distribution<double> strong(-20, -15), weak(-0.01, 0);
  for (int64_t i = 0; i < s.T * s.H * s.Dk; ++i) {
    in[3][i] = (i % s.Dk) % 2 == 0 ? strong(rng) : weak(rng);
  }
  return in;
}

const std::vector<std::string> kInputNames = {"q", "k", "v", "g", "beta", "S_in"};

// Runs the core (forward, then backward if douts = {dO, dS_out} is given):
// outputs {o, S_out}, grads {dq, dk, dv, dg, dbeta, dS_in}.
template <typename T>
KernelRun RunCore(bool reference, const KdaShape& s, int64_t block,
                  const Buffers& in, const Buffers& douts) {
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]),
                       v = Cast<T>(in[2]), g = Cast<T>(in[3]),
                       beta = Cast<T>(in[4]), S_in = Cast<T>(in[5]);
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv,
                ns = s.H * s.Dv * s.Dk;
  std::vector<T> o(nv), S_out(ns);
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      KdaCoreForwardRef(o.data(), S_out.data(), q.data(), k.data(), v.data(),
                        g.data(), beta.data(), S_in.data(), s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (!reference) {
    KdaCoreForward<T>(o.data(), S_out.data(), q.data(), k.data(), v.data(),
                      g.data(), beta.data(), S_in.data(), s.T, s.H, s.Dk, s.Dv,
                      block);
  }
  KernelRun r{{ToDouble(o), ToDouble(S_out)}, {}};
  if (douts.empty()) return r;
  const std::vector<T> dO = Cast<T>(douts[0]), dS_out = Cast<T>(douts[1]);
  std::vector<T> dq(nk), dk(nk), dv(nv), dg(nk), dbeta(s.T * s.H), dS_in(ns),
      ws(KdaCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block));
  if constexpr (std::is_same_v<T, double>) {
    if (reference) {
      KdaCoreBackwardRef(dq.data(), dk.data(), dv.data(), dg.data(),
                         dbeta.data(), dS_in.data(), ws.data(), dO.data(),
                         dS_out.data(), q.data(), k.data(), v.data(), g.data(),
                         beta.data(), S_in.data(), s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (!reference) {
    KdaCoreBackward<T>(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                       dS_in.data(), ws.data(), dO.data(), dS_out.data(),
                       q.data(), k.data(), v.data(), g.data(), beta.data(),
                       S_in.data(), s.T, s.H, s.Dk, s.Dv, block);
  }
  r.grads = {ToDouble(dq), ToDouble(dk), ToDouble(dv),
             ToDouble(dg), ToDouble(dbeta), ToDouble(dS_in)};
  return r;
}

Buffers RandomDouts(const KdaShape& s, std::mt19937_64& rng) {
  return {RandomVector(rng, s.T * s.H * s.Dv, -1, 1),
          RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1)};
}

// Every output and gradient of `fast` against `ref`: elementwise within
// atol + rtol |ref| and normalised error under max_rel.
void ExpectRunsClose(const KernelRun& fast, const KernelRun& ref, double atol,
                     double rtol, double max_rel) {
  const char* const outputs[] = {"o", "S_out"};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(AllClose(outputs[i], fast.outputs[i], ref.outputs[i], atol, rtol, max_rel));
  }
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], fast.grads[i], ref.grads[i], atol, rtol,
                         max_rel));
  }
}

// The harness case: fast vs reference (1e-12), float32, central differences
// of the fast float64 forward.
class KdaCoreCase : public KernelCase {
 public:
  KdaCoreCase(KdaShape s, int64_t block) : s_(s), block_(block) {}
  std::string Name() const override {
    return "kda_core " + s_.Name() + " block=" + std::to_string(block_);
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
  KdaShape s_;
  int64_t block_;
};

TEST(KdaCore, AgainstReferenceAndFiniteDifferences) {
  // One partial block, several blocks with a partial last one, exact blocks.
  CheckKernelCase(KdaCoreCase({5, 2, 3, 4}, 64), 1);
  CheckKernelCase(KdaCoreCase({9, 2, 3, 4}, 4), 2);
  CheckKernelCase(KdaCoreCase({8, 1, 4, 2}, 4), 3);
  CheckKernelCase(KdaCoreCase({1, 1, 2, 3}, 64), 4);
}

// The reference backward (reverse mode through time) against central
// differences of the reference forward, for all six inputs.
TEST(KdaCore, ReferenceBackwardMatchesFiniteDifferences) {
  for (const KdaShape& s : {KdaShape{7, 2, 3, 4}, KdaShape{4, 1, 5, 2}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(31 + s.T);
    Buffers in = SmallInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const KernelRun ref = RunCore<double>(true, s, kKdaBlockSize, in, douts);
    for (size_t i = 0; i < in.size(); ++i) {
      auto loss = [&] {
        const KernelRun r = RunCore<double>(true, s, kKdaBlockSize, in, {});
        return testing::Dot(douts[0], r.outputs[0]) + testing::Dot(douts[1], r.outputs[1]);
      };
      const Buffer numeric = testing::CentralDifferences(loss, &in[i], 1e-6);
      EXPECT_TRUE(AllClose("reference d" + kInputNames[i], ref.grads[i], numeric,
                           1e-7, 1e-6, 1e-6));
    }
  }
}

// The chunkwise core equals the token-by-token recurrence to 1e-12 at the
// lengths around the block size T_C = 64.
void ExpectChunkwiseEqualsRecurrence(int64_t H) {
  for (int64_t T : {1, 5, 63, 64, 65, 130, 200}) {
    const KdaShape s{T, H, 16, 12};
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(100 + T);
    const Buffers in = KdaLayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    ExpectRunsClose(RunCore<double>(false, s, kKdaBlockSize, in, douts),
                    RunCore<double>(true, s, kKdaBlockSize, in, douts), 1e-13,
                    1e-12, 1e-12);
  }
}

TEST(KdaCore, ChunkwiseEqualsTokenByTokenRecurrence) {
  ExpectChunkwiseEqualsRecurrence(2);
}

// Decays of up to e^-20 per token and channel beside channels that barely
// decay: every pairwise decay is one exponential of a difference, so nothing
// overflows and the chunkwise core still equals the recurrence (a naive
// exp(G_r) exp(-G_s) would give inf * 0). g of both signs is covered by the
// finite-difference cases (SmallInputs).
TEST(KdaCore, StrongDecaysStayFinite) {
  for (int64_t block : {16, 64}) {
    const KdaShape s{200, 2, 16, 8};
    SCOPED_TRACE("block=" + std::to_string(block));
    std::mt19937_64 rng(41);
    const Buffers in = StrongDecayInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    ExpectRunsClose(RunCore<double>(false, s, block, in, douts),
                    RunCore<double>(true, s, block, in, douts), 1e-13, 1e-12, 1e-12);
    // float32 too: its exponent range ends at e^88.
    ExpectRunsClose(RunCore<float>(false, s, block, in, douts),
                    RunCore<double>(true, s, block, in, douts), 1e-4, 1e-3, 1e-5);
  }
}

// Any block size gives the same function: 1 (token by token through the
// chunkwise code), sizes that do and do not divide T, and one block.
TEST(KdaCore, EveryBlockSizeAgrees) {
  const KdaShape s{37, 1, 8, 6};
  std::mt19937_64 rng(7);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun ref = RunCore<double>(true, s, kKdaBlockSize, in, douts);
  for (int64_t block : {1, 2, 7, 16, 37, 64}) {
    SCOPED_TRACE("block=" + std::to_string(block));
    ExpectRunsClose(RunCore<double>(false, s, block, in, douts), ref, 1e-13, 1e-12, 1e-12);
  }
}

// Slices [t0, t1) of a (T, H, D) buffer (or (T, H) when D = 1).
Buffer Rows(const Buffer& x, int64_t t0, int64_t t1, int64_t H, int64_t D) {
  return Buffer(x.begin() + t0 * H * D, x.begin() + t1 * H * D);
}

// A sequence cut at `cuts` and run piece by piece, with S handed forward and
// dS_in of each piece fed back as dS_out of the one before, equals one run
// to 1e-12.
void CheckCoreChunking(const KdaShape& s, const std::vector<int64_t>& cuts,
                       uint64_t seed) {
  std::ostringstream name;
  name << s.Name() << " cuts=";
  for (int64_t c : cuts) name << c << ",";
  SCOPED_TRACE(name.str());
  std::mt19937_64 rng(seed);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun whole = RunCore<double>(false, s, kKdaBlockSize, in, douts);
  std::vector<int64_t> bounds = {0};
  bounds.insert(bounds.end(), cuts.begin(), cuts.end());
  bounds.push_back(s.T);
  const size_t pieces = bounds.size() - 1;
  const std::vector<int64_t> widths = {s.Dk, s.Dk, s.Dv, s.Dk, 1};
  auto piece_inputs = [&](size_t p, const Buffer& state) {
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) {
      in_p.push_back(Rows(in[i], bounds[p], bounds[p + 1], s.H, widths[i]));
    }
    in_p.push_back(state);
    return in_p;
  };
  // Forward: record each piece's entering state.
  std::vector<Buffer> states = {in[5]};
  Buffer o;
  for (size_t p = 0; p < pieces; ++p) {
    const KdaShape sp{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv};
    const KernelRun r = RunCore<double>(false, sp, kKdaBlockSize, piece_inputs(p, states[p]), {});
    o.insert(o.end(), r.outputs[0].begin(), r.outputs[0].end());
    states.push_back(r.outputs[1]);
  }
  EXPECT_TRUE(AllClose("o", o, whole.outputs[0], 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("S_out", states[pieces], whole.outputs[1], 1e-13, 1e-12, 1e-12));
  // Backward, last piece first.
  Buffers grads(5);
  Buffer dS = douts[1];
  for (size_t p = pieces; p-- > 0;) {
    const KdaShape sp{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv};
    const KernelRun r =
        RunCore<double>(false, sp, kKdaBlockSize, piece_inputs(p, states[p]),
                        {Rows(douts[0], bounds[p], bounds[p + 1], s.H, s.Dv), dS});
    for (size_t i = 0; i < 5; ++i) {
      grads[i].insert(grads[i].begin(), r.grads[i].begin(), r.grads[i].end());
    }
    dS = r.grads[5];
  }
  grads.push_back(dS);
  for (size_t i = 0; i < kInputNames.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], grads[i], whole.grads[i], 1e-13,
                         1e-12, 1e-12));
  }
}

TEST(KdaCore, ChunkedSequenceEqualsOneRun) {
  const KdaShape s{200, 2, 16, 12};
  CheckCoreChunking(s, {64}, 2);  // at a block boundary
  CheckCoreChunking(s, {100}, 3);
  CheckCoreChunking(s, {70, 150}, 4);       // three pieces
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

// At 2 kernel threads, three heads on two lanes: still the recurrence to
// 1e-12, a chunked sequence still one run, and the same bits as 1 thread
// (each head is computed by one thread in the same order either way).
TEST(KdaCore, TwoThreadsKeepExactness) {
  const KdaShape s{200, 3, 16, 12};
  std::mt19937_64 rng(11);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun one = RunCore<double>(false, s, kKdaBlockSize, in, douts);
  ScopedKernelThreads two(2);
  ExpectChunkwiseEqualsRecurrence(3);
  CheckCoreChunking(s, {30, 31, 130}, 7);
  const KernelRun run = RunCore<double>(false, s, kKdaBlockSize, in, douts);
  EXPECT_EQ(run.outputs, one.outputs);
  EXPECT_EQ(run.grads, one.grads);
}

// Every output of one forward and backward: o, S_out, dq, dk, dv, dg,
// dbeta, dS_in.
template <typename T>
using Outputs = std::vector<std::vector<T>>;

const char* const kOutputNames[] = {"o", "S_out", "dq", "dk", "dv", "dg", "dbeta", "dS_in"};

// How to run the core: sequential, overlapped, or phase by phase.
enum class Mode { kSequential, kOverlapped, kPhases };

struct RunSpec {
  KdaShape s;
  int64_t block;
  int64_t tile = 0;          // ST tile B_V (0: untiled)
  bool null_states = false;  // S_in, S_out, dS_out, dS_in all nullptr
  std::string Name() const {
    return s.Name() + " block=" + std::to_string(block) + " st_tile=" + std::to_string(tile) +
           (null_states ? " null states" : "");
  }
};

// Runs forward and backward in `mode`; outputs start as -7 and workspaces as
// NaN, so an element never written, or a phase reading what no earlier
// phase wrote, shows.
template <typename T>
Outputs<T> RunMode(Mode mode, const RunSpec& c, const Buffers& in, const Buffers& douts) {
  const KdaShape& s = c.s;
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]), v = Cast<T>(in[2]),
                       g = Cast<T>(in[3]), beta = Cast<T>(in[4]), S_in_v = Cast<T>(in[5]),
                       dO = Cast<T>(douts[0]), dS_out_v = Cast<T>(douts[1]);
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  Outputs<T> out = {std::vector<T>(nv, T(-7)), std::vector<T>(ns, T(-7)),
                    std::vector<T>(nk, T(-7)), std::vector<T>(nk, T(-7)),
                    std::vector<T>(nv, T(-7)), std::vector<T>(nk, T(-7)),
                    std::vector<T>(s.T * s.H, T(-7)), std::vector<T>(ns, T(-7))};
  const T* S_in = c.null_states ? nullptr : S_in_v.data();
  const T* dS_out = c.null_states ? nullptr : dS_out_v.data();
  T* S_out = c.null_states ? nullptr : out[1].data();
  T* dS_in = c.null_states ? nullptr : out[7].data();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> ws;
  switch (mode) {
    case Mode::kSequential:
      KdaCoreForward<T>(out[0].data(), S_out, q.data(), k.data(), v.data(), g.data(),
                        beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
      break;
    case Mode::kOverlapped:
      KdaCoreForwardOverlapped<T>(out[0].data(), S_out, q.data(), k.data(), v.data(), g.data(),
                                  beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
      break;
    case Mode::kPhases:
      ws.assign(KdaCoreForwardPhaseWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), nan);
      for (CorePhase p : kCorePhases) {
        KdaCoreForwardPhase<T>(p, out[0].data(), S_out, ws.data(), q.data(), k.data(),
                               v.data(), g.data(), beta.data(), S_in, s.T, s.H, s.Dk, s.Dv,
                               c.block, c.tile);
      }
      break;
  }
  const int64_t bws = mode == Mode::kPhases
                          ? KdaCoreBackwardPhaseWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block)
                          : KdaCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block);
  ws.assign(static_cast<size_t>(bws), nan);
  auto backward = [&](auto&& call) {
    call(out[2].data(), out[3].data(), out[4].data(), out[5].data(), out[6].data(), dS_in,
         ws.data(), dO.data(), dS_out, q.data(), k.data(), v.data(), g.data(), beta.data(),
         S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
  };
  switch (mode) {
    case Mode::kSequential:
      backward([](auto... args) { KdaCoreBackward<T>(args...); });
      break;
    case Mode::kOverlapped:
      backward([](auto... args) { KdaCoreBackwardOverlapped<T>(args...); });
      break;
    case Mode::kPhases:
      for (CorePhase p : kCorePhases) {
        backward([p](auto... args) { KdaCoreBackwardPhase<T>(p, args...); });
      }
      break;
  }
  if (c.null_states) {
    out[1].clear();
    out[7].clear();
  }
  return out;
}

// Bit for bit (rel = 0; NaN counts as a difference) or within rel relative
// to max(1, |ref|).
template <typename T>
void ExpectSame(const Outputs<T>& got, const Outputs<T>& ref, double rel,
                const std::string& where) {
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i].size(), ref[i].size()) << where << " " << kOutputNames[i];
    size_t differ = 0;
    double worst = 0;
    for (size_t e = 0; e < ref[i].size(); ++e) {
      if (std::memcmp(&got[i][e], &ref[i][e], sizeof(T)) == 0) continue;
      const double d = std::abs(double(got[i][e]) - double(ref[i][e])) /
                       std::max(1.0, std::abs(double(ref[i][e])));
      worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
      ++differ;
    }
    if (rel == 0) {
      EXPECT_EQ(differ, 0u) << where << ": " << kOutputNames[i] << " differs in " << differ
                            << " of " << ref[i].size() << " elements";
    } else {
      EXPECT_LE(worst, rel) << where << ": " << kOutputNames[i];
    }
  }
}

template <typename T>
void ExpectModeSame(Mode mode, const RunSpec& c, double rel) {
  std::mt19937_64 rng(17);
  const Buffers in = KdaLayerLikeInputs(c.s, rng);
  const Buffers douts = RandomDouts(c.s, rng);
  const Outputs<T> ref = RunMode<T>(Mode::kSequential, c, in, douts);
  for (int threads : {1, 2}) {
    ScopedKernelThreads scoped(threads);
    const std::string where = std::string(sizeof(T) == 8 ? "float64 " : "float32 ") +
                              c.Name() + " threads " + std::to_string(threads);
    ExpectSame(RunMode<T>(mode, c, in, douts), ref, rel, where);
  }
}

// Split-and-overlap runs each block's Pre, ST and Out (forward) and Out, ST,
// Pre backward (backward) as tasks on 1 or 2 threads: the same bits as the
// sequential core, in float64 and float32, with more blocks than slots, one
// head and several, null boundary states and short partial last blocks
// (every block works on owned, aligned copies of its rows).
TEST(KdaCore, OverlapEqualsSequential) {
  ExpectModeSame<double>(Mode::kOverlapped, {{256, 3, 16, 16}, kKdaBlockSize}, 0);
  ExpectModeSame<double>(Mode::kOverlapped, {{144, 1, 8, 12}, 16}, 0);  // 9 blocks, 4 slots
  ExpectModeSame<double>(Mode::kOverlapped, {{160, 2, 12, 8}, 16, 0, true}, 0);
  ExpectModeSame<double>(Mode::kOverlapped, {{0, 2, 4, 4}, 8}, 0);      // empty chunk
  ExpectModeSame<float>(Mode::kOverlapped, {{320, 4, 16, 32}, kKdaBlockSize}, 0);
  ExpectModeSame<double>(Mode::kOverlapped, {{100, 2, 12, 8}, 8, 0, true}, 0);  // last: 4
  ExpectModeSame<double>(Mode::kOverlapped, {{200, 3, 16, 16}, kKdaBlockSize}, 0);  // last: 8
  ExpectModeSame<float>(Mode::kOverlapped, {{70, 2, 8, 6}, 64, 0, true}, 0);      // last: 6
}

// The phases kPre, kST, kOut in order give the core's outputs bit for bit
// (what one phase hands the next is copied exactly through the workspace),
// full and partial last blocks, null states, ST tiles, 1 and 2 threads.
TEST(KdaCore, PhasesInOrderAreTheCoreBitForBit) {
  const RunSpec cases[] = {
      {{256, 2, 16, 8}, 64},          // full blocks
      {{130, 3, 8, 6}, 64},           // a partial last block, odd head count
      {{45, 2, 8, 8}, 16, 0, true},   // small blocks, no boundary states
      {{1, 1, 4, 4}, 64},             // one token
      {{256, 2, 16, 8}, 64, 3},       // ST tiles with a partial last tile
      {{45, 2, 8, 8}, 16, 4, true},   // two tiles, no boundary states
  };
  for (const RunSpec& c : cases) {
    ExpectModeSame<double>(Mode::kPhases, c, 0);
    ExpectModeSame<float>(Mode::kPhases, c, 0);
  }
}

// The phase workspaces are the sizes the header states.
TEST(KdaCore, PhaseWorkspaceSizes) {
  const int64_t T = 130, H = 3, Dk = 8, Dv = 6, bs = 64, nb = 3;
  EXPECT_EQ(KdaCoreForwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            H * nb * (bs * (2 * bs + 3 * Dk + 2 * Dv) + Dv * Dk));
  EXPECT_EQ(KdaCoreBackwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            H * nb * (2 * Dv * Dk + bs * (1 + 2 * bs + 7 * Dk + 4 * Dv)));
  EXPECT_EQ(KdaCoreBackwardWorkspaceSize(T, H, Dk, Dv, bs), H * nb * Dv * Dk);
}

// The ST tile B_V: the state's value rows split into tiles, each an
// independent chain through the blocks. Against the untiled core: the same
// bits when the tile covers Dv, else within 1e-12 relative; the overlapped
// kernels with the same tile, on 1 and 2 threads, the same bits as the
// sequential ones with that tile. B_V = 1, 16, 48 (does not divide 128), 64
// and 128 = Dv.
TEST(KdaCore, StTilesEqualUntiled) {
  for (const KdaShape& s : {KdaShape{128, 2, 16, 128}, KdaShape{96, 1, 8, 128}}) {
    std::mt19937_64 rng(21);
    const Buffers in = KdaLayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const Outputs<double> untiled = RunMode<double>(Mode::kSequential, {s, 32}, in, douts);
    for (int64_t tile : {1, 16, 48, 64, 128}) {
      const RunSpec c{s, 32, tile};
      const Outputs<double> tiled = RunMode<double>(Mode::kSequential, c, in, douts);
      ExpectSame(tiled, untiled, tile >= s.Dv ? 0 : 1e-12, c.Name());
      for (int threads : {1, 2}) {
        ScopedKernelThreads scoped(threads);
        ExpectSame(RunMode<double>(Mode::kOverlapped, c, in, douts), tiled, 0,
                   c.Name() + " overlapped, threads " + std::to_string(threads));
      }
    }
  }
}

// nullptr states mean zeros: the forward from S_in = nullptr equals the one
// from a zero state, and the backward with dS_out = nullptr the one with a
// zero state gradient.
// Every buffer (inputs, outputs, workspace) moved by `offset` elements from
// where the allocator put it: the core's results, forward and backward.
template <typename T>
Outputs<T> RunAtOffset(const KdaShape& s, int64_t block, const Buffers& in,
                       const Buffers& douts, size_t offset) {
  auto place = [offset](const Buffer& b) {  // b's values after `offset` pad elements
    std::vector<T> x(offset, T(0));
    x.insert(x.end(), b.begin(), b.end());
    return x;
  };
  std::vector<std::vector<T>> x;
  for (const Buffer& b : in) x.push_back(place(b));
  for (const Buffer& b : douts) x.push_back(place(b));
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  const int64_t sizes[] = {nv, ns, nk, nk, nv, nk, s.T * s.H, ns,
                           KdaCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block)};
  std::vector<std::vector<T>> out;
  for (int64_t n : sizes) out.push_back(place(Buffer(n, 0.0)));
  auto at = [offset](auto& v) { return v.data() + offset; };
  KdaCoreForward<T>(at(out[0]), at(out[1]), at(x[0]), at(x[1]), at(x[2]), at(x[3]), at(x[4]),
                    at(x[5]), s.T, s.H, s.Dk, s.Dv, block);
  KdaCoreBackward<T>(at(out[2]), at(out[3]), at(out[4]), at(out[5]), at(out[6]), at(out[7]),
                     at(out[8]), at(x[6]), at(x[7]), at(x[0]), at(x[1]), at(x[2]), at(x[3]),
                     at(x[4]), at(x[5]), s.T, s.H, s.Dk, s.Dv, block);
  out.pop_back();  // the workspace
  for (auto& o : out) o.erase(o.begin(), o.begin() + offset);
  return out;
}

// The bits do not follow the addresses of the caller's buffers: each block
// is copied into owned, aligned matrices before any arithmetic. Buffers
// shifted by 1 to 7 elements (off every vector alignment), full and partial
// blocks, give the same bits as unshifted ones.
template <typename T>
void ExpectBitsIndependentOfAddresses(const KdaShape& s, int64_t block) {
  std::mt19937_64 rng(23);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const Outputs<T> ref = RunAtOffset<T>(s, block, in, douts, 0);
  for (size_t offset = 1; offset < 8; ++offset) {
    ExpectSame(RunAtOffset<T>(s, block, in, douts, offset), ref, 0,
               s.Name() + " block=" + std::to_string(block) + " offset " +
                   std::to_string(offset));
  }
}

TEST(KdaCore, BitsDoNotDependOnBufferAddresses) {
  ExpectBitsIndependentOfAddresses<double>({130, 2, 12, 10}, 64);
  ExpectBitsIndependentOfAddresses<double>({45, 1, 8, 5}, 16);
  ExpectBitsIndependentOfAddresses<float>({130, 2, 12, 10}, 64);
}

TEST(KdaCore, NullStatesMeanZeros) {
  const KdaShape s{20, 2, 4, 3};
  std::mt19937_64 rng(11);
  Buffers in = KdaLayerLikeInputs(s, rng);
  Buffers douts = RandomDouts(s, rng);
  std::fill(in[5].begin(), in[5].end(), 0.0);
  std::fill(douts[1].begin(), douts[1].end(), 0.0);
  const Outputs<double> zeros = RunMode<double>(Mode::kSequential, {s, 8}, in, douts);
  const Outputs<double> nulls = RunMode<double>(Mode::kSequential, {s, 8, 0, true}, in, douts);
  for (size_t i : {0, 2, 3, 4, 5, 6}) {
    EXPECT_EQ(nulls[i], zeros[i]) << kOutputNames[i];
  }
}

// An empty chunk hands the state through: S_out = S_in, dS_in = dS_out.
TEST(KdaCore, EmptyChunkPassesTheStateThrough) {
  const KdaShape s{0, 2, 3, 4};
  std::mt19937_64 rng(12);
  const Buffers in = SmallInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun r = RunCore<double>(false, s, kKdaBlockSize, in, douts);
  EXPECT_EQ(r.outputs[1], in[5]);
  EXPECT_EQ(r.grads[5], douts[1]);
}

// float32 agrees with the float64 reference at float tolerances, with
// decays down to ~e^-10 per token and channel at larger head sizes.
TEST(KdaCore, Float32AgreesWithFloat64) {
  for (const KdaShape& s : {KdaShape{130, 2, 32, 32}, KdaShape{70, 1, 64, 48}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(s.Dk);
    const Buffers in = KdaLayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    ExpectRunsClose(RunCore<float>(false, s, kKdaBlockSize, in, douts),
                    RunCore<double>(true, s, kKdaBlockSize, in, douts), 1e-4, 1e-3, 1e-5);
  }
}

// The FLOP count: the header's per-block formula, summed over blocks (the
// replay skipping the last block) and multiplied by the heads.
TEST(KdaCore, FlopCountFollowsTheFormula) {
  const double dk = 16, dv = 8;
  auto pre = [&](double L) { return 2 * L * L * dk + L * (L - 1) * (dk + dv); };
  auto st = [&](double L) { return 4 * L * dk * dv; };
  auto fwd = [&](double L) { return pre(L) + st(L) + 2 * L * dk * dv + 2 * L * L * dv; };
  auto bwd = [&](double L) {  // without the replay
    return pre(L) + 2 * L * dk * dv + 4 * L * L * dv + 4 * L * dk * dv + 2 * L * (L + 1) * dk +
           8 * L * dk * dv + L * (L - 1) * (dk + dv) + 2 * L * L * (dk + dv) +
           2 * L * (L - 1) * dk;
  };
  const KdaCoreFlops one = CountKdaCoreFlops(64, 1, 16, 8);
  EXPECT_DOUBLE_EQ(one.forward, fwd(64));
  EXPECT_DOUBLE_EQ(one.backward, bwd(64));
  // Two full blocks and a partial one of 5 tokens, three heads.
  const KdaCoreFlops three = CountKdaCoreFlops(133, 3, 16, 8);
  EXPECT_DOUBLE_EQ(three.forward, 3 * (2 * fwd(64) + fwd(5)));
  EXPECT_DOUBLE_EQ(three.backward,
                   3 * (2 * bwd(64) + bwd(5) + 2 * (pre(64) + st(64))));
  EXPECT_EQ(CountKdaCoreFlops(0, 2, 16, 8).forward, 0);
}

// ---- the gate ----------------------------------------------------------------

// The gate's forward against the formula written here, the kernel's backward
// against its reference (float64 and float32), and the reference backward
// against central differences of the reference forward for a, A_log and
// dt_bias; parameter gradients accumulate into what the caller passes.
TEST(KdaGate, ForwardBackwardAndFiniteDifferences) {
  const int64_t T = 6, H = 2, Dk = 5, n = T * H * Dk;
  std::mt19937_64 rng(3);
  Buffer a = RandomVector(rng, n, -6, 25), A_log = RandomVector(rng, H, -1, 2),
         dt_bias = RandomVector(rng, H * Dk, -2, 2);
  const Buffer dg = RandomVector(rng, n, -1, 1);
  Buffer g(n), g_ref(n);
  KdaGateForward<double>(g.data(), a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
  KdaGateForwardRef(g_ref.data(), a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
  Buffer direct(n);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < Dk; ++c) {
        const double u = a[(t * H + h) * Dk + c] + dt_bias[h * Dk + c];
        direct[(t * H + h) * Dk + c] = -std::exp(A_log[h]) * std::log1p(std::exp(u));
      }
    }
  }
  EXPECT_TRUE(AllClose("g", g, direct, 1e-14, 1e-14, 1e-14));
  EXPECT_TRUE(AllClose("g reference", g_ref, direct, 1e-14, 1e-13, 1e-14));
  std::vector<float> g32(n);
  const std::vector<float> a32 = Cast<float>(a), A_log32 = Cast<float>(A_log),
                           dt_bias32 = Cast<float>(dt_bias), dg32 = Cast<float>(dg);
  KdaGateForward<float>(g32.data(), a32.data(), A_log32.data(), dt_bias32.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("g float32", ToDouble(g32), direct, 1e-5, 1e-5, 1e-6));
  // Backward: parameter gradients start at 1 to show accumulation.
  Buffer da(n), dA_log(H, 1.0), ddt_bias(H * Dk, 1.0);
  Buffer da_ref(n), dA_log_ref(H, 1.0), ddt_bias_ref(H * Dk, 1.0);
  KdaGateBackward<double>(da.data(), dA_log.data(), ddt_bias.data(), dg.data(), a.data(),
                          A_log.data(), dt_bias.data(), T, H, Dk);
  KdaGateBackwardRef(da_ref.data(), dA_log_ref.data(), ddt_bias_ref.data(), dg.data(),
                     a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("da", da, da_ref, 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("dA_log", dA_log, dA_log_ref, 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("ddt_bias", ddt_bias, ddt_bias_ref, 1e-13, 1e-12, 1e-12));
  std::vector<float> da32(n), dA_log32(H, 1.0f), ddt_bias32(H * Dk, 1.0f);
  KdaGateBackward<float>(da32.data(), dA_log32.data(), ddt_bias32.data(), dg32.data(),
                         a32.data(), A_log32.data(), dt_bias32.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("da float32", ToDouble(da32), da_ref, 1e-5, 1e-4, 1e-5));
  EXPECT_TRUE(AllClose("dA_log float32", ToDouble(dA_log32), dA_log_ref, 1e-5, 1e-4, 1e-5));
  EXPECT_TRUE(AllClose("ddt_bias float32", ToDouble(ddt_bias32), ddt_bias_ref, 1e-5, 1e-4,
                       1e-5));
  // Central differences of L = <dg, g> (the accumulated 1 taken off); |L| is
  // some hundreds, so a step of 1e-5 keeps its rounding near 1e-8.
  auto loss = [&] {
    Buffer out(n);
    KdaGateForwardRef(out.data(), a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
    return testing::Dot(dg, out);
  };
  for (double& x : dA_log_ref) x -= 1.0;
  for (double& x : ddt_bias_ref) x -= 1.0;
  EXPECT_TRUE(AllClose("finite differences da", da_ref,
                       testing::CentralDifferences(loss, &a, 1e-5), 1e-7, 1e-6, 1e-6));
  EXPECT_TRUE(AllClose("finite differences dA_log", dA_log_ref,
                       testing::CentralDifferences(loss, &A_log, 1e-5), 1e-7, 1e-6, 1e-6));
  EXPECT_TRUE(AllClose("finite differences ddt_bias", ddt_bias_ref,
                       testing::CentralDifferences(loss, &dt_bias, 1e-5), 1e-7, 1e-6, 1e-6));
}

}  // namespace
}  // namespace stateflow::backend

// The KDA core's grid passes (GridKdaCore<T, HostExec>, grid_kda_core.h:
// Pre, ST and Out as separate passes over the workspace) against the
// token-by-token float64 reference (KdaCoreForwardRef / KdaCoreBackwardRef,
// kda_core.h): float64 at 1e-12 relative over block sizes, partial last
// blocks, chunks shorter than a block, decays down to e^-20 per token and
// channel, present and absent boundary states; central differences of the
// grid's float64 forward; float32 at float tolerances; a sequence cut in
// chunks with the state handed over equals one run. Bit for bit: every ST
// tile B_V gives the untiled bits; the phases run in order and the
// overlapped two-stream cores give the whole core's bits, the overlapped
// ones also on a checking executor that runs the passes in adversarial
// orders allowed by each stream's FIFO order and the events (and notices
// any one wait dropped); one or two kernel threads give the same bits.
// Workspaces start as NaN (a pass reading an element no earlier pass wrote
// fails) and carry a guard past their documented size that must stay
// untouched. The gate's functors against its formula, the float64
// reference and central differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/device/grid_kda_core.h"
#include "backend/device/grid_kernels/elementwise.h"
#include "backend/device/host_exec.h"
#include "backend/kernels/kda_core.h"
#include "backend/kernels/kda_prep.h"
#include "backend/threading.h"
#include "tests/backend/kda_test_inputs.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h, kda_test_inputs.h
using Shape = kernel_test::KdaShape;

const std::vector<std::string> kInputNames = {"q", "k", "v", "g", "beta", "S_in"};

// Small unconstrained inputs for finite differences: g per channel.
Buffers SmallInputs(const Shape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  return {RandomVector(rng, rows * s.Dk, -0.6, 0.6), RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dv, -1, 1),     RandomVector(rng, rows * s.Dk, -0.8, -0.01),
          RandomVector(rng, rows, 0.05, 0.95),       RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5)};
}

// Layer-like inputs with strong decays: g = -exp(u), u uniform in
// [log 1e-3, log 20], so per token and channel from ~0.999 down to e^-20
// (exp(G) underflows to 0 inside a block; nothing may overflow).
Buffers StrongDecayInputs(const Shape& s, std::mt19937_64& rng) {
  Buffers in = KdaLayerLikeInputs(s, rng);
  std::uniform_real_distribution<double> u(std::log(1e-3), std::log(20.0));
  for (double& x : in[3]) x = -std::exp(u(rng));
  return in;
}

Buffers RandomDouts(const Shape& s, std::mt19937_64& rng) {
  return {RandomVector(rng, s.T * s.H * s.Dv, -1, 1), RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1)};
}

// Which boundary states are absent (nullptr).
struct Nulls {
  bool S_in = false, S_out = false, dS_out = false, dS_in = false;
};

// How the grid core is issued: the whole core, its three phases in order,
// or the overlapped two-stream version.
enum class Mode { kWhole, kPhases, kOverlapped };

struct Config {
  int64_t block = kKdaBlockSize;
  int64_t st_tile = 0;
  Mode mode = Mode::kWhole;
  Nulls nulls;
};

Config With(int64_t block, int64_t st_tile = 0, Mode mode = Mode::kWhole, Nulls nulls = {}) {
  return {block, st_tile, mode, nulls};
}

// Past a workspace's documented size: elements no pass may touch.
constexpr int64_t kGuard = 64;
constexpr double kGuardValue = 12345.5;

// A vector of n elements, NaN, then the guard.
template <typename T>
std::vector<T> PoisonedWorkspace(int64_t n) {
  std::vector<T> ws(n + kGuard, std::numeric_limits<T>::quiet_NaN());
  std::fill(ws.begin() + n, ws.end(), T(kGuardValue));
  return ws;
}

template <typename T>
bool GuardIntact(const std::vector<T>& ws) {
  return std::all_of(ws.end() - kGuard, ws.end(), [](T x) { return x == T(kGuardValue); });
}

// The grid core (and its backward when douts = {dO, dS_out} is given) at
// precision T on `exec`: outputs {o, S_out}, grads {dq, dk, dv, dg, dbeta,
// dS_in}. Bracketed as a caller's stream 0 would bracket it: the inputs
// (NaN until then) copied in from staging by passes on stream 0 before the
// call, the outputs (NaN; absent ones stay zero) copied out after it;
// `finish` runs after each call is issued (a deferred executor's passes).
template <typename T, class Exec = HostExec>
KernelRun RunGrid(const Shape& s, const Config& c, const Buffers& in, const Buffers& douts,
                  const Exec& exec = Exec{}, const std::function<void()>& finish = {}) {
  using Core = GridKdaCore<T, Exec>;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<std::vector<T>> staged, inputs;
  staged.reserve(8);
  inputs.reserve(8);
  auto input = [&](const Buffer& x) -> const T* {
    staged.push_back(Cast<T>(x));
    inputs.emplace_back(x.size(), nan);
    exec.ForEach(static_cast<int64_t>(x.size()),
                 grid::CopyFn<T>{inputs.back().data(), staged.back().data()});
    return inputs.back().data();
  };
  const T *q = input(in[0]), *k = input(in[1]), *v = input(in[2]), *g = input(in[3]),
          *beta = input(in[4]), *S_in_v = input(in[5]);
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  const T* S_in = c.nulls.S_in ? nullptr : S_in_v;
  // What the core writes, and where stream 0 copies it to.
  std::vector<std::vector<T>> out, res;
  auto output = [&](int64_t n, bool absent) -> T* {
    out.emplace_back(n, absent ? T(0) : nan);
    res.emplace_back(n, T(0));
    return absent ? nullptr : out.back().data();
  };
  auto copy_out = [&] {
    for (size_t i = 0; i < out.size(); ++i) {
      exec.ForEach(static_cast<int64_t>(out[i].size()), grid::CopyFn<T>{res[i].data(), out[i].data()});
    }
    if (finish) finish();
  };
  out.reserve(8);
  res.reserve(8);
  T* o = output(nv, false);
  T* S_out = output(ns, c.nulls.S_out);
  std::vector<T> fws = PoisonedWorkspace<T>(Core::ForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block));
  switch (c.mode) {
    case Mode::kWhole:
      Core::Forward(exec, o, S_out, fws.data(), q, k, v, g,
                    beta, S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.st_tile);
      break;
    case Mode::kPhases:
      for (CorePhase p : kCorePhases) {
        Core::ForwardPhase(exec, p, o, S_out, fws.data(), q, k, v, g,
                           beta, S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.st_tile);
      }
      break;
    case Mode::kOverlapped:
      Core::ForwardOverlapped(exec, o, S_out, fws.data(), q, k, v, g,
                              beta, S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.st_tile);
      break;
  }
  copy_out();
  EXPECT_TRUE(GuardIntact(fws)) << "the forward wrote past its workspace";
  KernelRun r{{ToDouble(res[0]), ToDouble(res[1])}, {}};
  if (douts.empty()) return r;
  const T *dO = input(douts[0]), *dS_out_v = input(douts[1]);
  const T* dS_out = c.nulls.dS_out ? nullptr : dS_out_v;
  out.clear();
  res.clear();
  T* dq = output(nk, false);
  T* dk = output(nk, false);
  T* dv = output(nv, false);
  T* dg = output(nk, false);
  T* dbeta = output(s.T * s.H, false);
  T* dS_in = output(ns, c.nulls.dS_in);
  std::vector<T> bws = PoisonedWorkspace<T>(Core::BackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block));
  switch (c.mode) {
    case Mode::kWhole:
      Core::Backward(exec, dq, dk, dv, dg, dbeta, dS_in, bws.data(), dO, dS_out, q,
                     k, v, g, beta, S_in, s.T, s.H, s.Dk, s.Dv,
                     c.block, c.st_tile);
      break;
    case Mode::kPhases:
      for (CorePhase p : kCorePhases) {
        Core::BackwardPhase(exec, p, dq, dk, dv, dg, dbeta, dS_in, bws.data(), dO, dS_out,
                            q, k, v, g, beta, S_in, s.T, s.H,
                            s.Dk, s.Dv, c.block, c.st_tile);
      }
      break;
    case Mode::kOverlapped:
      Core::BackwardOverlapped(exec, dq, dk, dv, dg, dbeta, dS_in, bws.data(), dO, dS_out,
                               q, k, v, g, beta, S_in, s.T,
                               s.H, s.Dk, s.Dv, c.block, c.st_tile);
      break;
  }
  copy_out();
  EXPECT_TRUE(GuardIntact(bws)) << "the backward wrote past its workspace";
  for (const std::vector<T>& x : res) r.grads.push_back(ToDouble(x));
  return r;
}

// The float64 reference, same buffers as RunGrid.
KernelRun RunRef(const Shape& s, const Buffers& in, const Buffers& douts, Nulls nulls = {}) {
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  const double* S_in = nulls.S_in ? nullptr : in[5].data();
  Buffer o(nv), S_out(ns);
  KdaCoreForwardRef(o.data(), nulls.S_out ? nullptr : S_out.data(), in[0].data(), in[1].data(),
                    in[2].data(), in[3].data(), in[4].data(), S_in, s.T, s.H, s.Dk, s.Dv);
  KernelRun r{{o, S_out}, {}};
  if (douts.empty()) return r;
  Buffer dq(nk), dk(nk), dv(nv), dg(nk), dbeta(s.T * s.H), dS_in(ns);
  KdaCoreBackwardRef(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(),
                     nulls.dS_in ? nullptr : dS_in.data(), nullptr, douts[0].data(),
                     nulls.dS_out ? nullptr : douts[1].data(), in[0].data(), in[1].data(),
                     in[2].data(), in[3].data(), in[4].data(), S_in, s.T, s.H, s.Dk, s.Dv);
  r.grads = {dq, dk, dv, dg, dbeta, dS_in};
  return r;
}

// Every output and gradient of `a` within atol + rel |b| of `b`'s, and
// normalised error below rel; returns the worst normalised error.
double ExpectRunsClose(const std::string& what, const KernelRun& a, const KernelRun& b,
                       double atol, double rel) {
  double worst = 0.0;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_TRUE(AllClose(what + (i == 0 ? " o" : " S_out"), a.outputs[i], b.outputs[i], atol,
                         rel, rel));
    worst = std::max(worst, testing::RelativeError(a.outputs[i], b.outputs[i]));
  }
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(AllClose(what + " d" + kInputNames[i], a.grads[i], b.grads[i], atol, rel, rel));
    worst = std::max(worst, testing::RelativeError(a.grads[i], b.grads[i]));
  }
  return worst;
}

void ExpectSameBits(const std::string& what, const KernelRun& a, const KernelRun& b) {
  EXPECT_EQ(a.outputs, b.outputs) << what;
  EXPECT_EQ(a.grads, b.grads) << what;
}

// ---- against the reference --------------------------------------------------

// The harness (kernel_test_util.h) with the grid as the "fast" kernel: grid
// float64 vs the reference at 1e-12, float32 at 2e-5, and central
// differences of the grid's forward against its backward, every input.
class GridKdaCase : public KernelCase {
 public:
  GridKdaCase(Shape s, int64_t block) : s_(s), block_(block) {}
  std::string Name() const override {
    return "grid kda_core " + s_.Name() + " block=" + std::to_string(block_);
  }
  std::vector<std::string> InputNames() const override { return kInputNames; }
  Buffers MakeInputs(std::mt19937_64& rng) const override { return SmallInputs(s_, rng); }
  KernelRun Run(Variant variant, const Buffers& in, const Buffers& douts) const override {
    const Config c = With(block_);
    if (variant == Variant::kRef) return RunRef(s_, in, douts);
    if (variant == Variant::kFast32) return RunGrid<float>(s_, c, in, douts);
    return RunGrid<double>(s_, c, in, douts);
  }
  double Float32Tolerance() const override { return 2e-5; }

 private:
  Shape s_;
  int64_t block_;
};

TEST(GridKdaCore, AgainstReferenceAndFiniteDifferences) {
  CheckKernelCase(GridKdaCase({5, 2, 3, 4}, 64), 1);
  CheckKernelCase(GridKdaCase({9, 2, 3, 4}, 4), 2);
  CheckKernelCase(GridKdaCase({8, 1, 4, 2}, 4), 3);
  CheckKernelCase(GridKdaCase({1, 1, 2, 3}, 64), 4);
  CheckKernelCase(GridKdaCase({11, 1, 3, 3}, 3), 5);
}

struct RefCase {
  Shape s;
  int64_t block;
  bool strong;  // StrongDecayInputs, else KdaLayerLikeInputs
  std::string Name() const {
    return s.Name() + " block=" + std::to_string(block) + (strong ? " strong decays" : "");
  }
};

// float64 grid vs the recurrence at 1e-12 relative (atol 1e-13): lengths
// around the block, a partial last block, T shorter than a block, several
// block sizes, layer-like and strong decays, boundary states given. Prints
// each case's worst normalised error.
TEST(GridKdaCore, AgainstRecurrence) {
  std::vector<RefCase> cases;
  for (bool strong : {false, true}) {
    for (Shape s : {Shape{1, 2, 16, 16}, {5, 2, 16, 16}, {63, 2, 16, 16}, {64, 2, 16, 16},
                    {65, 2, 16, 16}, {130, 2, 16, 12}, {200, 2, 8, 12}, {150, 3, 12, 8}}) {
      cases.push_back({s, kKdaBlockSize, strong});
    }
    for (int64_t block : {1, 2, 7, 16, 37, 64}) cases.push_back({{37, 2, 8, 6}, block, strong});
    cases.push_back({{100, 1, 32, 32}, 32, strong});
  }
  for (const RefCase& rc : cases) {
    SCOPED_TRACE(rc.Name());
    std::mt19937_64 rng(100 + rc.s.T + rc.block);
    const Buffers in = rc.strong ? StrongDecayInputs(rc.s, rng) : KdaLayerLikeInputs(rc.s, rng);
    const Buffers douts = RandomDouts(rc.s, rng);
    const double worst = ExpectRunsClose("grid vs ref", RunGrid<double>(rc.s, With(rc.block), in, douts),
                                         RunRef(rc.s, in, douts), 1e-13, 1e-12);
    std::printf("  grid<double> vs ref, %s: worst normalised error %.2e\n", rc.Name().c_str(), worst);
  }
}

// Absent boundary states: S_in zeros (sequence start), S_out skipped,
// dS_out zeros (last chunk), dS_in skipped; an empty chunk (T = 0: S_out =
// S_in, dS_in = dS_out).
TEST(GridKdaCore, NullBoundaryStatesAndEmptyChunk) {
  for (Nulls nulls : {Nulls{true, false, false, false}, Nulls{false, true, true, true},
                      Nulls{true, true, true, false}}) {
    for (Shape s : {Shape{70, 2, 4, 5}, Shape{0, 2, 4, 5}}) {
      SCOPED_TRACE(s.Name() + " nulls " + std::to_string(nulls.S_in) + std::to_string(nulls.S_out) +
                   std::to_string(nulls.dS_out) + std::to_string(nulls.dS_in));
      std::mt19937_64 rng(9);
      const Buffers in = KdaLayerLikeInputs(s, rng);
      const Buffers douts = RandomDouts(s, rng);
      KernelRun ref = RunRef(s, in, douts, nulls);
      if (nulls.S_out) ref.outputs[1].assign(ref.outputs[1].size(), 0.0);
      if (nulls.dS_in) ref.grads[5].assign(ref.grads[5].size(), 0.0);
      ExpectRunsClose("grid vs ref", RunGrid<double>(s, With(32, 0, Mode::kWhole, nulls), in, douts),
                      ref, 1e-13, 1e-12);
    }
  }
  const Shape s{0, 2, 3, 2};
  std::mt19937_64 rng(10);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  for (Mode mode : {Mode::kWhole, Mode::kPhases, Mode::kOverlapped}) {
    const KernelRun r = RunGrid<double>(s, With(kKdaBlockSize, 0, mode), in, douts);
    EXPECT_EQ(r.outputs[1], in[5]);
    EXPECT_EQ(r.grads[5], douts[1]);
  }
}

// A sequence cut in chunks (on and off block boundaries, one of a single
// token), S handed forward and dS_in fed back as the previous chunk's
// dS_out, equals one run within 1e-12.
TEST(GridKdaCore, ChunkedSequenceEqualsOneRun) {
  const Shape s{150, 2, 8, 8};
  const int64_t block = 32;
  std::mt19937_64 rng(12);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun whole = RunGrid<double>(s, With(block), in, douts);
  const std::vector<int64_t> bounds = {0, 30, 31, 64, 150};
  const std::vector<int64_t> widths = {s.Dk, s.Dk, s.Dv, s.Dk, 1};
  auto rows = [&](const Buffer& x, size_t p, int64_t D) {
    return Buffer(x.begin() + bounds[p] * s.H * D, x.begin() + bounds[p + 1] * s.H * D);
  };
  auto piece = [&](size_t p) { return Shape{bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv}; };
  std::vector<Buffer> states = {in[5]};
  Buffer o;
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) in_p.push_back(rows(in[i], p, widths[i]));
    in_p.push_back(states[p]);
    const KernelRun r = RunGrid<double>(piece(p), With(block), in_p, {});
    o.insert(o.end(), r.outputs[0].begin(), r.outputs[0].end());
    states.push_back(r.outputs[1]);
  }
  EXPECT_TRUE(AllClose("o", o, whole.outputs[0], 1e-13, 1e-12, 1e-12));
  EXPECT_TRUE(AllClose("S_out", states.back(), whole.outputs[1], 1e-13, 1e-12, 1e-12));
  Buffers grads(5);
  Buffer dS = douts[1];
  for (size_t p = bounds.size() - 1; p-- > 0;) {
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) in_p.push_back(rows(in[i], p, widths[i]));
    in_p.push_back(states[p]);
    const KernelRun r = RunGrid<double>(piece(p), With(block), in_p, {rows(douts[0], p, s.Dv), dS});
    for (size_t i = 0; i < 5; ++i) grads[i].insert(grads[i].begin(), r.grads[i].begin(), r.grads[i].end());
    dS = r.grads[5];
  }
  grads.push_back(dS);
  for (size_t i = 0; i < kInputNames.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], grads[i], whole.grads[i], 1e-13, 1e-12, 1e-12));
  }
}

// float32 grid against the float64 recurrence, layer-like and strong decays.
TEST(GridKdaCore, Float32AgainstReference) {
  for (bool strong : {false, true}) {
    for (Shape s : {Shape{100, 2, 32, 32}, Shape{70, 1, 64, 48}}) {
      SCOPED_TRACE(s.Name() + (strong ? " strong decays" : ""));
      std::mt19937_64 rng(13);
      const Buffers in = strong ? StrongDecayInputs(s, rng) : KdaLayerLikeInputs(s, rng);
      const Buffers douts = RandomDouts(s, rng);
      const double worst = ExpectRunsClose("grid<float> vs ref", RunGrid<float>(s, {}, in, douts),
                                           RunRef(s, in, douts), 2e-5, 2e-5);
      std::printf("  grid<float> vs ref, %s%s: worst normalised error %.2e\n", s.Name().c_str(),
                  strong ? " strong decays" : "", worst);
    }
  }
}

// ---- bit for bit --------------------------------------------------------------

// The ST tile is the grid's launch shape only: every B_V (dividing Dv or
// not, one row, Dv, beyond) gives the untiled bits, whole and overlapped,
// float64 and float32.
template <typename T>
void ExpectTilesGiveUntiledBits() {
  const Shape s{150, 2, 8, 12};
  std::mt19937_64 rng(33);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun untiled = RunGrid<T>(s, With(32), in, douts);
  for (int64_t tile : {1, 5, 6, 12, 1000}) {
    for (Mode mode : {Mode::kWhole, Mode::kOverlapped}) {
      ExpectSameBits("st_tile " + std::to_string(tile) + (mode == Mode::kWhole ? "" : " overlapped"),
                     RunGrid<T>(s, With(32, tile, mode), in, douts), untiled);
    }
  }
}

TEST(GridKdaCore, StTilesGiveTheUntiledBits) {
  ExpectTilesGiveUntiledBits<double>();
  ExpectTilesGiveUntiledBits<float>();
}

// Block counts whose segments (StreamSegments) hold one or two blocks,
// the last partial or not, and under two blocks (the sequential fallback).
const std::vector<std::pair<Shape, int64_t>> kSegmentCases = {
    {{256, 2, 8, 6}, 32}, {{150, 2, 6, 8}, 32}, {{180, 1, 4, 5}, 32},
    {{70, 1, 4, 4}, 24},  {{64, 1, 8, 4}, 32},  {{20, 2, 4, 3}, 32}};

// The phases in order and the overlapped cores on the host executor give
// the whole core's bits.
TEST(GridKdaCore, PhasesAndOverlappedGiveTheWholeCoresBits) {
  for (const auto& [s, block] : kSegmentCases) {
    SCOPED_TRACE(s.Name() + " block=" + std::to_string(block));
    std::mt19937_64 rng(34);
    const Buffers in = KdaLayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const KernelRun whole = RunGrid<double>(s, With(block, 3), in, douts);
    ExpectSameBits("phases", RunGrid<double>(s, With(block, 3, Mode::kPhases), in, douts), whole);
    ExpectSameBits("overlapped", RunGrid<double>(s, With(block, 3, Mode::kOverlapped), in, douts), whole);
    const KernelRun whole32 = RunGrid<float>(s, With(block), in, douts);
    ExpectSameBits("phases float32", RunGrid<float>(s, With(block, 0, Mode::kPhases), in, douts), whole32);
    ExpectSameBits("overlapped float32", RunGrid<float>(s, With(block, 0, Mode::kOverlapped), in, douts), whole32);
  }
}

// HostExec splits long grids over the kernel threads; every functor writes
// disjoint elements, so two threads give the same bits as one.
TEST(GridKdaCore, TwoThreadsSameBits) {
  const Shape s{200, 3, 16, 16};
  std::mt19937_64 rng(11);
  const Buffers in = KdaLayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const int threads = KernelThreads();
  SetKernelThreads(1);
  const KernelRun one = RunGrid<double>(s, {}, in, douts);
  SetKernelThreads(2);
  const KernelRun two = RunGrid<double>(s, {}, in, douts);
  SetKernelThreads(threads);
  ExpectSameBits("two threads", two, one);
}

// ---- the overlapped cores in adversarial orders ---------------------------------

// How the checking executor picks the next pass among those allowed.
struct Order {
  enum Kind { kStream0First, kStream1First, kRandom } kind;
  uint64_t seed = 0;
  std::string Name() const {
    if (kind == kStream0First) return "stream 0 first";
    if (kind == kStream1First) return "stream 1 first";
    return "random seed " + std::to_string(seed);
  }
};

// The passes issued on two streams, each with the record passes its waits
// name; Run executes them in an order allowed by FIFO and the waits.
class Recording {
 public:
  void Issue(int stream, std::function<void()> run) {
    passes_.push_back({stream, std::move(run), std::move(pending_[stream])});
    pending_[stream].clear();
    queue_[stream].push_back(static_cast<int>(passes_.size()) - 1);
  }
  void Record(int stream, int event) {
    ASSERT_LT(event, kGridEvents);
    Issue(stream, [] {});
    last_record_[event] = static_cast<int>(passes_.size()) - 1;
  }
  void Wait(int stream, int event) {
    if (waits_++ == drop_wait_) return;  // this wait is lost
    auto it = last_record_.find(event);
    if (it != last_record_.end()) pending_[stream].push_back(it->second);
  }
  void DropWait(int n) { drop_wait_ = n; }
  int waits() const { return waits_; }
  bool used_stream1() const { return !queue_[1].empty(); }

  // False on a deadlock. Clears the recording.
  bool Run(const Order& order) {
    for (int st = 0; st < 2; ++st) {
      if (!pending_[st].empty()) Issue(st, [] {});
    }
    std::mt19937_64 rng(order.seed);
    std::vector<bool> done(passes_.size(), false);
    size_t head[2] = {0, 0};
    bool ok = true;
    for (size_t ran = 0; ran < passes_.size() && ok; ++ran) {
      std::vector<int> ready;
      for (int st = 0; st < 2; ++st) {
        if (head[st] == queue_[st].size()) continue;
        const Pass& p = passes_[queue_[st][head[st]]];
        if (std::all_of(p.after.begin(), p.after.end(), [&](int a) { return done[a]; })) {
          ready.push_back(st);
        }
      }
      if (ready.empty()) {
        ok = false;
        break;
      }
      int st = ready[0];
      if (ready.size() == 2 && order.kind != Order::kStream0First) {
        st = order.kind == Order::kStream1First ? 1 : static_cast<int>(rng() % 2);
      }
      const int id = queue_[st][head[st]++];
      passes_[id].run();
      done[id] = true;
    }
    passes_.clear();
    queue_[0].clear();
    queue_[1].clear();
    return ok;
  }

 private:
  struct Pass {
    int stream;
    std::function<void()> run;
    std::vector<int> after;
  };
  std::vector<Pass> passes_;
  std::vector<int> queue_[2], pending_[2];
  std::map<int, int> last_record_;  // event -> its latest record pass
  int waits_ = 0, drop_wait_ = -1;
};

// grid_ops.h's executor concept, deferred: every pass is recorded on the
// executor's stream and runs (HostExec's arithmetic) at Recording::Run.
struct CheckingExec {
  std::shared_ptr<Recording> rec;
  int stream = 0;

  template <class F>
  void ForEach(int64_t n, F f) const {
    rec->Issue(stream, [n, f] { HostExec{}.ForEach(n, f); });
  }
  template <class F>
  void ForEachTile(int64_t tiles, int64_t tile, F f) const {
    rec->Issue(stream, [tiles, tile, f] { HostExec{}.ForEachTile(tiles, tile, f); });
  }
  template <typename T>
  void GemmStridedBatched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                          int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta,
                          T* C, int64_t ldc, int64_t sc, int64_t batch) const {
    rec->Issue(stream, [=] {
      HostExec{}.GemmStridedBatched(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc,
                                    sc, batch);
    });
  }
  CheckingExec Stream(int i) const { return {rec, i}; }
  void Record(int e) const { rec->Record(stream, e); }
  void Wait(int e) const { rec->Wait(stream, e); }
};

struct CheckedRun {
  KernelRun run;
  bool deadlock = false, used_stream1 = false;
  int waits = 0;
};

// The overlapped core (forward and backward, each issued then run in
// `order`) on the checking executor; `drop_wait` loses that wait of each.
template <typename T>
CheckedRun RunChecked(const Shape& s, int64_t block, const Buffers& in, const Buffers& douts,
                      const Order& order, int drop_wait = -1) {
  auto rec = std::make_shared<Recording>();
  rec->DropWait(drop_wait);
  CheckedRun c;
  auto finish = [&] {
    c.used_stream1 = c.used_stream1 || rec->used_stream1();
    c.waits = rec->waits();
    c.deadlock = c.deadlock || !rec->Run(order);
    *rec = Recording();
    rec->DropWait(drop_wait);
  };
  c.run = RunGrid<T, CheckingExec>(s, With(block, 3, Mode::kOverlapped),
                                   in, douts, CheckingExec{rec, 0}, finish);
  return c;
}

std::vector<Order> Orders() {
  std::vector<Order> orders = {{Order::kStream0First}, {Order::kStream1First}};
  for (uint64_t seed = 1; seed <= 6; ++seed) orders.push_back({Order::kRandom, seed});
  return orders;
}

TEST(GridKdaStreams, OverlappedEqualsSequentialInEveryOrder) {
  for (const auto& [s, block] : kSegmentCases) {
    std::mt19937_64 rng(35);
    const Buffers in = KdaLayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const std::string what = s.Name() + " block=" + std::to_string(block);
    const KernelRun ref = RunGrid<double>(s, With(block, 3), in, douts);
    const bool two_streams = (s.T + block - 1) / block >= 2;
    for (const Order& order : Orders()) {
      const CheckedRun c = RunChecked<double>(s, block, in, douts, order);
      ASSERT_FALSE(c.deadlock) << what << ", " << order.Name();
      EXPECT_EQ(c.used_stream1, two_streams) << what;
      ExpectSameBits(what + ", " + order.Name(), c.run, ref);
    }
  }
}

// Every wait the overlapped cores issue is needed: dropped, some allowed
// order reads an element before it is written (inputs, outputs and
// workspaces start as NaN), which changes a result.
TEST(GridKdaStreams, EveryDroppedWaitIsCaught) {
  for (const auto& [s, block] : {kSegmentCases[1], kSegmentCases[4]}) {
    std::mt19937_64 rng(36);
    const Buffers in = KdaLayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const std::string what = s.Name() + " block=" + std::to_string(block);
    const KernelRun ref = RunGrid<double>(s, With(block, 3), in, douts);
    const int waits = RunChecked<double>(s, block, in, douts, {Order::kStream0First}).waits;
    EXPECT_GE(waits, 4) << what;
    for (int w = 0; w < waits; ++w) {
      bool caught = false;
      for (const Order& order : Orders()) {
        const CheckedRun c = RunChecked<double>(s, block, in, douts, order, w);
        caught = caught || c.deadlock || c.run.outputs != ref.outputs || c.run.grads != ref.grads;
      }
      EXPECT_TRUE(caught) << what << ": dropping wait " << w << " went unnoticed";
    }
  }
}

// ---- workspace sizes --------------------------------------------------------------

// The documented formulas (grid_kda_core.h), nb = ceil(T / bs).
TEST(GridKdaCore, WorkspaceSizesAreTheDocumentedFormulas) {
  using Core = GridKdaCore<double, HostExec>;
  for (const auto& [s, block] : kSegmentCases) {
    const int64_t nb = (s.T + block - 1) / block, tokens = s.T * s.H;
    const int64_t fwd = 3 * tokens * s.Dk + tokens * s.Dv + s.H * nb * block * block +
                        s.H * nb * s.Dv * s.Dk;
    const int64_t bwd = fwd + s.H * nb * block * block + 2 * tokens * s.Dv + 2 * tokens * s.Dk +
                        s.H * (nb + 1) * s.Dv * s.Dk;
    EXPECT_EQ(Core::ForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), fwd) << s.Name();
    EXPECT_EQ(Core::BackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), bwd) << s.Name();
  }
}

// ---- the gate -------------------------------------------------------------------------

// The gate's grid functors (GridKdaGateForward / GridKdaGateBackward) against
// the formula written out here, the float64 reference (kda_prep.h), and
// central differences of the forward; dA_log and ddt_bias accumulate.
TEST(GridKdaGate, AgainstFormulaReferenceAndFiniteDifferences) {
  const int64_t T = 13, H = 3, Dk = 5, n = T * H * Dk;
  std::mt19937_64 rng(21);
  Buffer a = RandomVector(rng, n, -6, 6), A_log = RandomVector(rng, H, -1, 2.5),
         dt_bias = RandomVector(rng, H * Dk, -3, 1);
  const Buffer dg = RandomVector(rng, n, -1, 1);
  const Buffer dA_log0 = RandomVector(rng, H, -1, 1), ddt_bias0 = RandomVector(rng, H * Dk, -1, 1);
  auto softplus = [](double x) { return std::log1p(std::exp(x)); };
  auto forward = [&] {
    Buffer g(n);
    GridKdaGateForward(HostExec{}, g.data(), a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
    return g;
  };
  const Buffer g = forward();
  Buffer g_formula(n), da_formula(n), dA_log_formula = dA_log0, ddt_bias_formula = ddt_bias0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < Dk; ++c) {
        const int64_t i = (t * H + h) * Dk + c;
        const double x = a[i] + dt_bias[h * Dk + c];
        g_formula[i] = -std::exp(A_log[h]) * softplus(x);
        da_formula[i] = -dg[i] * std::exp(A_log[h]) / (1 + std::exp(-x));
        ddt_bias_formula[h * Dk + c] += da_formula[i];
        dA_log_formula[h] += dg[i] * g_formula[i];
      }
    }
  }
  EXPECT_TRUE(AllClose("g vs formula", g, g_formula, 1e-14, 1e-14, 1e-14));
  Buffer g_ref(n);
  KdaGateForwardRef(g_ref.data(), a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("g vs ref", g, g_ref, 1e-14, 1e-14, 1e-14));

  Buffer da(n), dA_log = dA_log0, ddt_bias = ddt_bias0;
  GridKdaGateBackward(HostExec{}, da.data(), dA_log.data(), ddt_bias.data(), dg.data(), a.data(),
                      A_log.data(), dt_bias.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("da vs formula", da, da_formula, 1e-14, 1e-13, 1e-13));
  EXPECT_TRUE(AllClose("dA_log vs formula", dA_log, dA_log_formula, 1e-13, 1e-13, 1e-13));
  EXPECT_TRUE(AllClose("ddt_bias vs formula", ddt_bias, ddt_bias_formula, 1e-13, 1e-13, 1e-13));
  Buffer da_ref(n), dA_log_ref = dA_log0, ddt_bias_ref = ddt_bias0;
  KdaGateBackwardRef(da_ref.data(), dA_log_ref.data(), ddt_bias_ref.data(), dg.data(), a.data(),
                     A_log.data(), dt_bias.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("da vs ref", da, da_ref, 1e-14, 1e-13, 1e-13));
  EXPECT_TRUE(AllClose("dA_log vs ref", dA_log, dA_log_ref, 1e-13, 1e-13, 1e-13));
  EXPECT_TRUE(AllClose("ddt_bias vs ref", ddt_bias, ddt_bias_ref, 1e-13, 1e-13, 1e-13));

  // Central differences of L = <dg, g>, from a zero accumulator.
  Buffer da2(n), dA_log2(H, 0.0), ddt_bias2(H * Dk, 0.0);
  GridKdaGateBackward(HostExec{}, da2.data(), dA_log2.data(), ddt_bias2.data(), dg.data(), a.data(),
                      A_log.data(), dt_bias.data(), T, H, Dk);
  auto loss = [&] { return testing::Dot(dg, forward()); };
  EXPECT_TRUE(AllClose("da vs differences", da2, testing::CentralDifferences(loss, &a, 1e-6), 1e-7,
                       1e-6, 1e-6));
  EXPECT_TRUE(AllClose("dA_log vs differences", dA_log2,
                       testing::CentralDifferences(loss, &A_log, 1e-6), 1e-7, 1e-6, 1e-6));
  EXPECT_TRUE(AllClose("ddt_bias vs differences", ddt_bias2,
                       testing::CentralDifferences(loss, &dt_bias, 1e-6), 1e-7, 1e-6, 1e-6));
}

// float32 gate against the float64 formula.
TEST(GridKdaGate, Float32) {
  const int64_t T = 9, H = 2, Dk = 4, n = T * H * Dk;
  std::mt19937_64 rng(22);
  const Buffer a = RandomVector(rng, n, -6, 6), A_log = RandomVector(rng, H, -1, 2.5),
               dt_bias = RandomVector(rng, H * Dk, -3, 1), dg = RandomVector(rng, n, -1, 1);
  const std::vector<float> af = Cast<float>(a), A_logf = Cast<float>(A_log),
                           dt_biasf = Cast<float>(dt_bias), dgf = Cast<float>(dg);
  std::vector<float> g(n), da(n), dA_log(H, 0.0f), ddt_bias(H * Dk, 0.0f);
  GridKdaGateForward(HostExec{}, g.data(), af.data(), A_logf.data(), dt_biasf.data(), T, H, Dk);
  GridKdaGateBackward(HostExec{}, da.data(), dA_log.data(), ddt_bias.data(), dgf.data(), af.data(),
                      A_logf.data(), dt_biasf.data(), T, H, Dk);
  Buffer g_ref(n), da_ref(n), dA_log_ref(H, 0.0), ddt_bias_ref(H * Dk, 0.0);
  KdaGateForwardRef(g_ref.data(), a.data(), A_log.data(), dt_bias.data(), T, H, Dk);
  KdaGateBackwardRef(da_ref.data(), dA_log_ref.data(), ddt_bias_ref.data(), dg.data(), a.data(),
                     A_log.data(), dt_bias.data(), T, H, Dk);
  EXPECT_TRUE(AllClose("g", ToDouble(g), g_ref, 1e-5, 1e-5, 1e-5));
  EXPECT_TRUE(AllClose("da", ToDouble(da), da_ref, 1e-5, 1e-5, 1e-5));
  EXPECT_TRUE(AllClose("dA_log", ToDouble(dA_log), dA_log_ref, 1e-5, 1e-5, 1e-5));
  EXPECT_TRUE(AllClose("ddt_bias", ToDouble(ddt_bias), ddt_bias_ref, 1e-5, 1e-5, 1e-5));
}

}  // namespace
}  // namespace stateflow::backend

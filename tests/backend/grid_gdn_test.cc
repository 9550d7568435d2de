// The GDN core's grid passes (GridOps<T, HostExec>::GdnCoreForward /
// GdnCoreBackward: Pre, ST and Out as separate passes over the workspace)
// against the CPU kernel (float64, relative error < 1e-12), the token-by-token
// float64 reference, and central differences of the grid forward; every block
// size; null boundary states; a sequence cut in pieces; float32; the same bits
// on one or two threads; and a workspace poisoned with NaN, so that a pass
// reading an element no earlier pass wrote would fail.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/device/gdn_ops.h"
#include "backend/device/host_grid_device.h"
#include "backend/kernels/gdn_core.h"
#include "backend/kernels/gdn_prep.h"
#include "backend/threading.h"
#include "tests/backend/gdn_test_inputs.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

// Small unconstrained inputs for finite differences.
Buffers SmallInputs(const GdnShape& s, std::mt19937_64& rng) {
  const int64_t rows = s.T * s.H;
  return {RandomVector(rng, rows * s.Dk, -0.6, 0.6), RandomVector(rng, rows * s.Dk, -0.6, 0.6),
          RandomVector(rng, rows * s.Dv, -1, 1),     RandomVector(rng, rows, -0.8, -0.01),
          RandomVector(rng, rows, 0.05, 0.95),       RandomVector(rng, s.H * s.Dv * s.Dk, -0.5, 0.5)};
}

Buffers RandomDouts(const GdnShape& s, std::mt19937_64& rng) {
  return {RandomVector(rng, s.T * s.H * s.Dv, -1, 1),
          RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1)};
}

const std::vector<std::string> kInputNames = {"q", "k", "v", "g", "beta", "S_in"};

enum class Impl { kRef, kCpu, kGrid };

// Which boundary states are absent (nullptr).
struct Nulls {
  bool S_in = false, S_out = false, dS_out = false, dS_in = false;
};

// Runs the core (and its backward when douts = {dO, dS_out} is given):
// outputs {o, S_out}, grads {dq, dk, dv, dg, dbeta, dS_in}. Absent outputs
// stay zero. The grid's workspaces start as NaN.
template <typename T>
KernelRun RunCore(Impl impl, const GdnShape& s, int64_t block, const Buffers& in,
                  const Buffers& douts, Nulls nulls = {}) {
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]), v = Cast<T>(in[2]),
                       g = Cast<T>(in[3]), beta = Cast<T>(in[4]), S_in_v = Cast<T>(in[5]);
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  const T* S_in = nulls.S_in ? nullptr : S_in_v.data();
  std::vector<T> o(nv), S_out_v(ns);
  T* S_out = nulls.S_out ? nullptr : S_out_v.data();
  GdnOps<T>& grid = *GdnOpsOf<T>(HostGridDevice());
  const T nan = std::numeric_limits<T>::quiet_NaN();
  if constexpr (std::is_same_v<T, double>) {
    if (impl == Impl::kRef) {
      GdnCoreForwardRef(o.data(), S_out, q.data(), k.data(), v.data(), g.data(),
                        beta.data(), S_in, s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (impl == Impl::kCpu) {
    GdnCoreForward<T>(o.data(), S_out, q.data(), k.data(), v.data(), g.data(),
                      beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, block);
  } else if (impl == Impl::kGrid) {
    std::vector<T> ws(grid.GdnCoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), nan);
    grid.GdnCoreForward(o.data(), S_out, ws.data(), q.data(), k.data(), v.data(),
                        g.data(), beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, block);
  }
  KernelRun r{{ToDouble(o), ToDouble(S_out_v)}, {}};
  if (douts.empty()) return r;
  const std::vector<T> dO = Cast<T>(douts[0]), dS_out_v = Cast<T>(douts[1]);
  const T* dS_out = nulls.dS_out ? nullptr : dS_out_v.data();
  std::vector<T> dq(nk), dk(nk), dv(nv), dg(s.T * s.H), dbeta(s.T * s.H), dS_in_v(ns);
  T* dS_in = nulls.dS_in ? nullptr : dS_in_v.data();
  if constexpr (std::is_same_v<T, double>) {
    if (impl == Impl::kRef) {
      std::vector<T> ws(1);
      GdnCoreBackwardRef(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dS_in,
                         ws.data(), dO.data(), dS_out, q.data(), k.data(), v.data(),
                         g.data(), beta.data(), S_in, s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (impl == Impl::kCpu) {
    std::vector<T> ws(GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block));
    GdnCoreBackward<T>(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dS_in,
                       ws.data(), dO.data(), dS_out, q.data(), k.data(), v.data(),
                       g.data(), beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, block);
  } else if (impl == Impl::kGrid) {
    std::vector<T> ws(grid.GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), nan);
    grid.GdnCoreBackward(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dS_in,
                         ws.data(), dO.data(), dS_out, q.data(), k.data(), v.data(),
                         g.data(), beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, block);
  }
  r.grads = {ToDouble(dq), ToDouble(dk), ToDouble(dv), ToDouble(dg), ToDouble(dbeta),
             ToDouble(dS_in_v)};
  return r;
}

void ExpectRunsClose(const std::string& what, const KernelRun& a, const KernelRun& b,
                     double atol, double rel) {
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_TRUE(AllClose(what + (i == 0 ? " o" : " S_out"), a.outputs[i], b.outputs[i],
                         atol, rel, rel));
  }
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(AllClose(what + " d" + kInputNames[i], a.grads[i], b.grads[i], atol,
                         rel, rel));
  }
}

// The harness (kernel_test_util.h) with the grid as the "fast" kernel: grid
// float64 vs the reference at 1e-12, float32 at 1e-4, and central
// differences of the grid's forward against its backward, every input.
class GridGdnCase : public KernelCase {
 public:
  GridGdnCase(GdnShape s, int64_t block) : s_(s), block_(block) {}
  std::string Name() const override {
    return "grid gdn_core " + s_.Name() + " block=" + std::to_string(block_);
  }
  std::vector<std::string> InputNames() const override { return kInputNames; }
  Buffers MakeInputs(std::mt19937_64& rng) const override { return SmallInputs(s_, rng); }
  KernelRun Run(Variant variant, const Buffers& in, const Buffers& douts) const override {
    if (variant == Variant::kFast32) return RunCore<float>(Impl::kGrid, s_, block_, in, douts);
    return RunCore<double>(variant == Variant::kRef ? Impl::kRef : Impl::kGrid, s_, block_,
                           in, douts);
  }
  double Float32Tolerance() const override { return 1e-4; }

 private:
  GdnShape s_;
  int64_t block_;
};

TEST(GridGdnCore, AgainstReferenceAndFiniteDifferences) {
  CheckKernelCase(GridGdnCase({5, 2, 3, 4}, 64), 1);
  CheckKernelCase(GridGdnCase({9, 2, 3, 4}, 4), 2);
  CheckKernelCase(GridGdnCase({8, 1, 4, 2}, 4), 3);
  CheckKernelCase(GridGdnCase({1, 1, 2, 3}, 64), 4);
}

// Grid vs the CPU kernel (< 1e-12 relative) and vs the recurrence (1e-10, as
// the CPU kernel's own test) at the lengths around T_C = 64.
TEST(GridGdnCore, AgainstCpuKernelAndRecurrence) {
  for (GdnShape s : {GdnShape{1, 2, 16, 16}, {5, 2, 16, 16}, {63, 2, 16, 16}, {64, 2, 16, 16},
                  {65, 2, 16, 16}, {130, 2, 16, 16}, {200, 2, 8, 12}, {150, 3, 12, 8}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(100 + s.T);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    const KernelRun grid = RunCore<double>(Impl::kGrid, s, kGdnBlockSize, in, douts);
    ExpectRunsClose("grid vs cpu",  grid,
                    RunCore<double>(Impl::kCpu, s, kGdnBlockSize, in, douts), 1e-12, 1e-12);
    ExpectRunsClose("grid vs ref", grid,
                    RunCore<double>(Impl::kRef, s, kGdnBlockSize, in, douts), 1e-13, 1e-10);
  }
}

// Any block size gives the same function.
TEST(GridGdnCore, EveryBlockSizeAgrees) {
  const GdnShape s{37, 2, 8, 6};
  std::mt19937_64 rng(7);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun ref = RunCore<double>(Impl::kRef, s, kGdnBlockSize, in, douts);
  for (int64_t block : {1, 2, 7, 16, 37, 64}) {
    SCOPED_TRACE("block=" + std::to_string(block));
    ExpectRunsClose("grid vs ref", RunCore<double>(Impl::kGrid, s, block, in, douts), ref,
                    1e-13, 1e-10);
    ExpectRunsClose("grid vs cpu", RunCore<double>(Impl::kGrid, s, block, in, douts),
                    RunCore<double>(Impl::kCpu, s, block, in, douts), 1e-12, 1e-12);
  }
}

// Absent boundary states: S_in zeros (sequence start), S_out skipped,
// dS_out zeros (last chunk), dS_in skipped; and an empty chunk (T = 0: S_out
// = S_in, dS_in = dS_out).
TEST(GridGdnCore, NullBoundaryStatesAndEmptyChunk) {
  for (Nulls nulls : {Nulls{true, false, false, false}, Nulls{false, true, true, true},
                      Nulls{true, true, true, false}}) {
    for (GdnShape s : {GdnShape{70, 2, 4, 5}, GdnShape{0, 2, 4, 5}}) {
      SCOPED_TRACE(s.Name() + " nulls " + std::to_string(nulls.S_in) +
                   std::to_string(nulls.S_out) + std::to_string(nulls.dS_out) +
                   std::to_string(nulls.dS_in));
      std::mt19937_64 rng(9);
      const Buffers in = LayerLikeInputs(s, rng);
      const Buffers douts = RandomDouts(s, rng);
      ExpectRunsClose("grid vs cpu",
                      RunCore<double>(Impl::kGrid, s, 32, in, douts, nulls),
                      RunCore<double>(Impl::kCpu, s, 32, in, douts, nulls), 1e-12, 1e-12);
    }
  }
  // T = 0 against what it must be.
  const GdnShape s{0, 2, 3, 2};
  std::mt19937_64 rng(10);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun r = RunCore<double>(Impl::kGrid, s, 64, in, douts);
  EXPECT_EQ(r.outputs[1], in[5]);
  EXPECT_EQ(r.grads[5], douts[1]);
}

// A sequence cut in pieces, S handed forward and dS_in fed back as the
// previous piece's dS_out, equals one run (the chunk exactness the pipeline
// relies on).
TEST(GridGdnCore, ChunkedSequenceEqualsOneRun) {
  const GdnShape s{150, 2, 8, 8};
  std::mt19937_64 rng(12);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun whole = RunCore<double>(Impl::kGrid, s, kGdnBlockSize, in, douts);
  const std::vector<int64_t> bounds = {0, 30, 31, 64, 150};
  const std::vector<int64_t> widths = {s.Dk, s.Dk, s.Dv, 1, 1};
  auto rows = [&](const Buffer& x, size_t p, int64_t D) {
    return Buffer(x.begin() + bounds[p] * s.H * D, x.begin() + bounds[p + 1] * s.H * D);
  };
  std::vector<Buffer> states = {in[5]};
  Buffer o;
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) in_p.push_back(rows(in[i], p, widths[i]));
    in_p.push_back(states[p]);
    const KernelRun r = RunCore<double>(Impl::kGrid, {bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv},
                                        kGdnBlockSize, in_p, {});
    o.insert(o.end(), r.outputs[0].begin(), r.outputs[0].end());
    states.push_back(r.outputs[1]);
  }
  EXPECT_TRUE(AllClose("o", o, whole.outputs[0], 1e-13, 1e-10, 1e-10));
  EXPECT_TRUE(AllClose("S_out", states.back(), whole.outputs[1], 1e-13, 1e-10, 1e-10));
  Buffers grads(5);
  Buffer dS = douts[1];
  for (size_t p = bounds.size() - 1; p-- > 0;) {
    Buffers in_p;
    for (size_t i = 0; i < 5; ++i) in_p.push_back(rows(in[i], p, widths[i]));
    in_p.push_back(states[p]);
    const KernelRun r = RunCore<double>(Impl::kGrid, {bounds[p + 1] - bounds[p], s.H, s.Dk, s.Dv},
                                        kGdnBlockSize, in_p, {rows(douts[0], p, s.Dv), dS});
    for (size_t i = 0; i < 5; ++i) grads[i].insert(grads[i].begin(), r.grads[i].begin(), r.grads[i].end());
    dS = r.grads[5];
  }
  grads.push_back(dS);
  for (size_t i = 0; i < kInputNames.size(); ++i) {
    EXPECT_TRUE(AllClose("d" + kInputNames[i], grads[i], whole.grads[i], 1e-13, 1e-10, 1e-10));
  }
}

// float32 grid against the float64 recurrence at layer-like inputs.
TEST(GridGdnCore, Float32AgainstReference) {
  for (GdnShape s : {GdnShape{100, 2, 32, 32}, GdnShape{70, 1, 64, 48}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(13);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = RandomDouts(s, rng);
    ExpectRunsClose("grid<float> vs ref", RunCore<float>(Impl::kGrid, s, kGdnBlockSize, in, douts),
                    RunCore<double>(Impl::kRef, s, kGdnBlockSize, in, douts), 1e-4, 1e-4);
  }
}

// HostExec splits long grids over the kernel threads; every functor writes
// disjoint elements, so two threads give the same bits as one.
TEST(GridGdnCore, TwoThreadsSameBits) {
  const GdnShape s{200, 3, 16, 16};
  std::mt19937_64 rng(11);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = RandomDouts(s, rng);
  const KernelRun one = RunCore<double>(Impl::kGrid, s, kGdnBlockSize, in, douts);
  SetKernelThreads(2);
  const KernelRun two = RunCore<double>(Impl::kGrid, s, kGdnBlockSize, in, douts);
  SetKernelThreads(1);
  EXPECT_EQ(two.outputs, one.outputs);
  EXPECT_EQ(two.grads, one.grads);
}

}  // namespace
}  // namespace stateflow::backend

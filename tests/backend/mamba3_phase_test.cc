// The Mamba-3 core run phase by phase (Mamba3Ops<T>::Mamba3CoreForwardPhase /
// Mamba3CoreBackwardPhase, core_phase.h) against the whole core on the same
// device: kPre, kST, kOut in order give Mamba3CoreForward's o, S_out, k_out,
// v_out and Mamba3CoreBackward's nine gradients bit for bit, on the CPU
// device and the host-grid device, float32 and float64, full blocks, a
// partial last block, a last block of a few tokens, one token and an empty
// chunk, absent boundary states, one and two kernel threads. The phase
// workspaces start as NaN, so a phase reading an element that no earlier
// phase wrote would show; and leaving any one phase out must change the
// outputs that phase is responsible for (so the comparison can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/device/mamba3_ops.h"
#include "backend/device/device.h"
#include "backend/device/host_grid_device.h"
#include "backend/kernels/mamba3_core.h"
#include "backend/threading.h"
#include "tests/backend/kernel_test_util.h"
#include "tests/backend/mamba3_test_inputs.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h, mamba3_test_inputs.h

struct Case {
  Mamba3CoreShape s;
  int64_t block;
  bool null_states;  // every boundary state and its gradient nullptr
  int64_t tile;      // the ST tile B_V (0: untiled), of the core and its phases
  std::string Name() const {
    return s.Name() + " block=" + std::to_string(block) + (null_states ? " null states" : "") +
           (tile > 0 ? " st_tile=" + std::to_string(tile) : "");
  }
};

// Every output of one forward and one backward, in this order.
const char* const kOutputNames[] = {"o",  "S_out", "k_out", "v_out",  "dq",    "dk",    "dv",
                                    "da", "dgamma", "dbeta", "dS_in", "dk_in", "dv_in"};
enum Output { kO, kSOut, kKOut, kVOut, kDq, kDk, kDv, kDa, kDgamma, kDbeta, kDSIn, kDkIn, kDvIn };
template <typename T>
using Outputs = std::vector<std::vector<T>>;

// How to run a pass: the whole core, or its phases in order with `skip`
// (if any) left out.
struct Mode {
  bool phases = false;
  std::optional<CorePhase> skip;
};

template <typename T>
void Forward(Mamba3Ops<T>& ops, const Case& c, const std::vector<std::vector<T>>& x,
             Outputs<T>& out, Mode mode) {
  const Mamba3CoreShape& s = c.s;
  const bool nu = c.null_states;
  auto in = [&](int i) { return nu ? nullptr : x[static_cast<size_t>(i)].data(); };
  auto st = [&](int i) { return nu ? nullptr : out[static_cast<size_t>(i)].data(); };
  const int64_t n = mode.phases
                        ? ops.Mamba3CoreForwardPhaseWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block)
                        : ops.Mamba3CoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block);
  std::vector<T> ws(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
  auto call = [&](auto&& f) {
    f(out[kO].data(), st(kSOut), st(kKOut), st(kVOut), ws.data(), x[kQ].data(), x[kK].data(),
      x[kV].data(), x[kA].data(), x[kGamma].data(), x[kBeta].data(), in(kSIn), in(kKIn),
      in(kVIn), s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
  };
  if (!mode.phases) {
    call([&](auto... args) { ops.Mamba3CoreForward(args...); });
    return;
  }
  for (CorePhase p : kCorePhases) {
    if (mode.skip == p) continue;
    call([&](auto... args) { ops.Mamba3CoreForwardPhase(p, args...); });
  }
}

template <typename T>
void Backward(Mamba3Ops<T>& ops, const Case& c, const std::vector<std::vector<T>>& x,
              const std::vector<std::vector<T>>& d, Outputs<T>& out, Mode mode) {
  const Mamba3CoreShape& s = c.s;
  const bool nu = c.null_states;
  auto in = [&](int i) { return nu ? nullptr : x[static_cast<size_t>(i)].data(); };
  auto dout = [&](int i) { return nu ? nullptr : d[static_cast<size_t>(i)].data(); };
  auto din = [&](int i) { return nu ? nullptr : out[static_cast<size_t>(i)].data(); };
  const int64_t n = mode.phases
                        ? ops.Mamba3CoreBackwardPhaseWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block)
                        : ops.Mamba3CoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block);
  std::vector<T> ws(static_cast<size_t>(n), std::numeric_limits<T>::quiet_NaN());
  auto call = [&](auto&& f) {
    f(out[kDq].data(), out[kDk].data(), out[kDv].data(), out[kDa].data(), out[kDgamma].data(),
      out[kDbeta].data(), din(kDSIn), din(kDkIn), din(kDvIn), ws.data(), d[0].data(), dout(1),
      dout(2), dout(3), x[kQ].data(), x[kK].data(), x[kV].data(), x[kA].data(),
      x[kGamma].data(), x[kBeta].data(), in(kSIn), in(kKIn), in(kVIn), s.T, s.H, s.Dk, s.Dv,
      c.block, c.tile);
  };
  if (!mode.phases) {
    call([&](auto... args) { ops.Mamba3CoreBackward(args...); });
    return;
  }
  for (CorePhase p : kCorePhases) {
    if (mode.skip == p) continue;
    call([&](auto... args) { ops.Mamba3CoreBackwardPhase(p, args...); });
  }
}

// One case's inputs and outputs in fixed buffers: every run reads and writes
// the same addresses (a short block's small products may round differently
// with the alignment of their operands: mamba3_core.h), so the whole core
// and its phases are compared on equal terms.
template <typename T>
struct CaseBuffers {
  std::vector<std::vector<T>> x, d;
  Outputs<T> out;
};

template <typename T>
CaseBuffers<T> MakeBuffers(const Case& c, const Buffers& in, const Buffers& douts) {
  const Mamba3CoreShape& s = c.s;
  CaseBuffers<T> b;
  for (const Buffer& v : in) b.x.push_back(Cast<T>(v));
  for (const Buffer& v : douts) b.d.push_back(Cast<T>(v));
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, nh = s.T * s.H,
                ns = s.H * s.Dv * s.Dk;
  const int64_t sizes[] = {nv, ns, s.H * s.Dk, s.H * s.Dv, nk, nk, nv,
                           nh, nh, nh,         ns,         s.H * s.Dk, s.H * s.Dv};
  for (int64_t n : sizes) b.out.emplace_back(static_cast<size_t>(n), T(0));
  return b;
}

// Every output (zeros where a run writes nothing) of the forward run in
// `forward` mode and the backward in `backward` mode, copied out.
template <typename T>
Outputs<T> Run(Mamba3Ops<T>& ops, const Case& c, CaseBuffers<T>& b, Mode forward, Mode backward) {
  for (std::vector<T>& o : b.out) std::fill(o.begin(), o.end(), T(0));
  Forward<T>(ops, c, b.x, b.out, forward);
  Backward<T>(ops, c, b.x, b.d, b.out, backward);
  return b.out;
}

// Elements of output i that differ in their bits (NaN counts as differing).
template <typename T>
size_t Differing(const Outputs<T>& a, const Outputs<T>& b, int i) {
  const std::vector<T>& x = a[static_cast<size_t>(i)];
  const std::vector<T>& y = b[static_cast<size_t>(i)];
  size_t n = 0;
  for (size_t e = 0; e < x.size(); ++e) n += std::memcmp(&x[e], &y[e], sizeof(T)) != 0;
  return n;
}

struct Inputs {
  Buffers in, douts;
};
Inputs MakeInputs(const Mamba3CoreShape& s) {
  std::mt19937_64 rng(23);
  Inputs x{LayerLikeInputs(s, rng), {}};
  x.douts = {RandomVector(rng, s.T * s.H * s.Dv, -1, 1),
             RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1), RandomVector(rng, s.H * s.Dk, -1, 1),
             RandomVector(rng, s.H * s.Dv, -1, 1)};
  return x;
}

std::string Label(Device& device, size_t bytes, const Case& c) {
  return device.name() + (bytes == 8 ? " float64 " : " float32 ") + c.Name();
}

template <typename T>
void ExpectPhasesEqualCore(Device& device, const Case& c) {
  const Inputs x = MakeInputs(c.s);
  CaseBuffers<T> b = MakeBuffers<T>(c, x.in, x.douts);
  Mamba3Ops<T>& ops = *Mamba3OpsOf<T>(device);
  const Outputs<T> whole = Run<T>(ops, c, b, {}, {});
  const Outputs<T> phased = Run<T>(ops, c, b, {true, {}}, {true, {}});
  for (int i = 0; i < static_cast<int>(whole.size()); ++i) {
    EXPECT_EQ(Differing(whole, phased, i), 0u)
        << Label(device, sizeof(T), c) << ": " << kOutputNames[i] << " differs in "
        << Differing(whole, phased, i) << " of " << whole[static_cast<size_t>(i)].size()
        << " elements";
  }
}

const Case kCases[] = {
    {{256, 2, 16, 8}, 64, false, 0},  // full blocks
    {{130, 3, 8, 6}, 64, false, 0},   // a partial last block, odd head count
    {{100, 2, 8, 6}, 32, false, 0},   // a last block of 4 tokens
    {{45, 2, 8, 8}, 16, true, 0},     // small blocks, no boundary states
    {{1, 1, 4, 4}, 64, false, 0},     // one token
    {{0, 2, 4, 4}, 64, false, 0},     // an empty chunk hands the state on
};

// With an ST tile B_V, the phases (profile's timing) run ST tile by tile as
// the whole core does: the same bits as the whole core with that tile.
const Case kTiledCases[] = {
    {{256, 2, 16, 8}, 64, false, 3},  // a partial last tile
    {{130, 3, 8, 6}, 64, false, 1},   // one row per tile
    {{45, 2, 8, 8}, 16, true, 4},     // two tiles, no boundary states
};

TEST(Mamba3PhaseTest, TiledPhasesInOrderAreTheTiledCoreBitForBit) {
  for (const Case& c : kTiledCases) {
    ExpectPhasesEqualCore<double>(CpuDevice(), c);
    ExpectPhasesEqualCore<float>(CpuDevice(), c);
    ExpectPhasesEqualCore<double>(HostGridDevice(), c);
    ExpectPhasesEqualCore<float>(HostGridDevice(), c);
  }
}

TEST(Mamba3PhaseTest, CpuPhasesInOrderAreTheCoreBitForBit) {
  for (int threads : {1, 2}) {
    SetKernelThreads(threads);
    for (const Case& c : kCases) {
      ExpectPhasesEqualCore<double>(CpuDevice(), c);
      ExpectPhasesEqualCore<float>(CpuDevice(), c);
    }
  }
  SetKernelThreads(1);
}

TEST(Mamba3PhaseTest, HostGridPhasesInOrderAreTheCoreBitForBit) {
  for (const Case& c : kCases) {
    ExpectPhasesEqualCore<double>(HostGridDevice(), c);
    ExpectPhasesEqualCore<float>(HostGridDevice(), c);
  }
}

// Leaving one phase out breaks the outputs it is responsible for: without
// kPre or kOut the output rows (o; dk, dv, da, dgamma, dbeta), without
// kST the leaving state (S_out; the entering state's gradient dS_in). The
// other pass runs in full, so only the skipped pass's outputs can differ.
template <typename T>
void ExpectEveryPhaseMatters(Device& device, const Case& c) {
  const Inputs x = MakeInputs(c.s);
  CaseBuffers<T> buffers = MakeBuffers<T>(c, x.in, x.douts);
  Mamba3Ops<T>& ops = *Mamba3OpsOf<T>(device);
  const Outputs<T> whole = Run<T>(ops, c, buffers, {}, {});
  for (CorePhase p : kCorePhases) {
    const std::string where = Label(device, sizeof(T), c) + " without " + CorePhaseName(p);
    const Outputs<T> f = Run<T>(ops, c, buffers, {true, p}, {true, {}});
    EXPECT_GT(Differing(whole, f, p == CorePhase::kST ? kSOut : kO), 0u) << where << " forward";
    for (int i = kDq; i <= kDvIn; ++i) EXPECT_EQ(Differing(whole, f, i), 0u) << where;
    const Outputs<T> b = Run<T>(ops, c, buffers, {true, {}}, {true, p});
    // (dq is written by kOut on the CPU and, with Out's first backward
    // products, by kPre on the grid devices: not listed.)
    const std::vector<int> broken =
        p == CorePhase::kST ? std::vector<int>{kDSIn}
                           : std::vector<int>{kDk, kDv, kDa, kDgamma, kDbeta};
    for (int i : broken) {
      EXPECT_GT(Differing(whole, b, i), 0u) << where << " backward: " << kOutputNames[i];
    }
    for (int i = kO; i <= kVOut; ++i) EXPECT_EQ(Differing(whole, b, i), 0u) << where;
  }
}

TEST(Mamba3PhaseTest, LeavingOutAnyPhaseChangesItsOutputs) {
  const Case c = kCases[1];
  ExpectEveryPhaseMatters<double>(CpuDevice(), c);
  ExpectEveryPhaseMatters<float>(CpuDevice(), c);
  ExpectEveryPhaseMatters<double>(HostGridDevice(), c);
  ExpectEveryPhaseMatters<float>(HostGridDevice(), c);
}

// The CPU phase workspaces are the sizes their header states.
TEST(Mamba3PhaseTest, CpuPhaseWorkspaceSizes) {
  const int64_t T = 130, H = 3, Dk = 8, Dv = 6, bs = 64, nb = 3;
  Mamba3Ops<float>& ops = *Mamba3OpsOf<float>(CpuDevice());
  EXPECT_EQ(ops.Mamba3CoreForwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            H * nb * (bs * (1 + bs) + 2 * Dv * Dk));
  EXPECT_EQ(ops.Mamba3CoreBackwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            H * nb * (Dv * Dk + bs * (1 + 3 * bs + 2 * Dk + 2 * Dv) + 2 * Dv * Dk + Dk + Dv + 1));
  // The grid devices' are their whole cores' (every block's passes at once).
  Mamba3Ops<float>& grid = *Mamba3OpsOf<float>(HostGridDevice());
  EXPECT_EQ(grid.Mamba3CoreForwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            grid.Mamba3CoreForwardWorkspaceSize(T, H, Dk, Dv, bs));
  EXPECT_EQ(grid.Mamba3CoreBackwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            grid.Mamba3CoreBackwardWorkspaceSize(T, H, Dk, Dv, bs));
}

}  // namespace
}  // namespace stateflow::backend

// The GDN core run phase by phase (GdnOps<T>::GdnCoreForwardPhase /
// GdnCoreBackwardPhase, core_phase.h) against the whole core on the same
// device: kPre, kST, kOut in order give GdnCoreForward's o and S_out and
// GdnCoreBackward's six gradients bit for bit, on the CPU device and the
// host-grid device, float32 and float64, full and partial last blocks, null
// boundary states, one and two kernel threads. The phase workspaces start as
// NaN, so a phase reading an element that no earlier phase wrote would show.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/device/gdn_ops.h"
#include "backend/device/device.h"
#include "backend/device/host_grid_device.h"
#include "backend/threading.h"
#include "tests/backend/gdn_test_inputs.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h, gdn_test_inputs.h

struct Case {
  GdnShape s;
  int64_t block;
  bool null_states;  // S_in, S_out, dS_out, dS_in all nullptr
  int64_t tile;      // the ST tile B_V (0: untiled), of the core and its phases
  std::string Name() const {
    return s.Name() + " block=" + std::to_string(block) + (null_states ? " null states" : "") +
           (tile > 0 ? " st_tile=" + std::to_string(tile) : "");
  }
};

// Every output of one forward and backward: o, S_out, dq, dk, dv, dg,
// dbeta, dS_in.
template <typename T>
using Outputs = std::vector<std::vector<T>>;

// The whole core (phases = false) or its phases in order on `ops`.
template <typename T>
Outputs<T> Run(GdnOps<T>& ops, const Case& c, const Buffers& in, const Buffers& douts,
               bool phases) {
  const GdnShape& s = c.s;
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]), v = Cast<T>(in[2]),
                       g = Cast<T>(in[3]), beta = Cast<T>(in[4]), S_in_v = Cast<T>(in[5]),
                       dO = Cast<T>(douts[0]), dS_out_v = Cast<T>(douts[1]);
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  Outputs<T> out = {std::vector<T>(nv),          std::vector<T>(ns),
                    std::vector<T>(nk),          std::vector<T>(nk),
                    std::vector<T>(nv),          std::vector<T>(s.T * s.H),
                    std::vector<T>(s.T * s.H),   std::vector<T>(ns)};
  const T* S_in = c.null_states ? nullptr : S_in_v.data();
  const T* dS_out = c.null_states ? nullptr : dS_out_v.data();
  T* S_out = c.null_states ? nullptr : out[1].data();
  T* dS_in = c.null_states ? nullptr : out[7].data();
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const int64_t fws = phases ? ops.GdnCoreForwardPhaseWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block)
                             : ops.GdnCoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block);
  std::vector<T> ws(static_cast<size_t>(fws), nan);
  if (phases) {
    for (CorePhase p : kCorePhases) {
      ops.GdnCoreForwardPhase(p, out[0].data(), S_out, ws.data(), q.data(), k.data(), v.data(),
                              g.data(), beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, c.block,
                              c.tile);
    }
  } else {
    ops.GdnCoreForward(out[0].data(), S_out, ws.data(), q.data(), k.data(), v.data(), g.data(),
                       beta.data(), S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
  }
  const int64_t bws = phases ? ops.GdnCoreBackwardPhaseWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block)
                             : ops.GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block);
  ws.assign(static_cast<size_t>(bws), nan);
  auto backward = [&](auto&& call) {
    call(out[2].data(), out[3].data(), out[4].data(), out[5].data(), out[6].data(), dS_in,
         ws.data(), dO.data(), dS_out, q.data(), k.data(), v.data(), g.data(), beta.data(),
         S_in, s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
  };
  if (phases) {
    for (CorePhase p : kCorePhases) {
      backward([&](auto... args) { ops.GdnCoreBackwardPhase(p, args...); });
    }
  } else {
    backward([&](auto... args) { ops.GdnCoreBackward(args...); });
  }
  return out;
}

const char* const kOutputNames[] = {"o", "S_out", "dq", "dk", "dv", "dg", "dbeta", "dS_in"};

template <typename T>
void ExpectPhasesEqualCore(Device& device, const Case& c) {
  std::mt19937_64 rng(17);
  const Buffers in = LayerLikeInputs(c.s, rng);
  const Buffers douts = {RandomVector(rng, c.s.T * c.s.H * c.s.Dv, -1, 1),
                         RandomVector(rng, c.s.H * c.s.Dv * c.s.Dk, -1, 1)};
  GdnOps<T>& ops = *GdnOpsOf<T>(device);
  const Outputs<T> whole = Run<T>(ops, c, in, douts, false);
  const Outputs<T> phased = Run<T>(ops, c, in, douts, true);
  for (size_t i = 0; i < whole.size(); ++i) {
    ASSERT_EQ(whole[i].size(), phased[i].size());
    size_t differ = 0;
    for (size_t e = 0; e < whole[i].size(); ++e) {
      // Bit for bit (NaN, which neither should produce, counts as a difference).
      differ += std::memcmp(&whole[i][e], &phased[i][e], sizeof(T)) != 0;
    }
    EXPECT_EQ(differ, 0u) << device.name() << " " << (sizeof(T) == 8 ? "float64 " : "float32 ")
                          << c.Name() << ": " << kOutputNames[i] << " differs in " << differ
                          << " of " << whole[i].size() << " elements";
  }
}

const Case kCases[] = {
    {{256, 2, 16, 8}, 64, false, 0},   // full blocks
    {{130, 3, 8, 6}, 64, false, 0},    // a partial last block, odd head count
    {{45, 2, 8, 8}, 16, true, 0},      // small blocks, no boundary states
    {{1, 1, 4, 4}, 64, false, 0},      // one token
};

// With an ST tile B_V, the phases (profile's timing) run ST tile by tile as
// the whole core does: the same bits as the whole core with that tile.
const Case kTiledCases[] = {
    {{256, 2, 16, 8}, 64, false, 3},   // a partial last tile
    {{130, 3, 8, 6}, 64, false, 1},    // one row per tile
    {{45, 2, 8, 8}, 16, true, 4},      // two tiles, no boundary states
};

TEST(GdnPhaseTest, TiledPhasesInOrderAreTheTiledCoreBitForBit) {
  for (const Case& c : kTiledCases) {
    ExpectPhasesEqualCore<double>(CpuDevice(), c);
    ExpectPhasesEqualCore<float>(CpuDevice(), c);
    ExpectPhasesEqualCore<double>(HostGridDevice(), c);
    ExpectPhasesEqualCore<float>(HostGridDevice(), c);
  }
}

TEST(GdnPhaseTest, CpuPhasesInOrderAreTheCoreBitForBit) {
  for (int threads : {1, 2}) {
    SetKernelThreads(threads);
    for (const Case& c : kCases) {
      ExpectPhasesEqualCore<double>(CpuDevice(), c);
      ExpectPhasesEqualCore<float>(CpuDevice(), c);
    }
  }
  SetKernelThreads(1);
}

TEST(GdnPhaseTest, HostGridPhasesInOrderAreTheCoreBitForBit) {
  for (const Case& c : kCases) {
    ExpectPhasesEqualCore<double>(HostGridDevice(), c);
    ExpectPhasesEqualCore<float>(HostGridDevice(), c);
  }
}

// The CPU phase workspaces are the sizes their headers state.
TEST(GdnPhaseTest, CpuPhaseWorkspaceSizes) {
  const int64_t T = 130, H = 3, Dk = 8, Dv = 6, bs = 64, nb = 3;
  EXPECT_EQ(GdnOpsOf<float>(CpuDevice())->GdnCoreForwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            H * nb * (bs * (1 + 2 * bs + Dk + 2 * Dv) + Dv * Dk));
  EXPECT_EQ(GdnOpsOf<float>(CpuDevice())->GdnCoreBackwardPhaseWorkspaceSize(T, H, Dk, Dv, bs),
            H * nb * (2 * Dv * Dk + bs * (3 + 2 * bs + 4 * Dk + 4 * Dv)));
}

}  // namespace
}  // namespace stateflow::backend

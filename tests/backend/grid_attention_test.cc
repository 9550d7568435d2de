// The host-grid device's attention and RoPE (GridAttentionOps<T, HostExec>:
// grid_kernels/attention.h) against the CPU kernels (float64, < 1e-12), the
// float64 references, central differences of the grid forward, float32; GQA
// groups 1, 2, 4, queries from a prefix (start > 0), more keys than one key
// tile; dk, dv added to (not overwritten). RoPE: the same bits as the CPU
// kernel, its backward the inverse.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/device/host_grid_device.h"
#include "backend/kernels/attention.h"
#include "backend/kernels/rope.h"
#include "tests/backend/kernel_test_util.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

struct AttnShape {
  int64_t s, start, Hq, Hkv, d;
  int64_t k_tile = kAttentionKeyTile;
  int64_t keys() const { return start + s; }
  std::string Name() const {
    std::ostringstream o;
    o << "s=" << s << " start=" << start << " Hq=" << Hq << " Hkv=" << Hkv << " d=" << d
      << " k_tile=" << k_tile;
    return o.str();
  }
};

enum class Impl { kRef, kCpu, kGrid };

template <typename T>
AttentionOps<T>& GridAttention() {
  return *HostGridDevice().attention_ops<T>();
}

// Forward, then (douts = {dO}) backward with dk, dv starting at 0.25:
// outputs {o, lse}, grads {dq, dk - 0.25, dv - 0.25}.
template <typename T>
KernelRun RunAttention(Impl impl, const AttnShape& a, const Buffers& in, const Buffers& douts) {
  const std::vector<T> q = Cast<T>(in[0]), k = Cast<T>(in[1]), v = Cast<T>(in[2]);
  std::vector<T> o(a.s * a.Hq * a.d), lse(a.s * a.Hq);
  if constexpr (std::is_same_v<T, double>) {
    if (impl == Impl::kRef) {
      AttentionForwardRef(o.data(), lse.data(), q.data(), k.data(), v.data(), a.s, a.start,
                          a.Hq, a.Hkv, a.d);
    }
  }
  if (impl == Impl::kCpu) {
    AttentionForward<T>(o.data(), lse.data(), q.data(), k.data(), v.data(), a.s, a.start,
                        a.Hq, a.Hkv, a.d);
  } else if (impl == Impl::kGrid) {
    GridAttention<T>().AttentionForward(o.data(), lse.data(), q.data(), k.data(), v.data(),
                                        a.s, a.start, a.Hq, a.Hkv, a.d, kAttentionQueryTile,
                                        a.k_tile);
  }
  KernelRun r{{ToDouble(o), ToDouble(lse)}, {}};
  if (douts.empty()) return r;
  const std::vector<T> dO = Cast<T>(douts[0]);
  std::vector<T> dq(q.size()), dk(k.size(), T(0.25)), dv(v.size(), T(0.25)), D(a.s * a.Hq);
  if constexpr (std::is_same_v<T, double>) {
    if (impl == Impl::kRef) {
      AttentionBackwardRef(dq.data(), dk.data(), dv.data(), D.data(), dO.data(), o.data(),
                           lse.data(), q.data(), k.data(), v.data(), a.s, a.start, a.Hq,
                           a.Hkv, a.d);
    }
  }
  if (impl == Impl::kCpu) {
    AttentionBackward<T>(dq.data(), dk.data(), dv.data(), D.data(), dO.data(), o.data(),
                         lse.data(), q.data(), k.data(), v.data(), a.s, a.start, a.Hq,
                         a.Hkv, a.d);
  } else if (impl == Impl::kGrid) {
    GridAttention<T>().AttentionBackward(dq.data(), dk.data(), dv.data(), D.data(), dO.data(),
                                         o.data(), lse.data(), q.data(), k.data(), v.data(),
                                         a.s, a.start, a.Hq, a.Hkv, a.d, kAttentionQueryTile,
                                         a.k_tile);
  }
  Buffer dkd = ToDouble(dk), dvd = ToDouble(dv);
  for (double& x : dkd) x -= 0.25;
  for (double& x : dvd) x -= 0.25;
  r.grads = {ToDouble(dq), dkd, dvd};
  return r;
}

Buffers RandomInputs(const AttnShape& a, std::mt19937_64& rng) {
  return {RandomVector(rng, a.s * a.Hq * a.d, -1, 1),
          RandomVector(rng, a.keys() * a.Hkv * a.d, -1, 1),
          RandomVector(rng, a.keys() * a.Hkv * a.d, -1, 1)};
}

class GridAttentionCase : public KernelCase {
 public:
  explicit GridAttentionCase(AttnShape a) : a_(a) {}
  std::string Name() const override { return "grid attention " + a_.Name(); }
  std::vector<std::string> InputNames() const override { return {"q", "k", "v"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override { return RandomInputs(a_, rng); }
  // Outputs {o} only: the backward takes no d(lse) (the layer uses lse only
  // for the backward), so lse is compared in AgainstCpuKernel.
  KernelRun Run(Variant variant, const Buffers& in, const Buffers& douts) const override {
    KernelRun r = variant == Variant::kFast32
                      ? RunAttention<float>(Impl::kGrid, a_, in, douts)
                      : RunAttention<double>(variant == Variant::kRef ? Impl::kRef : Impl::kGrid,
                                             a_, in, douts);
    r.outputs.resize(1);
    return r;
  }
  double Float32Tolerance() const override { return 5e-5; }

 private:
  AttnShape a_;
};

TEST(GridAttention, AgainstReferenceAndFiniteDifferences) {
  CheckKernelCase(GridAttentionCase({5, 0, 2, 2, 4}), 1);
  CheckKernelCase(GridAttentionCase({4, 3, 4, 2, 3}), 2);
  CheckKernelCase(GridAttentionCase({3, 2, 4, 1, 2}), 3);
  CheckKernelCase(GridAttentionCase({6, 3, 2, 1, 3, /*k_tile=*/2}), 4);  // 5 key tiles
}

// Grid vs the CPU kernel at 1e-12, with more keys than one key tile (64).
TEST(GridAttention, AgainstCpuKernel) {
  for (AttnShape a : {AttnShape{70, 0, 2, 1, 16}, AttnShape{40, 100, 4, 2, 8},
                      AttnShape{1, 0, 1, 1, 1}, AttnShape{65, 64, 4, 4, 12},
                      AttnShape{30, 10, 2, 1, 8, /*k_tile=*/7}}) {
    SCOPED_TRACE(a.Name());
    std::mt19937_64 rng(5 + a.s);
    const Buffers in = RandomInputs(a, rng);
    const Buffers douts = {RandomVector(rng, a.s * a.Hq * a.d, -1, 1)};
    const KernelRun grid = RunAttention<double>(Impl::kGrid, a, in, douts);
    const KernelRun cpu = RunAttention<double>(Impl::kCpu, a, in, douts);
    const KernelRun ref = RunAttention<double>(Impl::kRef, a, in, douts);
    const std::vector<std::string> out_names = {"o", "lse"}, grad_names = {"dq", "dk", "dv"};
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(AllClose("vs cpu " + out_names[i], grid.outputs[i], cpu.outputs[i], 1e-12, 1e-12, 1e-12));
      EXPECT_TRUE(AllClose("vs ref " + out_names[i], grid.outputs[i], ref.outputs[i], 1e-12, 1e-12, 1e-12));
    }
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(AllClose("vs cpu " + grad_names[i], grid.grads[i], cpu.grads[i], 1e-12, 1e-12, 1e-12));
      EXPECT_TRUE(AllClose("vs ref " + grad_names[i], grid.grads[i], ref.grads[i], 1e-12, 1e-12, 1e-12));
    }
  }
}

// RoPE: the same bits as the CPU kernel (the same double-precision angles,
// the same products), and the backward undoes the forward.
template <typename T>
void CheckRope() {
  const int64_t N = 9, H = 3, d = 8, pos0 = 37;
  std::mt19937_64 rng(6);
  const std::vector<T> x = Cast<T>(RandomVector(rng, N * H * d, -1, 1));
  std::vector<T> cpu = x, grid = x;
  const double base = 500000.0;  // not the default: the base is passed through
  RopeForward<T>(cpu.data(), N, H, d, pos0, base);
  GridAttention<T>().RopeForward(grid.data(), N, H, d, pos0, base);
  EXPECT_EQ(grid, cpu);
  EXPECT_NE(grid, x);
  RopeBackward<T>(cpu.data(), N, H, d, pos0, base);
  GridAttention<T>().RopeBackward(grid.data(), N, H, d, pos0, base);
  EXPECT_EQ(grid, cpu);
  EXPECT_TRUE(AllClose("rope backward(forward(x))", ToDouble(grid), ToDouble(x), 1e-6, 1e-6, 1e-6));
}

TEST(GridAttention, RopeSameBitsAsCpu) {
  CheckRope<double>();
  CheckRope<float>();
}

}  // namespace
}  // namespace stateflow::backend

// The Mamba-3 entry points of the device seam on the host-grid device
// (GridOps<T, HostExec>: grid_kernels/mamba3_prep.h and mamba3_core.h) against
// the CPU device (backend/kernels/mamba3_prep.cc, mamba3_core.cc) and the
// float64 references:
//   - the core: grid float64 vs the token-by-token reference (1e-12 through
//     the KernelCase harness) and vs the CPU kernel (1e-12) at lengths around
//     T_C, at several block sizes, with absent boundary states and an empty
//     chunk; central differences of the grid forward for every input,
//     including every element of S_in, k_in and v_in, against the grid
//     backward fed d(S_out), d(k_out), d(v_out); workspaces poisoned with
//     NaN, so a pass reading an element no earlier pass wrote would fail;
//     the same bits on one or two threads;
//   - each per-token op pair (gates with the coefficients, the angle scan,
//     the rotation, the D skip with the z gate): the grid vs the CPU loops
//     (the plain float64 arithmetic the layer ran before the seam; 1e-12),
//     float32 at float tolerances, and central differences of the grid
//     forward against the grid backward, every input; accumulated gradients
//     are checked as added to.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/device/device.h"
#include "backend/device/host_grid_device.h"
#include "backend/device/mamba3_ops.h"
#include "backend/kernels/mamba3_core.h"
#include "backend/threading.h"
#include "tests/backend/kernel_test_util.h"
#include "tests/backend/mamba3_test_inputs.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h

// ---- the core ----------------------------------------------------------------

using CoreShape = Mamba3CoreShape;  // mamba3_test_inputs.h
const std::vector<std::string>& kCoreInputs = kMamba3CoreInputs;

Buffers CoreDouts(const CoreShape& s, std::mt19937_64& rng) {
  return {RandomVector(rng, s.T * s.H * s.Dv, -1, 1), RandomVector(rng, s.H * s.Dv * s.Dk, -1, 1),
          RandomVector(rng, s.H * s.Dk, -1, 1), RandomVector(rng, s.H * s.Dv, -1, 1)};
}

enum class Impl { kRef, kCpu, kGrid };

// Which boundary states are absent (nullptr): the carries in (S_in, k_in,
// v_in together: the sequence start), the states out, their gradients in
// (the last chunk), the gradients out (the first chunk).
struct Nulls {
  bool in = false, out = false, dout = false, din = false;
};

template <typename T>
const T* Maybe(const std::vector<T>& x, bool null) {
  return null ? nullptr : x.data();
}
template <typename T>
T* Maybe(std::vector<T>& x, bool null) {
  return null ? nullptr : x.data();
}

// Forward (and backward when douts = {dO, dS_out, dk_out, dv_out} is given)
// through one implementation: outputs {o, S_out, k_out, v_out}, grads {dq,
// dk, dv, da, dgamma, dbeta, dS_in, dk_in, dv_in}; absent ones stay zero. The
// grid's workspaces start as NaN.
template <typename T>
KernelRun RunCore(Impl impl, const CoreShape& s, int64_t block, const Buffers& in,
                  const Buffers& douts, Nulls nu = {}) {
  std::vector<std::vector<T>> x;
  for (const Buffer& b : in) x.push_back(Cast<T>(b));
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk,
                nh = s.T * s.H;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Mamba3Ops<T>& grid = *Mamba3OpsOf<T>(HostGridDevice());
  Mamba3Ops<T>& cpu = *Mamba3OpsOf<T>(CpuDevice());
  std::vector<T> o(nv), S_out(ns), k_out(s.H * s.Dk), v_out(s.H * s.Dv);
  const T *S_in = Maybe(x[kSIn], nu.in), *k_in = Maybe(x[kKIn], nu.in),
          *v_in = Maybe(x[kVIn], nu.in);
  if constexpr (std::is_same_v<T, double>) {
    if (impl == Impl::kRef) {
      Mamba3CoreForwardRef(o.data(), Maybe(S_out, nu.out), Maybe(k_out, nu.out),
                           Maybe(v_out, nu.out), x[kQ].data(), x[kK].data(), x[kV].data(),
                           x[kA].data(), x[kGamma].data(), x[kBeta].data(), S_in, k_in, v_in,
                           s.T, s.H, s.Dk, s.Dv);
    }
  }
  if (impl != Impl::kRef) {
    Mamba3Ops<T>& ops = impl == Impl::kCpu ? cpu : grid;
    std::vector<T> ws(ops.Mamba3CoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), nan);
    ops.Mamba3CoreForward(o.data(), Maybe(S_out, nu.out), Maybe(k_out, nu.out),
                          Maybe(v_out, nu.out), ws.data(), x[kQ].data(), x[kK].data(),
                          x[kV].data(), x[kA].data(), x[kGamma].data(), x[kBeta].data(), S_in,
                          k_in, v_in, s.T, s.H, s.Dk, s.Dv, block);
  }
  KernelRun r{{ToDouble(o), ToDouble(S_out), ToDouble(k_out), ToDouble(v_out)}, {}};
  if (douts.empty()) return r;
  std::vector<std::vector<T>> d;
  for (const Buffer& b : douts) d.push_back(Cast<T>(b));
  std::vector<T> dq(nk), dk(nk), dv(nv), da(nh), dgamma(nh), dbeta(nh), dS_in(ns),
      dk_in(s.H * s.Dk), dv_in(s.H * s.Dv);
  const T *dS_out = Maybe(d[1], nu.dout), *dk_out = Maybe(d[2], nu.dout),
          *dv_out = Maybe(d[3], nu.dout);
  if constexpr (std::is_same_v<T, double>) {
    if (impl == Impl::kRef) {
      std::vector<T> ws(1);
      Mamba3CoreBackwardRef(dq.data(), dk.data(), dv.data(), da.data(), dgamma.data(),
                            dbeta.data(), Maybe(dS_in, nu.din), Maybe(dk_in, nu.din),
                            Maybe(dv_in, nu.din), ws.data(), d[0].data(), dS_out, dk_out,
                            dv_out, x[kQ].data(), x[kK].data(), x[kV].data(), x[kA].data(),
                            x[kGamma].data(), x[kBeta].data(), S_in, k_in, v_in, s.T, s.H,
                            s.Dk, s.Dv);
    }
  }
  if (impl != Impl::kRef) {
    Mamba3Ops<T>& ops = impl == Impl::kCpu ? cpu : grid;
    std::vector<T> ws(ops.Mamba3CoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, block), nan);
    ops.Mamba3CoreBackward(dq.data(), dk.data(), dv.data(), da.data(), dgamma.data(),
                           dbeta.data(), Maybe(dS_in, nu.din), Maybe(dk_in, nu.din),
                           Maybe(dv_in, nu.din), ws.data(), d[0].data(), dS_out, dk_out,
                           dv_out, x[kQ].data(), x[kK].data(), x[kV].data(), x[kA].data(),
                           x[kGamma].data(), x[kBeta].data(), S_in, k_in, v_in, s.T, s.H, s.Dk,
                           s.Dv, block);
  }
  r.grads = {ToDouble(dq),     ToDouble(dk),    ToDouble(dv),    ToDouble(da),   ToDouble(dgamma),
             ToDouble(dbeta),  ToDouble(dS_in), ToDouble(dk_in), ToDouble(dv_in)};
  return r;
}

void ExpectRunsClose(const std::string& what, const KernelRun& a, const KernelRun& b,
                     double atol, double rel) {
  const char* outs[] = {"o", "S_out", "k_out", "v_out"};
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_TRUE(AllClose(what + " " + outs[i], a.outputs[i], b.outputs[i], atol, rel, rel));
  }
  for (size_t i = 0; i < a.grads.size(); ++i) {
    EXPECT_TRUE(AllClose(what + " d" + kCoreInputs[i], a.grads[i], b.grads[i], atol, rel, rel));
  }
}

// The harness with the grid as the "fast" kernel: float64 vs the reference
// at 1e-12, float32 at 1e-4, central differences of the grid forward.
class GridMamba3CoreCase : public KernelCase {
 public:
  GridMamba3CoreCase(CoreShape s, int64_t block) : s_(s), block_(block) {}
  std::string Name() const override {
    return "grid mamba3_core " + s_.Name() + " block=" + std::to_string(block_);
  }
  std::vector<std::string> InputNames() const override { return kCoreInputs; }
  Buffers MakeInputs(std::mt19937_64& rng) const override { return SmallInputs(s_, rng); }
  KernelRun Run(Variant variant, const Buffers& in, const Buffers& douts) const override {
    if (variant == Variant::kFast32) return RunCore<float>(Impl::kGrid, s_, block_, in, douts);
    return RunCore<double>(variant == Variant::kRef ? Impl::kRef : Impl::kGrid, s_, block_, in,
                           douts);
  }
  double Float32Tolerance() const override { return 1e-4; }

 private:
  CoreShape s_;
  int64_t block_;
};

TEST(GridMamba3Core, AgainstReferenceAndFiniteDifferences) {
  CheckKernelCase(GridMamba3CoreCase({5, 2, 3, 4}, 64), 1);
  CheckKernelCase(GridMamba3CoreCase({9, 2, 4, 3}, 4), 2);
  CheckKernelCase(GridMamba3CoreCase({8, 1, 4, 2}, 4), 3);
  CheckKernelCase(GridMamba3CoreCase({7, 2, 2, 3}, 1), 4);
  CheckKernelCase(GridMamba3CoreCase({1, 1, 2, 3}, 64), 5);
}

// Grid vs the CPU kernel (< 1e-12 relative) and vs the recurrence (1e-10,
// as the CPU kernel's own test) at the lengths around T_C = 64.
TEST(GridMamba3Core, AgainstCpuKernelAndRecurrence) {
  for (CoreShape s : {CoreShape{1, 2, 16, 16}, {5, 2, 16, 16}, {63, 2, 16, 16}, {64, 2, 16, 16},
                      {65, 2, 16, 16}, {130, 2, 16, 16}, {200, 2, 8, 12}, {150, 3, 12, 8}}) {
    SCOPED_TRACE(s.Name());
    std::mt19937_64 rng(100 + s.T);
    const Buffers in = LayerLikeInputs(s, rng);
    const Buffers douts = CoreDouts(s, rng);
    const KernelRun grid = RunCore<double>(Impl::kGrid, s, kMamba3BlockSize, in, douts);
    ExpectRunsClose("grid vs cpu", grid,
                    RunCore<double>(Impl::kCpu, s, kMamba3BlockSize, in, douts), 1e-12, 1e-12);
    ExpectRunsClose("grid vs ref", grid,
                    RunCore<double>(Impl::kRef, s, kMamba3BlockSize, in, douts), 1e-13, 1e-10);
  }
}

// Any block size gives the same function.
TEST(GridMamba3Core, EveryBlockSizeAgrees) {
  const CoreShape s{37, 2, 8, 6};
  std::mt19937_64 rng(7);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = CoreDouts(s, rng);
  const KernelRun ref = RunCore<double>(Impl::kRef, s, kMamba3BlockSize, in, douts);
  for (int64_t block : {1, 2, 7, 16, 37, 64}) {
    SCOPED_TRACE("block=" + std::to_string(block));
    const KernelRun grid = RunCore<double>(Impl::kGrid, s, block, in, douts);
    ExpectRunsClose("grid vs ref", grid, ref, 1e-13, 1e-10);
    ExpectRunsClose("grid vs cpu", grid, RunCore<double>(Impl::kCpu, s, block, in, douts),
                    1e-12, 1e-12);
  }
}

// Absent boundary states (the sequence start, the last chunk, the first
// chunk, outputs skipped) and an empty chunk (T = 0: the state handed on).
TEST(GridMamba3Core, NullBoundaryStatesAndEmptyChunk) {
  for (Nulls nu : {Nulls{true, false, false, false}, Nulls{false, true, true, true},
                   Nulls{true, true, true, false}, Nulls{false, false, false, false}}) {
    for (CoreShape s : {CoreShape{70, 2, 4, 5}, CoreShape{0, 2, 4, 5}}) {
      SCOPED_TRACE(s.Name() + " nulls " + std::to_string(nu.in) + std::to_string(nu.out) +
                   std::to_string(nu.dout) + std::to_string(nu.din));
      std::mt19937_64 rng(9);
      const Buffers in = LayerLikeInputs(s, rng);
      const Buffers douts = CoreDouts(s, rng);
      ExpectRunsClose("grid vs cpu", RunCore<double>(Impl::kGrid, s, 32, in, douts, nu),
                      RunCore<double>(Impl::kCpu, s, 32, in, douts, nu), 1e-12, 1e-12);
    }
  }
}

// The grid's passes write disjoint elements per index: one or two kernel
// threads give the same bits.
TEST(GridMamba3Core, SameBitsOnOneOrTwoThreads) {
  const CoreShape s{150, 3, 12, 8};
  std::mt19937_64 rng(11);
  const Buffers in = LayerLikeInputs(s, rng);
  const Buffers douts = CoreDouts(s, rng);
  const int saved = KernelThreads();
  SetKernelThreads(1);
  const KernelRun one = RunCore<double>(Impl::kGrid, s, 64, in, douts);
  SetKernelThreads(2);
  const KernelRun two = RunCore<double>(Impl::kGrid, s, 64, in, douts);
  SetKernelThreads(saved);
  for (size_t i = 0; i < one.outputs.size(); ++i) EXPECT_EQ(one.outputs[i], two.outputs[i]);
  for (size_t i = 0; i < one.grads.size(); ++i) EXPECT_EQ(one.grads[i], two.grads[i]);
}

// ---- the per-token ops ---------------------------------------------------------

// An op pair run on a device's Ops<T>: kRef on the CPU device in float64
// (the loops the layer ran before the seam), kFast64 / kFast32 on the
// host-grid device. Derived::RunOn<T>(ops, inputs, douts) does the work.
template <class Derived>
class OpCase : public KernelCase {
 public:
  KernelRun Run(Variant variant, const Buffers& in, const Buffers& douts) const override {
    const Derived& d = static_cast<const Derived&>(*this);
    switch (variant) {
      case Variant::kRef:
        return d.template RunOn<double>(*Mamba3OpsOf<double>(CpuDevice()), in, douts);
      case Variant::kFast64:
        return d.template RunOn<double>(*Mamba3OpsOf<double>(HostGridDevice()), in, douts);
      case Variant::kFast32:
        return d.template RunOn<float>(*Mamba3OpsOf<float>(HostGridDevice()), in, douts);
    }
    return {};
  }
  double Float32Tolerance() const override { return 1e-4; }
};

// An accumulated gradient starts here and is read back minus it: the ops
// must add, not write.
constexpr double kAccStart = 0.25;

template <typename T>
Buffer Accumulated(const std::vector<T>& x) {
  Buffer out = ToDouble(x);
  for (double& e : out) e -= kAccStart;
  return out;
}

// Gates and coefficients: dt = softplus(dt_raw + dt_bias), lam =
// sigmoid(lam_raw), a = -max(f(A_proj), floor) dt, gamma = lam dt, beta =
// (1 - lam) dt. The floor (0.5 here) is reached by some A_proj < -1.
class GatesCase : public OpCase<GatesCase> {
 public:
  GatesCase(int64_t S, int64_t H) : S_(S), H_(H) {}
  std::string Name() const override {
    return "mamba3 gates S=" + std::to_string(S_) + " H=" + std::to_string(H_);
  }
  std::vector<std::string> InputNames() const override {
    return {"dt_raw", "lam_raw", "A_proj", "dt_bias"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, S_ * H_, -2, 2), RandomVector(rng, S_ * H_, -3, 3),
            RandomVector(rng, S_ * H_, -3, 2), RandomVector(rng, H_, -1, 1)};
  }
  template <typename T>
  KernelRun RunOn(Mamba3Ops<T>& ops, const Buffers& in, const Buffers& douts) const {
    const int64_t n = S_ * H_;
    std::vector<T> dt = Cast<T>(in[0]), lam = Cast<T>(in[1]), A = Cast<T>(in[2]),
                   bias = Cast<T>(in[3]), theta;
    ops.Mamba3GatesForward(dt.data(), lam.data(), theta.data(), bias.data(), S_, H_, 0);
    std::vector<T> a(n), gamma(n), beta(n);
    const T floor = T(0.5);
    ops.Mamba3CoefficientsForward(a.data(), gamma.data(), beta.data(), A.data(), dt.data(),
                                  lam.data(), n, floor);
    KernelRun r{{ToDouble(a), ToDouble(gamma), ToDouble(beta)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> da = Cast<T>(douts[0]), dg = Cast<T>(douts[1]), db = Cast<T>(douts[2]);
    std::vector<T> ddt(n), ddA(n), dtrap(n), dbias(H_, T(kAccStart));
    ops.Mamba3CoefficientsBackward(ddt.data(), da.data(), dg.data(), db.data(), A.data(),
                                   lam.data(), n, floor);
    ops.Mamba3GatesBackward(ddA.data(), dtrap.data(), ddt.data(), dbias.data(), da.data(),
                            dg.data(), db.data(), A.data(), dt.data(), lam.data(), S_, H_, floor);
    r.grads = {ToDouble(ddt), ToDouble(dtrap), ToDouble(ddA), Accumulated(dbias)};
    return r;
  }

 private:
  int64_t S_, H_;
};

// The angle scan of B sequences: theta = pi tanh(theta_raw), phi_t =
// (phi_{t-1} + theta_t dt_t) mod 2 pi; outputs {phi, angle_out}. The angles
// grow from [0.5, 1] and stay away from the wrap (FD steps never cross it).
class AnglesCase : public OpCase<AnglesCase> {
 public:
  AnglesCase(int64_t B, int64_t Ts, int64_t H, int64_t Na) : B_(B), Ts_(Ts), H_(H), Na_(Na) {}
  std::string Name() const override {
    return "mamba3 angles B=" + std::to_string(B_) + " Ts=" + std::to_string(Ts_) +
           " H=" + std::to_string(H_) + " Na=" + std::to_string(Na_);
  }
  std::vector<std::string> InputNames() const override {
    return {"theta_raw", "dt", "angle_in"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    const int64_t S = B_ * Ts_;
    return {RandomVector(rng, S * Na_, 0.1, 1.5), RandomVector(rng, S * H_, 0.05, 0.8),
            RandomVector(rng, B_ * H_ * Na_, 0.5, 1)};
  }
  template <typename T>
  KernelRun RunOn(Mamba3Ops<T>& ops, const Buffers& in, const Buffers& douts) const {
    const int64_t S = B_ * Ts_;
    std::vector<T> theta = Cast<T>(in[0]), dt = Cast<T>(in[1]), angle_in = Cast<T>(in[2]);
    std::vector<T> no_dt, no_lam, no_bias;  // (0, H): the gates of no row
    ops.Mamba3GatesForward(no_dt.data(), no_lam.data(), theta.data(), no_bias.data(), S, 0, Na_);
    std::vector<T> phi(S * H_ * Na_), angle_out(B_ * H_ * Na_);
    ops.Mamba3AnglesForward(phi.data(), angle_out.data(), theta.data(), dt.data(),
                            angle_in.data(), B_, Ts_, H_, Na_);
    KernelRun r{{ToDouble(phi), ToDouble(angle_out)}, {}};
    if (douts.empty()) return r;
    std::vector<T> dphi = Cast<T>(douts[0]), dangle_out = Cast<T>(douts[1]);
    std::vector<T> dtheta(S * Na_), ddt(S * H_, T(kAccStart)), dangle_in(B_ * H_ * Na_);
    ops.Mamba3AnglesBackward(dtheta.data(), ddt.data(), dangle_in.data(), dphi.data(),
                             theta.data(), dt.data(), dangle_out.data(), B_, Ts_, H_, Na_);
    r.grads = {ToDouble(dtheta), Accumulated(ddt), ToDouble(dangle_in)};
    return r;
  }

 private:
  int64_t B_, Ts_, H_, Na_;
};

// k = rot(Bn + B_bias_h, phi), q = rot(Cn + C_bias_h, phi); N > 2 Na, so
// some channels are not turned.
class RotaryCase : public OpCase<RotaryCase> {
 public:
  RotaryCase(int64_t S, int64_t H, int64_t N, int64_t Na) : S_(S), H_(H), N_(N), Na_(Na) {}
  std::string Name() const override {
    return "mamba3 rotary S=" + std::to_string(S_) + " H=" + std::to_string(H_) +
           " N=" + std::to_string(N_) + " Na=" + std::to_string(Na_);
  }
  std::vector<std::string> InputNames() const override {
    return {"Cn", "Bn", "C_bias", "B_bias", "phi"};
  }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    return {RandomVector(rng, S_ * N_, -1, 1), RandomVector(rng, S_ * N_, -1, 1),
            RandomVector(rng, H_ * N_, -1, 1), RandomVector(rng, H_ * N_, -1, 1),
            RandomVector(rng, S_ * H_ * Na_, 0, 6.2)};
  }
  template <typename T>
  KernelRun RunOn(Mamba3Ops<T>& ops, const Buffers& in, const Buffers& douts) const {
    const std::vector<T> Cn = Cast<T>(in[0]), Bn = Cast<T>(in[1]), Cb = Cast<T>(in[2]),
                         Bb = Cast<T>(in[3]), phi = Cast<T>(in[4]);
    std::vector<T> q(S_ * H_ * N_), k(S_ * H_ * N_);
    ops.Mamba3RotaryForward(q.data(), k.data(), Cn.data(), Bn.data(), Cb.data(), Bb.data(),
                            phi.data(), S_, H_, N_, Na_);
    KernelRun r{{ToDouble(q), ToDouble(k)}, {}};
    if (douts.empty()) return r;
    std::vector<T> dq = Cast<T>(douts[0]), dk = Cast<T>(douts[1]);
    std::vector<T> dphi(S_ * H_ * Na_), dCn(S_ * N_), dBn(S_ * N_), dCb(H_ * N_, T(kAccStart)),
        dBb(H_ * N_, T(kAccStart));
    ops.Mamba3RotaryBackward(dphi.data(), dCn.data(), dBn.data(), dCb.data(), dBb.data(),
                             dq.data(), dk.data(), q.data(), k.data(), phi.data(), S_, H_, N_,
                             Na_);
    r.grads = {ToDouble(dCn), ToDouble(dBn), Accumulated(dCb), Accumulated(dBb),
               ToDouble(dphi)};
    return r;
  }

 private:
  int64_t S_, H_, N_, Na_;
};

// gated = (o + D_h xv) silu_z; the backward's dz is d(silu_z).
class GateOutputCase : public OpCase<GateOutputCase> {
 public:
  GateOutputCase(int64_t S, int64_t H, int64_t Dv) : S_(S), H_(H), Dv_(Dv) {}
  std::string Name() const override {
    return "mamba3 gate output S=" + std::to_string(S_) + " H=" + std::to_string(H_) +
           " Dv=" + std::to_string(Dv_);
  }
  std::vector<std::string> InputNames() const override { return {"o", "xv", "silu_z", "D"}; }
  Buffers MakeInputs(std::mt19937_64& rng) const override {
    const int64_t n = S_ * H_ * Dv_;
    return {RandomVector(rng, n, -1, 1), RandomVector(rng, n, -1, 1),
            RandomVector(rng, n, -1, 1), RandomVector(rng, H_, -1, 1)};
  }
  template <typename T>
  KernelRun RunOn(Mamba3Ops<T>& ops, const Buffers& in, const Buffers& douts) const {
    const int64_t n = S_ * H_ * Dv_;
    const std::vector<T> o = Cast<T>(in[0]), xv = Cast<T>(in[1]), sz = Cast<T>(in[2]),
                         D = Cast<T>(in[3]);
    std::vector<T> gated(n);
    ops.Mamba3GateOutputForward(gated.data(), o.data(), xv.data(), sz.data(), D.data(), S_, H_,
                                Dv_);
    KernelRun r{{ToDouble(gated)}, {}};
    if (douts.empty()) return r;
    const std::vector<T> dgated = Cast<T>(douts[0]);
    std::vector<T> dz(n), d_o(n), dxv(n), dD(H_, T(kAccStart));
    ops.Mamba3GateOutputBackward(dz.data(), d_o.data(), dxv.data(), dD.data(), dgated.data(),
                                 o.data(), xv.data(), sz.data(), D.data(), S_, H_, Dv_);
    r.grads = {ToDouble(d_o), ToDouble(dxv), ToDouble(dz), Accumulated(dD)};
    return r;
  }

 private:
  int64_t S_, H_, Dv_;
};

TEST(GridMamba3Ops, GatesAndCoefficients) {
  CheckKernelCase(GatesCase(7, 3), 21);
  CheckKernelCase(GatesCase(1, 1), 22);
}

TEST(GridMamba3Ops, AngleScan) {
  CheckKernelCase(AnglesCase(2, 5, 3, 2), 23);
  CheckKernelCase(AnglesCase(1, 9, 2, 3), 24);
  CheckKernelCase(AnglesCase(3, 1, 1, 1), 25);
}

TEST(GridMamba3Ops, Rotary) {
  CheckKernelCase(RotaryCase(5, 3, 8, 2), 26);
  CheckKernelCase(RotaryCase(3, 2, 4, 2), 27);
}

TEST(GridMamba3Ops, GateOutput) {
  CheckKernelCase(GateOutputCase(6, 3, 4), 28);
}

// The angle scan's absent boundary states (angle_out skipped, d(angle out)
// zeros, d(angle in) skipped) on the grid as on the CPU.
TEST(GridMamba3Ops, AngleScanNullBoundaryStates) {
  const int64_t B = 2, Ts = 4, H = 2, Na = 3, S = B * Ts;
  std::mt19937_64 rng(31);
  const Buffer theta = RandomVector(rng, S * Na, -3, 3), dt = RandomVector(rng, S * H, 0, 1),
               angle_in = RandomVector(rng, B * H * Na, 0, 6), dphi0 = RandomVector(rng, S * H * Na, -1, 1);
  Buffers results[2];
  Mamba3Ops<double>* devices[2] = {Mamba3OpsOf<double>(CpuDevice()), Mamba3OpsOf<double>(HostGridDevice())};
  for (int i = 0; i < 2; ++i) {
    Buffer phi(S * H * Na), dtheta(S * Na), ddt(S * H), dphi = dphi0;
    devices[i]->Mamba3AnglesForward(phi.data(), nullptr, theta.data(), dt.data(),
                                    angle_in.data(), B, Ts, H, Na);
    devices[i]->Mamba3AnglesBackward(dtheta.data(), ddt.data(), nullptr, dphi.data(),
                                     theta.data(), dt.data(), nullptr, B, Ts, H, Na);
    results[i] = {phi, dtheta, ddt};
  }
  for (size_t j = 0; j < results[0].size(); ++j) {
    EXPECT_TRUE(AllClose("grid vs cpu " + std::to_string(j), results[1][j], results[0][j],
                         1e-13, 1e-12, 1e-12));
  }
}

}  // namespace
}  // namespace stateflow::backend

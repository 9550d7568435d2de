// GridOps<bf16, HostExec> (issue 12, "bf16"): every kernel reads its bf16
// inputs as the floats they are, computes in float and rounds once when it
// stores a bf16. So each op, run on bf16 buffers, must give bit for bit
// what GridOps<float> gives on the same values widened -- its bf16 outputs
// rounded to nearest even, its float outputs (statistics, states, parameter
// gradients: precision.h) unchanged. A bf16 local or accumulator anywhere in
// a kernel, or a second rounding, breaks that equality; so does a kernel that
// skips an output. Where an op rounds an intermediate by design (the SwiGLU
// MLP's gate and up are bf16 activations the next GEMM reads; the head's
// d(logits) goes to its GEMMs in bf16), it is checked within bf16's
// tolerance against the float op instead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/device/bf16.h"
#include "backend/device/grid_attention_ops.h"
#include "backend/device/grid_gdn_ops.h"
#include "backend/device/grid_kda_ops.h"
#include "backend/device/grid_mamba3_ops.h"
#include "backend/device/grid_ops.h"
#include "backend/device/host_exec.h"
#include "backend/device/host_grid_device.h"
#include "backend/device/precision.h"

namespace stateflow::backend {
namespace {

static_assert(std::is_same_v<StatOf<float>, float> && std::is_same_v<GradOf<double>, double>);
static_assert(std::is_same_v<StatOf<bf16>, float> && std::is_same_v<GradOf<bf16>, float> &&
              std::is_same_v<MasterOf<bf16>, float> && kHasMaster<bf16> && !kHasMaster<float>);

// One buffer of an op: `stat` buffers are StatOf<T> (float in both runs),
// the others T; values uniform in [lo, hi] (bf16-representable for T
// buffers, so both runs start from the same values). tol > 0: this output
// is computed from a bf16 intermediate the op stores and reads back (by
// design, as a bf16 framework's autograd reads the bf16 gradient it stored),
// so it is compared within tol of its largest magnitude; tol < 0: scratch,
// not compared.
struct Spec {
  std::string name;
  int64_t n;
  bool stat = false;
  double lo = -1, hi = 1;
  double tol = 0;
};
constexpr double kScratch = -1;
// bf16's unit roundoff is 2^-9; a sum of rounded terms stays well inside this.
constexpr double kBf16Tol = 2e-2;

// The buffers of one run at element type T.
template <typename T>
struct Bufs {
  std::map<std::string, std::vector<T>> t;
  std::map<std::string, std::vector<StatOf<T>>> s;
  T* operator()(const std::string& name) { return t.at(name).data(); }
  StatOf<T>* S(const std::string& name) { return s.at(name).data(); }
};

std::uint32_t Bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Fills both runs' buffers with the same values.
void Fill(const std::vector<Spec>& specs, Bufs<bf16>* b, Bufs<float>* f, std::uint32_t seed) {
  std::mt19937 rng(seed);
  for (const Spec& sp : specs) {
    std::uniform_real_distribution<double> u(sp.lo, sp.hi);
    std::vector<float> v(static_cast<size_t>(sp.n));
    for (float& x : v) x = static_cast<float>(u(rng));
    if (sp.stat) {
      b->s[sp.name] = v;
      f->s[sp.name] = v;
    } else {
      std::vector<bf16> h(v.begin(), v.end());
      b->t[sp.name] = h;
      f->t[sp.name] = std::vector<float>(h.begin(), h.end());
    }
  }
}

// Runs `op` on GridOps<bf16> and GridOps<float> and checks every buffer:
// bit for bit (exact) or within `tol` relative to the buffer's largest
// magnitude. Returns how many buffers changed from their inputs (a caller
// asserts the op wrote something).
template <template <typename, typename> class Ops = GridOps, class Op>
void Check(const std::string& what, const std::vector<Spec>& specs, Op op, double tol = 0,
           std::uint32_t seed = 7) {
  SCOPED_TRACE(what);
  Bufs<bf16> b;
  Bufs<float> f;
  Fill(specs, &b, &f, seed);
  const Bufs<float> before = f;
  // Static: the executor is an empty struct, which GCC's -Wmaybe-uninitialized
  // takes for an uninitialized object once the calls are inlined.
  static Ops<bf16, HostExec> ob{HostExec{}};
  static Ops<float, HostExec> of{HostExec{}};
  op(ob, b);
  op(of, f);
  int changed = 0;
  for (const Spec& sp : specs) {
    SCOPED_TRACE(sp.name);
    if (sp.tol < 0) continue;
    const double buffer_tol = std::fmax(tol, sp.tol);
    double scale = 0;
    for (int64_t i = 0; i < sp.n; ++i) {
      const float want = sp.stat ? f.s[sp.name][i] : f.t[sp.name][i];
      scale = std::fmax(scale, std::fabs(static_cast<double>(want)));
    }
    int bad = 0;
    bool differs = false;
    for (int64_t i = 0; i < sp.n && bad < 3; ++i) {
      const float fv = sp.stat ? f.s[sp.name][i] : f.t[sp.name][i];
      const float was = sp.stat ? before.s.at(sp.name)[i] : before.t.at(sp.name)[i];
      differs = differs || Bits(fv) != Bits(was);
      // The float run rounded once, as a bf16 kernel must round.
      const float want = sp.stat ? fv : static_cast<float>(bf16(fv));
      const float got = sp.stat ? b.s[sp.name][i] : static_cast<float>(b.t[sp.name][i]);
      const bool ok = buffer_tol == 0
                          ? Bits(got) == Bits(want)
                          : std::fabs(static_cast<double>(got) - want) <= buffer_tol * scale;
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": bf16 run " << got << ", float run " << want;
      }
    }
    changed += differs;
  }
  EXPECT_GT(changed, 0) << "the op wrote nothing";
}

constexpr int64_t N = 37, C = 24, D = 20, H = 3;

TEST(GridBf16, ElementwiseAndRowOpsRoundOnceBitForBit) {
  Check("Add", {{"y", N * C}, {"x", N * C}},
        [](auto& ops, auto& b) { ops.Add(b("y"), b("x"), N * C); });
  Check("Mul", {{"y", N * C}, {"a", N * C}, {"c", N * C}},
        [](auto& ops, auto& b) { ops.Mul(b("y"), b("a"), b("c"), N * C); });
  Check("Silu", {{"y", N * C}, {"x", N * C, false, -6, 6}, {"dx", N * C}, {"dy", N * C}},
        [](auto& ops, auto& b) {
          ops.SiluForward(b("y"), b("x"), N * C);
          ops.SiluBackward(b("dx"), b("dy"), b("x"), N * C);
        });
  Check("Gelu", {{"y", N * C}, {"x", N * C, false, -6, 6}, {"dx", N * C}, {"dy", N * C}},
        [](auto& ops, auto& b) {
          ops.GeluForward(b("y"), b("x"), N * C);
          ops.GeluBackward(b("dx"), b("dy"), b("x"), N * C);
        });
  Check("LayerNorm",
        {{"y", N * C}, {"mean", N, true}, {"rstd", N, true}, {"x", N * C, false, 2, 6},
         {"w", C}, {"b", C}, {"dx", N * C}, {"dw", C, true}, {"db", C, true}, {"dy", N * C}},
        [](auto& ops, auto& b) {
          ops.LayerNormForward(b("y"), b.S("mean"), b.S("rstd"), b("x"), b("w"), b("b"), N, C,
                               1e-5f);
          ops.LayerNormBackward(b("dx"), b.S("dw"), b.S("db"), b("dy"), b("x"), b("w"),
                                b.S("mean"), b.S("rstd"), N, C);
        });
  Check("RmsNorm",
        {{"y", N * C}, {"rstd", N, true}, {"x", N * C}, {"w", C}, {"dx", N * C},
         {"dw", C, true}, {"dy", N * C}, {"y2", N * C}},
        [](auto& ops, auto& b) {
          ops.RmsNormForward(b("y"), b.S("rstd"), b("x"), b("w"), N, C, 1e-6f);
          ops.RmsNormBackward(b("dx"), b.S("dw"), b("dy"), b("x"), b("w"), b.S("rstd"), N, C);
          ops.RmsNormApply(b("y2"), b("x"), b.S("rstd"), b("w"), N, C);
        });
  Check("L2Norm",
        {{"y", N * H * 8}, {"rn", N * H, true}, {"x", N * H * 8}, {"dx", N * H * 8},
         {"dy", N * H * 8}},
        [](auto& ops, auto& b) {
          ops.L2NormForward(b("y"), b.S("rn"), b("x"), N * H, 8, 0.35f, 1e-6f);
          ops.L2NormBackward(b("dx"), b("dy"), b("x"), b.S("rn"), N * H, 8, 0.35f);
        });
  Check<GridGdnOps>("GdnGate",
        {{"g", N * H}, {"a", N * H, false, -3, 3}, {"A_log", H}, {"dt_bias", H},
         {"da", N * H}, {"dA_log", H, true}, {"ddt_bias", H, true, -1, 1, kBf16Tol},
         {"dg", N * H}},
        [](auto& ops, auto& b) {
          ops.GdnGateForward(b("g"), b("a"), b("A_log"), b("dt_bias"), N, H);
          ops.GdnGateBackward(b("da"), b.S("dA_log"), b.S("ddt_bias"), b("dg"), b("a"),
                              b("A_log"), b("dt_bias"), N, H);
        });
  Check("SigmoidForward", {{"beta", N * H}, {"bin", N * H, false, -4, 4}},
        [](auto& ops, auto& b) { ops.SigmoidForward(b("beta"), b("bin"), N * H); });
  Check("SigmoidBackward", {{"db", N * H}, {"dbeta", N * H}, {"beta", N * H, false, 0.05, 0.95}},
        [](auto& ops, auto& b) { ops.SigmoidBackward(b("db"), b("dbeta"), b("beta"), N * H); });
  Check("ShortConv",
        {{"y", N * C}, {"tail_out", 3 * C}, {"x", N * C}, {"w", C * 4}, {"tail_in", 3 * C},
         {"dx", N * C}, {"dtail_in", 3 * C}, {"dw", C * 4, true}, {"dy", N * C},
         {"dtail_out", 3 * C}},
        [](auto& ops, auto& b) {
          ops.ShortConvForward(b("y"), b("tail_out"), b("x"), b("w"), b("tail_in"), N, C, 4);
          ops.ShortConvBackward(b("dx"), b("dtail_in"), b.S("dw"), b("dy"), b("dtail_out"),
                                b("x"), b("w"), b("tail_in"), N, C, 4);
        });
}

TEST(GridBf16, GemmOpsAccumulateInFloat) {
  // No bias: the product is rounded once. dw, db are fp32 gradients.
  Check("Linear",
        {{"y", N * D}, {"x", N * C}, {"w", D * C}, {"dx", N * C}, {"dw", D * C, true},
         {"db", D, true}, {"dy", N * D}},
        [](auto& ops, auto& b) {
          ops.LinearForward(b("y"), b("x"), b("w"), nullptr, N, C, D);
          ops.LinearBackward(b("dx"), b.S("dw"), b.S("db"), b("dy"), b("x"), b("w"), N, C, D);
        });
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>((i * 7) % 11);
  Check("Embedding", {{"y", N * C}, {"table", 11 * C}, {"dtable", 11 * C, true}, {"dy", N * C}},
        [&](auto& ops, auto& b) {
          ops.EmbeddingForward(b("y"), ids.data(), b("table"), N, C, 11);
          ops.EmbeddingBackward(b.S("dtable"), b("dy"), ids.data(), N, C, 11);
        });
  // The loss, log-sum-exps and per-token losses are float: bit for bit.
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 5) % 29);
  Check("OutputLossForward",
        {{"losses", N, true}, {"lse", N, true}, {"logits", N * 29, true}, {"x", N * C},
         {"w", 29 * C}},
        [&](auto& ops, auto& b) {
          ops.OutputLossForward(b.S("losses"), b.S("lse"), b.S("logits"), b("x"), b("w"),
                                targets.data(), N, C, 29, 10);
        });
}

TEST(GridBf16, MlpAndHeadBackwardWithinBf16Tolerance) {
  // gate, up and h are bf16 activations that the next product reads, and
  // the head's GEMMs read d(logits) in bf16: rounded on purpose, so close
  // to the float op but not its bits.
  constexpr int64_t F = 40;
  Check("SwigluMlp",
        {{"y", N * C}, {"gate", N * F}, {"up", N * F}, {"h", N * F}, {"x", N * C},
         {"wg", F * C}, {"wu", F * C}, {"wd", C * F}, {"dx", N * C}, {"dwg", F * C, true},
         {"dwu", F * C, true}, {"dwd", C * F, true}, {"ws", 2 * N * F, false, -1, 1, kScratch}, {"dy", N * C}},
        [](auto& ops, auto& b) {
          ops.SwigluMlpForward(b("y"), b("gate"), b("up"), b("h"), b("x"), b("wg"), b("wu"),
                               b("wd"), N, C, F);
          ops.SwigluMlpBackward(b("dx"), b.S("dwg"), b.S("dwu"), b.S("dwd"), b("ws"), b("dy"),
                                b("gate"), b("up"), b("x"), b("wg"), b("wu"), b("wd"), N, C,
                                F);
        },
        2e-2);
  std::vector<int32_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = static_cast<int32_t>((i * 5) % 29);
  for (int64_t slice : {10, 29}) {
    Check("OutputLossBackward slice " + std::to_string(slice),
          {{"losses", N, true}, {"lse", N, true}, {"logits", N * slice, true},
           {"dlosses", N, true, 0.5, 1.5}, {"x", N * C}, {"w", 29 * C}, {"dx", N * C},
           {"dw", 29 * C, true}, {"ws", N * slice, false, -1, 1, kScratch}},
          [&](auto& ops, auto& b) {
            ops.OutputLossForward(b.S("losses"), b.S("lse"), b.S("logits"), b("x"), b("w"),
                                  targets.data(), N, C, 29, slice);
            constexpr bool kBf16 =
                std::is_same_v<std::remove_reference_t<decltype(ops)>, GridOps<bf16, HostExec>>;
            ASSERT_EQ(ops.OutputLossBackwardWorkspaceSize(N, 29, slice), kBf16 ? N * slice : 0);
            ops.OutputLossBackward(b("dx"), b.S("dw"), b.S("logits"), b.S("dlosses"),
                                   b.S("lse"), b("x"), b("w"), targets.data(), N, C, 29, slice,
                                   b("ws"));
          },
          2e-2);
  }
}

TEST(GridBf16, Mamba3PrepOpsRoundOnceBitForBit) {
  constexpr int64_t B = 2, Ts = 9, S = B * Ts, Na = 2, Nst = 6, P = 5;
  Check<GridMamba3Ops>("Gates",
        {{"dt", S * H, false, -2, 2}, {"lam", S * H, false, -3, 3}, {"theta", S * Na},
         {"dt_bias", H}},
        [](auto& ops, auto& b) {
          ops.Mamba3GatesForward(b("dt"), b("lam"), b("theta"), b("dt_bias"), S, H, Na);
        });
  Check<GridMamba3Ops>("GatesBackward",
        {{"ddA", S * H}, {"dtrap", S * H}, {"ddt", S * H}, {"ddt_bias", H, true, -1, 1, kBf16Tol},
         {"da", S * H}, {"dgamma", S * H}, {"dbeta", S * H}, {"A_proj", S * H, false, -2, 2},
         {"dt", S * H, false, 0.01, 1}, {"lam", S * H, false, 0.05, 0.95}},
        [](auto& ops, auto& b) {
          ops.Mamba3GatesBackward(b("ddA"), b("dtrap"), b("ddt"), b.S("ddt_bias"), b("da"),
                                  b("dgamma"), b("dbeta"), b("A_proj"), b("dt"), b("lam"), S,
                                  H, 1e-4f);
        });
  Check<GridMamba3Ops>("Angles",
        {{"phi", S * H * Na, true}, {"angle_out", B * H * Na, true}, {"theta", S * Na},
         {"dt", S * H, false, 0.01, 1}, {"angle_in", B * H * Na, true, 0, 6},
         {"dtheta", S * Na}, {"ddt", S * H}, {"dangle_in", B * H * Na, true},
         {"dphi", S * H * Na, true}, {"dangle_out", B * H * Na, true}},
        [](auto& ops, auto& b) {
          ops.Mamba3AnglesForward(b.S("phi"), b.S("angle_out"), b("theta"), b("dt"),
                                  b.S("angle_in"), B, Ts, H, Na);
          ops.Mamba3AnglesBackward(b("dtheta"), b("ddt"), b.S("dangle_in"), b.S("dphi"),
                                   b("theta"), b("dt"), b.S("dangle_out"), B, Ts, H, Na);
        });
  Check<GridMamba3Ops>("Rotary",
        {{"q", S * H * Nst}, {"k", S * H * Nst}, {"Cn", S * Nst}, {"Bn", S * Nst},
         {"C_bias", H * Nst}, {"B_bias", H * Nst}, {"phi", S * H * Na, true, 0, 6},
         {"dphi", S * H * Na, true, -1, 1, kBf16Tol}, {"dCn", S * Nst, false, -1, 1, kBf16Tol},
         {"dBn", S * Nst, false, -1, 1, kBf16Tol}, {"dC_bias", H * Nst, true, -1, 1, kBf16Tol},
         {"dB_bias", H * Nst, true, -1, 1, kBf16Tol}, {"dq", S * H * Nst},
         {"dk", S * H * Nst}},
        [](auto& ops, auto& b) {
          ops.Mamba3RotaryForward(b("q"), b("k"), b("Cn"), b("Bn"), b("C_bias"), b("B_bias"),
                                  b.S("phi"), S, H, Nst, Na);
          ops.Mamba3RotaryBackward(b.S("dphi"), b("dCn"), b("dBn"), b.S("dC_bias"),
                                   b.S("dB_bias"), b("dq"), b("dk"), b("q"), b("k"),
                                   b.S("phi"), S, H, Nst, Na);
        });
  Check<GridMamba3Ops>("Coefficients",
        {{"a", S * H}, {"gamma", S * H}, {"beta", S * H}, {"A_proj", S * H, false, -2, 2},
         {"dt", S * H, false, 0.01, 1}, {"lam", S * H, false, 0.05, 0.95}, {"ddt", S * H},
         {"da", S * H}, {"dgamma", S * H}, {"dbeta", S * H}},
        [](auto& ops, auto& b) {
          ops.Mamba3CoefficientsForward(b("a"), b("gamma"), b("beta"), b("A_proj"), b("dt"),
                                        b("lam"), S * H, 1e-4f);
          ops.Mamba3CoefficientsBackward(b("ddt"), b("da"), b("dgamma"), b("dbeta"),
                                         b("A_proj"), b("lam"), S * H, 1e-4f);
        });
  Check<GridMamba3Ops>("GateOutput",
        {{"gated", S * H * P}, {"o", S * H * P}, {"xv", S * H * P}, {"silu_z", S * H * P},
         {"D", H}, {"dz", S * H * P}, {"d_o", S * H * P}, {"dxv", S * H * P},
         {"dD", H, true}, {"dgated", S * H * P}},
        [](auto& ops, auto& b) {
          ops.Mamba3GateOutputForward(b("gated"), b("o"), b("xv"), b("silu_z"), b("D"), S, H,
                                      P);
          ops.Mamba3GateOutputBackward(b("dz"), b("d_o"), b("dxv"), b.S("dD"), b("dgated"),
                                       b("o"), b("xv"), b("silu_z"), b("D"), S, H, P);
        });
}

// The cores: the float passes on widened copies in the workspace, so bit for
// bit the float core's results rounded; states and their gradients float.
TEST(GridBf16, GdnCoreIsTheFloatCoreOnWidenedInputs) {
  for (int64_t T : {64, 77}) {
    constexpr int64_t Hc = 2, Dk = 8, Dv = 6, bs = 16;
    GridGdnOps<bf16, HostExec> probe{HostExec{}};
    GridGdnOps<float, HostExec> probe_f{HostExec{}};
    const int64_t wf = probe.GdnCoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs);
    const int64_t wb = probe.GdnCoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs);
    EXPECT_EQ(wf - probe_f.GdnCoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs),
              T * Hc * (2 * Dk + 2 * Dv + 2));
    EXPECT_EQ(wb - probe_f.GdnCoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs),
              T * Hc * (4 * Dk + 3 * Dv + 4));
    const int64_t n = T * Hc;
    const std::vector<Spec> specs = {
        {"o", n * Dv},          {"S_out", Hc * Dv * Dk, true},
        {"q", n * Dk, false, -0.3, 0.3}, {"k", n * Dk, false, -0.3, 0.3},
        {"v", n * Dv},          {"g", n, false, -0.2, 0},
        {"beta", n, false, 0.1, 0.9}, {"S_in", Hc * Dv * Dk, true},
        {"dq", n * Dk},         {"dk", n * Dk},
        {"dv", n * Dv},         {"dg", n},
        {"dbeta", n},           {"dS_in", Hc * Dv * Dk, true},
        {"dO", n * Dv},         {"dS_out", Hc * Dv * Dk, true}};
    for (bool overlapped : {false, true}) {
      Check<GridGdnOps>("GDN core T=" + std::to_string(T) + (overlapped ? " overlapped" : ""), specs,
            [&](auto& ops, auto& b) {
              // Each run sizes its own workspace (the float run's is smaller).
              const int64_t w = std::max(ops.GdnCoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs),
                                         ops.GdnCoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs));
              std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
              if (overlapped) {
                ops.GdnCoreForwardOverlapped(b("o"), b.S("S_out"), ws.data(), b("q"), b("k"),
                                             b("v"), b("g"), b("beta"), b.S("S_in"), T, Hc, Dk,
                                             Dv, bs, 2);
                ops.GdnCoreBackwardOverlapped(b("dq"), b("dk"), b("dv"), b("dg"), b("dbeta"),
                                              b.S("dS_in"), ws.data(), b("dO"), b.S("dS_out"),
                                              b("q"), b("k"), b("v"), b("g"), b("beta"),
                                              b.S("S_in"), T, Hc, Dk, Dv, bs, 2);
              } else {
                ops.GdnCoreForward(b("o"), b.S("S_out"), ws.data(), b("q"), b("k"), b("v"),
                                   b("g"), b("beta"), b.S("S_in"), T, Hc, Dk, Dv, bs);
                ops.GdnCoreBackward(b("dq"), b("dk"), b("dv"), b("dg"), b("dbeta"),
                                    b.S("dS_in"), ws.data(), b("dO"), b.S("dS_out"), b("q"),
                                    b("k"), b("v"), b("g"), b("beta"), b.S("S_in"), T, Hc, Dk,
                                    Dv, bs);
              }
            });
    }
    Check<GridGdnOps>("GDN core phases T=" + std::to_string(T), specs, [&](auto& ops, auto& b) {
      const int64_t w = std::max(ops.GdnCoreForwardPhaseWorkspaceSize(T, Hc, Dk, Dv, bs),
                                 ops.GdnCoreBackwardPhaseWorkspaceSize(T, Hc, Dk, Dv, bs));
      std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
      for (CorePhase p : {CorePhase::kPre, CorePhase::kST, CorePhase::kOut}) {
        ops.GdnCoreForwardPhase(p, b("o"), b.S("S_out"), ws.data(), b("q"), b("k"), b("v"),
                                b("g"), b("beta"), b.S("S_in"), T, Hc, Dk, Dv, bs);
      }
      for (CorePhase p : {CorePhase::kPre, CorePhase::kST, CorePhase::kOut}) {
        ops.GdnCoreBackwardPhase(p, b("dq"), b("dk"), b("dv"), b("dg"), b("dbeta"),
                                 b.S("dS_in"), ws.data(), b("dO"), b.S("dS_out"), b("q"),
                                 b("k"), b("v"), b("g"), b("beta"), b.S("S_in"), T, Hc, Dk, Dv,
                                 bs);
      }
    });
  }
}

// KDA: GDN's core with the decay per key channel (g is (T, H, Dk)).
TEST(GridBf16, KdaCoreIsTheFloatCoreOnWidenedInputs) {
  for (int64_t T : {64, 77}) {
    constexpr int64_t Hc = 2, Dk = 8, Dv = 6, bs = 16;
    GridKdaOps<bf16, HostExec> probe{HostExec{}};
    GridKdaOps<float, HostExec> probe_f{HostExec{}};
    const int64_t wf = probe.KdaCoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs);
    const int64_t wb = probe.KdaCoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs);
    EXPECT_EQ(wf - probe_f.KdaCoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs),
              T * Hc * (3 * Dk + 2 * Dv + 1));
    EXPECT_EQ(wb - probe_f.KdaCoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs),
              T * Hc * (6 * Dk + 3 * Dv + 2));
    const int64_t n = T * Hc;
    const std::vector<Spec> specs = {
        {"o", n * Dv},          {"S_out", Hc * Dv * Dk, true},
        {"q", n * Dk, false, -0.3, 0.3}, {"k", n * Dk, false, -0.3, 0.3},
        {"v", n * Dv},          {"g", n * Dk, false, -0.2, 0},
        {"beta", n, false, 0.1, 0.9}, {"S_in", Hc * Dv * Dk, true},
        {"dq", n * Dk},         {"dk", n * Dk},
        {"dv", n * Dv},         {"dg", n * Dk},
        {"dbeta", n},           {"dS_in", Hc * Dv * Dk, true},
        {"dO", n * Dv},         {"dS_out", Hc * Dv * Dk, true}};
    for (bool overlapped : {false, true}) {
      Check<GridKdaOps>("KDA core T=" + std::to_string(T) + (overlapped ? " overlapped" : ""), specs,
            [&](auto& ops, auto& b) {
              const int64_t w = std::max(ops.KdaCoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs),
                                         ops.KdaCoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs));
              std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
              if (overlapped) {
                ops.KdaCoreForwardOverlapped(b("o"), b.S("S_out"), ws.data(), b("q"), b("k"),
                                             b("v"), b("g"), b("beta"), b.S("S_in"), T, Hc, Dk,
                                             Dv, bs, 2);
                ops.KdaCoreBackwardOverlapped(b("dq"), b("dk"), b("dv"), b("dg"), b("dbeta"),
                                              b.S("dS_in"), ws.data(), b("dO"), b.S("dS_out"),
                                              b("q"), b("k"), b("v"), b("g"), b("beta"),
                                              b.S("S_in"), T, Hc, Dk, Dv, bs, 2);
              } else {
                ops.KdaCoreForward(b("o"), b.S("S_out"), ws.data(), b("q"), b("k"), b("v"),
                                   b("g"), b("beta"), b.S("S_in"), T, Hc, Dk, Dv, bs);
                ops.KdaCoreBackward(b("dq"), b("dk"), b("dv"), b("dg"), b("dbeta"),
                                    b.S("dS_in"), ws.data(), b("dO"), b.S("dS_out"), b("q"),
                                    b("k"), b("v"), b("g"), b("beta"), b.S("S_in"), T, Hc, Dk,
                                    Dv, bs);
              }
            });
    }
    Check<GridKdaOps>("KDA core phases T=" + std::to_string(T), specs, [&](auto& ops, auto& b) {
      const int64_t w = std::max(ops.KdaCoreForwardPhaseWorkspaceSize(T, Hc, Dk, Dv, bs),
                                 ops.KdaCoreBackwardPhaseWorkspaceSize(T, Hc, Dk, Dv, bs));
      std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
      for (CorePhase p : {CorePhase::kPre, CorePhase::kST, CorePhase::kOut}) {
        ops.KdaCoreForwardPhase(p, b("o"), b.S("S_out"), ws.data(), b("q"), b("k"), b("v"),
                                b("g"), b("beta"), b.S("S_in"), T, Hc, Dk, Dv, bs);
      }
      for (CorePhase p : {CorePhase::kPre, CorePhase::kST, CorePhase::kOut}) {
        ops.KdaCoreBackwardPhase(p, b("dq"), b("dk"), b("dv"), b("dg"), b("dbeta"),
                                 b.S("dS_in"), ws.data(), b("dO"), b.S("dS_out"), b("q"),
                                 b("k"), b("v"), b("g"), b("beta"), b.S("S_in"), T, Hc, Dk, Dv,
                                 bs);
      }
    });
  }
}

TEST(GridBf16, Mamba3CoreIsTheFloatCoreOnWidenedInputs) {
  constexpr int64_t T = 75, Hc = 2, Dk = 6, Dv = 5, bs = 16, n = T * Hc;
  const std::vector<Spec> specs = {
      {"o", n * Dv},           {"S_out", Hc * Dv * Dk, true}, {"k_out", Hc * Dk},
      {"v_out", Hc * Dv},      {"q", n * Dk},                 {"k", n * Dk},
      {"v", n * Dv},           {"a", n, false, -0.3, -0.01},  {"gamma", n, false, 0, 0.5},
      {"beta", n, false, 0, 0.5}, {"S_in", Hc * Dv * Dk, true}, {"k_in", Hc * Dk},
      {"v_in", Hc * Dv},       {"dq", n * Dk},                {"dk", n * Dk},
      {"dv", n * Dv},          {"da", n},                     {"dgamma", n},
      {"dbeta", n},            {"dS_in", Hc * Dv * Dk, true}, {"dk_in", Hc * Dk},
      {"dv_in", Hc * Dv},      {"dO", n * Dv},                {"dS_out", Hc * Dv * Dk, true},
      {"dk_out", Hc * Dk},     {"dv_out", Hc * Dv}};
  Check<GridMamba3Ops>("Mamba-3 core overlapped", specs, [&](auto& ops, auto& b) {
    const int64_t w = std::max(ops.Mamba3CoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs),
                               ops.Mamba3CoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs));
    std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
    ops.Mamba3CoreForwardOverlapped(b("o"), b.S("S_out"), b("k_out"), b("v_out"), ws.data(),
                                    b("q"), b("k"), b("v"), b("a"), b("gamma"), b("beta"),
                                    b.S("S_in"), b("k_in"), b("v_in"), T, Hc, Dk, Dv, bs);
    ops.Mamba3CoreBackwardOverlapped(b("dq"), b("dk"), b("dv"), b("da"), b("dgamma"),
                                     b("dbeta"), b.S("dS_in"), b("dk_in"), b("dv_in"), ws.data(),
                                     b("dO"), b.S("dS_out"), b("dk_out"), b("dv_out"), b("q"),
                                     b("k"), b("v"), b("a"), b("gamma"), b("beta"), b.S("S_in"),
                                     b("k_in"), b("v_in"), T, Hc, Dk, Dv, bs);
  });
  Check<GridMamba3Ops>("Mamba-3 core phases", specs, [&](auto& ops, auto& b) {
    const int64_t w = std::max(ops.Mamba3CoreForwardPhaseWorkspaceSize(T, Hc, Dk, Dv, bs),
                               ops.Mamba3CoreBackwardPhaseWorkspaceSize(T, Hc, Dk, Dv, bs));
    std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
    for (CorePhase p : {CorePhase::kPre, CorePhase::kST, CorePhase::kOut}) {
      ops.Mamba3CoreForwardPhase(p, b("o"), b.S("S_out"), b("k_out"), b("v_out"), ws.data(),
                                 b("q"), b("k"), b("v"), b("a"), b("gamma"), b("beta"),
                                 b.S("S_in"), b("k_in"), b("v_in"), T, Hc, Dk, Dv, bs);
    }
    for (CorePhase p : {CorePhase::kPre, CorePhase::kST, CorePhase::kOut}) {
      ops.Mamba3CoreBackwardPhase(p, b("dq"), b("dk"), b("dv"), b("da"), b("dgamma"),
                                  b("dbeta"), b.S("dS_in"), b("dk_in"), b("dv_in"), ws.data(),
                                  b("dO"), b.S("dS_out"), b("dk_out"), b("dv_out"), b("q"),
                                  b("k"), b("v"), b("a"), b("gamma"), b("beta"), b.S("S_in"),
                                  b("k_in"), b("v_in"), T, Hc, Dk, Dv, bs);
    }
  });
  Check<GridMamba3Ops>("Mamba-3 core", specs, [&](auto& ops, auto& b) {
    const int64_t w = std::max(ops.Mamba3CoreForwardWorkspaceSize(T, Hc, Dk, Dv, bs),
                               ops.Mamba3CoreBackwardWorkspaceSize(T, Hc, Dk, Dv, bs));
    std::vector<StatOf<std::remove_pointer_t<decltype(b("o"))>>> ws(w);
    ops.Mamba3CoreForward(b("o"), b.S("S_out"), b("k_out"), b("v_out"), ws.data(), b("q"),
                          b("k"), b("v"), b("a"), b("gamma"), b("beta"), b.S("S_in"),
                          b("k_in"), b("v_in"), T, Hc, Dk, Dv, bs);
    ops.Mamba3CoreBackward(b("dq"), b("dk"), b("dv"), b("da"), b("dgamma"), b("dbeta"),
                           b.S("dS_in"), b("dk_in"), b("dv_in"), ws.data(), b("dO"),
                           b.S("dS_out"), b("dk_out"), b("dv_out"), b("q"), b("k"), b("v"),
                           b("a"), b("gamma"), b("beta"), b.S("S_in"), b("k_in"), b("v_in"), T,
                           Hc, Dk, Dv, bs);
  });
}

// Attention keeps each row's running sums (o; dq) in float locals and
// stores them once: bit for bit the float kernels' rounded results; the
// log-sum-exps, D and the K/V gradient accumulator (dk, dv) are float. Grouped queries (Hq = 4, Hkv = 2), a
// prefix of earlier keys (start = 5), key tiles of 4.
TEST(GridBf16, AttentionRoundsOnceBitForBit) {
  constexpr int64_t s = 9, start = 5, Hq = 4, Hkv = 2, d = 8, keys = start + s;
  const auto run_attention = [](auto& ops, auto& b) {
    using T = std::remove_pointer_t<decltype(b("o"))>;
    GridAttentionOps<T, HostExec> attn{HostExec{}};
    attn.AttentionForward(b("o"), b.S("lse"), b("q"), b("k"), b("v"), s, start, Hq, Hkv, d, 4,
                          4);
    (void)ops;
  };
  const std::vector<Spec> fwd = {{"o", s * Hq * d}, {"lse", s * Hq, true},
                                 {"q", s * Hq * d}, {"k", keys * Hkv * d},
                                 {"v", keys * Hkv * d}};
  Check("AttentionForward", fwd, run_attention);
  Check("AttentionBackward",
        {{"dq", s * Hq * d}, {"dk", keys * Hkv * d, true}, {"dv", keys * Hkv * d, true},
         {"D", s * Hq, true}, {"dO", s * Hq * d}, {"o", s * Hq * d},
         {"lse", s * Hq, true, 1, 3}, {"q", s * Hq * d}, {"k", keys * Hkv * d},
         {"v", keys * Hkv * d}},
        [](auto& ops, auto& b) {
          using T = std::remove_pointer_t<decltype(b("o"))>;
          GridAttentionOps<T, HostExec> attn{HostExec{}};
          attn.AttentionBackward(b("dq"), b.S("dk"), b.S("dv"), b.S("D"), b("dO"), b("o"),
                                 b.S("lse"), b("q"), b("k"), b("v"), s, start, Hq, Hkv, d, 4,
                                 4);
          (void)ops;
        });
  Check("Rope", {{"x", s * Hq * d}, {"dx", s * Hq * d}}, [](auto& ops, auto& b) {
    using T = std::remove_pointer_t<decltype(b("x"))>;
    GridAttentionOps<T, HostExec> attn{HostExec{}};
    attn.RopeForward(b("x"), s, Hq, d, start, 10000.0);
    attn.RopeBackward(b("dx"), s, Hq, d, start, 10000.0);
    (void)ops;
  });
}

TEST(GridBf16, HostGridHasBf16AndTheCpuDoesNot) {
  EXPECT_TRUE(HostGridDevice().has_bf16());
  EXPECT_FALSE(CpuDevice().has_bf16());
  EXPECT_NE(HostGridDevice().attention_ops<bf16>(), nullptr);
  // Widen is exact; Narrow rounds to nearest even (ties to even).
  Ops<bf16>& ops = HostGridDevice().ops<bf16>();
  std::vector<bf16> h = {bf16(1.0f), bf16(-2.5f)};
  std::vector<float> f(2);
  ops.Widen(f.data(), h.data(), 2);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.5f);
  f = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256};  // ties: to 1, and up to 1 + 4/256
  ops.Narrow(h.data(), f.data(), 2);
  EXPECT_EQ(static_cast<float>(h[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(h[1]), 1.0f + 4.0f / 256);
}

}  // namespace
}  // namespace stateflow::backend

// The Mamba-3 layer: central-difference gradient checks (float64) of the
// input, every element of the four boundary-state tensors in (angle, S, k, v;
// the objective weighs all four out) and every parameter (sampled elements of
// the big ones), in both recompute modes and at batch 1 and 2; a sequence cut
// into N chunks equals one run (N = 1..4, chunk lengths not multiples of
// T_C, batch 1 and 3); batch 3 equals three batch-1 runs; recompute full
// bit-identical to none; the parameter count equals the cost model's; what
// the forward saves; errors for misuse.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/layers/mamba3_layer.h"
#include "backend/threading.h"
#include "models/cost_model.h"
#include "models/layer_formulas.h"
#include "models/model.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::backend {
namespace {

using models::Recompute;
using testing::FromVector;
using testing::RelError;
using testing::ToVector;
using testing::Uniform;

constexpr BufferClass kWs = BufferClass::kWorkspace;
constexpr BufferClass kBs = BufferClass::kBoundaryStates;

// Hidden 16, 2 heads of P = 6, N = 8 (2 rotary angles: channels 0..3 turn,
// 4..7 do not), MLP 24.
Mamba3LayerDims SmallDims(int64_t block_size) {
  Mamba3LayerDims d;
  d.C = 16, d.H = 2, d.Dp = 6, d.Ds = 8, d.F = 24;
  d.Na = Mamba3RopeAngles(d.Ds);
  d.block_size = block_size;
  return d;
}

template <typename T>
void RandomizeParams(Mamba3Layer<T>* m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Param<T>& p : m->params()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    const double lo = norm ? 0.5 : -0.5, hi = norm ? 1.5 : 0.5;
    testing::Assign(&p.value, Uniform(rng, p.value.numel(), lo, hi));
  }
}

// The four parts of a boundary state (or of the objective's weights on one).
struct StateValues {
  std::vector<double> angle, S, k, v;
};

StateValues RandomState(const Mamba3LayerDims& d, int64_t B, std::mt19937_64& rng,
                        bool angles_in_range) {
  StateValues s;
  // Angles away from 0 and 2 pi, so that no central difference crosses the
  // mod 2 pi of the first token.
  s.angle = angles_in_range ? Uniform(rng, B * d.H * d.Na, 0.5, 5.5)
                            : Uniform(rng, B * d.H * d.Na, -1, 1);
  s.S = Uniform(rng, B * d.H * d.Dp * d.Ds, -0.5, 0.5);
  s.k = Uniform(rng, B * d.HDs(), -1, 1);
  s.v = Uniform(rng, B * d.HDp(), -1, 1);
  return s;
}

template <typename T>
Mamba3State<T> MakeState(TrackingAllocator& alloc, const Mamba3LayerDims& d,
                         int64_t B, const StateValues& v) {
  Mamba3State<T> s;
  s.angle = FromVector<T>(alloc, kBs, {B, d.H, d.Na}, v.angle);
  s.S = FromVector<T>(alloc, kBs, {B, d.H, d.Dp, d.Ds}, v.S);
  s.k = FromVector<T>(alloc, kBs, {B, d.H, d.Ds}, v.k);
  s.v = FromVector<T>(alloc, kBs, {B, d.H, d.Dp}, v.v);
  return s;
}

template <typename T>
StateValues ToValues(const Mamba3State<T>& s) {
  return {ToVector(s.angle), ToVector(s.S), ToVector(s.k), ToVector(s.v)};
}

struct ChunkInputs {
  int64_t B = 1;
  std::vector<double> x;   // (B S, C)
  StateValues state;       // in
  std::vector<double> ry;  // objective weights on y
  StateValues rstate;      // and on the state out
};

ChunkInputs MakeInputs(const Mamba3LayerDims& d, int64_t B, int64_t S,
                       std::mt19937_64& rng) {
  ChunkInputs in;
  in.B = B;
  in.x = Uniform(rng, B * S * d.C, -1, 1);
  in.state = RandomState(d, B, rng, true);
  in.ry = Uniform(rng, B * S * d.C, -1, 1);
  in.rstate = RandomState(d, B, rng, false);
  return in;
}

struct LayerRun {
  std::vector<double> y, dx;
  StateValues state_out, dstate_in;
  std::vector<std::vector<double>> dparams;
};

double Dot(const std::vector<double>& r, const std::vector<double>& v) {
  double s = 0;
  for (size_t i = 0; i < r.size(); ++i) s += r[i] * v[i];
  return s;
}

// L = <ry, y> + <rstate, state_out> through a forward only.
template <typename T>
double ForwardObjective(Mamba3Layer<T>* m, TrackingAllocator& alloc,
                        const ChunkInputs& in, Recompute mode) {
  const Mamba3LayerDims& d = m->dims();
  const int64_t rows = static_cast<int64_t>(in.x.size()) / d.C;
  Tensor<T> x = FromVector<T>(alloc, kWs, {rows, d.C}, in.x);
  Mamba3State<T> state_in = MakeState<T>(alloc, d, in.B, in.state);
  Tensor<T> y;
  Mamba3State<T> out;
  Mamba3LayerSaved<T> saved;
  const Status st = m->Forward(&y, &out, &saved, x, in.B, state_in, mode);
  EXPECT_TRUE(st.ok()) << st.message();
  const StateValues o = ToValues(out);
  return Dot(in.ry, ToVector(y)) + Dot(in.rstate.angle, o.angle) +
         Dot(in.rstate.S, o.S) + Dot(in.rstate.k, o.k) + Dot(in.rstate.v, o.v);
}

// Forward and backward with dy = ry and d(state out) = rstate (or nullptr).
template <typename T>
LayerRun ForwardBackward(Mamba3Layer<T>* m, TrackingAllocator& alloc,
                         const ChunkInputs& in, Recompute mode,
                         bool with_dstate_out = true) {
  const Mamba3LayerDims& d = m->dims();
  const int64_t rows = static_cast<int64_t>(in.x.size()) / d.C;
  Tensor<T> x = FromVector<T>(alloc, kWs, {rows, d.C}, in.x);
  Mamba3State<T> state_in = MakeState<T>(alloc, d, in.B, in.state);
  Mamba3State<T> dstate_out = MakeState<T>(alloc, d, in.B, in.rstate);
  Tensor<T> dy = FromVector<T>(alloc, kWs, {rows, d.C}, in.ry);
  Tensor<T> y, dx;
  Mamba3State<T> state_out, dstate_in;
  Mamba3LayerSaved<T> saved;
  Status st = m->Forward(&y, &state_out, &saved, x, in.B, state_in, mode);
  EXPECT_TRUE(st.ok()) << st.message();
  st = m->Backward(&dx, &dstate_in, &saved, dy, in.B,
                   with_dstate_out ? &dstate_out : nullptr, state_in);
  EXPECT_TRUE(st.ok()) << st.message();
  LayerRun r{ToVector(y), ToVector(dx), ToValues(state_out), ToValues(dstate_in), {}};
  for (Param<T>& p : m->params()) r.dparams.push_back(ToVector(p.grad));
  return r;
}

std::vector<double> CentralDiff(const std::function<double()>& f,
                                std::vector<double>* values,
                                const std::vector<int64_t>& indices, double h) {
  std::vector<double> out;
  for (int64_t i : indices) {
    const double saved = (*values)[i];
    (*values)[i] = saved + h;
    const double up = f();
    (*values)[i] = saved - h;
    const double down = f();
    (*values)[i] = saved;
    out.push_back((up - down) / (2 * h));
  }
  return out;
}

// Up to `k` indices spread over [0, n), always the first and last.
std::vector<int64_t> SampleIndices(int64_t n, int64_t k, std::mt19937_64& rng) {
  std::vector<int64_t> idx;
  if (n <= k) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  idx = {0, n - 1};
  std::uniform_int_distribution<int64_t> dist(1, n - 2);
  while (static_cast<int64_t>(idx.size()) < k) idx.push_back(dist(rng));
  return idx;
}

::testing::AssertionResult MatchesDiff(const std::string& what,
                                       const std::vector<double>& analytic,
                                       const std::vector<int64_t>& indices,
                                       const std::vector<double>& numeric) {
  for (size_t j = 0; j < indices.size(); ++j) {
    const double a = analytic[indices[j]], n = numeric[j];
    if (!(std::abs(a - n) <= 1e-7 + 1e-6 * std::abs(n))) {
      return ::testing::AssertionFailure()
             << what << "[" << indices[j] << "]: backward " << a
             << ", central difference " << n;
    }
  }
  return ::testing::AssertionSuccess();
}

struct GradCase {
  int64_t B, S, block_size;
  Recompute mode;
};

void CheckGradients(const GradCase& c) {
  SCOPED_TRACE("B=" + std::to_string(c.B) + " S=" + std::to_string(c.S) + " T_C=" +
               std::to_string(c.block_size) + " recompute " +
               std::string(models::RecomputeName(c.mode)));
  const Mamba3LayerDims d = SmallDims(c.block_size);
  TrackingAllocator alloc(0);
  auto m = Mamba3Layer<double>::Make(alloc, d, /*layer=*/2, /*num_layers=*/3, 7);
  ASSERT_TRUE(m.ok()) << m.status().message();
  RandomizeParams(&*m, 11);
  std::mt19937_64 rng(13 + c.S);
  ChunkInputs in = MakeInputs(d, c.B, c.S, rng);
  const LayerRun run = ForwardBackward(&*m, alloc, in, c.mode);
  auto f = [&] { return ForwardObjective(&*m, alloc, in, c.mode); };
  const double h = 1e-6;
  const struct {
    const char* name;
    std::vector<double>* values;
    const std::vector<double>* grad;
  } inputs[] = {{"x", &in.x, &run.dx},
                {"angle_in", &in.state.angle, &run.dstate_in.angle},
                {"S_in", &in.state.S, &run.dstate_in.S},
                {"k_in", &in.state.k, &run.dstate_in.k},
                {"v_in", &in.state.v, &run.dstate_in.v}};
  for (const auto& input : inputs) {
    // Every element, except 256 sampled ones of a long chunk's input.
    const std::vector<int64_t> idx =
        SampleIndices(static_cast<int64_t>(input.values->size()), 256, rng);
    EXPECT_TRUE(MatchesDiff(input.name, *input.grad, idx,
                            CentralDiff(f, input.values, idx, h)));
  }
  for (int id = 0; id < Mamba3Layer<double>::kNumParams; ++id) {
    Param<double>& p = m->param(static_cast<Mamba3Layer<double>::ParamId>(id));
    std::vector<double> values = ToVector(p.value);
    const std::vector<int64_t> idx = SampleIndices(p.value.numel(), 12, rng);
    auto fp = [&] {
      testing::Assign(&p.value, values);
      return f();
    };
    EXPECT_TRUE(MatchesDiff(p.name, run.dparams[id], idx, CentralDiff(fp, &values, idx, h)));
    testing::Assign(&p.value, values);
  }
}

// Several kernel blocks with a partial last one, one and two tokens, the
// default T_C with a partial block; two sequences.
TEST(Mamba3LayerTest, BackwardMatchesCentralDifferences) {
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    CheckGradients({1, 11, 4, mode});
    CheckGradients({1, 1, 4, mode});
    CheckGradients({2, 2, 4, mode});
    CheckGradients({1, 70, 64, mode});
    CheckGradients({2, 9, 4, mode});
  }
}

// A sequence of B sequences cut into pieces, each piece a Forward from the
// previous piece's state; the backward from the last piece to the first with
// d(state in) handed back. Rows of x are sequence-major within each piece.
struct ChunkedRun {
  std::vector<double> y, dx;  // (B, S_total, C) sequence-major
  StateValues state_out, dstate_in;
  std::vector<std::vector<double>> dparams;
};

// Rows [t0, t1) of every sequence of a (B, S, C) buffer.
std::vector<double> Slice(const std::vector<double>& x, int64_t B, int64_t S,
                          int64_t C, int64_t t0, int64_t t1) {
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), x.begin() + (b * S + t0) * C, x.begin() + (b * S + t1) * C);
  }
  return out;
}
void Unslice(std::vector<double>* x, const std::vector<double>& piece, int64_t B,
             int64_t S, int64_t C, int64_t t0, int64_t t1) {
  const int64_t L = t1 - t0;
  for (int64_t b = 0; b < B; ++b) {
    std::copy(piece.begin() + b * L * C, piece.begin() + (b + 1) * L * C,
              x->begin() + (b * S + t0) * C);
  }
}

ChunkedRun RunChunked(const Mamba3LayerDims& d, const ChunkInputs& in,
                      const std::vector<int64_t>& bounds, Recompute mode) {
  TrackingAllocator alloc(0);
  auto m = Mamba3Layer<double>::Make(alloc, d, 1, 2, 5);
  EXPECT_TRUE(m.ok());
  RandomizeParams(&*m, 3);
  const int64_t B = in.B, S = bounds.back(), C = d.C, pieces = bounds.size() - 1;
  std::vector<Mamba3State<double>> states;
  states.push_back(MakeState<double>(alloc, d, B, in.state));
  std::vector<Mamba3LayerSaved<double>> saved(pieces);
  ChunkedRun r;
  r.y.assign(in.x.size(), 0.0);
  r.dx.assign(in.x.size(), 0.0);
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t t0 = bounds[p], t1 = bounds[p + 1];
    Tensor<double> x = FromVector<double>(alloc, kWs, {B * (t1 - t0), C},
                                          Slice(in.x, B, S, C, t0, t1));
    Tensor<double> y;
    Mamba3State<double> out;
    EXPECT_TRUE(m->Forward(&y, &out, &saved[p], x, B, states.back(), mode).ok());
    Unslice(&r.y, ToVector(y), B, S, C, t0, t1);
    states.push_back(std::move(out));
  }
  r.state_out = ToValues(states.back());
  Mamba3State<double> dstate = MakeState<double>(alloc, d, B, in.rstate);
  for (int64_t p = pieces - 1; p >= 0; --p) {
    const int64_t t0 = bounds[p], t1 = bounds[p + 1];
    Tensor<double> dy = FromVector<double>(alloc, kWs, {B * (t1 - t0), C},
                                           Slice(in.ry, B, S, C, t0, t1));
    Tensor<double> dx;
    Mamba3State<double> dstate_in;
    EXPECT_TRUE(m->Backward(&dx, &dstate_in, &saved[p], dy, B, &dstate, states[p]).ok());
    Unslice(&r.dx, ToVector(dx), B, S, C, t0, t1);
    dstate = std::move(dstate_in);
  }
  r.dstate_in = ToValues(dstate);
  for (Param<double>& p : m->params()) r.dparams.push_back(ToVector(p.grad));
  return r;
}

void ExpectClose(const std::string& what, const std::vector<double>& a,
                 const std::vector<double>& b) {
  EXPECT_LT(RelError(a, b), 1e-10) << what;
}

void ExpectRunsClose(const ChunkedRun& a, const ChunkedRun& b) {
  ExpectClose("y", a.y, b.y);
  ExpectClose("dx", a.dx, b.dx);
  ExpectClose("angle out", a.state_out.angle, b.state_out.angle);
  ExpectClose("S out", a.state_out.S, b.state_out.S);
  ExpectClose("k out", a.state_out.k, b.state_out.k);
  ExpectClose("v out", a.state_out.v, b.state_out.v);
  ExpectClose("d angle in", a.dstate_in.angle, b.dstate_in.angle);
  ExpectClose("dS in", a.dstate_in.S, b.dstate_in.S);
  ExpectClose("dk in", a.dstate_in.k, b.dstate_in.k);
  ExpectClose("dv in", a.dstate_in.v, b.dstate_in.v);
  for (size_t i = 0; i < a.dparams.size(); ++i) {
    ExpectClose("param " + std::to_string(i), a.dparams[i], b.dparams[i]);
  }
}

// N = 1, 2, 3, 4 chunks of 150 tokens (lengths not multiples of T_C = 64),
// batch 1 and 3, both recompute modes.
TEST(Mamba3LayerTest, ChunkedEqualsUnchunked) {
  const Mamba3LayerDims d = SmallDims(kMamba3BlockSize);
  const std::vector<std::vector<int64_t>> splits = {
      {0, 150}, {0, 70, 150}, {0, 37, 101, 150}, {0, 1, 65, 129, 150}};
  for (int64_t B : {1, 3}) {
    std::mt19937_64 rng(21 + B);
    const ChunkInputs in = MakeInputs(d, B, 150, rng);
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      const ChunkedRun whole = RunChunked(d, in, splits[0], mode);
      for (size_t n = 1; n < splits.size(); ++n) {
        SCOPED_TRACE("B=" + std::to_string(B) + " N=" + std::to_string(n + 1));
        ExpectRunsClose(RunChunked(d, in, splits[n], mode), whole);
      }
    }
  }
}

// Three sequences in one batch equal three runs of one (to 1e-10: the
// projections' matrix products over 3 S rows may block differently).
TEST(Mamba3LayerTest, BatchOfThreeEqualsThreeOnes) {
  const Mamba3LayerDims d = SmallDims(16);
  const int64_t S = 40;
  std::mt19937_64 rng(5);
  const ChunkInputs in = MakeInputs(d, 3, S, rng);
  const ChunkedRun batch = RunChunked(d, in, {0, 17, S}, Recompute::kNone);
  std::vector<std::vector<double>> dparams_sum;
  for (int64_t b = 0; b < 3; ++b) {
    ChunkInputs one;
    one.B = 1;
    auto part = [&](const std::vector<double>& v, int64_t n) {
      return std::vector<double>(v.begin() + b * n, v.begin() + (b + 1) * n);
    };
    one.x = part(in.x, S * d.C);
    one.ry = part(in.ry, S * d.C);
    for (auto [dst, src] : {std::pair{&one.state, &in.state}, std::pair{&one.rstate, &in.rstate}}) {
      dst->angle = part(src->angle, d.H * d.Na);
      dst->S = part(src->S, d.H * d.Dp * d.Ds);
      dst->k = part(src->k, d.HDs());
      dst->v = part(src->v, d.HDp());
    }
    const ChunkedRun r = RunChunked(d, one, {0, 17, S}, Recompute::kNone);
    ExpectClose("y", r.y, part(batch.y, S * d.C));
    ExpectClose("dx", r.dx, part(batch.dx, S * d.C));
    ExpectClose("state_out.S", r.state_out.S, part(batch.state_out.S, d.H * d.Dp * d.Ds));
    ExpectClose("state_out.angle", r.state_out.angle, part(batch.state_out.angle, d.H * d.Na));
    ExpectClose("dstate_in.S", r.dstate_in.S, part(batch.dstate_in.S, d.H * d.Dp * d.Ds));
    ExpectClose("dstate_in.k", r.dstate_in.k, part(batch.dstate_in.k, d.HDs()));
    ExpectClose("dstate_in.v", r.dstate_in.v, part(batch.dstate_in.v, d.HDp()));
    ExpectClose("dstate_in.angle", r.dstate_in.angle, part(batch.dstate_in.angle, d.H * d.Na));
    dparams_sum.resize(r.dparams.size());
    for (size_t i = 0; i < r.dparams.size(); ++i) {
      dparams_sum[i].resize(r.dparams[i].size());
      for (size_t e = 0; e < r.dparams[i].size(); ++e) dparams_sum[i][e] += r.dparams[i][e];
    }
  }
  for (size_t i = 0; i < dparams_sum.size(); ++i) {
    ExpectClose("param " + std::to_string(i), batch.dparams[i], dparams_sum[i]);
  }
}

// Every output, state, input gradient and parameter gradient of two runs,
// bit for bit.
void ExpectSameBits(const LayerRun& a, const LayerRun& b, Mamba3Layer<double>& m) {
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.state_out.angle, b.state_out.angle);
  EXPECT_EQ(a.state_out.S, b.state_out.S);
  EXPECT_EQ(a.state_out.k, b.state_out.k);
  EXPECT_EQ(a.state_out.v, b.state_out.v);
  EXPECT_EQ(a.dstate_in.angle, b.dstate_in.angle);
  EXPECT_EQ(a.dstate_in.S, b.dstate_in.S);
  EXPECT_EQ(a.dstate_in.k, b.dstate_in.k);
  EXPECT_EQ(a.dstate_in.v, b.dstate_in.v);
  ASSERT_EQ(a.dparams.size(), b.dparams.size());
  for (size_t id = 0; id < a.dparams.size(); ++id) {
    EXPECT_EQ(a.dparams[id], b.dparams[id]) << m.params()[id].name;
  }
}

TEST(Mamba3LayerTest, RecomputeFullIsBitIdenticalToNone) {
  const Mamba3LayerDims d = SmallDims(16);
  TrackingAllocator alloc(0);
  auto none = Mamba3Layer<double>::Make(alloc, d, 1, 2, 5);
  auto full = Mamba3Layer<double>::Make(alloc, d, 1, 2, 5);
  ASSERT_TRUE(none.ok() && full.ok());
  RandomizeParams(&*none, 3);
  RandomizeParams(&*full, 3);
  std::mt19937_64 rng(4);
  const ChunkInputs in = MakeInputs(d, 2, 37, rng);
  // Twice, so that accumulated parameter gradients are compared too.
  ForwardBackward(&*none, alloc, in, Recompute::kNone);
  ForwardBackward(&*full, alloc, in, Recompute::kFull);
  const LayerRun a = ForwardBackward(&*none, alloc, in, Recompute::kNone);
  const LayerRun b = ForwardBackward(&*full, alloc, in, Recompute::kFull);
  ExpectSameBits(a, b, *none);
}

// dims.st_overlap: the core's forward and backward through the Ops'
// overlapped entry points (on the CPU Mamba3CoreForwardOverlapped /
// BackwardOverlapped, OpenMP tasks per block), the same arithmetic per
// block: outputs, all four states and every gradient bit for bit in float64
// with full blocks (S = 48 in blocks of 16, two sequences), under both
// recompute modes and at 1 and 2 threads.
TEST(Mamba3LayerTest, StOverlapIsBitIdenticalToSequential) {
  const Mamba3LayerDims d = SmallDims(16);
  Mamba3LayerDims d_on = d;
  d_on.st_overlap = true;
  const int threads_before = KernelThreads();
  for (int threads : {1, 2}) {
    SetKernelThreads(threads);
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      SCOPED_TRACE(std::string(RecomputeName(mode)) + ", threads " + std::to_string(threads));
      TrackingAllocator alloc(0);
      auto off = Mamba3Layer<double>::Make(alloc, d, 1, 2, 5);
      auto on = Mamba3Layer<double>::Make(alloc, d_on, 1, 2, 5);
      ASSERT_TRUE(off.ok() && on.ok());
      ASSERT_TRUE(on->dims().st_overlap);
      RandomizeParams(&*off, 3);
      RandomizeParams(&*on, 3);
      std::mt19937_64 rng(4);
      const ChunkInputs in = MakeInputs(d, 2, 48, rng);
      const LayerRun a = ForwardBackward(&*off, alloc, in, mode);
      const LayerRun b = ForwardBackward(&*on, alloc, in, mode);
      ExpectSameBits(a, b, *off);
    }
  }
  SetKernelThreads(threads_before);
}

// dims.st_tile (schedule.st_tile): B_V reaches the core's Ops calls, and the
// layer's results do not depend on it beyond rounding (Dp = 6 in tiles of 1,
// 4 (not a divisor) and 6): within 1e-12 relative of the untiled layer in
// float64, sequential and overlapped, under both recompute modes.
TEST(Mamba3LayerTest, StTileChangesNothingBeyondRounding) {
  const Mamba3LayerDims d = SmallDims(16);
  for (bool overlap : {false, true}) {
    for (int64_t tile : {1, 4, 6}) {
      Mamba3LayerDims d_tile = d;
      d_tile.st_tile = tile;
      d_tile.st_overlap = overlap;
      for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
        SCOPED_TRACE(std::string(RecomputeName(mode)) + " st_tile " + std::to_string(tile) +
                     (overlap ? " overlapped" : ""));
        TrackingAllocator alloc(0);
        auto untiled = Mamba3Layer<double>::Make(alloc, d, 1, 2, 5);
        auto tiled = Mamba3Layer<double>::Make(alloc, d_tile, 1, 2, 5);
        ASSERT_TRUE(untiled.ok() && tiled.ok());
        ASSERT_EQ(tiled->dims().st_tile, tile);
        RandomizeParams(&*untiled, 3);
        RandomizeParams(&*tiled, 3);
        std::mt19937_64 rng(4);
        const ChunkInputs in = MakeInputs(d, 2, 48, rng);
        const LayerRun a = ForwardBackward(&*untiled, alloc, in, mode);
        const LayerRun b = ForwardBackward(&*tiled, alloc, in, mode);
        EXPECT_LT(RelError(b.y, a.y), 1e-12);
        EXPECT_LT(RelError(b.dx, a.dx), 1e-12);
        EXPECT_LT(RelError(b.state_out.S, a.state_out.S), 1e-12);
        EXPECT_LT(RelError(b.dstate_in.S, a.dstate_in.S), 1e-12);
        EXPECT_LT(RelError(b.dstate_in.k, a.dstate_in.k), 1e-12);
        EXPECT_LT(RelError(b.dstate_in.v, a.dstate_in.v), 1e-12);
        for (size_t id = 0; id < a.dparams.size(); ++id) {
          EXPECT_LT(RelError(b.dparams[id], a.dparams[id]), 1e-12) << untiled->params()[id].name;
        }
      }
    }
  }
}

// The layer's parameters are what the cost model counts for a Mamba-3 layer
// (mixer plus MLP and norms), for the tiny preset and a paper-shaped one.
TEST(Mamba3LayerTest, ParameterCountEqualsTheCostModels) {
  for (const char* name : {"mamba3-tiny", "mamba3-3b"}) {
    SCOPED_TRACE(name);
    auto model = models::ModelPreset(name);
    ASSERT_TRUE(model.ok()) << model.status().message();
    Mamba3LayerDims d = Mamba3LayerDims::FromModel(*model);
    int64_t count = 0;
    const int64_t shapes_elems[] = {
        d.C, d.HDp() * d.C, d.HDp() * d.C, d.Ds * d.C, d.Ds * d.C, d.H * d.C,
        d.H * d.C, d.H * d.C, d.Na * d.C, d.H, d.Ds, d.Ds, d.HDs(), d.HDs(), d.H,
        d.C * d.HDp(), d.C, d.F * d.C, d.F * d.C, d.C * d.F};
    if (std::string(name) == "mamba3-tiny") {
      TrackingAllocator alloc(0);
      auto m = Mamba3Layer<float>::Make(alloc, d, 0, 1, 1);
      ASSERT_TRUE(m.ok());
      for (Param<float>& p : m->params()) count += p.value.numel();
    } else {  // too big to allocate here: the layer's shapes, as Make makes them
      for (int64_t n : shapes_elems) count += n;
    }
    EXPECT_EQ(static_cast<double>(count),
              models::MixerParamCount(*model, models::LayerKind::kRecurrence) +
                  models::MlpAndNormsParamCount(*model));
  }
}

// What the forward keeps: under kNone the per-token elements of
// mamba3_layer.h, recounted from the saved tensors:
//   x, xn, h, hn (4C); mlp gate, up (2F); rstd1, rstd2, B_rstd, C_rstd (4);
//   z, xv, o, gated (4 HP); Bp, Cp (2N); dt, ddA, lam, a, gamma, beta (6H);
//   theta (Na); phi (H Na); q, k (2 HN);
// under kFull only x (C). Nothing else stays live after the forward but y.
TEST(Mamba3LayerTest, SavedBytesPerMode) {
  const Mamba3LayerDims d = SmallDims(64);
  const int64_t S = 9;
  const int64_t per_token_none = 4 * d.C + 2 * d.F + 4 + 4 * d.HDp() + 2 * d.Ds +
                                 6 * d.H + d.Na + d.H * d.Na + 2 * d.HDs();
  EXPECT_EQ(Mamba3LayerSaved<double>::NumelPerToken(d), per_token_none);
  EXPECT_EQ(Mamba3State<double>::Numel(d), d.H * d.Na + d.H * d.Dp * d.Ds + d.HDs() + d.HDp());
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    TrackingAllocator alloc(0);
    auto m = Mamba3Layer<double>::Make(alloc, d, 1, 1, 5);
    ASSERT_TRUE(m.ok());
    std::mt19937_64 rng(1);
    const ChunkInputs in = MakeInputs(d, 1, S, rng);
    Tensor<double> x = FromVector<double>(alloc, kWs, {S, d.C}, in.x);
    Mamba3State<double> state_in = MakeState<double>(alloc, d, 1, in.state);
    const int64_t ws_before = alloc.LiveBytes(kWs);
    Tensor<double> y;
    Mamba3State<double> state_out;
    Mamba3LayerSaved<double> saved;
    ASSERT_TRUE(m->Forward(&y, &state_out, &saved, x, 1, state_in, mode).ok());
    const int64_t per_token = mode == Recompute::kNone ? per_token_none : d.C;
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations),
              S * per_token * int64_t{sizeof(double)});
    EXPECT_EQ(alloc.LiveBytes(kBs), 2 * Mamba3State<double>::Numel(d) * int64_t{sizeof(double)});
    EXPECT_EQ(alloc.LiveBytes(kWs), ws_before + y.bytes());
    Tensor<double> dy = FromVector<double>(alloc, kWs, {S, d.C}, in.ry), dx;
    ASSERT_TRUE(m->Backward(&dx, nullptr, &saved, dy, 1, nullptr, state_in).ok());
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 0);
    EXPECT_EQ(alloc.LiveBytes(kWs), ws_before + y.bytes() + dy.bytes() + dx.bytes());
  }
}

// The official init where it matters: D, B_bias, C_bias and the norms 1;
// dt = softplus(dt_bias) in [0.001, 0.1].
TEST(Mamba3LayerTest, OfficialInitialisation) {
  const Mamba3LayerDims d = SmallDims(64);
  TrackingAllocator alloc(0);
  auto m = Mamba3Layer<double>::Make(alloc, d, 0, 1, 3);
  ASSERT_TRUE(m.ok());
  using L = Mamba3Layer<double>;
  for (L::ParamId id : {L::kD, L::kBBias, L::kCBias, L::kBNorm, L::kCNorm, L::kMixerNorm}) {
    for (double v : ToVector(m->param(id).value)) EXPECT_EQ(v, 1.0) << L::ParamName(id);
  }
  for (double b : ToVector(m->param(L::kDtBias).value)) {
    const double dt = std::log1p(std::exp(b));
    EXPECT_GE(dt, 0.001 * (1 - 1e-9));
    EXPECT_LE(dt, 0.1 * (1 + 1e-9));
  }
  EXPECT_EQ(Mamba3RopeAngles(16), 4);
  EXPECT_EQ(Mamba3RopeAngles(128), 32);
  EXPECT_EQ(Mamba3RopeAngles(6), 1);  // 3 rounded down to 2
}

TEST(Mamba3LayerTest, MisuseIsAnErrorNotACrash) {
  const Mamba3LayerDims d = SmallDims(64);
  TrackingAllocator alloc(0);
  auto m = Mamba3Layer<double>::Make(alloc, d, 4, 5, 3);
  ASSERT_TRUE(m.ok());
  std::mt19937_64 rng(1);
  const ChunkInputs in = MakeInputs(d, 1, 6, rng);
  Tensor<double> x = FromVector<double>(alloc, kWs, {6, d.C}, in.x);
  Mamba3State<double> state = MakeState<double>(alloc, d, 1, in.state);
  Tensor<double> y, dx;
  Mamba3State<double> out;
  Mamba3LayerSaved<double> saved;
  Status st = m->Forward(&y, &out, &saved, x, 4, state, Recompute::kNone);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("batch 4"), std::string::npos) << st.message();
  st = m->Forward(&y, &out, &saved, x, 2, state, Recompute::kNone);
  EXPECT_NE(st.message().find("state_in.angle"), std::string::npos) << st.message();
  st = m->Backward(&dx, nullptr, &saved, x, 1, nullptr, state);
  EXPECT_NE(st.message().find("without a saved forward"), std::string::npos) << st.message();
  ASSERT_TRUE(m->Forward(&y, &out, &saved, x, 1, state, Recompute::kNone).ok());
  st = m->Backward(&dx, nullptr, &saved, x, 2, nullptr, state);
  EXPECT_NE(st.message().find("layer 4 (mamba3 layer): batch 2"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace stateflow::backend

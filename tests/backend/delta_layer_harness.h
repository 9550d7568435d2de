// A test harness for the delta-rule layers (GdnLayer, KdaLayer: a boundary
// state of the recurrent state S and three conv tails, dims with C, H, K,
// Dv, W, HK(), HV()): seeded inputs and objective weights, one forward +
// backward, the objective through a forward alone, central differences, the
// float64 gradient check of every input and parameter, and chunked against
// unchunked. The family's own properties stay in its test file
// (gdn_layer_test.cc, kda_layer_test.cc).
//
//   const LayerRun r = ForwardBackward(&*layer, alloc, in, Recompute::kNone);
//   ExpectBackwardMatchesCentralDifferences(&*layer, alloc, c, Recompute::kFull);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/layers/param.h"
#include "models/cost_model.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::backend::delta_layer_test {

using models::Recompute;
using testing::FromVector;
using testing::RelError;
using testing::ToVector;
using testing::Uniform;

inline constexpr BufferClass kWs = BufferClass::kWorkspace;

// One layer configuration: chunk length, conv width, kernel block size.
struct LayerCase {
  int64_t S;           // tokens in the chunk
  int64_t W;           // conv width
  int64_t block_size;  // T_C of the core
  std::string Name() const {
    std::ostringstream s;
    s << "S=" << S << " W=" << W << " T_C=" << block_size;
    return s.str();
  }
};

// Readable parameters in test logs (gtest prints unknown types as bytes).
inline void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.Name(); }



// Random, O(1) parameters (the 0.02 initialisation makes small gradients):
// the same values for float and double from the same seed.
template <template <typename> class L, typename T>
void RandomizeParams(L<T>* layer, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (Param<T>& p : layer->params()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    const double lo = norm ? 0.5 : -0.5, hi = norm ? 1.5 : 0.5;
    testing::Assign(&p.value, Uniform(rng, p.value.numel(), lo, hi));
  }
}

// Inputs of one chunk and the weights of the objective
// L = <ry, y> + <rstate, state_out> (all four parts).
struct BlockInputs {
  std::vector<double> x, S, tq, tk, tv;        // input and state in
  std::vector<double> ry, rS, rtq, rtk, rtv;   // objective weights
};

template <class Dims>
BlockInputs MakeInputs(const Dims& d, int64_t S, std::mt19937_64& rng) {
  BlockInputs in;
  const int64_t tail = d.W - 1;
  in.x = Uniform(rng, S * d.C, -1, 1);
  in.S = Uniform(rng, d.H * d.Dv * d.K, -0.5, 0.5);
  in.tq = Uniform(rng, tail * d.HK(), -1, 1);
  in.tk = Uniform(rng, tail * d.HK(), -1, 1);
  in.tv = Uniform(rng, tail * d.HV(), -1, 1);
  in.ry = Uniform(rng, S * d.C, -1, 1);
  in.rS = Uniform(rng, d.H * d.Dv * d.K, -1, 1);
  in.rtq = Uniform(rng, tail * d.HK(), -1, 1);
  in.rtk = Uniform(rng, tail * d.HK(), -1, 1);
  in.rtv = Uniform(rng, tail * d.HV(), -1, 1);
  return in;
}

template <class State, class Dims>
State MakeState(TrackingAllocator& alloc, const Dims& d, const std::vector<double>& S,
                const std::vector<double>& tq, const std::vector<double>& tk,
                const std::vector<double>& tv) {
  using T = std::remove_reference_t<decltype(*State{}.tail_q.data())>;
  State s;
  s.S = FromVector<T>(alloc, BufferClass::kBoundaryStates, {1, d.H, d.Dv, d.K}, S);
  s.tail_q = FromVector<T>(alloc, BufferClass::kBoundaryStates, {1, d.W - 1, d.HK()}, tq);
  s.tail_k = FromVector<T>(alloc, BufferClass::kBoundaryStates, {1, d.W - 1, d.HK()}, tk);
  s.tail_v = FromVector<T>(alloc, BufferClass::kBoundaryStates, {1, d.W - 1, d.HV()}, tv);
  return s;
}

// Everything one forward + backward gives.
struct LayerRun {
  std::vector<double> y, S_out, tq_out, tk_out, tv_out;
  std::vector<double> dx, dS, dtq, dtk, dtv;
  std::vector<std::vector<double>> dparams;  // per ParamId
};

template <typename T, class State>
double Objective(const BlockInputs& in, const Tensor<T>& y, const State& out) {
  auto dot = [](const std::vector<double>& r, const Tensor<T>& t) {
    double s = 0;
    for (int64_t e = 0; e < t.numel(); ++e) s += r[e] * static_cast<double>(t.data()[e]);
    return s;
  };
  return dot(in.ry, y) + dot(in.rS, out.S) + dot(in.rtq, out.tail_q) +
         dot(in.rtk, out.tail_k) + dot(in.rtv, out.tail_v);
}

// The objective through a forward only (for finite differences).
template <template <typename> class L, typename T>
double ForwardObjective(L<T>* layer, TrackingAllocator& alloc, const BlockInputs& in,
                        Recompute mode) {
  using State = typename L<T>::State;
  const auto& d = layer->dims();
  const int64_t S = static_cast<int64_t>(in.x.size()) / d.C;
  Tensor<T> x = FromVector<T>(alloc, kWs, {S, d.C}, in.x);
  State state_in = MakeState<State>(alloc, d, in.S, in.tq, in.tk, in.tv);
  Tensor<T> y;
  State state_out;
  typename L<T>::Saved saved;
  const Status st = layer->Forward(&y, &state_out, &saved, x, 1, state_in, mode);
  EXPECT_TRUE(st.ok()) << st.message();
  return Objective(in, y, state_out);
}

template <template <typename> class L, typename T>
LayerRun ForwardBackward(L<T>* layer, TrackingAllocator& alloc, const BlockInputs& in,
                         Recompute mode) {
  using State = typename L<T>::State;
  const auto& d = layer->dims();
  const int64_t S = static_cast<int64_t>(in.x.size()) / d.C;
  Tensor<T> x = FromVector<T>(alloc, kWs, {S, d.C}, in.x);
  State state_in = MakeState<State>(alloc, d, in.S, in.tq, in.tk, in.tv);
  State dstate_out = MakeState<State>(alloc, d, in.rS, in.rtq, in.rtk, in.rtv);
  Tensor<T> dy = FromVector<T>(alloc, kWs, {S, d.C}, in.ry);
  Tensor<T> y, dx;
  State state_out, dstate_in;
  typename L<T>::Saved saved;
  Status st = layer->Forward(&y, &state_out, &saved, x, 1, state_in, mode);
  EXPECT_TRUE(st.ok()) << st.message();
  st = layer->Backward(&dx, &dstate_in, &saved, dy, 1, &dstate_out, state_in);
  EXPECT_TRUE(st.ok()) << st.message();
  LayerRun r{ToVector(y), ToVector(state_out.S), ToVector(state_out.tail_q),
             ToVector(state_out.tail_k), ToVector(state_out.tail_v), ToVector(dx),
             ToVector(dstate_in.S), ToVector(dstate_in.tail_q),
             ToVector(dstate_in.tail_k), ToVector(dstate_in.tail_v), {}};
  for (Param<T>& p : layer->params()) r.dparams.push_back(ToVector(p.grad));
  return r;
}

// Central differences of `f` at the elements `indices` of `values`.
inline std::vector<double> CentralDiff(const std::function<double()>& f,
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

inline std::vector<int64_t> AllIndices(int64_t n) {
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  return idx;
}

// Up to `k` indices spread over [0, n), always including the first and last.
inline std::vector<int64_t> SampleIndices(int64_t n, int64_t k, std::mt19937_64& rng) {
  if (n <= k) return AllIndices(n);
  std::vector<int64_t> idx = {0, n - 1};
  std::uniform_int_distribution<int64_t> dist(1, n - 2);
  while (static_cast<int64_t>(idx.size()) < k) idx.push_back(dist(rng));
  return idx;
}

inline ::testing::AssertionResult MatchesDiff(const std::string& what,
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

// The gradient check of a layer in float64: the backward against central
// differences of the forward's objective for the input, every part of the
// state in, and sampled elements of every parameter.
template <template <typename> class L>
void ExpectBackwardMatchesCentralDifferences(L<double>* layer, TrackingAllocator& alloc,
                                             const LayerCase& c, Recompute mode) {
  std::mt19937_64 rng(13);
  BlockInputs in = MakeInputs(layer->dims(), c.S, rng);
  const LayerRun run = ForwardBackward(layer, alloc, in, mode);
  auto f = [&] { return ForwardObjective(layer, alloc, in, mode); };
  const double h = 1e-6;
  const struct {
    const char* name;
    std::vector<double>* values;
    const std::vector<double>* grad;
  } inputs[] = {{"x", &in.x, &run.dx},      {"S_in", &in.S, &run.dS},
                {"tail_q", &in.tq, &run.dtq}, {"tail_k", &in.tk, &run.dtk},
                {"tail_v", &in.tv, &run.dtv}};
  for (const auto& input : inputs) {
    // Every element, except 256 sampled ones of a long chunk's input.
    const std::vector<int64_t> idx =
        SampleIndices(static_cast<int64_t>(input.values->size()), 256, rng);
    EXPECT_TRUE(MatchesDiff(input.name, *input.grad, idx,
                            CentralDiff(f, input.values, idx, h)));
  }
  for (std::size_t id = 0; id < layer->params().size(); ++id) {
    Param<double>& p = layer->params()[id];
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

// Two chunks with the boundary state handed over equal one chunk of both
// (float64): the outputs, the state out, and, with the state gradient
// chained back, the input, state-in and parameter gradients.
template <template <typename> class L>
void ExpectTwoChunksEqualOne(L<double>* one, L<double>* two, TrackingAllocator& alloc,
                             int64_t S1, int64_t S2, double tol) {
  using State = typename L<double>::State;
  const auto& d = one->dims();
  std::mt19937_64 rng(29);
  const BlockInputs in = MakeInputs(d, S1 + S2, rng);
  const LayerRun whole = ForwardBackward(one, alloc, in, Recompute::kNone);
  auto rows = [&](const std::vector<double>& v, int64_t r0, int64_t r1) {
    return std::vector<double>(v.begin() + r0 * d.C, v.begin() + r1 * d.C);
  };
  Tensor<double> x1 = FromVector<double>(alloc, kWs, {S1, d.C}, rows(in.x, 0, S1));
  Tensor<double> x2 = FromVector<double>(alloc, kWs, {S2, d.C}, rows(in.x, S1, S1 + S2));
  State s_in = MakeState<State>(alloc, d, in.S, in.tq, in.tk, in.tv);
  State dstate_out = MakeState<State>(alloc, d, in.rS, in.rtq, in.rtk, in.rtv);
  Tensor<double> y1, y2, dx1, dx2;
  State s_mid, s_out, ds_mid, ds_in;
  typename L<double>::Saved saved1, saved2;
  ASSERT_TRUE(two->Forward(&y1, &s_mid, &saved1, x1, 1, s_in, Recompute::kNone).ok());
  ASSERT_TRUE(two->Forward(&y2, &s_out, &saved2, x2, 1, s_mid, Recompute::kNone).ok());
  Tensor<double> dy1 = FromVector<double>(alloc, kWs, {S1, d.C}, rows(in.ry, 0, S1));
  Tensor<double> dy2 = FromVector<double>(alloc, kWs, {S2, d.C}, rows(in.ry, S1, S1 + S2));
  ASSERT_TRUE(two->Backward(&dx2, &ds_mid, &saved2, dy2, 1, &dstate_out, s_mid).ok());
  ASSERT_TRUE(two->Backward(&dx1, &ds_in, &saved1, dy1, 1, &ds_mid, s_in).ok());
  std::vector<double> y = ToVector(y1), dx = ToVector(dx1);
  for (double v : ToVector(y2)) y.push_back(v);
  for (double v : ToVector(dx2)) dx.push_back(v);
  EXPECT_LT(RelError(y, whole.y), tol);
  EXPECT_LT(RelError(ToVector(s_out.S), whole.S_out), tol);
  EXPECT_LT(RelError(ToVector(s_out.tail_q), whole.tq_out), tol);
  EXPECT_LT(RelError(ToVector(s_out.tail_v), whole.tv_out), tol);
  EXPECT_LT(RelError(dx, whole.dx), tol);
  EXPECT_LT(RelError(ToVector(ds_in.S), whole.dS), tol);
  EXPECT_LT(RelError(ToVector(ds_in.tail_k), whole.dtk), tol);
  for (std::size_t id = 0; id < whole.dparams.size(); ++id) {
    EXPECT_LT(RelError(ToVector(two->params()[id].grad), whole.dparams[id]), tol)
        << two->params()[id].name;
  }
}

}  // namespace stateflow::backend::delta_layer_test

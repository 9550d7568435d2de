// The embedding and head layers: central-difference gradient checks
// (float64) of every input and parameter; the head's loss against a plain
// log-softmax over all logits computed here; the result independent of the
// vocabulary slice width; only kLogits slices are transient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "backend/layers/embedding_layer.h"
#include "backend/layers/head_layer.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::backend {
namespace {

using testing::FromVector;
using testing::RelError;
using testing::ToVector;
using testing::Uniform;

constexpr BufferClass kWs = BufferClass::kWorkspace;

std::vector<int32_t> RandomIds(std::mt19937_64& rng, int64_t n, int64_t V) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f over every element of *values.
std::vector<double> Diff(const std::function<double()>& f, std::vector<double>* values) {
  std::vector<double> out(values->size());
  const double h = 1e-6;
  for (size_t i = 0; i < values->size(); ++i) {
    const double v = (*values)[i];
    (*values)[i] = v + h;
    const double up = f();
    (*values)[i] = v - h;
    const double down = f();
    (*values)[i] = v;
    out[i] = (up - down) / (2 * h);
  }
  return out;
}

void ExpectClose(const char* what, const std::vector<double>& analytic,
                 const std::vector<double>& numeric) {
  ASSERT_EQ(analytic.size(), numeric.size());
  for (size_t i = 0; i < analytic.size(); ++i) {
    EXPECT_NEAR(analytic[i], numeric[i], 1e-7 + 1e-6 * std::abs(numeric[i]))
        << what << "[" << i << "]";
  }
}

TEST(EmbeddingLayerTest, BackwardMatchesCentralDifferences) {
  const int64_t V = 9, C = 5, S = 12;  // S > V: repeated ids add up
  TrackingAllocator alloc(0);
  auto emb = EmbeddingLayer<double>::Make(alloc, V, C, 0, 1);
  ASSERT_TRUE(emb.ok());
  std::mt19937_64 rng(2);
  const std::vector<int32_t> ids = RandomIds(rng, S, V);
  const std::vector<double> r = Uniform(rng, S * C, -1, 1);
  std::vector<double> table = ToVector(emb->params()[0].value);
  auto f = [&] {
    testing::Assign(&emb->params()[0].value, table);
    Tensor<double> y;
    EXPECT_TRUE(emb->Forward(&y, ids.data(), S).ok());
    return Dot(r, ToVector(y));
  };
  const std::vector<double> numeric = Diff(f, &table);
  testing::Assign(&emb->params()[0].value, table);
  Tensor<double> dy = FromVector<double>(alloc, kWs, {S, C}, r);
  ASSERT_TRUE(emb->Backward(dy, ids.data()).ok());
  ExpectClose("d(table)", ToVector(emb->params()[0].grad), numeric);
  // The forward output is the gathered rows.
  Tensor<double> y;
  ASSERT_TRUE(emb->Forward(&y, ids.data(), S).ok());
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(y.data()[s * C + c], table[ids[s] * C + c]);
    }
  }
}

// sum_s [logsumexp(z_s) - z_s[target]] with z = RMSNorm(x) * norm W^T, all
// logits at once, written out here.
double PlainHeadLoss(const std::vector<double>& x, const std::vector<double>& norm,
                     const std::vector<double>& w, const std::vector<int32_t>& targets,
                     int64_t C, int64_t V) {
  const int64_t S = static_cast<int64_t>(targets.size());
  double total = 0;
  for (int64_t s = 0; s < S; ++s) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[s * C + c] * x[s * C + c];
    const double rstd = 1.0 / std::sqrt(ss / C + 1e-6);
    std::vector<double> z(V, 0.0);
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t c = 0; c < C; ++c) z[v] += x[s * C + c] * rstd * norm[c] * w[v * C + c];
    }
    double m = z[0];
    for (double zv : z) m = std::max(m, zv);
    double sum = 0;
    for (double zv : z) sum += std::exp(zv - m);
    total += m + std::log(sum) - z[targets[s]];
  }
  return total;
}

class HeadLayerTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(HeadLayerTest, LossAndGradientsMatchPlainReference) {
  const int64_t C = 6, V = 23, S = 7, slice = GetParam();
  const double scale = 0.37;  // d(objective)/d(loss_sum)
  TrackingAllocator alloc(0);
  auto head = HeadLayer<double>::Make(alloc, C, V, slice, 4, 5);
  ASSERT_TRUE(head.ok());
  std::mt19937_64 rng(6);
  std::vector<double> norm = Uniform(rng, C, 0.5, 1.5), w = Uniform(rng, V * C, -1, 1);
  std::vector<double> x = Uniform(rng, S * C, -1, 1);
  testing::Assign(&head->params()[0].value, norm);
  testing::Assign(&head->params()[1].value, w);
  const std::vector<int32_t> targets = RandomIds(rng, S, V);
  auto loss = [&] {
    testing::Assign(&head->params()[0].value, norm);
    testing::Assign(&head->params()[1].value, w);
    Tensor<double> xt = FromVector<double>(alloc, kWs, {S, C}, x);
    HeadSaved<double> saved;
    double sum = 0;
    EXPECT_TRUE(head->Forward(&sum, &saved, xt, targets.data()).ok());
    return scale * sum;
  };
  EXPECT_NEAR(loss(), scale * PlainHeadLoss(x, norm, w, targets, C, V), 1e-12);
  const std::vector<double> dx_num = Diff(loss, &x), dnorm_num = Diff(loss, &norm),
                            dw_num = Diff(loss, &w);
  Tensor<double> xt = FromVector<double>(alloc, kWs, {S, C}, x), dx;
  HeadSaved<double> saved;
  double sum = 0;
  ASSERT_TRUE(head->Forward(&sum, &saved, xt, targets.data()).ok());
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kLogits), 0);  // slices are transient
  EXPECT_EQ(alloc.PeakBytes(BufferClass::kLogits),
            S * std::min(slice, V) * int64_t{sizeof(double)});
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations),
            S * HeadSaved<double>::NumelPerToken(C) * int64_t{sizeof(double)});
  ASSERT_TRUE(head->Backward(&dx, &saved, targets.data(), scale).ok());
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 0);
  ExpectClose("dx", ToVector(dx), dx_num);
  ExpectClose("d(norm)", ToVector(head->params()[0].grad), dnorm_num);
  ExpectClose("d(output)", ToVector(head->params()[1].grad), dw_num);
  // A second backward has nothing saved.
  EXPECT_EQ(head->Backward(&dx, &saved, targets.data(), scale).code(),
            Status::Code::kInvalidInput);
}

// 1 column, an uneven last slice, exactly V, more than V.
INSTANTIATE_TEST_SUITE_P(Slices, HeadLayerTest, ::testing::Values(1, 5, 23, 64));

}  // namespace
}  // namespace stateflow::backend

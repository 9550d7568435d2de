// The float64 reference of the causal attention kernel (attention.h): one
// query row at a time, its scores materialised, plain loops. Slow and
// obviously right; the fast kernel is tested against it.
//
// Dimensions as in attention.h: s queries from position start, Hq, Hkv heads
// (G = Hq / Hkv per K/V head), d head dim.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/kernels/attention.h"

namespace stateflow::backend {
namespace {

double DotRow(const double* a, const double* b, int64_t d) {
  double sum = 0;
  for (int64_t e = 0; e < d; ++e) sum += a[e] * b[e];
  return sum;
}

// p (p_len) = softmax of the scores of query row (i, h) over keys 0..start+i;
// returns the log-sum-exp.
double SoftmaxRow(std::vector<double>* p, const double* q, const double* k,
                  int64_t i, int64_t h, int64_t start, int64_t Hq,
                  int64_t Hkv, int64_t d) {
  const int64_t kvh = h / (Hq / Hkv), keys = start + i + 1;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  p->assign(keys, 0.0);
  double max = -INFINITY;
  for (int64_t j = 0; j < keys; ++j) {
    (*p)[j] = scale * DotRow(q + (i * Hq + h) * d, k + (j * Hkv + kvh) * d, d);
    max = std::max(max, (*p)[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < keys; ++j) sum += std::exp((*p)[j] - max);
  for (int64_t j = 0; j < keys; ++j) (*p)[j] = std::exp((*p)[j] - max) / sum;
  return max + std::log(sum);
}

}  // namespace

void AttentionForwardRef(double* o, double* lse, const double* q,
                         const double* k, const double* v, int64_t s,
                         int64_t start, int64_t Hq, int64_t Hkv, int64_t d) {
  std::vector<double> p;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / (Hq / Hkv);
      lse[i * Hq + h] = SoftmaxRow(&p, q, k, i, h, start, Hq, Hkv, d);
      double* out = o + (i * Hq + h) * d;
      for (int64_t e = 0; e < d; ++e) out[e] = 0;
      for (int64_t j = 0; j < static_cast<int64_t>(p.size()); ++j) {
        for (int64_t e = 0; e < d; ++e) out[e] += p[j] * v[(j * Hkv + kvh) * d + e];
      }
    }
  }
}

void AttentionBackwardRef(double* dq, double* dk, double* dv, double* D,
                          const double* dO, const double* /*o*/,
                          const double* /*lse*/, const double* q,
                          const double* k, const double* v, int64_t s,
                          int64_t start, int64_t Hq, int64_t Hkv, int64_t d) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> p, out(d);
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = h / (Hq / Hkv);
      SoftmaxRow(&p, q, k, i, h, start, Hq, Hkv, d);
      const int64_t keys = static_cast<int64_t>(p.size());
      const double* g = dO + (i * Hq + h) * d;  // dO row
      std::fill(out.begin(), out.end(), 0.0);
      for (int64_t j = 0; j < keys; ++j) {
        for (int64_t e = 0; e < d; ++e) out[e] += p[j] * v[(j * Hkv + kvh) * d + e];
      }
      const double Di = DotRow(g, out.data(), d);
      D[i * Hq + h] = Di;
      double* dqi = dq + (i * Hq + h) * d;
      for (int64_t e = 0; e < d; ++e) dqi[e] = 0;
      for (int64_t j = 0; j < keys; ++j) {
        const double* kj = k + (j * Hkv + kvh) * d;
        const double dp = DotRow(g, v + (j * Hkv + kvh) * d, d);
        const double ds = p[j] * (dp - Di) * scale;  // d(score) times scale
        for (int64_t e = 0; e < d; ++e) {
          dqi[e] += ds * kj[e];
          dk[(j * Hkv + kvh) * d + e] += ds * q[(i * Hq + h) * d + e];
          dv[(j * Hkv + kvh) * d + e] += p[j] * g[e];
        }
      }
    }
  }
}

}  // namespace stateflow::backend

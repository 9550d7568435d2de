// Tiled causal attention (see attention.h for the math and the threading).
//
// Dimensions: s queries, start the first one's position, Hq, Hkv heads, d
// head dim, G = Hq / Hkv query heads per K/V head; Br x Bc a (query tile,
// key tile), r x c its valid part (partial tiles at the ends). A query row
// of tile i0 has position p = start + i0 + row; key column j = j0 + col.
#include "backend/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/kernels/eigen_types.h"
#include "backend/threading.h"

namespace stateflow::backend {
namespace {

template <typename T>
using RowArray = Eigen::Map<Eigen::Array<T, 1, Eigen::Dynamic>>;

// The sizes every tile function needs.
struct Geometry {
  int64_t s, start, Hq, Hkv, d, Br, Bc;
  int64_t group() const { return Hq / Hkv; }
  int64_t keys() const { return start + s; }
};

// Head h's rows [row0, row0 + n) of a (rows, H, d) buffer: (n, d), row
// stride H d.
template <typename T>
CSMat<T> HeadRows(const T* x, int64_t row0, int64_t n, int64_t h, int64_t H,
                  int64_t d) {
  return CSMat<T>(x + (row0 * H + h) * d, n, d, Eigen::OuterStride<>(H * d));
}
template <typename T>
SMat<T> HeadRows(T* x, int64_t row0, int64_t n, int64_t h, int64_t H,
                 int64_t d) {
  return SMat<T>(x + (row0 * H + h) * d, n, d, Eigen::OuterStride<>(H * d));
}

template <typename T>
T Scale(int64_t d) {
  return static_cast<T>(1.0 / std::sqrt(static_cast<double>(d)));
}

// S (r, c) := scale Q K^T with the causal mask (-inf where key > query);
// the same expression in the forward and the backward, so that both see the
// same scores. S's rows are Bc apart (a top-left block of the (Br, Bc)
// scratch).
template <typename T>
void Scores(RowMat<T>* S, const RowMat<T>& Q, int64_t r, const RowMat<T>& K,
            int64_t c, T scale, const Geometry& g, int64_t i0, int64_t j0) {
  auto Sb = S->topLeftCorner(r, c);
  Sb.noalias() = scale * (Q.topRows(r) * K.topRows(c).transpose());
  const int64_t first_pos = g.start + i0;
  if (j0 + c - 1 <= first_pos) return;  // every key of the tile is visible
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t row = 0; row < r; ++row) {
    const int64_t first_masked = first_pos + row - j0 + 1;  // column of key p+1
    for (int64_t col = std::max<int64_t>(first_masked, 0); col < c; ++col) {
      (*S)(row, col) = kNegInf;
    }
  }
}

// The first query tile with a query that sees key j0 (position >= j0).
int64_t FirstQueryTile(const Geometry& g, int64_t j0) {
  const int64_t i = std::max<int64_t>(0, j0 - g.start);
  return i / g.Br * g.Br;
}

// The key range a query tile [i0, i0 + r) sees: [0, start + i0 + r).
int64_t KeysSeen(const Geometry& g, int64_t i0, int64_t r) {
  return g.start + i0 + r;
}

// ---- forward -----------------------------------------------------------------

// Every product reads tiles copied into the thread's own scratch, never the
// caller's buffers: Eigen evaluates small products coefficient by
// coefficient with vectorised sums that peel to the operands' alignment, so
// products over the caller's buffers would give bits that depend on where
// those sit. The copies cost O(tile d) per O(tile^2 d) product.
template <typename T>
struct ForwardScratch {
  RowMat<T> Q;       // (Br, d) the query tile
  RowMat<T> K, V;    // (Bc, d) the key tile
  RowMat<T> S;       // (Br, Bc) scores, then probabilities (unnormalised)
  RowMat<T> acc;     // (Br, d) running sum of P V
  Vec<T> m, l;       // (Br) running row max and row sum of exp(S - m)
  Vec<T> m_new;      // (Br) the running max after this tile
  explicit ForwardScratch(const Geometry& g)
      : Q(g.Br, g.d), K(g.Bc, g.d), V(g.Bc, g.d), S(g.Br, g.Bc),
        acc(g.Br, g.d), m(g.Br), l(g.Br), m_new(g.Br) {}
};

// One (query head h, query tile i0) task: o and lse of its r rows.
template <typename T>
void ForwardTile(ForwardScratch<T>* w, T* o, T* lse, const T* q, const T* k,
                 const T* v, const Geometry& g, int64_t h, int64_t i0) {
  const int64_t r = std::min(g.Br, g.s - i0), kvh = h / g.group();
  const T scale = Scale<T>(g.d);
  w->Q.topRows(r) = HeadRows(q, i0, r, h, g.Hq, g.d);
  w->acc.topRows(r).setZero();
  w->m.head(r).setConstant(-std::numeric_limits<T>::infinity());
  w->l.head(r).setZero();
  const int64_t keys = KeysSeen(g, i0, r);
  for (int64_t j0 = 0; j0 < keys; j0 += g.Bc) {
    const int64_t c = std::min(g.Bc, keys - j0);
    w->K.topRows(c) = HeadRows(k, j0, c, kvh, g.Hkv, g.d);
    w->V.topRows(c) = HeadRows(v, j0, c, kvh, g.Hkv, g.d);
    Scores(&w->S, w->Q, r, w->K, c, scale, g, i0, j0);
    // Online softmax, row by row: the tile's row max joins the running max
    // (finite after the first tile, which holds key 0 that every query sees).
    // The exponentials, most of the work at small d, in one pass over the
    // whole tile when its rows are contiguous (c == Bc), else row by row.
    for (int64_t row = 0; row < r; ++row) {
      RowArray<T> srow(w->S.data() + row * g.Bc, c);
      w->m_new(row) = std::max(w->m(row), srow.maxCoeff());
      srow -= w->m_new(row);
    }
    if (c == g.Bc) {
      RowArray<T> all(w->S.data(), r * g.Bc);
      all = all.exp();
    } else {
      for (int64_t row = 0; row < r; ++row) {
        RowArray<T> srow(w->S.data() + row * g.Bc, c);
        srow = srow.exp();
      }
    }
    for (int64_t row = 0; row < r; ++row) {
      const T alpha = std::exp(w->m(row) - w->m_new(row));
      w->l(row) = alpha * w->l(row) + RowArray<T>(w->S.data() + row * g.Bc, c).sum();
      if (alpha != T(1)) w->acc.row(row) *= alpha;
      w->m(row) = w->m_new(row);
    }
    w->acc.topRows(r).noalias() += w->S.topLeftCorner(r, c) * w->V.topRows(c);
  }
  SMat<T> O = HeadRows(o, i0, r, h, g.Hq, g.d);
  for (int64_t row = 0; row < r; ++row) {
    O.row(row) = w->acc.row(row) / w->l(row);
    lse[(i0 + row) * g.Hq + h] = w->m(row) + std::log(w->l(row));
  }
}

int Lanes(int64_t tasks) { return LoopTeam(tasks); }

// ---- backward ----------------------------------------------------------------

// Tiles copied into scratch as in the forward.
template <typename T>
struct BackwardScratch {
  RowMat<T> Q, dO, dQ;  // (Br, d) the query tile, its dO, its dQ share
  RowMat<T> K, V;       // (Bc, d) the key tile
  RowMat<T> P;          // (Br, Bc) probabilities
  RowMat<T> dS;         // (Br, Bc) dO V^T, then scale dS
  RowMat<T> dK, dV;     // (Bc, d) the key tile's gradients over all its queries
  explicit BackwardScratch(const Geometry& g)
      : Q(g.Br, g.d), dO(g.Br, g.d), dQ(g.Br, g.d), K(g.Bc, g.d),
        V(g.Bc, g.d), P(g.Br, g.Bc), dS(g.Br, g.Bc), dK(g.Bc, g.d),
        dV(g.Bc, g.d) {}
};

// One (query head h, query tile i0) against the key tile [j0, j0 + c) in
// w->K, w->V: adds to w->dK, w->dV and to dq's rows.
template <typename T>
void BackwardTile(BackwardScratch<T>* w, T* dq, const T* D, const T* dO,
                  const T* lse, const T* q, int64_t c, const Geometry& g,
                  int64_t h, int64_t i0, int64_t j0) {
  const int64_t r = std::min(g.Br, g.s - i0);
  const T scale = Scale<T>(g.d);
  w->Q.topRows(r) = HeadRows(q, i0, r, h, g.Hq, g.d);
  w->dO.topRows(r) = HeadRows(dO, i0, r, h, g.Hq, g.d);
  const auto Q = w->Q.topRows(r);
  const auto dOt = w->dO.topRows(r);
  const auto K = w->K.topRows(c);
  const auto V = w->V.topRows(c);
  Scores(&w->P, w->Q, r, w->K, c, scale, g, i0, j0);
  for (int64_t row = 0; row < r; ++row) {
    RowArray<T>(w->P.data() + row * g.Bc, c) -= lse[(i0 + row) * g.Hq + h];
  }
  if (c == g.Bc) {  // one pass of exp over the tile, as in the forward
    RowArray<T> all(w->P.data(), r * g.Bc);
    all = all.exp();
  } else {
    for (int64_t row = 0; row < r; ++row) {
      RowArray<T> prow(w->P.data() + row * g.Bc, c);
      prow = prow.exp();
    }
  }
  const auto P = w->P.topLeftCorner(r, c);
  w->dV.topRows(c).noalias() += P.transpose() * dOt;
  auto dS = w->dS.topLeftCorner(r, c);
  dS.noalias() = dOt * V.transpose();  // dP
  for (int64_t row = 0; row < r; ++row) {
    const T Drow = D[(i0 + row) * g.Hq + h];
    RowArray<T> ds(w->dS.data() + row * g.Bc, c);
    ds = RowArray<T>(w->P.data() + row * g.Bc, c) * (ds - Drow) * scale;
  }
  w->dK.topRows(c).noalias() += dS.transpose() * Q;
  w->dQ.topRows(r).noalias() = dS * K;
  HeadRows(dq, i0, r, h, g.Hq, g.d) += w->dQ.topRows(r);
}

// K/V head kvh: its query heads' dq and D rows, and its dk, dv rows.
template <typename T>
void BackwardKvHead(BackwardScratch<T>* w, T* dq, T* dk, T* dv, T* D,
                    const T* dO, const T* o, const T* lse, const T* q,
                    const T* k, const T* v, const Geometry& g, int64_t kvh) {
  const int64_t h0 = kvh * g.group(), h1 = h0 + g.group();
  for (int64_t h = h0; h < h1; ++h) {
    HeadRows(dq, 0, g.s, h, g.Hq, g.d).setZero();
    // D = rowsum(dO o O) by a plain loop: Eigen's vectorised dot product
    // peels to the buffers' alignment, which would make the bits depend on
    // where the caller's buffers sit.
    for (int64_t i = 0; i < g.s; ++i) {
      const T* a = dO + (i * g.Hq + h) * g.d;
      const T* b = o + (i * g.Hq + h) * g.d;
      T sum = 0;
      for (int64_t e = 0; e < g.d; ++e) sum += a[e] * b[e];
      D[i * g.Hq + h] = sum;
    }
  }
  for (int64_t j0 = 0; j0 < g.keys(); j0 += g.Bc) {
    const int64_t c = std::min(g.Bc, g.keys() - j0);
    w->K.topRows(c) = HeadRows(k, j0, c, kvh, g.Hkv, g.d);
    w->V.topRows(c) = HeadRows(v, j0, c, kvh, g.Hkv, g.d);
    w->dK.topRows(c).setZero();
    w->dV.topRows(c).setZero();
    for (int64_t h = h0; h < h1; ++h) {
      for (int64_t i0 = FirstQueryTile(g, j0); i0 < g.s; i0 += g.Br) {
        BackwardTile(w, dq, D, dO, lse, q, c, g, h, i0, j0);
      }
    }
    HeadRows(dk, j0, c, kvh, g.Hkv, g.d) += w->dK.topRows(c);
    HeadRows(dv, j0, c, kvh, g.Hkv, g.d) += w->dV.topRows(c);
  }
}

}  // namespace

template <typename T>
void AttentionForward(T* o, T* lse, const T* q, const T* k, const T* v,
                      int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                      int64_t d, int64_t q_tile, int64_t k_tile) {
  const Geometry g{s, start, Hq, Hkv, d, q_tile, k_tile};
  const int64_t tiles = (s + q_tile - 1) / q_tile, tasks = Hq * tiles;
  const int lanes = Lanes(tasks);
  // Round-robin (static, 1): later query tiles see more keys, so neighbours
  // share the load; each task alone writes its rows.
#pragma omp parallel num_threads(lanes) if (lanes > 1)
  {
    ForwardScratch<T> scratch(g);
#pragma omp for schedule(static, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      ForwardTile(&scratch, o, lse, q, k, v, g, t % Hq, (t / Hq) * q_tile);
    }
  }
}

template <typename T>
void AttentionBackward(T* dq, T* dk, T* dv, T* D, const T* dO, const T* o,
                       const T* lse, const T* q, const T* k, const T* v,
                       int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                       int64_t d, int64_t q_tile, int64_t k_tile) {
  const Geometry g{s, start, Hq, Hkv, d, q_tile, k_tile};
  const int lanes = Lanes(Hkv);
#pragma omp parallel num_threads(lanes) if (lanes > 1)
  {
    BackwardScratch<T> scratch(g);
#pragma omp for schedule(static)
    for (int64_t kvh = 0; kvh < Hkv; ++kvh) {
      BackwardKvHead(&scratch, dq, dk, dv, D, dO, o, lse, q, k, v, g, kvh);
    }
  }
}

AttentionFlops CountAttentionFlops(int64_t s, int64_t start, int64_t Hq,
                                   int64_t d) {
  const double sd = static_cast<double>(s);
  const double pairs = sd * static_cast<double>(start) + sd * (sd + 1) / 2;
  const double per_pair = static_cast<double>(Hq) * static_cast<double>(d);
  return {4 * per_pair * pairs, 10 * per_pair * pairs};
}

#define SF_INSTANTIATE(T)                                                     \
  template void AttentionForward<T>(T*, T*, const T*, const T*, const T*,     \
                                    int64_t, int64_t, int64_t, int64_t,       \
                                    int64_t, int64_t, int64_t);               \
  template void AttentionBackward<T>(T*, T*, T*, T*, const T*, const T*,      \
                                     const T*, const T*, const T*, const T*,  \
                                     int64_t, int64_t, int64_t, int64_t,      \
                                     int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

#include "backend/kernels/embedding.h"

#include <cassert>
#include <string>

#include "backend/kernels/eigen_types.h"

namespace stateflow::backend {

Status CheckTokenIds(const int32_t* ids, int64_t R, int64_t V) {
  for (int64_t n = 0; n < R; ++n) {
    if (ids[n] < 0 || ids[n] >= V) {
      return Status::Invalid("token " + std::to_string(n) + ": id " +
                             std::to_string(ids[n]) +
                             " is outside the vocabulary [0, " +
                             std::to_string(V) + ")");
    }
  }
  return Status::Ok();
}

template <typename T>
void EmbeddingForward(T* y, const int32_t* ids, const T* table, int64_t R,
                      int64_t C, int64_t V) {
  Mat<T> Y(y, R, C);          // (R, C)
  CMat<T> E(table, V, C);     // (V, C)
  for (int64_t n = 0; n < R; ++n) {
    assert(ids[n] >= -1 && ids[n] < V);
    if (ids[n] < 0) {  // another tensor-parallel rank's row
      Y.row(n).setZero();
    } else {
      Y.row(n) = E.row(ids[n]);
    }
  }
}

template <typename T>
void EmbeddingBackward(T* dtable, const T* dy, const int32_t* ids, int64_t R,
                       int64_t C, int64_t V) {
  Mat<T> dE(dtable, V, C);    // (V, C)
  CMat<T> dY(dy, R, C);       // (R, C)
  for (int64_t n = 0; n < R; ++n) {
    assert(ids[n] >= -1 && ids[n] < V);
    if (ids[n] >= 0) dE.row(ids[n]) += dY.row(n);
  }
}

#define SF_INSTANTIATE(T)                                                  \
  template void EmbeddingForward<T>(T*, const int32_t*, const T*, int64_t, \
                                    int64_t, int64_t);                     \
  template void EmbeddingBackward<T>(T*, const T*, const int32_t*,         \
                                     int64_t, int64_t, int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
#undef SF_INSTANTIATE

void EmbeddingForwardRef(double* y, const int32_t* ids, const double* table,
                         int64_t R, int64_t C, int64_t /*V*/) {
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = table[ids[n] * C + c];
  }
}

void EmbeddingBackwardRef(double* dtable, const double* dy,
                          const int32_t* ids, int64_t R, int64_t C,
                          int64_t /*V*/) {
  for (int64_t n = 0; n < R; ++n) {
    for (int64_t c = 0; c < C; ++c) dtable[ids[n] * C + c] += dy[n * C + c];
  }
}

}  // namespace stateflow::backend

// Token embedding as a forward/backward kernel pair: the forward gathers rows
// of the table, the backward scatter-adds into the table's gradient. The plain
// float64 reference is beside it. Conventions as in linear.h.
// Not the output layer (output_loss.h); the table is not tied here.
//
//   EmbeddingForward<float>(y, ids, table, R, C, V);
//   EmbeddingBackward<float>(dtable, dy, ids, R, C, V);
//
// Dimensions: R tokens, C model width, V vocabulary size.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace stateflow::backend {

// Ok if every id is in [0, V); otherwise names the first bad position:
// "token 17: id 50300 is outside the vocabulary [0, 50257)". The kernels
// below only assert this, so call it where ids enter (data loading).
Status CheckTokenIds(const int32_t* ids, int64_t R, int64_t V);

// y (R, C) = table[ids[n]] for each n. ids (R), table (V, C).
// REQUIRES: CheckTokenIds(ids, R, V).ok().
template <typename T>
void EmbeddingForward(T* y, const int32_t* ids, const T* table, int64_t R,
                      int64_t C, int64_t V);

// dtable (V, C) += dy[n] at row ids[n], for each n (repeated ids add up).
template <typename T>
void EmbeddingBackward(T* dtable, const T* dy, const int32_t* ids, int64_t R,
                       int64_t C, int64_t V);

void EmbeddingForwardRef(double* y, const int32_t* ids, const double* table,
                         int64_t R, int64_t C, int64_t V);
void EmbeddingBackwardRef(double* dtable, const double* dy,
                          const int32_t* ids, int64_t R, int64_t C,
                          int64_t V);

}  // namespace stateflow::backend

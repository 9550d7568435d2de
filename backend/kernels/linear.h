// Linear layer y = x W^T (+ b) as a forward/backward kernel pair, with the
// plain float64 reference beside it (same arguments, same order).
//
// Conventions of every kernel in backend/kernels/: outputs first, then
// inputs, then sizes; input gradients (dx) are written (=), parameter
// gradients (dw, db) are accumulated (+=) so that several chunks or
// microbatches add into one gradient buffer. Buffers are dense row-major.
// Not a layer object: no parameters are owned here.
//
//   LinearForward<float>(y, x, w, b, R, C, D);
//   LinearBackward<float>(dx, dw, db, dy, x, w, R, C, D);
//
// Dimensions: R rows (tokens), C input features, D output features.
#pragma once

#include <cstdint>

namespace stateflow::backend {

// y (R, D) = x (R, C) * w (D, C)^T + b (D). b may be nullptr (no bias).
template <typename T>
void LinearForward(T* y, const T* x, const T* w, const T* b, int64_t R,
                   int64_t C, int64_t D);

// dx (R, C) = dy w (written; nullptr skips it), dw (D, C) += dy^T x
// (nullptr skips it), db (D) += column sums of dy (nullptr skips it). With a
// weight-gradient sink active (weight_grad_sink.h) dw and db go to the sink.
template <typename T>
void LinearBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w,
                    int64_t R, int64_t C, int64_t D);

// Plain float64 references (triple loops).
void LinearForwardRef(double* y, const double* x, const double* w,
                      const double* b, int64_t R, int64_t C, int64_t D);
void LinearBackwardRef(double* dx, double* dw, double* db, const double* dy,
                       const double* x, const double* w, int64_t R, int64_t C,
                       int64_t D);

}  // namespace stateflow::backend

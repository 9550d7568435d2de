// The causal short convolution, per channel, of width W (4 in GDN and
// Mamba-3), as a forward/backward kernel pair over one sequence chunk, with
// the plain float64 reference beside it. Conventions as in linear.h.
//
// Index convention (lag-indexed taps): y_t[c] = sum_{j=0}^{W-1} w[j][c] * x_{t-j}[c]
// so w[0] multiplies the current token and w[W-1] the oldest one.
//
// Boundary state (the "tail"): the last W-1 raw inputs before the chunk,
// tail[m] = x_{m-(W-1)} for m = 0..W-2 (oldest first; zeros at sequence
// start). The forward returns the tail for the next chunk: the last W-1 rows
// of [tail_in; x]. A chunk shorter than W-1 tokens works: its outgoing tail
// then mixes rows of the incoming tail and of the chunk. The backward turns
// d(tail_out) into d(tail_in), so running a sequence in chunks gives exactly
// the same outputs and gradients as running it at once.
// Not the activation that follows (silu.h) and no bias.
//
//   ShortConvForward<float>(y, tail_out, x, w, tail_in, T, C, W);
//   ShortConvBackward<float>(dx, dtail_in, dw, dy, dtail_out, x, w, tail_in, T, C, W);
//
// Dimensions: T tokens in the chunk, C channels, W taps.
#pragma once

#include <cstdint>

namespace stateflow::backend {

// y (T, C); tail_out (W-1, C) (nullptr skips it); x (T, C); w (W, C);
// tail_in (W-1, C) (nullptr means zeros: the sequence start).
// REQUIRES: W >= 1, T >= 0; y does not alias x, tail_out does not alias
// tail_in.
template <typename T>
void ShortConvForward(T* y, T* tail_out, const T* x, const T* w,
                      const T* tail_in, int64_t T_len, int64_t C, int64_t W);

// dx (T, C) written; dtail_in (W-1, C) written (nullptr skips it);
// dw (W, C) accumulated; dy (T, C); dtail_out (W-1, C) (nullptr means zeros:
// the last chunk of a sequence); x, w, tail_in as in the forward.
template <typename T>
void ShortConvBackward(T* dx, T* dtail_in, T* dw, const T* dy,
                       const T* dtail_out, const T* x, const T* w,
                       const T* tail_in, int64_t T_len, int64_t C, int64_t W);

void ShortConvForwardRef(double* y, double* tail_out, const double* x,
                         const double* w, const double* tail_in,
                         int64_t T_len, int64_t C, int64_t W);
void ShortConvBackwardRef(double* dx, double* dtail_in, double* dw,
                          const double* dy, const double* dtail_out,
                          const double* x, const double* w,
                          const double* tail_in, int64_t T_len, int64_t C,
                          int64_t W);

}  // namespace stateflow::backend

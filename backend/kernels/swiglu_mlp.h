// The SwiGLU MLP, y = down(silu(gate(x)) * up(x)), without biases, as a
// forward/backward kernel pair with the plain float64 reference beside it.
// Conventions as in linear.h (outputs first; dx written, weight gradients
// accumulated). Not the pre-norm or the residual: the block adds those.
//
//   SwigluMlpForward<float>(y, gate, up, h, x, wg, wu, wd, R, C, F);
//   SwigluMlpBackward<float>(dx, dwg, dwu, dwd, ws, dy, gate, up, x, wg, wu, wd, R, C, F);
//
// Dimensions: R tokens, C model width, F hidden (intermediate) width.
#pragma once

#include <cstdint>

namespace stateflow::backend {

// gate (R, F) = x wg^T, up (R, F) = x wu^T   (saved for the backward)
// h    (R, F) = silu(gate) * up               (workspace; not needed later)
// y    (R, C) = h wd^T
// x (R, C), wg (F, C), wu (F, C), wd (C, F).
template <typename T>
void SwigluMlpForward(T* y, T* gate, T* up, T* h, const T* x, const T* wg,
                      const T* wu, const T* wd, int64_t R, int64_t C,
                      int64_t F);

// dx (R, C) written; dwg (F, C), dwu (F, C), dwd (C, F) accumulated.
// workspace: (2, R, F), overwritten. gate, up: saved by the forward.
template <typename T>
void SwigluMlpBackward(T* dx, T* dwg, T* dwu, T* dwd, T* workspace,
                       const T* dy, const T* gate, const T* up, const T* x,
                       const T* wg, const T* wu, const T* wd, int64_t R,
                       int64_t C, int64_t F);

void SwigluMlpForwardRef(double* y, double* gate, double* up, double* h,
                         const double* x, const double* wg, const double* wu,
                         const double* wd, int64_t R, int64_t C, int64_t F);
void SwigluMlpBackwardRef(double* dx, double* dwg, double* dwu, double* dwd,
                          double* workspace, const double* dy,
                          const double* gate, const double* up,
                          const double* x, const double* wg, const double* wu,
                          const double* wd, int64_t R, int64_t C, int64_t F);

}  // namespace stateflow::backend

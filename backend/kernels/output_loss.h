// The output layer and cross-entropy loss, computed over vocabulary slices so
// that the full (R, V) logits never exist at once: the forward keeps an
// online logsumexp per token across slices; the backward recomputes each
// slice's logits and turns them into dx and dW slice by slice. Only an
// (R, Vs) logits workspace is ever live. The plain float64 reference beside
// it materialises all logits. Conventions as in linear.h.
// Not the final norm (rmsnorm.h) and not label smoothing or ignore-indices.
//
//   double mean_loss = OutputLossForward<float>(losses, lse, logits_ws, x, w, targets, R, C, V, Vs);
//   OutputLossBackward<float>(dx, dw, logits_ws, dlosses, lse, x, w, targets, R, C, V, Vs);
//
// Dimensions: R tokens, C model width, V vocabulary size, Vs slice width
// (slices [0, Vs), [Vs, 2 Vs), ...; the last one may be narrower).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// Per token n: loss_n = logsumexp_v(x_n . w_v) - x_n . w_{targets[n]}.
// losses (R): loss_n (written; nullptr skips it).
// lse (R): logsumexp_v(x_n . w_v), saved for the backward.
// logits (R, Vs): workspace (BufferClass::kLogits), overwritten.
// x (R, C), w (V, C), targets (R) in [0, V).
// Returns the MEAN of loss_n over the R tokens (0 if R == 0); the sum over
// several calls is obtained from `losses`.
// REQUIRES: 1 <= Vs; targets checked with CheckTokenIds (embedding.h).
template <typename T>
double OutputLossForward(T* losses, T* lse, T* logits, const T* x, const T* w,
                         const int32_t* targets, int64_t R, int64_t C,
                         int64_t V, int64_t Vs);

// dlosses (R): d(objective)/d(loss_n), e.g. 1/R for the mean of this call, or
// 1/(tokens of the whole sequence) when a sequence is split into chunks.
// dx (R, C) written (nullptr skips it), dw (V, C) accumulated,
// logits (R, Vs) workspace overwritten. lse: from the forward.
template <typename T>
void OutputLossBackward(T* dx, T* dw, T* logits, const T* dlosses,
                        const T* lse, const T* x, const T* w,
                        const int32_t* targets, int64_t R, int64_t C,
                        int64_t V, int64_t Vs);

// References: all (R, V) logits at once (the workspace `logits` is unused).
double OutputLossForwardRef(double* losses, double* lse, double* logits,
                            const double* x, const double* w,
                            const int32_t* targets, int64_t R, int64_t C,
                            int64_t V, int64_t Vs);
void OutputLossBackwardRef(double* dx, double* dw, double* logits,
                           const double* dlosses, const double* lse,
                           const double* x, const double* w,
                           const int32_t* targets, int64_t R, int64_t C,
                           int64_t V, int64_t Vs);

}  // namespace stateflow::backend

// The output layer and cross-entropy loss, computed over vocabulary slices so
// that the full (N, V) logits never exist at once: the forward keeps an
// online logsumexp per token across slices; the backward recomputes each
// slice's logits and turns them into dx and dW slice by slice. Only an
// (N, Vs) logits workspace is ever live. The plain float64 reference beside
// it materialises all logits. Conventions as in linear.h.
// Not the final norm (rmsnorm.h) and not label smoothing or ignore-indices.
//
//   double mean_loss = OutputLossForward<float>(losses, lse, logits_ws, x, w, targets, N, C, V, Vs);
//   OutputLossBackward<float>(dx, dw, logits_ws, dlosses, lse, x, w, targets, N, C, V, Vs);
//
// Dimensions: N tokens, C model width, V vocabulary size, Vs slice width
// (slices [0, Vs), [Vs, 2 Vs), ...; the last one may be narrower).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// Per token n: loss_n = logsumexp_v(x_n . w_v) - x_n . w_{targets[n]}.
// losses (N): loss_n (written; nullptr skips it).
// lse (N): logsumexp_v(x_n . w_v), saved for the backward.
// logits (N, Vs): workspace (BufferClass::kLogits), overwritten.
// x (N, C), w (V, C), targets (N) in [0, V).
// Returns the MEAN of loss_n over the N tokens (0 if N == 0); the sum over
// several calls is obtained from `losses`.
// REQUIRES: 1 <= Vs; targets checked with CheckTokenIds (embedding.h).
template <typename T>
double OutputLossForward(T* losses, T* lse, T* logits, const T* x, const T* w,
                         const int32_t* targets, int64_t N, int64_t C,
                         int64_t V, int64_t Vs);

// dlosses (N): d(objective)/d(loss_n), e.g. 1/N for the mean of this call, or
// 1/(tokens of the whole sequence) when a sequence is split into chunks.
// dx (N, C) written (nullptr skips it), dw (V, C) accumulated,
// logits (N, Vs) workspace overwritten. lse: from the forward.
template <typename T>
void OutputLossBackward(T* dx, T* dw, T* logits, const T* dlosses,
                        const T* lse, const T* x, const T* w,
                        const int32_t* targets, int64_t N, int64_t C,
                        int64_t V, int64_t Vs);

// References: all (N, V) logits at once (the workspace `logits` is unused).
double OutputLossForwardRef(double* losses, double* lse, double* logits,
                            const double* x, const double* w,
                            const int32_t* targets, int64_t N, int64_t C,
                            int64_t V, int64_t Vs);
void OutputLossBackwardRef(double* dx, double* dw, double* logits,
                           const double* dlosses, const double* lse,
                           const double* x, const double* w,
                           const int32_t* targets, int64_t N, int64_t C,
                           int64_t V, int64_t Vs);

}  // namespace stateflow::backend

// Causal softmax attention for ONE sequence, as a forward/backward kernel pair
// in the FlashAttention-2 form (tiled, online softmax: no (s, start + s)
// score matrix ever exists, only one (Q_TILE, K_TILE) tile per thread), with
// the plain float64 reference beside it (attention_ref.cc).
//
// The chunk's queries q (s rows) sit at absolute positions start..start+s-1 of
// the sequence; k, v are the sequence's first start + s rows (a prefix of the
// layer's K/V buffer). The query at position p attends to keys 0..p:
//   o_p = sum_{j <= p} softmax_j(scale q_p . k_j) v_j,   scale = d^{-1/2},
//   lse_p = log sum_{j <= p} exp(scale q_p . k_j)         (saved for backward).
// GQA: query head h reads K/V head h / (Hq / Hkv).
//
// Backward (given dO, and the forward's o and lse): dq is written; dk and dv
// are ADDED to, so that the backward of every chunk of a sequence (run
// N-1..0) accumulates into the sequence-wide gradient buffers, each chunk into
// rows 0..start+s-1. Per tile, with P = exp(scale Q K^T - lse) (causal
// mask), D = rowsum(dO o O) (the caller's workspace, (s, Hq)):
//   dV += P^T dO,  dS = P o (dO V^T - D),  dQ += scale dS K,  dK += scale dS^T Q.
//
// Threads (backend/threading.h): the forward runs its (query head, query
// tile) tasks round-robin on KernelThreads() lanes, each task alone writing
// its rows of o and lse; the backward runs one K/V head per task, which alone
// writes that head's rows of dk, dv and its query heads' rows of dq. No sum
// is ever split across threads, and every product reads tiles copied into
// the thread's own aligned scratch (never the caller's buffers, whose
// alignment would steer Eigen's vectorised sums), so results are the same
// bits for any thread count and wherever the buffers sit. Per-thread tile
// scratch (O(Q_TILE K_TILE + (Q_TILE + K_TILE) d) elements) lives in Eigen
// matrices and is not tracked (as GDN's per-block scratch); the only tracked
// workspace is D.
//
// Not the projections, the rotary embedding (rope.h) or the K/V buffer
// (backend/layers/attention_layer.h).
//
//   AttentionForward<float>(o, lse, q, k, v, s, start, Hq, Hkv, d);
//   AttentionBackward<float>(dq, dk, dv, D, dO, o, lse, q, k, v, s, start, Hq, Hkv, d);
//
// Dimensions: s queries of the chunk, start its first position (so k and v
// have start + s rows), Hq query heads, Hkv K/V heads (Hq a multiple of Hkv),
// d head dim. Layouts: q, o, dq (s, Hq, d); k, v, dk, dv (start + s, Hkv, d);
// lse, D (s, Hq).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// Tile sizes: queries and keys per tile (tests pass smaller ones).
inline constexpr int64_t kAttentionQueryTile = 64;
inline constexpr int64_t kAttentionKeyTile = 64;

// o (s, Hq, d), lse (s, Hq) written. REQUIRES: s, start >= 0, Hq % Hkv == 0,
// d >= 1, tiles >= 1.
template <typename T>
void AttentionForward(T* o, T* lse, const T* q, const T* k, const T* v,
                      int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                      int64_t d, int64_t q_tile = kAttentionQueryTile,
                      int64_t k_tile = kAttentionKeyTile);

// dq (s, Hq, d) written; dk, dv (start + s, Hkv, d) added to; D (s, Hq)
// workspace (overwritten). dO (s, Hq, d); o, lse from AttentionForward on the
// same q, k, v. REQUIRES: as the forward.
template <typename T>
void AttentionBackward(T* dq, T* dk, T* dv, T* D, const T* dO, const T* o,
                       const T* lse, const T* q, const T* k, const T* v,
                       int64_t s, int64_t start, int64_t Hq, int64_t Hkv,
                       int64_t d, int64_t q_tile = kAttentionQueryTile,
                       int64_t k_tile = kAttentionKeyTile);

// The useful floating-point operations (matrix products as 2mnk over the
// causal pairs only, pairs = s start + s (s + 1) / 2; masked tile entries,
// exps and elementwise work not counted), the usual FlashAttention count:
//   forward  = 4 d Hq pairs    (S = Q K^T, P V)
//   backward = 10 d Hq pairs   (S again, dP = dO V^T, dV, dQ, dK)
struct AttentionFlops {
  double forward = 0;
  double backward = 0;
};
AttentionFlops CountAttentionFlops(int64_t s, int64_t start, int64_t Hq,
                                   int64_t d);

// ---- float64 reference: one query row at a time, plain loops --------------

// Same arguments as AttentionForward (no tiles): the scores of one query row
// materialised, max-subtracted softmax.
void AttentionForwardRef(double* o, double* lse, const double* q,
                         const double* k, const double* v, int64_t s,
                         int64_t start, int64_t Hq, int64_t Hkv, int64_t d);

// Same arguments as AttentionBackward (no tiles). It reads only q, k, v and
// dO: the softmax, o and D are recomputed from scratch per row (o and lse are
// ignored), so it does not share the fast kernel's assumptions. D is written
// (rowsum(dO o O) of its own O).
void AttentionBackwardRef(double* dq, double* dk, double* dv, double* D,
                          const double* dO, const double* o,
                          const double* lse, const double* q, const double* k,
                          const double* v, int64_t s, int64_t start,
                          int64_t Hq, int64_t Hkv, int64_t d);

}  // namespace stateflow::backend

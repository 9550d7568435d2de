// The Kimi Delta Attention (KDA) recurrence core, per head, in chunkwise form
// over blocks of T_C tokens (kKdaBlockSize = 64), as a forward/backward pair,
// with the token-by-token float64 reference beside it (docs/kda-kernel.md
// derives the math). KDA is the gated delta rule of gdn_core.h with a
// per-channel (diagonal) decay instead of a scalar one. Per head, with S the
// (d_v, d_k) state:
//   S_t = S_{t-1} D_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,
//   o_t = S_t q_t,          D_t = diag(exp(g_t)),  g_t in R^{d_k},
// where g (log decay per key channel, from kda_prep.h; <= 0 in practice, not
// assumed), beta and the L2-normalised (and, for q, scaled) q, k come from
// the layer. The core takes the state entering the chunk (S_in, the boundary
// state) and returns the state leaving it (S_out), so that a sequence run
// chunk by chunk is exact; its backward turns d(S_out) into d(S_in).
//
// Each block is processed by the paper's three functions (Pre, ST, Out):
//   Pre  (block-parallel): cumulative log decays G (per channel), the
//        pairwise decayed products KK and P, the keys decayed to the block's
//        end, and the UT/WY transform W, U of the block's delta-rule updates;
//   ST   (sequential):     V_new = U - W S^T and the state leaving the block;
//   Out  (block-parallel): o from the entering state and the intra-block
//        causal attention P over V_new.
// Every pairwise decay is exp(G_r - G_s) with s <= r, computed as one
// exponential (never exp(G_r) exp(-G_s), which overflows for strong decays),
// so Pre costs O(L^2 d_k) exponentials per block.
// Block-level gradients come from the matching *Backward functions.
//
// Saved for the backward: only the core's inputs q, k, v, g, beta, S_in (the
// layer's activations). The backward replays the block-entering states from
// S_in into a caller-provided workspace of KdaCoreBackwardWorkspaceSize
// elements (BufferClass::kWorkspace) and recomputes Pre per block. Small
// per-block scratch, O(T_C (T_C + d_k + d_v) + d_v d_k) elements, lives in
// Eigen temporaries and is not tracked.
//
// Not the projections, short convolution, gate (kda_prep.h) or output norm
// of the layer.
//
//   KdaCoreForward<float>(o, S_out, q, k, v, g, beta, S_in, T, H, Dk, Dv);
//   KdaCoreBackward<float>(dq, dk, dv, dg, dbeta, dS_in, ws, dO, dS_out, q, k, v, g, beta, S_in, T, H, Dk, Dv);
//
// Dimensions: T tokens in the chunk, H heads, Dk key/query dim (d_k), Dv
// value dim (d_v), L tokens in one block (T_C, or fewer for the last block).
// Layouts: q, k, g (T, H, Dk); v, o (T, H, Dv); beta (T, H); S (H, Dv, Dk).
#pragma once

#include <cstdint>

#include "backend/kernels/eigen_types.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

inline constexpr int64_t kKdaBlockSize = 64;  // T_C

// ---- block level (one head, one block of L tokens) -------------------------

// Omega_i: what Pre computes for ST and Out (and the backward).
template <typename T>
struct KdaBlockOmega {
  RowMat<T> G;   // (L, Dk) G_r = g_0 + ... + g_r per channel (cumulative)
  RowMat<T> KK;  // (L, L) sum_c k_rc k_sc exp(G_rc - G_sc) for s < r, else 0
  RowMat<T> P;   // (L, L) sum_c q_rc k_sc exp(G_rc - G_sc) for s <= r, else 0
  RowMat<T> Kt;  // (L, Dk) k_s o exp(G_{L-1} - G_s): keys decayed to the end
  RowMat<T> W;   // (L, Dk) (I + A)^{-1} diag(beta) (K o exp(G))
  RowMat<T> U;   // (L, Dv) (I + A)^{-1} diag(beta) V,  A = diag(beta) KK
};

// Q, K (L, Dk), V (L, Dv), g (L, Dk), beta (L) -> *omega (resized to L).
// REQUIRES: L >= 1.
template <typename T>
void KdaBlockPre(KdaBlockOmega<T>* omega, CMatRef<T> Q, CMatRef<T> K,
                 CMatRef<T> V, CMatRef<T> g, CVecRef<T> beta);

// V_new (L, Dv) = U - W S_in^T;
// S_out (Dv, Dk) = S_in diag(exp(G_{L-1})) + V_new^T Kt.
// REQUIRES: S_out does not alias S_in.
template <typename T>
void KdaBlockST(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                const KdaBlockOmega<T>& omega);

// KdaBlockST on the value rows [j0, j0 + n) of the state alone (columns of
// V_new, rows of S_out and S_in): V_new[:, j] and S_out[j] read only
// S_in[j], so the state's rows split into independent tiles of B_V rows
// (schedule.st_tile). KdaBlockST is this function on all Dv rows.
template <typename T>
void KdaBlockSTRows(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                    const KdaBlockOmega<T>& omega, int64_t j0, int64_t n);

// O (L, Dv) = (Q o exp(G)) S_in^T + P V_new.
template <typename T>
void KdaBlockOut(MatRef<T> O, CMatRef<T> Q, CMatRef<T> V_new,
                 CMatRef<T> S_in, const KdaBlockOmega<T>& omega);

// Gradients of one block, accumulated by the three backward functions.
template <typename T>
struct KdaBlockGrads {
  RowMat<T> dQ;     // (L, Dk)
  RowMat<T> dK;     // (L, Dk)
  RowMat<T> dV;     // (L, Dv)
  RowMat<T> dG;     // (L, Dk) w.r.t. the cumulative G (dg = reverse cumsum)
  Vec<T> dbeta;     // (L)
  void SetZero(int64_t L, int64_t Dk, int64_t Dv);
};

// Given dO (L, Dv): dV_new (L, Dv) written; dS_in (Dv, Dk) added;
// grads->dQ, dK, dG added.
template <typename T>
void KdaBlockOutBackward(KdaBlockGrads<T>* grads, MatRef<T> dV_new,
                         MatRef<T> dS_in, CMatRef<T> dO, CMatRef<T> Q,
                         CMatRef<T> K, CMatRef<T> V_new, CMatRef<T> S_in,
                         const KdaBlockOmega<T>& omega);

// Given dS_out (Dv, Dk) and dV_new (L, Dv) from Out (to which ST's share is
// added, making it dU): dW (L, Dk) written; dS_in added; grads->dK, dG added.
// st_tile B_V in (0, Dv): the state gradient's chain (dS_in, dV_new, row by
// row of the state) runs tile by tile of B_V rows, then the sums over all
// rows (dK, dG, dW); equal to the untiled order within rounding.
template <typename T>
void KdaBlockSTBackward(KdaBlockGrads<T>* grads, MatRef<T> dW,
                        MatRef<T> dS_in, MatRef<T> dV_new,
                        CMatRef<T> dS_out, CMatRef<T> V_new, CMatRef<T> S_in,
                        const KdaBlockOmega<T>& omega, CMatRef<T> K,
                        int64_t st_tile = 0);

// Given dU (L, Dv) and dW (L, Dk): grads->dK, dV, dG, dbeta added.
template <typename T>
void KdaBlockPreBackward(KdaBlockGrads<T>* grads, CMatRef<T> dU,
                         CMatRef<T> dW, CMatRef<T> K, CMatRef<T> V,
                         CVecRef<T> beta, const KdaBlockOmega<T>& omega);

// ---- the core over a chunk of T tokens, H heads ---------------------------

// o (T, H, Dv); S_out (H, Dv, Dk) (nullptr skips it); q, k, g (T, H, Dk);
// v (T, H, Dv); beta (T, H); S_in (H, Dv, Dk) (nullptr means zeros: the
// sequence start). block_size: T_C (tests use small ones). T may be any
// length >= 0 (T = 0 hands S_in on as S_out); the last block is partial when
// T is not a multiple of T_C. st_tile: B_V, ST's tile of the state's value
// rows (KdaBlockSTRows); 0 or >= Dv: untiled; otherwise equal to the
// untiled results within rounding (< 1e-12 relative in float64).
// Heads run on LoopTeam(H) lanes (backend/threading.h), each lane a fixed
// range of heads (static schedule), so the results never depend on timing:
// the same bits from run to run at any thread count. Each block's rows are
// copied into owned (aligned) matrices before any arithmetic, so the bits do
// not depend on the addresses of the caller's buffers either (Eigen's
// vectorised loops peel scalar iterations up to an aligned address).
template <typename T>
void KdaCoreForward(T* o, T* S_out, const T* q, const T* k, const T* v,
                    const T* g, const T* beta, const T* S_in, int64_t T_len,
                    int64_t H, int64_t Dk, int64_t Dv,
                    int64_t block_size = kKdaBlockSize, int64_t st_tile = 0);

// The same forward with split-and-overlap (the paper's section 3.4) on
// KernelThreads() threads: per head, block b's Pre, ST and Out are OpenMP
// tasks, ST(b) after Pre(b) and ST(b - 1), Out(b) after ST(b), so that while
// one thread runs a block's sequential ST others run the Pre of later
// blocks and the Out of earlier ones (of every head). Blocks cycle through
// kKdaOverlapSlots slots per head (Omega, V_new, entering state), so the
// untracked scratch stays O(slots (T_C (T_C + Dk + Dv) + Dv Dk)) per head
// whatever T. Each block runs the same Pre / ST / Out arithmetic on the same
// owned copies of its inputs as KdaCoreForward: the same bits, partial
// blocks included. With st_tile B_V in (0, Dv), a block's ST is one task per
// tile of B_V state rows, tile j of block b after tile j of block b - 1 only
// (Out(b) after all of block b's tiles); the same bits as KdaCoreForward
// with that st_tile.
inline constexpr int64_t kKdaOverlapSlots = 4;
template <typename T>
void KdaCoreForwardOverlapped(T* o, T* S_out, const T* q, const T* k,
                              const T* v, const T* g, const T* beta,
                              const T* S_in, int64_t T_len, int64_t H,
                              int64_t Dk, int64_t Dv,
                              int64_t block_size = kKdaBlockSize,
                              int64_t st_tile = 0);

// Elements of the backward's workspace: per head, the (ceil(T / T_C), Dv, Dk)
// states entering each of its blocks: H * ceil(T / T_C) * Dv * Dk, whatever
// the thread count (so the memory ledger never depends on it).
int64_t KdaCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                     int64_t Dv,
                                     int64_t block_size = kKdaBlockSize);

// dq, dk, dg (T, H, Dk), dv (T, H, Dv), dbeta (T, H), dS_in (H, Dv, Dk):
// written (dS_in nullptr skips it). workspace: KdaCoreBackwardWorkspaceSize
// elements. dO (T, H, Dv); dS_out (H, Dv, Dk) (nullptr means zeros: the last
// chunk of a sequence). The rest as in the forward.
template <typename T>
void KdaCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                     T* workspace, const T* dO, const T* dS_out, const T* q,
                     const T* k, const T* v, const T* g, const T* beta,
                     const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                     int64_t Dv, int64_t block_size = kKdaBlockSize,
                     int64_t st_tile = 0);

// The same backward with split-and-overlap on KernelThreads() threads: per
// head, after the replay of its entering states (one task per head), block
// b's backward is three OpenMP tasks, blocks last to first: Out(b) (Pre
// recomputed, V_new, the Out backward: no state gradient needed), ST(b)
// after Out(b) and ST(b + 1) (the sequential chain of the state gradient),
// Pre(b) after ST(b) (the Pre backward and the block's gradient rows).
// Blocks cycle through kKdaOverlapSlots scratch slots per head. The same
// workspace and the same per-block arithmetic in the same order as
// KdaCoreBackward: the same bits. st_tile: as in KdaCoreBackward (a block's
// ST backward walks its tiles in one task).
template <typename T>
void KdaCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                               T* workspace, const T* dO, const T* dS_out,
                               const T* q, const T* k, const T* v, const T* g,
                               const T* beta, const T* S_in, int64_t T_len,
                               int64_t H, int64_t Dk, int64_t Dv,
                               int64_t block_size = kKdaBlockSize,
                               int64_t st_tile = 0);

// ---- the core phase by phase (for timing: core_phase.h) --------------------

// KdaCoreForward run one phase at a time: calling it with kPre, kST, kOut in
// that order, on the same arguments and workspace, gives KdaCoreForward's o
// and S_out bit for bit (each block runs the same Pre / ST / Out arithmetic;
// what one phase hands the next is copied exactly through the workspace).
// kPre reads q, k, v, g, beta; kST also S_in and writes S_out; kOut writes
// o. Heads in parallel on LoopTeam(H) lanes in every phase.
// workspace: KdaCoreForwardPhaseWorkspaceSize elements, per (head, block) a
// slot holding its Omega, V_new and entering state:
//   H ceil(T / T_C) (T_C (2 T_C + 3 Dk + 2 Dv) + Dv Dk).
// Not for training (the ordinary forward keeps this on the heap, per block).
int64_t KdaCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                         int64_t Dv,
                                         int64_t block_size = kKdaBlockSize);
template <typename T>
void KdaCoreForwardPhase(CorePhase phase, T* o, T* S_out, T* workspace,
                         const T* q, const T* k, const T* v, const T* g,
                         const T* beta, const T* S_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size = kKdaBlockSize,
                         int64_t st_tile = 0);

// KdaCoreBackward one phase at a time (core_phase.h: kPre = replay, Pre
// recomputed and the Out backward; kST = the state-gradient chain; kOut =
// the Pre backward and the gradient rows): in order on the same arguments
// and workspace, KdaCoreBackward's outputs bit for bit. dS_in is written by
// kST, dq, dk, dv, dg, dbeta by kOut. workspace:
// KdaCoreBackwardPhaseWorkspaceSize elements: KdaCoreBackwardWorkspaceSize's
// entering states, then per (head, block) a slot with its Omega, V_new, the
// gradients of V_new, W and its entering state, and its gradient rows:
//   H ceil(T / T_C) (2 Dv Dk + T_C (1 + 2 T_C + 7 Dk + 4 Dv)).
int64_t KdaCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                          int64_t Dk, int64_t Dv,
                                          int64_t block_size = kKdaBlockSize);
template <typename T>
void KdaCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                          T* dbeta, T* dS_in, T* workspace, const T* dO,
                          const T* dS_out, const T* q, const T* k, const T* v,
                          const T* g, const T* beta, const T* S_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size = kKdaBlockSize,
                          int64_t st_tile = 0);

// The floating-point operations the chunkwise algorithm executes (matrix
// products counted as 2mnk; a pairwise decayed product sum_c a_c b_c e_c as
// 2 Dk per pair (s <= r for P, s < r for KK), and each of its two gradients
// likewise; unit-triangular solves as L(L-1) per right-hand side column;
// elementwise work and exps not counted). Per block of L tokens:
//   Pre = 2 L^2 Dk + L(L-1)(Dk + Dv)          (KK and P pairs, two solves)
//   ST  = 4 L Dk Dv                           (W S^T, V_new^T Kt)
//   Out = 2 L Dk Dv + 2 L^2 Dv                (Q S^T, P V_new)
//   forward  = Pre + ST + Out
//   backward = Pre + 2 L Dk Dv                        (recompute, V_new)
//            + 4 L^2 Dv + 4 L Dk Dv + 2 L(L+1) Dk     (Out backward)
//            + 8 L Dk Dv                              (ST backward)
//            + L(L-1)(Dk + Dv) + 2 L^2 (Dk + Dv) + 2 L(L-1) Dk   (Pre backward)
//            + Pre + ST for every block but the last  (the replay)
// summed over blocks and multiplied by H.
struct KdaCoreFlops {
  double forward = 0;
  double backward = 0;
};
KdaCoreFlops CountKdaCoreFlops(int64_t T_len, int64_t H, int64_t Dk,
                               int64_t Dv, int64_t block_size = kKdaBlockSize);

// ---- float64 reference: the recurrence token by token ----------------------

// Same arguments as KdaCoreForward (no block size): S_t and o_t token by
// token.
void KdaCoreForwardRef(double* o, double* S_out, const double* q,
                       const double* k, const double* v, const double* g,
                       const double* beta, const double* S_in, int64_t T_len,
                       int64_t H, int64_t Dk, int64_t Dv);

// Same arguments as KdaCoreBackward (the workspace is unused and may be
// nullptr; the reference keeps all T states itself): reverse mode through
// time.
void KdaCoreBackwardRef(double* dq, double* dk, double* dv, double* dg,
                        double* dbeta, double* dS_in, double* workspace,
                        const double* dO, const double* dS_out,
                        const double* q, const double* k, const double* v,
                        const double* g, const double* beta,
                        const double* S_in, int64_t T_len, int64_t H,
                        int64_t Dk, int64_t Dv);

}  // namespace stateflow::backend

// The Gated DeltaNet recurrence core, per head, in chunkwise form over blocks
// of T_C tokens (kGdnBlockSize = 64), as a forward/backward pair, with the
// token-by-token float64 reference beside it (docs/gdn-kernel.md derives the
// math). Per head, with S the (d_v, d_k) state:
//   S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,
//   o_t = S_t q_t,          alpha_t = exp(g_t),
// where g (log decay), beta, and the L2-normalised (and, for q, scaled) q, k
// come from gdn_prep.h. The core takes the state entering the chunk (S_in,
// the boundary state) and returns the state leaving it (S_out), so that a
// sequence run chunk by chunk is exact; its backward turns d(S_out) into
// d(S_in).
//
// Each block is processed by the paper's three functions (Pre, ST, Out):
//   Pre  (block-parallel): cumulative log decays G, the decay matrix Gam and
//        the UT/WY transform W, U of the block's delta-rule updates;
//   ST   (sequential):     V_new = U - W S^T and the state leaving the block;
//   Out  (block-parallel): o from the entering state and the intra-block
//        causal attention over V_new.
// Block-level gradients come from the matching *Backward functions.
//
// Saved for the backward: only the core's inputs q, k, v, g, beta, S_in (the
// layer's activations). The backward replays the block-entering states from
// S_in into a caller-provided workspace of GdnCoreBackwardWorkspaceSize
// elements (BufferClass::kWorkspace) and recomputes Pre per block. Small
// per-block scratch, O(T_C (T_C + d_k + d_v) + d_v d_k) elements, lives in
// Eigen temporaries and is not tracked.
//
// Not the projections, short convolution, gates or output norm of the layer.
//
//   GdnCoreForward<float>(o, S_out, q, k, v, g, beta, S_in, T, H, Dk, Dv);
//   GdnCoreBackward<float>(dq, dk, dv, dg, dbeta, dS_in, ws, dO, dS_out, q, k, v, g, beta, S_in, T, H, Dk, Dv);
//
// Dimensions: T tokens in the chunk, H heads, Dk key/query dim (d_k), Dv
// value dim (d_v), L tokens in one block (T_C, or fewer for the last block).
// Layouts: q, k (T, H, Dk); v, o (T, H, Dv); g, beta (T, H); S (H, Dv, Dk).
#pragma once

#include <cstdint>

#include "backend/kernels/eigen_types.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

inline constexpr int64_t kGdnBlockSize = 64;  // T_C

// ---- block level (one head, one block of L tokens) -------------------------

// Omega_i: what Pre computes for ST and Out (and the backward).
template <typename T>
struct GdnBlockOmega {
  Vec<T> G;       // (L)    G_r = g_0 + ... + g_r, cumulative log decay
  RowMat<T> Gam;  // (L, L) exp(G_r - G_s) for s <= r, else 0
  RowMat<T> KG;   // (L, L) (k_r . k_s) exp(G_r - G_s) for s < r, else 0
  RowMat<T> W;    // (L, Dk) (I + A)^{-1} diag(beta exp(G)) K
  RowMat<T> U;    // (L, Dv) (I + A)^{-1} diag(beta) V,  A = diag(beta) KG
};

// K (L, Dk), V (L, Dv), g (L), beta (L) -> *omega (resized to L).
template <typename T>
void GdnBlockPre(GdnBlockOmega<T>* omega, CMatRef<T> K, CMatRef<T> V,
                 CVecRef<T> g, CVecRef<T> beta);

// V_new (L, Dv) = U - W S_in^T;
// S_out (Dv, Dk) = exp(G_{L-1}) S_in + V_new^T diag(exp(G_{L-1} - G)) K.
// REQUIRES: S_out does not alias S_in.
template <typename T>
void GdnBlockST(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                const GdnBlockOmega<T>& omega, CMatRef<T> K);

// GdnBlockST on the value rows [j0, j0 + n) of the state alone (columns of
// V_new, rows of S_out and S_in): V_new[:, j] and S_out[j] read only
// S_in[j], so the state's rows split into independent tiles of B_V rows
// (schedule.st_tile, docs/gdn-kernel.md). The same arithmetic as
// GdnBlockST on those rows, its products split (equal within rounding).
template <typename T>
void GdnBlockSTRows(MatRef<T> V_new, MatRef<T> S_out, CMatRef<T> S_in,
                    const GdnBlockOmega<T>& omega, CMatRef<T> K, int64_t j0,
                    int64_t n);

// O (L, Dv) = diag(exp(G)) Q S_in^T + ((Q K^T) o Gam) V_new.
template <typename T>
void GdnBlockOut(MatRef<T> O, CMatRef<T> Q, CMatRef<T> K, CMatRef<T> V_new,
                 CMatRef<T> S_in, const GdnBlockOmega<T>& omega);

// Gradients of one block, accumulated by the three backward functions.
template <typename T>
struct GdnBlockGrads {
  RowMat<T> dQ;     // (L, Dk)
  RowMat<T> dK;     // (L, Dk)
  RowMat<T> dV;     // (L, Dv)
  Vec<T> dG;        // (L) w.r.t. the cumulative G (dg = reverse cumsum)
  Vec<T> dbeta;     // (L)
  void SetZero(int64_t L, int64_t Dk, int64_t Dv);
};

// Given dO (L, Dv): dV_new (L, Dv) written; dS_in (Dv, Dk) added;
// grads->dQ, dK, dG added.
template <typename T>
void GdnBlockOutBackward(GdnBlockGrads<T>* grads, MatRef<T> dV_new,
                         MatRef<T> dS_in, CMatRef<T> dO, CMatRef<T> Q,
                         CMatRef<T> K, CMatRef<T> V_new, CMatRef<T> S_in,
                         const GdnBlockOmega<T>& omega);

// Given dS_out (Dv, Dk) and dV_new (L, Dv) from Out (to which ST's share is
// added, making it dU): dW (L, Dk) written; dS_in added; grads->dK, dG added.
// st_tile B_V in (0, Dv): the state gradient's chain (dS_in, dV_new, row by
// row of the state) runs tile by tile of B_V rows, then the sums over all
// rows (dK, dG, dW); equal to the untiled order within rounding.
template <typename T>
void GdnBlockSTBackward(GdnBlockGrads<T>* grads, MatRef<T> dW,
                        MatRef<T> dS_in, MatRef<T> dV_new,
                        CMatRef<T> dS_out, CMatRef<T> V_new, CMatRef<T> S_in,
                        const GdnBlockOmega<T>& omega, CMatRef<T> K,
                        int64_t st_tile = 0);

// Given dU (L, Dv) and dW (L, Dk): grads->dK, dV, dG, dbeta added.
template <typename T>
void GdnBlockPreBackward(GdnBlockGrads<T>* grads, CMatRef<T> dU,
                         CMatRef<T> dW, CMatRef<T> K, CMatRef<T> V,
                         CVecRef<T> beta, const GdnBlockOmega<T>& omega);

// ---- the core over a chunk of T tokens, H heads ---------------------------

// o (T, H, Dv); S_out (H, Dv, Dk) (nullptr skips it); q, k (T, H, Dk);
// v (T, H, Dv); g, beta (T, H); S_in (H, Dv, Dk) (nullptr means zeros: the
// sequence start). block_size: T_C (tests use small ones). T may be any
// length >= 0; the last block is partial when T is not a multiple of T_C.
// st_tile: B_V, ST's tile of the state's value rows (GdnBlockSTRows); 0 or
// >= Dv: untiled (the same bits as before tiles existed); otherwise equal to
// the untiled results within rounding (< 1e-12 relative in float64).
template <typename T>
void GdnCoreForward(T* o, T* S_out, const T* q, const T* k, const T* v,
                    const T* g, const T* beta, const T* S_in, int64_t T_len,
                    int64_t H, int64_t Dk, int64_t Dv,
                    int64_t block_size = kGdnBlockSize, int64_t st_tile = 0);

// The same forward with split-and-overlap (the paper's section 3.4) on
// KernelThreads() threads: per head, block b's Pre, ST and Out are OpenMP
// tasks, ST(b) after Pre(b) and ST(b - 1), Out(b) after ST(b), so that while
// one thread runs a block's sequential ST others run the Pre of later
// blocks and the Out of earlier ones (of every head). Blocks cycle through
// kGdnOverlapSlots slots per head (Omega, V_new, entering state), so the
// untracked scratch stays O(slots (T_C (T_C + Dk + Dv) + Dv Dk)) per head
// whatever T. Each block runs the same Pre / ST / Out arithmetic on the same
// inputs as GdnCoreForward: the same bits when the blocks take Eigen's
// packed products (full blocks of >= 16 tokens, as T_C = 64); a short partial
// last block's small products may differ in the last bit, as they may
// between two runs of either function (heap alignment; tested < 1e-13).
// With st_tile B_V in (0, Dv), a block's ST is one task per tile of B_V
// state rows, tile j of block b after tile j of block b - 1 only, so one
// head's ceil(Dv / B_V) tiles are parallel ST chains (Out(b) after all of
// block b's tiles); the same bits as GdnCoreForward with that st_tile.
inline constexpr int64_t kGdnOverlapSlots = 4;
template <typename T>
void GdnCoreForwardOverlapped(T* o, T* S_out, const T* q, const T* k,
                              const T* v, const T* g, const T* beta,
                              const T* S_in, int64_t T_len, int64_t H,
                              int64_t Dk, int64_t Dv,
                              int64_t block_size = kGdnBlockSize,
                              int64_t st_tile = 0);

// Heads run in parallel on LoopTeam(H) lanes (min(H, KernelThreads()), at
// least two while KernelThreads() > 1: backend/threading.h), each lane a
// fixed range of heads (static schedule), so the results never depend on
// timing: the same bits from run to run at a given thread count.
int64_t GdnCoreLanes(int64_t H);

// Elements of the backward's workspace: per head, the (ceil(T / T_C), Dv, Dk)
// states entering each of its blocks: H * ceil(T / T_C) * Dv * Dk, whatever
// the thread count (so the memory ledger never depends on it).
int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                     int64_t Dv,
                                     int64_t block_size = kGdnBlockSize);

// dq, dk (T, H, Dk), dv (T, H, Dv), dg, dbeta (T, H), dS_in (H, Dv, Dk):
// written (dS_in nullptr skips it). workspace: GdnCoreBackwardWorkspaceSize
// elements. dO (T, H, Dv); dS_out (H, Dv, Dk) (nullptr means zeros: the last
// chunk of a sequence). The rest as in the forward.
template <typename T>
void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                     T* workspace, const T* dO, const T* dS_out, const T* q,
                     const T* k, const T* v, const T* g, const T* beta,
                     const T* S_in, int64_t T_len, int64_t H, int64_t Dk,
                     int64_t Dv, int64_t block_size = kGdnBlockSize,
                     int64_t st_tile = 0);

// The same backward with split-and-overlap on KernelThreads() threads: per
// head, after the replay of its entering states (one task per head), block
// b's backward is three OpenMP tasks, blocks last to first: Out(b) (Pre
// recomputed, V_new, the Out backward: no state gradient needed), ST(b)
// after Out(b) and ST(b + 1) (the sequential chain of the state gradient),
// Pre(b) after ST(b) (the Pre backward and the block's gradient rows); so
// while one thread runs a block's ST backward others run the Out backward of
// earlier blocks and the Pre backward of later ones (of every head). Blocks
// cycle through kGdnOverlapSlots scratch slots per head (untracked, O(slots
// (T_C (T_C + Dk + Dv) + Dv Dk)) per head). The same workspace and the same
// per-block arithmetic in the same order as GdnCoreBackward: the same bits
// where the blocks take Eigen's packed products (see the forward's note).
// st_tile: as in GdnCoreBackward (a block's ST backward walks its tiles in
// one task: the tiles are not separate tasks in the backward).
template <typename T>
void GdnCoreBackwardOverlapped(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
                               T* workspace, const T* dO, const T* dS_out,
                               const T* q, const T* k, const T* v, const T* g,
                               const T* beta, const T* S_in, int64_t T_len,
                               int64_t H, int64_t Dk, int64_t Dv,
                               int64_t block_size = kGdnBlockSize,
                               int64_t st_tile = 0);

// ---- the core phase by phase (for timing: core_phase.h) --------------------

// GdnCoreForward run one phase at a time: calling it with kPre, kST, kOut in
// that order, on the same arguments and workspace, gives GdnCoreForward's o
// and S_out bit for bit (each block runs the same Pre / ST / Out arithmetic;
// what one phase hands the next is copied exactly through the workspace).
// kPre reads k, v, g, beta; kST also S_in and writes S_out; kOut also q and
// writes o. Heads in parallel on GdnCoreLanes(H) lanes in every phase.
// workspace: GdnCoreForwardPhaseWorkspaceSize elements, per (head, block) a
// slot holding its Omega, V_new and entering state:
//   H ceil(T / T_C) (T_C (1 + 2 T_C + Dk + 2 Dv) + Dv Dk).
// Not for training (the ordinary forward keeps this on the stack, per block).
int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                         int64_t Dv,
                                         int64_t block_size = kGdnBlockSize);
template <typename T>
void GdnCoreForwardPhase(CorePhase phase, T* o, T* S_out, T* workspace,
                         const T* q, const T* k, const T* v, const T* g,
                         const T* beta, const T* S_in, int64_t T_len,
                         int64_t H, int64_t Dk, int64_t Dv,
                         int64_t block_size = kGdnBlockSize, int64_t st_tile = 0);

// GdnCoreBackward one phase at a time (core_phase.h: kPre = replay, Pre
// recomputed and the Out backward; kST = the state-gradient chain; kOut =
// the Pre backward and the gradient rows): in order on the same arguments
// and workspace, GdnCoreBackward's outputs bit for bit. dS_in is written by
// kST, dq, dk, dv, dg, dbeta by kOut. workspace:
// GdnCoreBackwardPhaseWorkspaceSize elements: GdnCoreBackwardWorkspaceSize's
// entering states, then per (head, block) a slot with its Omega, V_new, the
// gradients of V_new, W and its entering state, and its gradient rows:
//   H ceil(T / T_C) (2 Dv Dk + T_C (3 + 2 T_C + 4 Dk + 4 Dv)).
int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                          int64_t Dk, int64_t Dv,
                                          int64_t block_size = kGdnBlockSize);
template <typename T>
void GdnCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                          T* dbeta, T* dS_in, T* workspace, const T* dO,
                          const T* dS_out, const T* q, const T* k, const T* v,
                          const T* g, const T* beta, const T* S_in,
                          int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                          int64_t block_size = kGdnBlockSize, int64_t st_tile = 0);

// The floating-point operations the chunkwise algorithm executes (matrix
// products counted as 2mnk, unit-triangular solves as L(L-1) per right-hand
// side column, elementwise work and exps not counted). Per block of L tokens:
//   Pre = 2 L^2 Dk + L(L-1)(Dk + Dv)            (K K^T, two solves)
//   ST  = 4 L Dk Dv                             (W S^T, V_new^T K)
//   Out = 2 L Dk Dv + 2 L^2 Dk + 2 L^2 Dv       (Q S^T, Q K^T, P V_new)
//   forward  = Pre + ST + Out
//   backward = 2 Pre + ST + 2 L Dk Dv (replay and recompute)
//            + (6 L^2 Dk + 4 L^2 Dv + 4 L Dk Dv)   (Out backward)
//            + 8 L Dk Dv                          (ST backward)
//            + L(L-1)(Dk + Dv) + 2 L^2 (Dk + Dv) + 4 L^2 Dk (Pre backward)
// summed over blocks and multiplied by H.
struct GdnCoreFlops {
  double forward = 0;
  double backward = 0;
};
GdnCoreFlops CountGdnCoreFlops(int64_t T_len, int64_t H, int64_t Dk,
                               int64_t Dv, int64_t block_size = kGdnBlockSize);

// ---- float64 reference: the recurrence token by token ----------------------

// Same arguments as GdnCoreForward (no block size): S_t and o_t token by
// token.
void GdnCoreForwardRef(double* o, double* S_out, const double* q,
                       const double* k, const double* v, const double* g,
                       const double* beta, const double* S_in, int64_t T_len,
                       int64_t H, int64_t Dk, int64_t Dv);

// Same arguments as GdnCoreBackward (the workspace is unused; the reference
// keeps all T states itself): reverse mode through time.
void GdnCoreBackwardRef(double* dq, double* dk, double* dv, double* dg,
                        double* dbeta, double* dS_in, double* workspace,
                        const double* dO, const double* dS_out,
                        const double* q, const double* k, const double* v,
                        const double* g, const double* beta,
                        const double* S_in, int64_t T_len, int64_t H,
                        int64_t Dk, int64_t Dv);

}  // namespace stateflow::backend

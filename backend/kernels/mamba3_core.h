// The Mamba-3 (SISO) recurrence core, per head, in chunkwise form over blocks
// of T_C tokens (kMamba3BlockSize = 64), as a forward/backward pair, with the
// token-by-token float64 reference beside it. Per head, with S the (Dv, Dk)
// state (Dk = d_state, Dv = the SSM head dim), the trapezoidal update of the
// official module (state-spaces/mamba, mamba_ssm/modules/mamba3.py and
// ops/triton/mamba3/):
//   S_t = exp(a_t) (S_{t-1} + beta_t v_{t-1} k_{t-1}^T) + gamma_t v_t k_t^T,
//   o_t = S_t q_t,
// where a = A dt (log decay, <= 0), gamma = lambda dt and beta = (1 - lambda)
// dt (the trapezoid gate lambda), q, k the rotated, normalised C and B with
// their biases, and v the x channels. The "previous token" of the first token
// of a chunk is the carry (k_in, v_in) of the boundary state, which is why
// the state entering and leaving a chunk is (S, last k, last v); the running
// rotary angle is the layer's (mamba3_layer.h), not the core's.
//
// Within a block (local tokens r, s = 0..L-1, entering state S, carry kp, vp):
//   G_r = a_0 + ... + a_r,   c_s = gamma_s + beta_{s+1} (s < L-1),
//   M_rs = exp(G_r - G_s) c_s (s < r),  M_rr = gamma_r,  0 above,
//   S'  = S + beta_0 vp kp^T                          (the carried update)
// and each block is processed by the paper's three functions:
//   Pre (block-parallel): G, the decay-weight matrix M and the block's own
//        state contribution U = V^T diag(M_{L-1,.}) K;
//   ST  (sequential):     S_next = exp(G_{L-1}) S' + U, carry (k_{L-1}, v_{L-1});
//   Out (block-parallel): O = diag(exp(G)) Q S'^T + ((Q K^T) o M) V.
//
// Saved for the backward: only the core's inputs (the layer's activations).
// The backward replays the states entering each block into a caller-provided
// workspace of Mamba3CoreBackwardWorkspaceSize elements (kWorkspace) and
// recomputes Pre per block; per-block scratch, O(L (L + Dk + Dv) + Dk Dv)
// elements, lives in Eigen temporaries and is not tracked.
// Per block the backward is three functions, OutAG, the ST chain and OutWG
// (see Mamba3CoreBackwardOverlapped), in the sequential and overlapped
// kernels alike.
//
// Not the projections, norms, rotary angles, D skip or gate of the layer.
//
//   Mamba3CoreForward<float>(o, S_out, k_out, v_out, q, k, v, a, gamma, beta,
//                            S_in, k_in, v_in, T, H, Dk, Dv);
//   Mamba3CoreForwardOverlapped<float>(...the same arguments...);  // split-and-overlap
//   for (CorePhase p : kCorePhases)                                   // timed phase by phase
//     Mamba3CoreForwardPhase<float>(p, o, S_out, k_out, v_out, ws, q, k, ...);
//
// Dimensions: T tokens in the chunk, H heads, Dk state dim (d_state), Dv SSM
// head dim, L tokens in one block (T_C, or fewer for the last block).
// Layouts: q, k (T, H, Dk); v, o (T, H, Dv); a, gamma, beta (T, H);
// S (H, Dv, Dk); k carry (H, Dk); v carry (H, Dv).
#pragma once

#include <cstdint>

#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

inline constexpr int64_t kMamba3BlockSize = 64;  // T_C

// o (T, H, Dv); S_out (H, Dv, Dk), k_out (H, Dk), v_out (H, Dv) (each
// nullptr skips it); q, k, v, a, gamma, beta as in the header; S_in, k_in,
// v_in: the boundary state entering the chunk (nullptr means zeros: the
// sequence start). T may be any length >= 0 (T = 0 hands the state on).
// Heads run on min(H, KernelThreads()) lanes with a static schedule: the same
// bits from run to run at any thread count. st_tile: B_V (schedule.st_tile),
// ST's tile of the state's value rows: row i of S' and of the leaving state
// needs only row i of the entering state and of U, so ST runs tile by tile;
// 0 or >= Dv: untiled (the same bits as before tiles existed); otherwise
// equal to the untiled results within rounding (< 1e-12 relative in
// float64: the same operations per element, but Eigen vectorises a block of
// rows differently from the whole state, so the last bits may differ).
template <typename T>
void Mamba3CoreForward(T* o, T* S_out, T* k_out, T* v_out, const T* q,
                       const T* k, const T* v, const T* a, const T* gamma,
                       const T* beta, const T* S_in, const T* k_in,
                       const T* v_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size = kMamba3BlockSize,
                                   int64_t st_tile = 0);

// The same forward with split-and-overlap (the paper's section 3.4) on
// KernelThreads() threads: per head, block b's Pre (G, M and U, the bulk of
// the work), ST (S' and S_next, O(Dk Dv)) and Out are OpenMP tasks, ST(b)
// after Pre(b) and ST(b - 1), Out(b) after ST(b), so that the sequential
// chain of STs runs while other threads run the Pre of later blocks and the
// Out of earlier ones (of every head). Blocks cycle through
// kMamba3OverlapSlots slots per head (Pre, S', entering state): untracked
// scratch O(slots (L^2 + Dk Dv)) per head whatever T. Each block runs the
// same Pre / ST / Out code on the same inputs as Mamba3CoreForward: the same
// bits where the blocks take Eigen's packed products (full blocks of >= 16
// tokens, as T_C = 64); a short partial last block's small products may
// differ in the last bit, as they may between two runs of either function
// (heap alignment of temporaries; tested < 1e-12). With st_tile B_V in
// (0, Dv) each tile of a block's ST is its own task (tile j after tile j of
// the block before), so the chain of one head spreads over the threads; Out
// waits for every tile.
inline constexpr int64_t kMamba3OverlapSlots = 4;
template <typename T>
void Mamba3CoreForwardOverlapped(T* o, T* S_out, T* k_out, T* v_out,
                                 const T* q, const T* k, const T* v,
                                 const T* a, const T* gamma, const T* beta,
                                 const T* S_in, const T* k_in, const T* v_in,
                                 int64_t T_len, int64_t H, int64_t Dk,
                                 int64_t Dv,
                                 int64_t block_size = kMamba3BlockSize,
                                 int64_t st_tile = 0);

// Elements of the backward's workspace: per head, the (ceil(T / T_C), Dv, Dk)
// states entering each of its blocks: H ceil(T / T_C) Dv Dk, whatever the
// thread count.
int64_t Mamba3CoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                        int64_t Dv,
                                        int64_t block_size = kMamba3BlockSize);

// dq, dk (T, H, Dk), dv (T, H, Dv), da, dgamma, dbeta (T, H): written.
// dS_in (H, Dv, Dk), dk_in (H, Dk), dv_in (H, Dv): written unless nullptr
// (the first chunk). dO (T, H, Dv); dS_out, dk_out, dv_out: nullptr means
// zeros (the last chunk). workspace: Mamba3CoreBackwardWorkspaceSize
// elements. The rest as in the forward. st_tile: the replay's ST as the
// forward's, and the chain of state gradients (dS' += exp(G_{L-1}) dS_next,
// row by row) tile by tile, then its sums over all rows (the carry's
// gradients): equal to the untiled order within rounding.
template <typename T>
void Mamba3CoreBackward(T* dq, T* dk, T* dv, T* da, T* dgamma, T* dbeta,
                        T* dS_in, T* dk_in, T* dv_in, T* workspace,
                        const T* dO, const T* dS_out, const T* dk_out,
                        const T* dv_out, const T* q, const T* k, const T* v,
                        const T* a, const T* gamma, const T* beta,
                        const T* S_in, const T* k_in, const T* v_in,
                        int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                        int64_t block_size = kMamba3BlockSize,
                        int64_t st_tile = 0);

// The same backward with split-and-overlap on KernelThreads() threads. The
// backward of block b is, as in Mamba3CoreBackward, three functions:
//   OutAG (Pre again; Out's intra-block backward and its gradient of S',
//          dS' = dOg^T Q): needs neither the replayed state nor anything
//          from later blocks;
//   ST    (dS' += exp(G_{L-1}) dS_next, the carry's share through S'):
//          the sequential chain of state gradients, O(Dk Dv);
//   OutWG (Out's inter-block term, the ST's and Pre's gradients, the
//          block's rows of every gradient): after ST(b) and the replay of
//          the state entering b; nothing downstream waits for it.
// The replay of the entering states is itself split: Pre (with U) per block
// in parallel, the O(Dk Dv) ST chained. As OpenMP tasks per head and block
// (replay blocks first to last, then the backward last to first), the
// replay overlaps with the OutAG of the last blocks, and each block's
// OutWG with the chain and the OutAG of earlier blocks (of every head).
// Blocks cycle through kMamba3OverlapSlots slots per head (untracked scratch
// O(slots (L (L + Dk + Dv) + Dk Dv))). The same workspace as
// Mamba3CoreBackward (the memory ledger does not change) and the same
// per-block code in the same order: the same bits where the blocks take
// Eigen's packed products (see the forward's note). st_tile: as in
// Mamba3CoreBackward (a block's ST backward walks its tiles in one task).
template <typename T>
void Mamba3CoreBackwardOverlapped(T* dq, T* dk, T* dv, T* da, T* dgamma,
                                  T* dbeta, T* dS_in, T* dk_in, T* dv_in,
                                  T* workspace, const T* dO, const T* dS_out,
                                  const T* dk_out, const T* dv_out, const T* q,
                                  const T* k, const T* v, const T* a,
                                  const T* gamma, const T* beta, const T* S_in,
                                  const T* k_in, const T* v_in, int64_t T_len,
                                  int64_t H, int64_t Dk, int64_t Dv,
                                  int64_t block_size = kMamba3BlockSize,
                                  int64_t st_tile = 0);

// ---- the core phase by phase (for timing: core_phase.h) --------------------

// Mamba3CoreForward run one phase at a time: calling it with kPre, kST, kOut
// in that order, on the same arguments and workspace, gives
// Mamba3CoreForward's o, S_out, k_out and v_out bit for bit (each block runs
// the same Pre / ST / Out functions on the same values; what one phase hands
// the next is copied exactly through the workspace into the same aligned
// temporaries). "The same arguments" means the same buffers: a short last
// block's small products may round with their operands' alignment, as
// between two calls of Mamba3CoreForward on copies (see the overlapped
// forward's note). kPre reads k, v, a,
// gamma, beta; kST also S_in, k_in, v_in and writes S_out, k_out, v_out;
// kOut also q and writes o. Heads on the forward's lanes in every phase.
// workspace: Mamba3CoreForwardPhaseWorkspaceSize elements, per (head, block)
// a slot with its Pre (G, M, U) and its carried entering state S':
//   H ceil(T / T_C) (T_C (1 + T_C) + 2 Dv Dk).
// Not for training (the ordinary forward keeps this on the stack, per block).
int64_t Mamba3CoreForwardPhaseWorkspaceSize(
    int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size = kMamba3BlockSize);
template <typename T>
void Mamba3CoreForwardPhase(CorePhase phase, T* o, T* S_out, T* k_out,
                            T* v_out, T* workspace, const T* q, const T* k,
                            const T* v, const T* a, const T* gamma,
                            const T* beta, const T* S_in, const T* k_in,
                            const T* v_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size = kMamba3BlockSize,
                            int64_t st_tile = 0);

// Mamba3CoreBackward one phase at a time, with the split of
// Mamba3CoreBackwardOverlapped (core_phase.h's roles): kPre = the replay of
// the entering states (Pre with U, the O(Dk Dv) ST chained) and every
// block's OutAG; kST = the chain of state gradients (blocks last to first);
// kOut = every block's OutWG (the block's rows of every gradient). In order
// on the same arguments and workspace: Mamba3CoreBackward's outputs bit for
// bit. dS_in, dk_in, dv_in are written by kST, dq, dk, dv, da, dgamma,
// dbeta by kOut. workspace: Mamba3CoreBackwardPhaseWorkspaceSize elements:
// Mamba3CoreBackwardWorkspaceSize's entering states, then per (head, block)
// a slot with its G, Gam, M, the gradients of M, Q, K, V, diag(exp(G)) dO,
// S', of the leaving state and carry, and of beta_0:
//   H ceil(T / T_C) (Dv Dk + T_C (1 + 3 T_C + 2 Dk + 2 Dv)
//                    + 2 Dv Dk + Dk + Dv + 1).
int64_t Mamba3CoreBackwardPhaseWorkspaceSize(
    int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
    int64_t block_size = kMamba3BlockSize);
template <typename T>
void Mamba3CoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* da,
                             T* dgamma, T* dbeta, T* dS_in, T* dk_in,
                             T* dv_in, T* workspace, const T* dO,
                             const T* dS_out, const T* dk_out,
                             const T* dv_out, const T* q, const T* k,
                             const T* v, const T* a, const T* gamma,
                             const T* beta, const T* S_in, const T* k_in,
                             const T* v_in, int64_t T_len, int64_t H,
                             int64_t Dk, int64_t Dv,
                             int64_t block_size = kMamba3BlockSize,
                             int64_t st_tile = 0);

// The floating-point operations the chunkwise algorithm executes (matrix
// products as 2mnk; elementwise work, exps and the per-block rank-one carry
// counted as 2 Dk Dv). Per block of L tokens:
//   Pre = 2 L Dk Dv                          (U = V^T diag(m) K)
//   ST  = 4 Dk Dv                            (S', then exp(G) S' + U)
//   Out = 2 L^2 Dk + 2 L Dk Dv + 2 L^2 Dv    (Q K^T, Q S'^T, P V)
//   forward  = Pre + ST + Out
//   backward = replay (Pre + ST, all blocks but the last)
//            + 2 L^2 Dk + 2 Dk Dv            (Q K^T and S' again)
//            + 4 L Dk Dv                     (dS_exit: dV, V dS_exit)
//            + 4 L^2 Dv + 4 L^2 Dk           (P^T dO, dO V^T, dQK K, dQK^T Q)
//            + 4 L Dk Dv + 6 Dk Dv           (dO S', dO^T Q; the carry's three)
// summed over blocks and multiplied by H.
struct Mamba3CoreFlops {
  double forward = 0;
  double backward = 0;
};
Mamba3CoreFlops CountMamba3CoreFlops(int64_t T_len, int64_t H, int64_t Dk,
                                     int64_t Dv,
                                     int64_t block_size = kMamba3BlockSize);

// ---- float64 reference: the recurrence token by token ----------------------

// Same arguments as Mamba3CoreForward (no block size).
void Mamba3CoreForwardRef(double* o, double* S_out, double* k_out,
                          double* v_out, const double* q, const double* k,
                          const double* v, const double* a,
                          const double* gamma, const double* beta,
                          const double* S_in, const double* k_in,
                          const double* v_in, int64_t T_len, int64_t H,
                          int64_t Dk, int64_t Dv);

// Same arguments as Mamba3CoreBackward (the workspace is unused): reverse
// mode through time over the stored states.
void Mamba3CoreBackwardRef(double* dq, double* dk, double* dv, double* da,
                           double* dgamma, double* dbeta, double* dS_in,
                           double* dk_in, double* dv_in, double* workspace,
                           const double* dO, const double* dS_out,
                           const double* dk_out, const double* dv_out,
                           const double* q, const double* k, const double* v,
                           const double* a, const double* gamma,
                           const double* beta, const double* S_in,
                           const double* k_in, const double* v_in,
                           int64_t T_len, int64_t H, int64_t Dk, int64_t Dv);

}  // namespace stateflow::backend

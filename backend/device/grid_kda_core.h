// GridKdaCore<T, Exec>: the Kimi Delta Attention (KDA) core as grid passes
// (grid_kernels/kda_forward.h, kda_backward.h: the CUDA kernels' arithmetic)
// issued through an executor: HostExec (host loops, host_exec.h) or CudaExec
// (one CUDA thread per index, GEMMs in cuBLAS: backend/cuda/grid_exec.cuh).
// The executor concept is GridOps' (grid_ops.h's opening comment). T is
// float or double. The math, the CPU kernel and the float64 reference are
// backend/kernels/kda_core.h's; the same arguments in the same order, with
// the executor first and, as GridGdnOps' GDN core, a workspace after the
// outputs in the forward too (a pass hands the next its results there).
//
// The passes have GDN's structure (GridGdnOps' GDN core): Pre and Out run every
// block of every head at once, ST is the one sequential pass (blocks in
// order, each block's products GEMMs over every head: DeltaStForward,
// grid_recurrent.h); the backward replays Pre and ST, then Out's
// backward, ST's backward (the state gradient, blocks last to first), and
// the rest (ST's and Pre's gradient rows). st_tile shapes no launch: any
// gives the same bits. The
// overlapped versions cut the blocks into StreamSegments(nb) segments on
// two streams exactly as GridGdnOps' overlapped GDN cores do, with the same
// passes on the same elements: the same bits as the sequential ones. The
// phases are the sequential passes in three groups (core_phase.h's roles):
// run in order, the same bits as the whole core.
//
// Of the executor it uses ForEach,
// GemmStridedBatched (ST's products and the per-block ones with a dimension of Dk or Dv:
// o = Qh S_b^T + P V_new; backward P^T dO, dO V_new^T, dO S_b, dO^T Qh,
// V_new dS', -d(V_new) S_b) and, overlapped, Stream, Record and Wait.
// KK and P are per-entry functors (a per-channel decay is no mask on a GEMM).
//
// Also the gate's two drivers (GridKdaGateForward / GridKdaGateBackward,
// grid_kernels/kda_gate.h). Not the projections, convolution or norms of
// the layer, and not yet a member of GridOps / Ops<T>.
//
//   using Core = GridKdaCore<double, HostExec>;
//   std::vector<double> ws(Core::ForwardWorkspaceSize(T, H, Dk, Dv, 64));
//   Core::Forward(HostExec{}, o, S_out, ws.data(), q, k, v, g, beta, S_in, T, H, Dk, Dv, 64);
//
// Dimensions and layouts: kda_common.h (q, k, g (T, H, Dk); v, o (T, H, Dv);
// beta (T, H); S (H, Dv, Dk)).
#pragma once

#include <cstdint>

#include "backend/device/grid_kernels/gdn_backward.h"
#include "backend/device/grid_kernels/kda_backward.h"
#include "backend/device/grid_kernels/kda_common.h"
#include "backend/device/grid_kernels/kda_forward.h"
#include "backend/device/grid_kernels/kda_gate.h"
#include "backend/device/grid_recurrent.h"
#include "backend/device/precision.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

// The overlapped cores' segments and event ids are the other families'
// (StreamSegments, kGridEvents: grid_recurrent.h).

template <typename T, class Exec>
struct GridKdaCore {
  // Elements of Forward's workspace: KdaForwardWorkspace (kda_common.h),
  //   3 T H Dk + T H Dv + H nb bs^2 + H nb Dv Dk,   nb = ceil(T / bs).
  static int64_t ForwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                      int64_t Dv, int64_t block_size) {
    return grid::KdaForwardWorkspace<T>::Size(
        grid::KdaShape::Make(T_len, H, Dk, Dv, block_size));
  }
  // o (T, H, Dv) written; S_out (H, Dv, Dk) written unless nullptr; S_in
  // nullptr: zeros. T_len >= 0 (0 hands S_in on as S_out); block_size >= 1;
  // st_tile: ignored (B_V of a per-row ST; ST's products are GEMMs).
  static void Forward(const Exec& exec, T* o, T* S_out, T* workspace,
                      const T* q, const T* k, const T* v, const T* g,
                      const T* beta, const T* S_in, int64_t T_len, int64_t H,
                      int64_t Dk, int64_t Dv, int64_t block_size,
                      int64_t st_tile = 0);
  // Forward on two streams (GridGdnOps::GdnCoreForwardOverlapped's schedule):
  // Pre and Out of a segment on stream 1, its ST on stream 0. The same
  // workspace and bits as Forward; under 2 blocks, Forward.
  static void ForwardOverlapped(const Exec& exec, T* o, T* S_out,
                                T* workspace, const T* q, const T* k,
                                const T* v, const T* g, const T* beta,
                                const T* S_in, int64_t T_len, int64_t H,
                                int64_t Dk, int64_t Dv, int64_t block_size,
                                int64_t st_tile = 0);
  // One phase of Forward (kPre: G, KK, Kt, W, U; kST: V_new, the states,
  // S_out; kOut: o), on Forward's workspace: kPre, kST, kOut in order give
  // Forward's bits.
  static void ForwardPhase(const Exec& exec, CorePhase phase, T* o, T* S_out,
                           T* workspace, const T* q, const T* k, const T* v,
                           const T* g, const T* beta, const T* S_in,
                           int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile = 0);

  // Elements of Backward's workspace: KdaBackwardWorkspace (kda_common.h),
  //   ForwardWorkspaceSize + H nb bs^2 + 2 T H Dv + 2 T H Dk
  //   + H (nb + 1) Dv Dk
  // (larger than the CPU kernel's H nb Dv Dk: every block's results of a
  // pass exist at once, where the CPU walks the blocks with small scratch).
  static int64_t BackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv, int64_t block_size) {
    return grid::KdaBackwardWorkspace<T>::Size(
        grid::KdaShape::Make(T_len, H, Dk, Dv, block_size));
  }
  // dq, dk, dg (T, H, Dk), dv (T, H, Dv), dbeta (T, H) written; dS_in
  // (H, Dv, Dk) written unless nullptr. dO (T, H, Dv); dS_out nullptr:
  // zeros. The rest as Forward's.
  static void Backward(const Exec& exec, T* dq, T* dk, T* dv, T* dg, T* dbeta,
                       T* dS_in, T* workspace, const T* dO, const T* dS_out,
                       const T* q, const T* k, const T* v, const T* g,
                       const T* beta, const T* S_in, int64_t T_len, int64_t H,
                       int64_t Dk, int64_t Dv, int64_t block_size,
                       int64_t st_tile = 0);
  // Backward on two streams (GridGdnOps::GdnCoreBackwardOverlapped's
  // schedule): the replay as the overlapped forward with Out's backward of
  // segment k on stream 1 after the replayed ST_k; then ST's backward on
  // stream 0, segments last to first, and the rest of segment k on stream 1
  // after ST_k's backward. The same workspace and bits as Backward; under 2
  // blocks, Backward.
  static void BackwardOverlapped(const Exec& exec, T* dq, T* dk, T* dv, T* dg,
                                 T* dbeta, T* dS_in, T* workspace,
                                 const T* dO, const T* dS_out, const T* q,
                                 const T* k, const T* v, const T* g,
                                 const T* beta, const T* S_in, int64_t T_len,
                                 int64_t H, int64_t Dk, int64_t Dv,
                                 int64_t block_size, int64_t st_tile = 0);
  // One phase of Backward (kPre: the replay and Out's backward, dq written;
  // kST: the state-gradient chain, dS_in; kOut: the rest, dk, dv, dg, dbeta
  // completed), on Backward's workspace: in order, Backward's bits.
  static void BackwardPhase(const Exec& exec, CorePhase phase, T* dq, T* dk,
                            T* dv, T* dg, T* dbeta, T* dS_in, T* workspace,
                            const T* dO, const T* dS_out, const T* q,
                            const T* k, const T* v, const T* g, const T* beta,
                            const T* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv, int64_t block_size,
                            int64_t st_tile = 0);

 private:
  using Shape = grid::KdaShape;
  using FwdWs = grid::KdaForwardWorkspace<T>;
  using BwdWs = grid::KdaBackwardWorkspace<T>;

  // The inputs of one core call.
  struct Args {
    const T *q, *k, *v, *g, *beta, *S_in;
    Shape s;
  };
  static Args MakeArgs(const T* q, const T* k, const T* v, const T* g,
                       const T* beta, const T* S_in, int64_t T_len, int64_t H,
                       int64_t Dk, int64_t Dv, int64_t block_size) {
    return {q, k, v, g, beta, S_in, Shape::Make(T_len, H, Dk, Dv, block_size)};
  }
  // ST's per-channel decay of a state across block b (DeltaStForward's carry).
  static auto Carry(const T* G, const Shape& s) {
    return [G, s](int64_t b, T* dst, int64_t dst_stride, const T* src,
                  int64_t src_stride, bool accumulate) {
      return grid::KdaCarryFn<T>{dst, dst_stride, src, src_stride, G, s, b, accumulate};
    };
  }

  // Events of the overlapped cores, one id per use within a call.
  static constexpr int kEvEntry = 0, kEvSideDone = 1, kEvOutDone = 2;
  static int EvPre(int seg) { return 3 + seg; }
  static int EvST(int seg) { return 3 + kMaxStreamSegments + seg; }
  static int EvSTBack(int seg) { return 3 + 2 * kMaxStreamSegments + seg; }

  // f over blocks [b0, b1) of an (outer, nb, per_block) index space, or of a
  // (T, H, D) one (ForTokens: per_token = H D).
  template <class F>
  static void ForBlocks(const Exec& e, int64_t outer, int64_t per_block,
                        int64_t b0, int64_t b1, const Shape& s, F f) {
    const int64_t n_in = (b1 - b0) * per_block;
    e.ForEach(outer * n_in, grid::BlockRangeFn<F>{f, per_block, s.nb, b0, n_in});
  }
  template <class F>
  static void ForTokens(const Exec& e, int64_t per_token, int64_t b0,
                        int64_t b1, const Shape& s, F f) {
    const int64_t t0 = b0 * s.bs, t1 = b1 * s.bs < s.T ? b1 * s.bs : s.T;
    const int64_t n = (t1 - t0) * per_token;
    e.ForEach(n, grid::BlockRangeFn<F>{f, s.bs * per_token, s.nb, b0, n});
  }

  // The forward's passes over blocks [b0, b1), each on executor e.
  // Pre: G, KK, Kt, W, U.
  static void Pre(const Exec& e, const FwdWs& ws, const Args& a, int64_t b0,
                  int64_t b1);
  // ST: V_new into Vn, the entering states; the last block's exit state into
  // S_out unless nullptr.
  static void ST(const Exec& e, const FwdWs& ws, T* Vn, T* S_out,
                 const Args& a, int64_t b0, int64_t b1);
  // Out: o; Qh over W and P over KK (neither read again by the forward).
  static void Out(const Exec& e, const FwdWs& ws, T* o, const Args& a,
                  int64_t b0, int64_t b1);
  // The backward's passes over blocks [b0, b1) (Backward's order): Out's
  // backward (dq written, dk and dg begun, d(V_new) from Out, each block's
  // own share of dS); ST's backward; the rest (ST's key and decay gradients,
  // dW, Pre's backward: dv, dbeta written, dk, dg completed).
  static void OutBack(const Exec& e, const BwdWs& ws, T* dq, T* dk, T* dg,
                      const T* dO, const Args& a, int64_t b0, int64_t b1);
  static void STBack(const Exec& e, const BwdWs& ws, T* dS_in,
                     const T* dS_out, const Args& a, int64_t b0, int64_t b1);
  static void RestBack(const Exec& e, const BwdWs& ws, T* dk, T* dv, T* dg,
                       T* dbeta, const Args& a, int64_t b0, int64_t b1);
};

// The gate g = -exp(A_log[h]) softplus(a + dt_bias[h, c]) (kda_gate.h): g
// (T, H, Dk) written from a (T, H, Dk), A_log (H), dt_bias (H, Dk).
template <typename T, class Exec>
void GridKdaGateForward(const Exec& exec, T* g, const T* a, const T* A_log,
                        const T* dt_bias, int64_t T_len, int64_t H, int64_t Dk) {
  exec.ForEach(T_len * H * Dk, grid::KdaGateForwardFn<T>{g, a, A_log, dt_bias, H, Dk});
}

// Its backward: da (T, H, Dk) written; dA_log (H) and ddt_bias (H, Dk)
// accumulated (+=), each a deterministic sum over the tokens.
// REQUIRES: da does not alias dg.
template <typename T, class Exec>
void GridKdaGateBackward(const Exec& exec, T* da, GradOf<T>* dA_log,
                         GradOf<T>* ddt_bias, const T* dg, const T* a,
                         const T* A_log, const T* dt_bias, int64_t T_len,
                         int64_t H, int64_t Dk) {
  exec.ForEach(T_len * H * Dk,
               grid::KdaGateInputGradFn<T>{da, dg, a, A_log, dt_bias, H, Dk});
  exec.ForEach(H * Dk, grid::KdaGateBiasGradFn<T>{ddt_bias, da, T_len, H, Dk});
  exec.ForEach(H, grid::KdaGateDecayGradFn<T>{dA_log, dg, a, A_log, dt_bias,
                                              T_len, H, Dk});
}

// ---- out-of-line members ----------------------------------------------------

template <typename T, class Exec>
void GridKdaCore<T, Exec>::Pre(const Exec& e, const FwdWs& ws, const Args& a,
                               int64_t b0, int64_t b1) {
  using namespace grid;
  const Shape& s = a.s;
  ForTokens(e, s.H * s.Dk, b0, b1, s, KdaCumDecayFn<T>{ws.G, a.g, s});
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            KdaGramFn<T>{ws.KK, a.k, a.k, ws.G, s, /*strict=*/true});
  ForTokens(e, s.H * s.Dk, b0, b1, s, KdaEndDecayFn<T>{ws.Kt, a.k, ws.G, s});
  ForBlocks(e, s.H, s.Dv + s.Dk, b0, b1, s,
            KdaPreSolveFn<T>{ws.U, ws.W, ws.KK, a.k, a.v, a.beta, ws.G, s});
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::ST(const Exec& e, const FwdWs& ws, T* Vn, T* S_out,
                              const Args& a, int64_t b0, int64_t b1) {
  DeltaStForward(e, ws.S, Vn, S_out, ws.U, ws.W, ws.Kt, a.S_in, a.s, b0, b1,
                 Carry(ws.G, a.s));
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::Out(const Exec& e, const FwdWs& ws, T* o,
                               const Args& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const Shape& s = a.s;
  T* Qh = ws.W;  // W's last reader was ST
  ForTokens(e, s.H * s.Dk, b0, b1, s, KdaScaleByDecayFn<T>{Qh, a.q, ws.G});
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            KdaGramFn<T>{ws.KK, a.q, a.k, ws.G, s, /*strict=*/false});
  // o = Qh S_b^T + P V_new.
  BlockGemm(e, s, b0, b1, false, true, kL, s.Dv, s.Dk, T(1),
            TokenRows(Qh, s.Dk, s), States(ws.S, s.nb, 0, s), T(0),
            TokenRows(o, s.Dv, s));
  BlockGemm(e, s, b0, b1, false, false, kL, s.Dv, kL, T(1), Tiles(ws.KK, s),
            TokenRows(ws.U, s.Dv, s), T(1), TokenRows(o, s.Dv, s));
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::Forward(const Exec& exec, T* o, T* S_out,
                                   T* workspace, const T* q, const T* k,
                                   const T* v, const T* g, const T* beta,
                                   const T* S_in, int64_t T_len, int64_t H,
                                   int64_t Dk, int64_t Dv, int64_t block_size,
                                   int64_t /*st_tile*/) {
  const Args a = MakeArgs(q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size);
  const FwdWs ws(workspace, a.s);
  Pre(exec, ws, a, 0, a.s.nb);
  ST(exec, ws, /*Vn=*/ws.U, S_out, a, 0, a.s.nb);
  Out(exec, ws, o, a, 0, a.s.nb);
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::ForwardOverlapped(
    const Exec& exec, T* o, T* S_out, T* workspace, const T* q, const T* k,
    const T* v, const T* g, const T* beta, const T* S_in, int64_t T_len,
    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const Args a = MakeArgs(q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size);
  const int segs = StreamSegments(a.s.nb);
  if (segs < 2) {
    Forward(exec, o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk,
            Dv, block_size, st_tile);
    return;
  }
  const FwdWs ws(workspace, a.s);
  auto bound = [&](int seg) { return seg * a.s.nb / segs; };
  const Exec& main = exec;
  const Exec side = exec.Stream(1);
  main.Record(kEvEntry);  // the inputs, made on stream 0 before this call
  side.Wait(kEvEntry);
  Pre(side, ws, a, bound(0), bound(1));
  side.Record(EvPre(0));
  for (int seg = 0; seg < segs; ++seg) {
    main.Wait(EvPre(seg));
    ST(main, ws, /*Vn=*/ws.U, S_out, a, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      Pre(side, ws, a, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    Out(side, ws, o, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);  // stream 0's later work sees o
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::ForwardPhase(
    const Exec& exec, CorePhase phase, T* o, T* S_out, T* workspace, const T* q,
    const T* k, const T* v, const T* g, const T* beta, const T* S_in,
    int64_t T_len, int64_t H, int64_t Dk, int64_t Dv, int64_t block_size,
    int64_t /*st_tile*/) {
  const Args a = MakeArgs(q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size);
  const FwdWs ws(workspace, a.s);
  switch (phase) {
    case CorePhase::kPre: Pre(exec, ws, a, 0, a.s.nb); break;
    case CorePhase::kST: ST(exec, ws, /*Vn=*/ws.U, S_out, a, 0, a.s.nb); break;
    case CorePhase::kOut: Out(exec, ws, o, a, 0, a.s.nb); break;
  }
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::OutBack(const Exec& e, const BwdWs& ws, T* dq,
                                   T* dk, T* dg, const T* dO, const Args& a,
                                   int64_t b0, int64_t b1) {
  using namespace grid;
  const Shape& s = a.s;
  const FwdWs& f = ws.f;
  const int64_t Dk = s.Dk, Dv = s.Dv, tile = s.bs * s.bs;
  ForTokens(e, s.H * Dk, b0, b1, s, KdaScaleByDecayFn<T>{ws.Qh, a.q, f.G});
  ForBlocks(e, s.H, tile, b0, b1, s,
            KdaGramFn<T>{ws.PdP, a.q, a.k, f.G, s, /*strict=*/false});
  // d(V_new) = P^T dO; then dP = dO V_new^T over P, causal.
  BlockGemm(e, s, b0, b1, true, false, kL, Dv, kL, T(1), Tiles(ws.PdP, s),
            TokenRows(dO, Dv, s), T(0), TokenRows(ws.dVn, Dv, s));
  BlockGemm(e, s, b0, b1, false, true, kL, kL, Dv, T(1), TokenRows(dO, Dv, s),
            TokenRows(ws.Vn, Dv, s), T(0), Tiles(ws.PdP, s));
  ForBlocks(e, s.H, tile, b0, b1, s, KdaCausalMaskFn<T>{ws.PdP, s});
  // dQh = dO S_b.
  BlockGemm(e, s, b0, b1, false, false, kL, Dk, Dv, T(1), TokenRows(dO, Dv, s),
            States(f.S, s.nb, 0, s), T(0), TokenRows(ws.dQh, Dk, s));
  ForTokens(e, s.H * Dk, b0, b1, s,
            KdaOutQueryGradFn<T>{dq, dg, ws.PdP, a.q, a.k, ws.dQh, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s,
            KdaOutKeyGradFn<T>{dk, dg, ws.PdP, a.q, a.k, f.G, s});
  // Out's share of the gradient of the state entering block b: dO^T Qh.
  BlockGemm(e, s, b0, b1, true, false, Dv, Dk, kL, T(1), TokenRows(dO, Dv, s),
            TokenRows(ws.Qh, Dk, s), T(0), States(ws.dS, s.nb + 1, 0, s));
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::STBack(const Exec& e, const BwdWs& ws, T* dS_in,
                                  const T* dS_out, const Args& a, int64_t b0,
                                  int64_t b1) {
  DeltaStBackward(e, ws.dS, ws.dVn, /*accumulate_z=*/true, dS_in, dS_out, ws.f.W,
                  ws.f.Kt, a.s, b0, b1, Carry(ws.f.G, a.s));
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::RestBack(const Exec& e, const BwdWs& ws, T* dk,
                                    T* dv, T* dg, T* dbeta, const Args& a,
                                    int64_t b0, int64_t b1) {
  using namespace grid;
  const Shape& s = a.s;
  const FwdWs& f = ws.f;
  const int64_t Dk = s.Dk, Dv = s.Dv;
  T* e_buf = ws.Qh;  // Out's backward (every block) is done with Qh
  T* dW = ws.dQh;    // and with dQh
  // ST's rows: dKt = V_new dS' (dS' = slot b + 1), then dk, e, dG.
  BlockGemm(e, s, b0, b1, false, false, kL, Dk, Dv, T(1), TokenRows(ws.Vn, Dv, s),
            States(ws.dS, s.nb + 1, 1, s), T(0), TokenRows(e_buf, Dk, s));
  ForTokens(e, s.H * Dk, b0, b1, s, KdaSTKeyGradFn<T>{dk, dg, e_buf, f.Kt, f.G, s});
  ForBlocks(e, s.H, Dk, b0, b1, s, KdaSTDecayGradFn<T>{dg, e_buf, ws.dS, f.S, f.G, s});
  // dW = -d(V_new) S_b.
  BlockGemm(e, s, b0, b1, false, false, kL, Dk, Dv, T(-1), TokenRows(ws.dVn, Dv, s),
            States(f.S, s.nb, 0, s), T(0), TokenRows(dW, Dk, s));
  // Pre's backward (GDN's solve, dA and dv: the same M = I + diag(beta) KK).
  ForBlocks(e, s.H, Dv + Dk, b0, b1, s,
            GdnPreBackSolveFn<T>{ws.dVn, dW, f.KK, a.beta, s});
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            GdnDAFn<T>{ws.PdP, ws.dVn, dW, f.U, f.W, s});
  ForTokens(e, s.H * Dv, b0, b1, s, GdnScaleByBetaFn<T>{dv, ws.dVn, a.beta, Dv});
  ForTokens(e, s.H, b0, b1, s,
            KdaPreRowGradFn<T>{dbeta, ws.dVn, dW, ws.PdP, f.KK, a.k, a.v, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s,
            KdaPreKeyGradFn<T>{dk, dg, dW, ws.PdP, a.k, a.beta, f.G, s});
  ForBlocks(e, s.H, Dk, b0, b1, s, KdaDecayCumsumFn<T>{dg, s});
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::Backward(const Exec& exec, T* dq, T* dk, T* dv,
                                    T* dg, T* dbeta, T* dS_in, T* workspace,
                                    const T* dO, const T* dS_out, const T* q,
                                    const T* k, const T* v, const T* g,
                                    const T* beta, const T* S_in,
                                    int64_t T_len, int64_t H, int64_t Dk,
                                    int64_t Dv, int64_t block_size,
                                    int64_t /*st_tile*/) {
  const Args a = MakeArgs(q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size);
  const BwdWs ws(workspace, a.s);
  const int64_t nb = a.s.nb;
  Pre(exec, ws.f, a, 0, nb);
  ST(exec, ws.f, ws.Vn, /*S_out=*/nullptr, a, 0, nb);
  OutBack(exec, ws, dq, dk, dg, dO, a, 0, nb);
  STBack(exec, ws, dS_in, dS_out, a, 0, nb);
  RestBack(exec, ws, dk, dv, dg, dbeta, a, 0, nb);
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::BackwardOverlapped(
    const Exec& exec, T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dS_in,
    T* workspace, const T* dO, const T* dS_out, const T* q, const T* k,
    const T* v, const T* g, const T* beta, const T* S_in, int64_t T_len,
    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const Args a = MakeArgs(q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size);
  const int segs = StreamSegments(a.s.nb);
  if (segs < 2) {
    Backward(exec, dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k,
             v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    return;
  }
  const BwdWs ws(workspace, a.s);
  auto bound = [&](int seg) { return seg * a.s.nb / segs; };
  const Exec& main = exec;
  const Exec side = exec.Stream(1);
  main.Record(kEvEntry);
  side.Wait(kEvEntry);
  // The replay and Out's backward, segments first to last.
  Pre(side, ws.f, a, bound(0), bound(1));
  side.Record(EvPre(0));
  for (int seg = 0; seg < segs; ++seg) {
    main.Wait(EvPre(seg));
    ST(main, ws.f, ws.Vn, /*S_out=*/nullptr, a, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      Pre(side, ws.f, a, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    OutBack(side, ws, dq, dk, dg, dO, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvOutDone);
  main.Wait(kEvOutDone);
  // The state-gradient chain, segments last to first, and the rest of each.
  for (int seg = segs - 1; seg >= 0; --seg) {
    STBack(main, ws, dS_in, dS_out, a, bound(seg), bound(seg + 1));
    main.Record(EvSTBack(seg));
    side.Wait(EvSTBack(seg));
    RestBack(side, ws, dk, dv, dg, dbeta, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);
}

template <typename T, class Exec>
void GridKdaCore<T, Exec>::BackwardPhase(
    const Exec& exec, CorePhase phase, T* dq, T* dk, T* dv, T* dg, T* dbeta,
    T* dS_in, T* workspace, const T* dO, const T* dS_out, const T* q,
    const T* k, const T* v, const T* g, const T* beta, const T* S_in,
    int64_t T_len, int64_t H, int64_t Dk, int64_t Dv, int64_t block_size,
    int64_t /*st_tile*/) {
  const Args a = MakeArgs(q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size);
  const BwdWs ws(workspace, a.s);
  const int64_t nb = a.s.nb;
  switch (phase) {
    case CorePhase::kPre:  // the replay and Out's backward
      Pre(exec, ws.f, a, 0, nb);
      ST(exec, ws.f, ws.Vn, /*S_out=*/nullptr, a, 0, nb);
      OutBack(exec, ws, dq, dk, dg, dO, a, 0, nb);
      break;
    case CorePhase::kST:  // the state-gradient chain
      STBack(exec, ws, dS_in, dS_out, a, 0, nb);
      break;
    case CorePhase::kOut:  // ST's rows and Pre's backward
      RestBack(exec, ws, dk, dv, dg, dbeta, a, 0, nb);
      break;
  }
}

}  // namespace stateflow::backend

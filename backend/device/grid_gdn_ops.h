// GridGdnOps<T, Exec>: the Gated DeltaNet family's kernels (GdnOps<T>,
// gdn_ops.h) as grid passes over the SF_HD functors of grid_kernels/gdn_*.h
// and the gate functors of grid_kernels/rows.h: the gate and beta, and the
// chunkwise core whole, on two streams (split-and-overlap) and phase by
// phase. The executor and the two-stream schedule: grid_ops.h; what the
// recurrent cores share: grid_recurrent.h. Run by the host-grid device with
// HostExec and by the CUDA device with CudaExec (backend/cuda/).
//
//   GridGdnOps<double, HostExec> gdn{HostExec{}};
//   gdn.GdnCoreForward(o, S_out, ws, q, k, v, g, beta, S_in, T, H, Dk, Dv, 64);
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

#include "backend/device/grid_kernels/gdn_backward.h"
#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/grid_kernels/gdn_forward.h"
#include "backend/device/grid_kernels/rows.h"
#include "backend/device/gdn_ops.h"
#include "backend/device/grid_recurrent.h"

namespace stateflow::backend {

template <typename T, typename Exec>
class GridGdnOps final : public GdnOps<T>, public GridRecurrentCore<T, Exec> {
 public:
  explicit GridGdnOps(Exec exec) : GridRecurrentCore<T, Exec>(exec) {}

  void GdnGateForward(T* g, const T* a, const T* A_log, const T* dt_bias,
                      int64_t T_len, int64_t H) override {
    exec_.ForEach(T_len * H, grid::GdnGateForwardFn<T>{g, a, A_log, dt_bias, H});
  }
  // REQUIRES: da does not alias dg (as the CPU kernel).
  void GdnGateBackward(T* da, GradOf<T>* dA_log, GradOf<T>* ddt_bias, const T* dg,
                       const T* a, const T* A_log, const T* dt_bias,
                       int64_t T_len, int64_t H) override {
    exec_.ForEach(T_len * H,
                  grid::GdnGateInputGradFn<T>{da, dg, a, A_log, dt_bias, H});
    exec_.ForEach(H, grid::GdnGateParamGradFn<T>{dA_log, ddt_bias, da, dg, a,
                                                 A_log, dt_bias, T_len, H});
  }

  // ---- the GDN core (grid_kernels/gdn_*.h) ----
  // st_tile (B_V) shapes no launch here: ST's products are GEMMs over every
  // value row of every head (DeltaStForward), so any st_tile gives the same
  // bits.
  int64_t GdnCoreForwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                      int64_t Dv,
                                      int64_t block_size) override {
    return grid::GdnForwardWorkspace<T>::Size(
               grid::GdnShape::Make(T_len, H, Dk, Dv, block_size)) +
           (kWide ? WideGdnForwardSize(T_len * H, Dk, Dv) : 0);
  }
  void GdnCoreForward(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q, const T* k,
                      const T* v, const T* g, const T* beta, const StatOf<T>* S_in,
                      int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                      int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, {});
    } else {
      GdnCoreForwardNative(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreForwardNative(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q, const T* k,
                      const T* v, const T* g, const T* beta, const StatOf<T>* S_in,
                      int64_t T_len, int64_t H, int64_t Dk, int64_t Dv,
                      int64_t block_size, int64_t st_tile);
  // The forward on two streams (the class comment): the blocks in
  // StreamSegments(nb) segments, Pre and Out on stream 1, ST on stream 0,
  //   Pre_0 -> (ST_0 || Pre_1) -> (ST_1 || Out_0, Pre_2) -> ... -> Out_last,
  // the same workspace and the same bits as GdnCoreForward (every pass the
  // same functor on the same elements). Under 2 blocks: GdnCoreForward.
  void GdnCoreForwardOverlapped(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q,
                                const T* k, const T* v, const T* g,
                                const T* beta, const StatOf<T>* S_in, int64_t T_len,
                                int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size,
                                int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Overlapped());
    } else {
      GdnCoreForwardOverlappedNative(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreForwardOverlappedNative(T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q,
                                const T* k, const T* v, const T* g,
                                const T* beta, const StatOf<T>* S_in, int64_t T_len,
                                int64_t H, int64_t Dk, int64_t Dv,
                                int64_t block_size,
                                int64_t st_tile);
  // Larger than the CPU kernel's (H nb Dv Dk): see GdnBackwardWorkspace
  // (grid_kernels/gdn_common.h) -- every block's intermediate results of a
  // pass exist at once, where the CPU walks the blocks with small scratch.
  int64_t GdnCoreBackwardWorkspaceSize(int64_t T_len, int64_t H, int64_t Dk,
                                       int64_t Dv,
                                       int64_t block_size) override {
    return grid::GdnBackwardWorkspace<T>::Size(
               grid::GdnShape::Make(T_len, H, Dk, Dv, block_size)) +
           (kWide ? WideGdnBackwardSize(T_len * H, Dk, Dv) : 0);
  }
  void GdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
                       StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const StatOf<T>* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
                       int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    } else {
      GdnCoreBackwardNative(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreBackwardNative(T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
                       StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q,
                       const T* k, const T* v, const T* g, const T* beta,
                       const StatOf<T>* S_in, int64_t T_len, int64_t H, int64_t Dk,
                       int64_t Dv, int64_t block_size,
                       int64_t st_tile);
  // The backward on two streams: the replay as the overlapped forward with
  // Out's backward of segment k on stream 1 after the replayed ST_k; then the
  // ST backward on stream 0, segments last to first, and the rest of
  // segment k's backward (ST's row and decay gradients, Pre's backward) on
  // stream 1 after ST_k's backward, while stream 0 runs ST_{k-1}'s. The same
  // workspace and bits as GdnCoreBackward. Under 2 blocks: GdnCoreBackward.
  void GdnCoreBackwardOverlapped(
      T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
      const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
      const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size,
      int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Overlapped());
    } else {
      GdnCoreBackwardOverlappedNative(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreBackwardOverlappedNative(
      T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
      const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
      const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
      int64_t Dk, int64_t Dv, int64_t block_size,
      int64_t st_tile);

  // The core phase by phase (ops.h): the passes of GdnCoreForward /
  // GdnCoreBackward in three groups, on their own workspaces.
  int64_t GdnCoreForwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                           int64_t Dk, int64_t Dv,
                                           int64_t block_size) override {
    return GdnCoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  void GdnCoreForwardPhase(CorePhase phase, T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const StatOf<T>* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Of(phase));
    } else {
      GdnCoreForwardPhaseNative(phase, o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreForwardPhaseNative(CorePhase phase, T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const StatOf<T>* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile);
  int64_t GdnCoreBackwardPhaseWorkspaceSize(int64_t T_len, int64_t H,
                                            int64_t Dk, int64_t Dv,
                                            int64_t block_size) override {
    return GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size);
  }
  void GdnCoreBackwardPhase(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace, const T* dO,
                            const StatOf<T>* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const StatOf<T>* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile = 0) override {
    if constexpr (kWide) {
      WideGdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile, WideMode::Of(phase));
    } else {
      GdnCoreBackwardPhaseNative(phase, dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k, v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    }
  }
  void GdnCoreBackwardPhaseNative(CorePhase phase, T* dq, T* dk, T* dv, T* dg,
                            T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace, const T* dO,
                            const StatOf<T>* dS_out, const T* q, const T* k,
                            const T* v, const T* g, const T* beta,
                            const StatOf<T>* S_in, int64_t T_len, int64_t H,
                            int64_t Dk, int64_t Dv,
                            int64_t block_size, int64_t st_tile);

 private:
  using Base = GridRecurrentCore<T, Exec>;
  using Base::exec_;
  using Base::kWide;
  using typename Base::F;
  using typename Base::WideMode;
  using typename Base::WideArgs;
  using Base::kEvEntry;
  using Base::kEvSideDone;
  using Base::kEvOutDone;
  using Base::EvPre;
  using Base::EvST;
  using Base::EvSTBack;
  using Base::ForBlocks;
  using Base::ForTokens;
  using Base::BlockGram;

  // The float copies' extra workspace elements (bf16).
  static int64_t WideGdnForwardSize(int64_t n, int64_t Dk, int64_t Dv) {
    return n * (2 * Dk + 2 * Dv + 2);  // q, k, v, g, beta; o
  }
  static int64_t WideGdnBackwardSize(int64_t n, int64_t Dk, int64_t Dv) {
    // dO, q, k, v, g, beta; dq, dk, dv, dg, dbeta
    return n * (2 * Dk + 2 * Dv + 2) + n * (2 * Dk + Dv + 2);
  }
  void WideGdnCoreForward(T* o, F* S_out, F* workspace, const T* q,
                          const T* k, const T* v, const T* g, const T* beta,
                          const F* S_in, int64_t T_len, int64_t H, int64_t Dk,
                          int64_t Dv, int64_t block_size, int64_t st_tile,
                          WideMode mode = {});
  void WideGdnCoreBackward(T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in,
                           F* workspace, const T* dO, const F* dS_out,
                           const T* q, const T* k, const T* v, const T* g,
                           const T* beta, const F* S_in, int64_t T_len,
                           int64_t H, int64_t Dk, int64_t Dv,
                           int64_t block_size, int64_t st_tile, WideMode mode = {});
  // The inputs of one GDN core call, and its blocks [b0, b1) (a segment).
  struct GdnArgs {
    const T *q, *k, *v, *g, *beta, *S_in;
    grid::GdnShape s;
  };
  // ST's decay of a state across block b (DeltaStForward's carry).
  static auto Carry(const T* G, const grid::GdnShape& s) {
    return [G, s](int64_t b, T* dst, int64_t dst_stride, const T* src,
                  int64_t src_stride, bool accumulate) {
      return grid::GdnCarryFn<T>{dst, dst_stride, src, src_stride, G, s, b, accumulate};
    };
  }
  // The forward's passes over blocks [b0, b1), each on executor e.
  // Pre: G, KG, W, U.
  void GdnPre(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
              const GdnArgs& a, int64_t b0, int64_t b1);
  // ST: V_new into Vn, the entering states; the last block's exit state
  // into S_out unless nullptr.
  void GdnST(Exec& e, const grid::GdnForwardWorkspace<T>& ws, T* Vn, StatOf<T>* S_out,
             const GdnArgs& a, int64_t b0, int64_t b1);
  // Out: o; P over KG (no longer needed by then).
  void GdnOut(Exec& e, const grid::GdnForwardWorkspace<T>& ws, T* o,
              const GdnArgs& a, int64_t b0, int64_t b1);
  // The backward's passes over blocks [b0, b1) (GdnCoreBackward's order):
  // Out's backward (dq, dk, dg written, d(V_new) from Out, each block's own
  // share of dS); ST's backward; the rest (ST's row and decay gradients, dW,
  // Pre's backward: dv, dbeta written, dk, dg completed). ST's backward
  // reads the decayed keys the replay's GdnST left in the workspace.
  void GdnOutBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws, T* dq,
                  T* dk, T* dg, const T* dO, const GdnArgs& a, int64_t b0,
                  int64_t b1);
  void GdnSTBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws, StatOf<T>* dS_in,
                 const StatOf<T>* dS_out, const GdnArgs& a, int64_t b0, int64_t b1);
  void GdnRestBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws, T* dk,
                   T* dv, T* dg, T* dbeta, const GdnArgs& a, int64_t b0,
                   int64_t b1);
};

// ---- out-of-line members ----------------------------------------------------

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnPre(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
                                 const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  ForTokens(e, s.H, b0, b1, s, GdnCumDecayFn<T>{ws.G, a.g, s});
  BlockGram(e, ws.KG, a.k, a.k, s.Dk, s, b0, b1);
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s, GdnMaskDecayFn<T>{ws.KG, ws.G, s, true});
  ForBlocks(e, s.H, s.Dv + s.Dk, b0, b1, s,
            GdnPreSolveFn<T>{ws.U, ws.W, ws.KG, a.k, a.v, a.beta, ws.G, s});
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnST(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
                                T* Vn, StatOf<T>* S_out, const GdnArgs& a, int64_t b0,
                                int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  ForTokens(e, s.H * s.Dk, b0, b1, s, GdnDecayedKeyFn<T>{ws.Kd, a.k, ws.G, s});
  DeltaStForward(e, ws.S, Vn, S_out, ws.U, ws.W, ws.Kd, a.S_in, s, b0, b1, Carry(ws.G, s));
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnOut(Exec& e, const grid::GdnForwardWorkspace<T>& ws,
                                 T* o, const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  BlockGram(e, ws.KG, a.q, a.k, s.Dk, s, b0, b1);
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s, GdnMaskDecayFn<T>{ws.KG, ws.G, s, false});
  // o = gam (Q S_b^T) + P V_new (V_new in U after ST).
  BlockGemm(e, s, b0, b1, false, true, kL, s.Dv, s.Dk, T(1), TokenRows(a.q, s.Dk, s),
            States(ws.S, s.nb, 0, s), T(0), TokenRows(o, s.Dv, s));
  ForTokens(e, s.H * s.Dv, b0, b1, s, GdnScaleByDecayFn<T>{o, ws.G, s, s.Dv});
  BlockGemm(e, s, b0, b1, false, false, kL, s.Dv, kL, T(1), Tiles(ws.KG, s),
            TokenRows(ws.U, s.Dv, s), T(1), TokenRows(o, s.Dv, s));
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnCoreForwardNative(T* o, StatOf<T>* S_out, StatOf<T>* workspace,
                                               const T* q, const T* k, const T* v,
                                               const T* g, const T* beta,
                                               const StatOf<T>* S_in, int64_t T_len, int64_t H,
                                               int64_t Dk, int64_t Dv,
                                               int64_t block_size, int64_t /*st_tile*/) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s};
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  GdnPre(exec_, ws, a, 0, s.nb);
  GdnST(exec_, ws, /*Vn=*/ws.U, S_out, a, 0, s.nb);
  GdnOut(exec_, ws, o, a, 0, s.nb);
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnCoreForwardOverlappedNative(
    T* o, StatOf<T>* S_out, StatOf<T>* workspace, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = StreamSegments(s.nb);
  if (segs < 2) {
    GdnCoreForward(o, S_out, workspace, q, k, v, g, beta, S_in, T_len, H, Dk,
                   Dv, block_size, st_tile);
    return;
  }
  const GdnArgs a{q, k, v, g, beta, S_in, s};
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  auto bound = [&](int seg) { return seg * s.nb / segs; };
  Exec& main = exec_;
  Exec side = exec_.Stream(1);
  main.Record(kEvEntry);  // the inputs, made on stream 0 before this call
  side.Wait(kEvEntry);
  GdnPre(side, ws, a, bound(0), bound(1));
  side.Record(EvPre(0));
  for (int seg = 0; seg < segs; ++seg) {
    main.Wait(EvPre(seg));
    GdnST(main, ws, /*Vn=*/ws.U, S_out, a, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      GdnPre(side, ws, a, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    GdnOut(side, ws, o, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);  // stream 0's later work sees o
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnOutBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws,
                                     T* dq, T* dk, T* dg, const T* dO,
                                     const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  const GdnForwardWorkspace<T>& f = ws.f;
  const int64_t Dk = s.Dk, Dv = s.Dv, tile = s.bs * s.bs;
  BlockGram(e, ws.P, a.q, a.k, Dk, s, b0, b1);
  ForBlocks(e, s.H, tile, b0, b1, s, GdnMaskDecayFn<T>{ws.P, f.G, s, false});
  BlockGram(e, ws.dP, dO, ws.Vn, Dv, s, b0, b1);
  ForBlocks(e, s.H, tile, b0, b1, s, GdnMaskBlockFn<T>{ws.dP, s});
  // dO S_b into dq: the decay gradient reads it, then dq is finished over it.
  BlockGemm(e, s, b0, b1, false, false, kL, Dk, Dv, T(1), TokenRows(dO, Dv, s),
            States(f.S, s.nb, 0, s), T(0), TokenRows(dq, Dk, s));
  ForTokens(e, s.H, b0, b1, s, GdnOutDecayGradFn<T>{dg, ws.P, ws.dP, a.q, dq, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s, GdnOutQueryGradFn<T>{dq, ws.dP, a.k, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s, GdnOutKeyGradFn<T>{dk, ws.dP, a.q, f.G, s});
  ForTokens(e, s.H * Dv, b0, b1, s, GdnOutValueGradFn<T>{ws.dVn, ws.P, dO, s});
  ForBlocks(e, s.H, Dv * Dk, b0, b1, s,
            GdnStateShareFn<T>{ws.dS, dO, a.q, ws.dVn, f.W, f.G, s});
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnSTBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws,
                                    StatOf<T>* dS_in, const StatOf<T>* dS_out, const GdnArgs& a,
                                    int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  // The decayed keys Kd of blocks [b0, b1): the replay's GdnST made them in
  // this workspace (every caller runs it first, on this stream or before
  // this one waits), and nothing since writes them.
  DeltaStBackward(e, ws.dS, ws.Z, /*accumulate_z=*/false, dS_in, dS_out, ws.f.W, ws.f.Kd, s,
                  b0, b1, Carry(ws.f.G, s));
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnRestBack(Exec& e, const grid::GdnBackwardWorkspace<T>& ws,
                                      T* dk, T* dv, T* dg, T* dbeta,
                                      const GdnArgs& a, int64_t b0, int64_t b1) {
  using namespace grid;
  const GdnShape& s = a.s;
  const GdnForwardWorkspace<T>& f = ws.f;
  const int64_t Dk = s.Dk, Dv = s.Dv;
  ForTokens(e, s.H * Dv, b0, b1, s, AddFn<T>{ws.dVn, ws.Z});
  // dKd = V_new dS' (dS' the state leaving the block: slot b + 1) in dW,
  // which the GEMM after ST's gradients overwrites with dW = -d(V_new) S_b.
  BlockGemm(e, s, b0, b1, false, false, kL, Dk, Dv, T(1), TokenRows(ws.Vn, Dv, s),
            States(ws.dS, s.nb + 1, 1, s), T(0), TokenRows(ws.dW, Dk, s));
  ForTokens(e, s.H, b0, b1, s, GdnSTRowGradFn<T>{dk, ws.e, ws.dW, a.k, f.G, s});
  ForBlocks(e, s.H, 1, b0, b1, s, GdnSTDecayGradFn<T>{dg, ws.e, ws.dS, f.S, f.G, s});
  BlockGemm(e, s, b0, b1, false, false, kL, Dk, Dv, T(-1), TokenRows(ws.dVn, Dv, s),
            States(f.S, s.nb, 0, s), T(0), TokenRows(ws.dW, Dk, s));
  // Pre's backward.
  ForBlocks(e, s.H, Dv + Dk, b0, b1, s,
            GdnPreBackSolveFn<T>{ws.dVn, ws.dW, f.KG, a.beta, s});
  ForBlocks(e, s.H, s.bs * s.bs, b0, b1, s,
            GdnDAFn<T>{ws.dP, ws.dVn, ws.dW, f.U, f.W, s});
  ForTokens(e, s.H * Dv, b0, b1, s, GdnScaleByBetaFn<T>{dv, ws.dVn, a.beta, Dv});
  ForTokens(e, s.H, b0, b1, s,
            GdnPreRowGradFn<T>{dbeta, dg, ws.dVn, ws.dW, ws.dP, f.KG, a.k, a.v,
                               a.beta, f.G, s});
  ForTokens(e, s.H * Dk, b0, b1, s,
            GdnPreKeyGradFn<T>{dk, ws.dW, ws.dP, a.k, a.beta, f.G, s});
  ForBlocks(e, s.H, 1, b0, b1, s, GdnDecayCumsumFn<T>{dg, s});
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnCoreBackwardNative(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
    const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t /*st_tile*/) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s};
  const grid::GdnBackwardWorkspace<T> ws(workspace, s);
  // The replay of Pre and ST (U and V_new kept apart: Pre's backward needs U).
  GdnPre(exec_, ws.f, a, 0, s.nb);
  GdnST(exec_, ws.f, ws.Vn, /*S_out=*/nullptr, a, 0, s.nb);
  GdnOutBack(exec_, ws, dq, dk, dg, dO, a, 0, s.nb);
  GdnSTBack(exec_, ws, dS_in, dS_out, a, 0, s.nb);
  GdnRestBack(exec_, ws, dk, dv, dg, dbeta, a, 0, s.nb);
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnCoreBackwardOverlappedNative(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in, StatOf<T>* workspace,
    const T* dO, const StatOf<T>* dS_out, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const int segs = StreamSegments(s.nb);
  if (segs < 2) {
    GdnCoreBackward(dq, dk, dv, dg, dbeta, dS_in, workspace, dO, dS_out, q, k,
                    v, g, beta, S_in, T_len, H, Dk, Dv, block_size, st_tile);
    return;
  }
  const GdnArgs a{q, k, v, g, beta, S_in, s};
  const grid::GdnBackwardWorkspace<T> ws(workspace, s);
  auto bound = [&](int seg) { return seg * s.nb / segs; };
  Exec& main = exec_;
  Exec side = exec_.Stream(1);
  main.Record(kEvEntry);
  side.Wait(kEvEntry);
  // The replay, with Out's backward of a segment after its ST.
  GdnPre(side, ws.f, a, bound(0), bound(1));
  side.Record(EvPre(0));
  for (int seg = 0; seg < segs; ++seg) {
    main.Wait(EvPre(seg));
    GdnST(main, ws.f, ws.Vn, /*S_out=*/nullptr, a, bound(seg), bound(seg + 1));
    main.Record(EvST(seg));
    if (seg + 1 < segs) {
      GdnPre(side, ws.f, a, bound(seg + 1), bound(seg + 2));
      side.Record(EvPre(seg + 1));
    }
    side.Wait(EvST(seg));
    GdnOutBack(side, ws, dq, dk, dg, dO, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvOutDone);
  main.Wait(kEvOutDone);
  // ST's backward, segments last to first; the rest of each behind it.
  for (int seg = segs - 1; seg >= 0; --seg) {
    GdnSTBack(main, ws, dS_in, dS_out, a, bound(seg), bound(seg + 1));
    main.Record(EvSTBack(seg));
    side.Wait(EvSTBack(seg));
    GdnRestBack(side, ws, dk, dv, dg, dbeta, a, bound(seg), bound(seg + 1));
  }
  side.Record(kEvSideDone);
  main.Wait(kEvSideDone);
}

// The phases are GdnCoreForward's and GdnCoreBackward's passes, cut where
// the profiler times them (tests/backend/gdn_phase_test.cc checks that the
// three phases in order give the whole core's bits).
template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnCoreForwardPhaseNative(CorePhase phase, T* o, StatOf<T>* S_out,
                                                    StatOf<T>* workspace, const T* q,
                                                    const T* k, const T* v, const T* g,
                                                    const T* beta, const StatOf<T>* S_in,
                                                    int64_t T_len, int64_t H,
                                                    int64_t Dk, int64_t Dv,
                                                    int64_t block_size, int64_t /*st_tile*/) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s};
  const grid::GdnForwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case CorePhase::kPre: GdnPre(exec_, ws, a, 0, s.nb); break;
    case CorePhase::kST: GdnST(exec_, ws, /*Vn=*/ws.U, S_out, a, 0, s.nb); break;
    case CorePhase::kOut: GdnOut(exec_, ws, o, a, 0, s.nb); break;
  }
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::GdnCoreBackwardPhaseNative(
    CorePhase phase, T* dq, T* dk, T* dv, T* dg, T* dbeta, StatOf<T>* dS_in,
    StatOf<T>* workspace, const T* dO, const StatOf<T>* dS_out, const T* q, const T* k,
    const T* v, const T* g, const T* beta, const StatOf<T>* S_in, int64_t T_len,
    int64_t H, int64_t Dk, int64_t Dv, int64_t block_size, int64_t /*st_tile*/) {
  const grid::GdnShape s = grid::GdnShape::Make(T_len, H, Dk, Dv, block_size);
  const GdnArgs a{q, k, v, g, beta, S_in, s};
  const grid::GdnBackwardWorkspace<T> ws(workspace, s);
  switch (phase) {
    case CorePhase::kPre:  // the replay and Out's backward
      GdnPre(exec_, ws.f, a, 0, s.nb);
      GdnST(exec_, ws.f, ws.Vn, /*S_out=*/nullptr, a, 0, s.nb);
      GdnOutBack(exec_, ws, dq, dk, dg, dO, a, 0, s.nb);
      break;
    case CorePhase::kST:  // the state-gradient chain
      GdnSTBack(exec_, ws, dS_in, dS_out, a, 0, s.nb);
      break;
    case CorePhase::kOut:  // the ST's rows and Pre's backward
      GdnRestBack(exec_, ws, dk, dv, dg, dbeta, a, 0, s.nb);
      break;
  }
}

// ---- bf16: the core on float copies (kWide) ---------------------------------

// Each call names its arguments to WideArgs in one fixed order whatever the
// mode, so the whole core, the overlapped one and the three phases (which
// find the copies an earlier phase made) share one layout.

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::WideGdnCoreForward(
    T* o, F* S_out, F* workspace, const T* q, const T* k, const T* v,
    const T* g, const T* beta, const F* S_in, int64_t T_len, int64_t H,
    int64_t Dk, int64_t Dv, int64_t block_size, int64_t st_tile,
    WideMode mode) {
  GridGdnOps<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(exec_, workspace + f.GdnCoreForwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
             mode);
  const F* qf = w.In(q, n * Dk);
  const F* kf = w.In(k, n * Dk);
  const F* vf = w.In(v, n * Dv);
  const F* gf = w.In(g, n);
  const F* bf = w.In(beta, n);
  F* of = w.Out(o, n * Dv);
  if (mode.phase) {
    f.GdnCoreForwardPhase(*mode.phase, of, S_out, workspace, qf, kf, vf, gf, bf, S_in, T_len, H,
                          Dk, Dv, block_size, st_tile);
  } else if (mode.overlapped) {
    f.GdnCoreForwardOverlapped(of, S_out, workspace, qf, kf, vf, gf, bf, S_in, T_len, H, Dk,
                               Dv, block_size, st_tile);
  } else {
    f.GdnCoreForward(of, S_out, workspace, qf, kf, vf, gf, bf, S_in, T_len, H, Dk, Dv,
                     block_size, st_tile);
  }
  w.Narrow();
}

template <typename T, typename Exec>
void GridGdnOps<T, Exec>::WideGdnCoreBackward(
    T* dq, T* dk, T* dv, T* dg, T* dbeta, F* dS_in, F* workspace, const T* dO,
    const F* dS_out, const T* q, const T* k, const T* v, const T* g,
    const T* beta, const F* S_in, int64_t T_len, int64_t H, int64_t Dk,
    int64_t Dv, int64_t block_size, int64_t st_tile, WideMode mode) {
  GridGdnOps<F, Exec> f(exec_);
  const int64_t n = T_len * H;
  WideArgs w(exec_, workspace + f.GdnCoreBackwardWorkspaceSize(T_len, H, Dk, Dv, block_size),
             mode);
  const F* dOf = w.In(dO, n * Dv);
  const F* qf = w.In(q, n * Dk);
  const F* kf = w.In(k, n * Dk);
  const F* vf = w.In(v, n * Dv);
  const F* gf = w.In(g, n);
  const F* bf = w.In(beta, n);
  F* dqf = w.Out(dq, n * Dk);
  F* dkf = w.Out(dk, n * Dk);
  F* dvf = w.Out(dv, n * Dv);
  F* dgf = w.Out(dg, n);
  F* dbf = w.Out(dbeta, n);
  if (mode.phase) {
    f.GdnCoreBackwardPhase(*mode.phase, dqf, dkf, dvf, dgf, dbf, dS_in, workspace, dOf, dS_out,
                           qf, kf, vf, gf, bf, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  } else if (mode.overlapped) {
    f.GdnCoreBackwardOverlapped(dqf, dkf, dvf, dgf, dbf, dS_in, workspace, dOf, dS_out, qf, kf,
                                vf, gf, bf, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  } else {
    f.GdnCoreBackward(dqf, dkf, dvf, dgf, dbf, dS_in, workspace, dOf, dS_out, qf, kf, vf, gf,
                      bf, S_in, T_len, H, Dk, Dv, block_size, st_tile);
  }
  w.Narrow();
}

}  // namespace stateflow::backend

// What the grid devices' recurrent cores share (GridGdnOps, GridMamba3Ops,
// GridKdaOps: grid_gdn_ops.h, grid_mamba3_ops.h, grid_kda_ops.h): the
// executor, the segments and events of the overlapped cores on two streams,
// the passes' restriction to a range of blocks, the blocks' Gram matrices as
// batched GEMMs, and bf16's float copies of a core call's arguments
// (WideArgs). The executor's contract and the two-stream schedule are
// grid_ops.h's.
//
// Not a kernel of its own: a base the families' grid ops derive from.
//
//   template <typename T, typename Exec>
//   class GridGdnOps final : public GdnOps<T>, GridRecurrentCore<T, Exec> { ... };
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>

#include "backend/device/grid_kernels/elementwise.h"
#include "backend/device/grid_kernels/gdn_common.h"
#include "backend/device/precision.h"
#include "backend/kernels/core_phase.h"

namespace stateflow::backend {

// Segments of the overlapped GDN and Mamba-3 cores: min(nb,
// kMaxStreamSegments); segment j is blocks [j nb / S, (j + 1) nb / S). The
// event ids they use are below kGridEvents.
inline constexpr int kMaxStreamSegments = 4;
inline constexpr int kGridEvents = 3 + 3 * kMaxStreamSegments;
inline int StreamSegments(int64_t nb) {
  return nb < kMaxStreamSegments ? static_cast<int>(nb) : kMaxStreamSegments;
}

namespace grid {

// One operand of a per-block GEMM: head h's block b is the row-major
// matrix at p + h * head + b * block, rows ld apart.
template <typename P>
struct Blocks {
  P* p;
  int64_t head, block, ld;
  P* At(int64_t h, int64_t b) const { return p + h * head + b * block; }
};
// A (T, H, D) buffer's block rows (L, D).
template <typename P>
Blocks<P> TokenRows(P* x, int64_t D, const GdnShape& s) {
  return {x, D, s.bs * s.H * D, s.H * D};
}
// An (H, nb, bs, bs) buffer's blocks.
template <typename P>
Blocks<P> Tiles(P* x, const GdnShape& s) {
  return {x, s.nb * s.bs * s.bs, s.bs * s.bs, s.bs};
}
// An (H, slots, Dv, Dk) buffer's (Dv, Dk) states, block b at slot b + shift.
template <typename P>
Blocks<P> States(P* x, int64_t slots, int64_t shift, const GdnShape& s) {
  return {x + shift * s.Dv * s.Dk, slots * s.Dv * s.Dk, s.Dv * s.Dk, s.Dk};
}
// A GEMM dimension: a size, or kL for the block's token count.
inline constexpr int64_t kL = -1;
// C_b = alpha op(A_b) op(B_b) + beta C_b (row-major, (M, N), op(A) (M, K))
// for every head and block b in [b0, b1): per head, one strided-batched
// GEMM over the full blocks and one for a partial last block.
template <typename T, class Exec, class PA, class PB>
void BlockGemm(const Exec& e, const GdnShape& s, int64_t b0, int64_t b1, bool ta, bool tb,
               int64_t M, int64_t N, int64_t K, T alpha, Blocks<PA> A, Blocks<PB> B, T beta,
               Blocks<T> C) {
  const int64_t full_end = s.T / s.bs < b1 ? s.T / s.bs : b1;
  for (int64_t h = 0; h < s.H; ++h) {
    auto run = [&](int64_t b, int64_t count, int64_t L) {
      auto dim = [L](int64_t x) { return x == kL ? L : x; };
      e.GemmStridedBatched(ta, tb, dim(M), dim(N), dim(K), alpha,
                           static_cast<const T*>(A.At(h, b)), A.ld, A.block,
                           static_cast<const T*>(B.At(h, b)), B.ld, B.block, beta,
                           C.At(h, b), C.ld, C.block, count);
    };
    if (full_end > b0) run(b0, full_end - b0, s.bs);
    if (full_end < b1) run(full_end, 1, s.L(full_end));  // the partial last
  }
}

}  // namespace grid

// The state chain (ST) of the delta-rule cores (GDN, KDA) over blocks
// [b0, b1) in order, each block's products GEMMs batched over the heads
// (head h's matrices a fixed stride apart in every buffer):
//   V_new_b = U_b - W_b S_b^T               (over U when Vn == U)
//   S_{b+1} = carry_b(S_b) + V_new_b^T X_b,
// X the keys as the leaving state sees them ((T, H, Dk): GDN's decayed
// keys, KDA's Kt). states (H, nb, Dv, Dk): slot 0 filled from S_in (zeros
// for nullptr) when b0 = 0, a later segment's first slot written by the
// segment before; the last block's S_{b+1} into S_out (skipped when
// nullptr). carry(b, dst, dst_stride, src, src_stride, accumulate) gives
// the ForEach functor over H Dv Dk that writes dst = decay_b o src (+ dst).
template <typename T, class Exec, class Carry>
void DeltaStForward(const Exec& e, T* states, T* Vn, T* S_out, const T* U,
                    const T* W, const T* X, const T* S_in, const grid::GdnShape& s,
                    int64_t b0, int64_t b1, Carry carry) {
  const int64_t n = s.Dv * s.Dk, stride = s.nb * n;  // a state; a head's slots
  const int64_t ldk = s.H * s.Dk, ldv = s.H * s.Dv;
  if (b0 == 0) {  // block 0's entering state (no block: S_out = S_in)
    T* first = s.nb > 0 ? states : S_out;
    if (first != nullptr) {
      e.ForEach(s.H * n, grid::StateCopyFn<T>{first, s.nb > 0 ? stride : n, S_in, n, n});
    }
  }
  if (Vn != U) {
    const int64_t t0 = b0 * s.bs, t1 = b1 * s.bs < s.T ? b1 * s.bs : s.T;
    e.ForEach((t1 - t0) * s.H * s.Dv,
              grid::CopyFn<T>{Vn + s.Row(t0, 0, s.Dv), U + s.Row(t0, 0, s.Dv)});
  }
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t t0 = b * s.bs, L = s.L(b);
    T* Sb = states + b * n;
    T* Vb = Vn + s.Row(t0, 0, s.Dv);
    e.GemmStridedBatched(false, true, L, s.Dv, s.Dk, T(-1), W + s.Row(t0, 0, s.Dk), ldk,
                         s.Dk, Sb, s.Dk, stride, T(1), Vb, ldv, s.Dv, s.H);
    const bool last = b + 1 == s.nb;
    T* next = last ? S_out : Sb + n;
    if (next == nullptr) continue;
    const int64_t next_stride = last ? n : stride;
    e.ForEach(s.H * n, carry(b, next, next_stride, Sb, stride, false));
    e.GemmStridedBatched(true, false, s.Dv, s.Dk, L, T(1), Vb, ldv, s.Dv,
                         X + s.Row(t0, 0, s.Dk), ldk, s.Dk, T(1), next, s.Dk,
                         next_stride, s.H);
  }
}

// Its transpose over blocks [b0, b1) in reverse, dS (H, nb + 1, Dv, Dk):
// slot nb filled from dS_out (zeros for nullptr) when b1 = nb; for each
// block, with dS' = slot b + 1 (the gradient of the state leaving it),
//   Z_b  = X_b dS'^T   (accumulate_z: Z_b += X_b dS'^T)
//   slot b = slot b (the block's own share) + carry_b^T(dS') - Z_b^T W_b;
// slot 0 copied into dS_in (unless nullptr) when b0 = 0.
template <typename T, class Exec, class Carry>
void DeltaStBackward(const Exec& e, T* dS, T* Z, bool accumulate_z, T* dS_in,
                     const T* dS_out, const T* W, const T* X, const grid::GdnShape& s,
                     int64_t b0, int64_t b1, Carry carry) {
  const int64_t n = s.Dv * s.Dk, stride = (s.nb + 1) * n;
  const int64_t ldk = s.H * s.Dk, ldv = s.H * s.Dv;
  if (b1 == s.nb) {
    e.ForEach(s.H * n, grid::StateCopyFn<T>{dS + s.nb * n, stride, dS_out, n, n});
  }
  for (int64_t b = b1 - 1; b >= b0; --b) {
    const int64_t t0 = b * s.bs, L = s.L(b);
    T* cur = dS + b * n;
    const T* next = cur + n;
    T* Zb = Z + s.Row(t0, 0, s.Dv);
    const T* Wb = W + s.Row(t0, 0, s.Dk);
    e.GemmStridedBatched(false, true, L, s.Dv, s.Dk, T(1), X + s.Row(t0, 0, s.Dk), ldk,
                         s.Dk, next, s.Dk, stride, accumulate_z ? T(1) : T(0), Zb, ldv,
                         s.Dv, s.H);
    e.ForEach(s.H * n, carry(b, cur, stride, next, stride, true));
    e.GemmStridedBatched(true, false, s.Dv, s.Dk, L, T(-1), Zb, ldv, s.Dv, Wb, ldk, s.Dk,
                         T(1), cur, s.Dk, stride, s.H);
  }
  if (dS_in != nullptr && b0 == 0) {
    e.ForEach(s.H * n, grid::StateCopyFn<T>{dS_in, n, dS, stride, n});
  }
}

template <typename T, typename Exec>
class GridRecurrentCore {
 public:
  explicit GridRecurrentCore(Exec exec) : exec_(exec) {}
  Exec& exec() { return exec_; }

 protected:
  // bf16 (StatOf<T> wider than T): the recurrent cores run their float
  // passes on float copies of their inputs, made in the workspace after the
  // float core's own, and round their outputs once at the end ("bf16" in
  // docs/backend.md).
  static constexpr bool kWide = !std::is_same_v<StatOf<T>, T>;
  using F = StatOf<T>;
  // How a bf16 core call runs: the whole core, sequential or overlapped,
  // or one of its phases (kPre widens the inputs, kOut rounds the outputs;
  // the copies stay in the workspace between the calls, as the float core's
  // intermediates do).
  struct WideMode {
    bool overlapped = false;
    std::optional<CorePhase> phase;
    static WideMode Overlapped() { return {true, std::nullopt}; }
    static WideMode Of(CorePhase p) { return {false, p}; }
    bool widens() const { return !phase || *phase == CorePhase::kPre; }
    bool narrows() const { return !phase || *phase == CorePhase::kOut; }
  };
  // The float copies of one bf16 core call's arguments, carved from `at` in
  // the order the call names them, a nullptr argument's too (a fixed layout:
  // a later phase finds what an earlier one made). In: the copy of an input,
  // widened if the mode widens; Out: the copy of an output, rounded into it
  // by Narrow() if the mode narrows. A nullptr argument gives nullptr.
  class WideArgs {
   public:
    WideArgs(Exec& exec, F* at, WideMode mode) : exec_(exec), at_(at), mode_(mode) {}
    const F* In(const T* x, int64_t n) {
      F* y = Take(n);
      if (x == nullptr) return nullptr;
      if (mode_.widens()) exec_.ForEach(n, grid::ConvertFn<F, T>{y, x});
      return y;
    }
    F* Out(T* x, int64_t n) {
      F* y = Take(n);
      if (x == nullptr) return nullptr;
      outs_[count_++] = {x, y, n};
      return y;
    }
    void Narrow() {
      if (!mode_.narrows()) return;
      for (int i = 0; i < count_; ++i) {
        exec_.ForEach(outs_[i].n, grid::ConvertFn<T, F>{outs_[i].x, outs_[i].y});
      }
    }

   private:
    struct Output {
      T* x;
      F* y;
      int64_t n;
    };
    F* Take(int64_t n) {
      F* r = at_;
      at_ += n;
      return r;
    }
    Exec& exec_;
    F* at_;
    WideMode mode_;
    std::array<Output, 8> outs_{};  // the most a core names: Mamba-3's backward
    int count_ = 0;
  };

  // Events of the overlapped cores (grid_ops.h's executor comment), one id
  // per use within a call: entry, side done, and per segment.
  static constexpr int kEvEntry = 0, kEvSideDone = 1, kEvOutDone = 2;
  static int EvPre(int seg) { return 3 + seg; }
  static int EvST(int seg) { return 3 + kMaxStreamSegments + seg; }
  static int EvSTBack(int seg) { return 3 + 2 * kMaxStreamSegments + seg; }

  // f over blocks [b0, b1) of an (outer, nb, per_block) index space, or of
  // a (T, H, D) one (Tokens: per_token = H D).
  template <class F>
  void ForBlocks(Exec& e, int64_t outer, int64_t per_block, int64_t b0,
                 int64_t b1, const grid::GdnShape& s, F f) {
    const int64_t n_in = (b1 - b0) * per_block;
    e.ForEach(outer * n_in, grid::BlockRangeFn<F>{f, per_block, s.nb, b0, n_in});
  }
  template <class F>
  void ForTokens(Exec& e, int64_t per_token, int64_t b0, int64_t b1,
                 const grid::GdnShape& s, F f) {
    const int64_t t0 = b0 * s.bs, t1 = b1 * s.bs < s.T ? b1 * s.bs : s.T;
    const int64_t n = (t1 - t0) * per_token;
    e.ForEach(n, grid::BlockRangeFn<F>{f, s.bs * per_token, s.nb, b0, n});
  }
  // tile[h, b] (L, L) = X_b Y_b^T for every head and block b in [b0, b1) of
  // (T, H, D) buffers X, Y: one strided-batched GEMM per head over its full
  // blocks, one GEMM for a partial last block.
  void BlockGram(Exec& e, T* tile, const T* X, const T* Y, int64_t D,
                 const grid::GdnShape& s, int64_t b0, int64_t b1);

  Exec exec_;
};

template <typename T, typename Exec>
void GridRecurrentCore<T, Exec>::BlockGram(Exec& e, T* tile, const T* X, const T* Y,
                                           int64_t D, const grid::GdnShape& s, int64_t b0,
                                           int64_t b1) {
  grid::BlockGemm(e, s, b0, b1, false, true, grid::kL, grid::kL, D, T(1),
                  grid::TokenRows(X, D, s), grid::TokenRows(Y, D, s), T(0),
                  grid::Tiles(tile, s));
}

}  // namespace stateflow::backend

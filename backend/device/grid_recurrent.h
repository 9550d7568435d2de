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
                                 int64_t D, const grid::GdnShape& s,
                                 int64_t b0, int64_t b1) {
  const int64_t full_end = s.T / s.bs < b1 ? s.T / s.bs : b1;  // full blocks end
  const int64_t ld = s.H * D;
  for (int64_t h = 0; h < s.H; ++h) {
    if (full_end > b0) {
      const int64_t off = s.Row(b0 * s.bs, h, D);
      e.GemmStridedBatched(false, true, s.bs, s.bs, D, T(1), X + off, ld,
                           s.bs * ld, Y + off, ld, s.bs * ld, T(0),
                           tile + s.Tile(h, b0, 0, 0), s.bs, s.bs * s.bs,
                           full_end - b0);
    }
    if (full_end < b1) {  // the partial last block
      const int64_t L = s.L(full_end), off = s.Row(full_end * s.bs, h, D);
      e.Gemm(false, true, L, L, D, T(1), X + off, ld, Y + off, ld, T(0),
             tile + s.Tile(h, full_end, 0, 0), s.bs);
    }
  }
}

}  // namespace stateflow::backend

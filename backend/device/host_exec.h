// HostExec: the executor of GridOps (grid_ops.h) on the host. ForEach is a
// loop over the grid, split over the kernel threads (backend/threading.h,
// static schedule) when it is long; every grid functor writes disjoint
// elements per index, so the split never changes a bit. Gemm is Eigen's
// product on row-major views; Sum adds in index order in double. Streams
// and events (grid_ops.h) are no-ops: the passes run in issue order.
//
// Not a CPU device of its own: HostGridDevice (host_grid_device.h) wraps it.
//
//   GridOps<double, HostExec> ops{HostExec{}};
#pragma once

#include <Eigen/Core>
#include <cstdint>

#include "backend/threading.h"

namespace stateflow::backend {

struct HostExec {
  // Below this many indices ForEach stays on the calling thread.
  static constexpr int64_t kParallelIndices = 1 << 12;

  template <class F>
  void ForEach(int64_t n, F f) const {
    const int threads = KernelThreads();
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (threads > 1 && n >= kParallelIndices)
    for (int64_t i = 0; i < n; ++i) f(i);
  }

  // One tile's indices are contiguous: on the host just a ForEach.
  template <class F>
  void ForEachTile(int64_t tiles, int64_t tile, F f) const {
    ForEach(tiles * tile, f);
  }

  // One stream: work runs when issued, so every event is already complete.
  HostExec Stream(int /*i*/) const { return *this; }
  void Record(int /*e*/) const {}
  void Wait(int /*e*/) const {}

  template <typename T>
  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
            T alpha, const T* A, int64_t lda, const T* B, int64_t ldb, T beta,
            T* C, int64_t ldc) const {
    using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic,
                                 Eigen::RowMajor>;
    using CView = Eigen::Map<const RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
    using View = Eigen::Map<RowMat, Eigen::Unaligned, Eigen::OuterStride<>>;
    if (M == 0 || N == 0) return;
    View c(C, M, N, Eigen::OuterStride<>(ldc));
    if (beta == T(0)) {
      c.setZero();
    } else if (beta != T(1)) {
      c *= beta;
    }
    if (K == 0) return;
    // op(A) (M, K): A is (M, K), or (K, M) when transposed; likewise B.
    const CView a(A, trans_a ? K : M, trans_a ? M : K, Eigen::OuterStride<>(lda));
    const CView b(B, trans_b ? N : K, trans_b ? K : N, Eigen::OuterStride<>(ldb));
    if (!trans_a && !trans_b) c.noalias() += alpha * (a * b);
    if (!trans_a && trans_b) c.noalias() += alpha * (a * b.transpose());
    if (trans_a && !trans_b) c.noalias() += alpha * (a.transpose() * b);
    if (trans_a && trans_b) c.noalias() += alpha * (a.transpose() * b.transpose());
  }

  template <typename T>
  void GemmStridedBatched(bool trans_a, bool trans_b, int64_t M, int64_t N,
                          int64_t K, T alpha, const T* A, int64_t lda,
                          int64_t stride_a, const T* B, int64_t ldb,
                          int64_t stride_b, T beta, T* C, int64_t ldc,
                          int64_t stride_c, int64_t batch) const {
    for (int64_t i = 0; i < batch; ++i) {
      Gemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda,
           B + i * stride_b, ldb, beta, C + i * stride_c, ldc);
    }
  }

  template <typename T>
  double Sum(const T* x, int64_t n) const {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
    return acc;
  }
};

}  // namespace stateflow::backend

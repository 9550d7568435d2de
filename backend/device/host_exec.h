// HostExec: the executor of GridOps (grid_ops.h) on the host. ForEach is a
// loop over the grid, split over the kernel threads (backend/threading.h,
// static schedule) when it is long; every grid functor writes disjoint
// elements per index, so the split never changes a bit. Gemm is Eigen's
// product on row-major views; Sum adds in index order in double. GemmBf16
// (bf16 operands, float accumulation, a float or bf16 C) widens the operands
// to float, exactly, and runs the float product, rounding a bf16 C once.
// Streams and events (grid_ops.h) are no-ops: the passes run in issue order.
//
// Not a CPU device of its own: HostGridDevice (host_grid_device.h) wraps it.
//
//   GridOps<double, HostExec> ops{HostExec{}};
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/device/bf16.h"
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
    // The product of dense (aligned) copies of op(A) and op(B), then added:
    // Eigen vectorises small products by where their operands sit, so the
    // same values at other addresses could round differently. From copies,
    // a call's bits depend on its values and shapes alone -- what the grid's
    // bit-for-bit guarantees (overlapped = sequential, any ST tile, any
    // executor) rest on. The sum into C is elementwise, exact per element.
    RowMat ca, cb;
    if (trans_a) {
      ca = a.transpose();
    } else {
      ca = a;
    }
    if (trans_b) {
      cb = b.transpose();
    } else {
      cb = b;
    }
    RowMat p(M, N);
    p.noalias() = ca * cb;
    if (alpha != T(1)) p *= alpha;
    c += p;
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

  // Row-major C (M, N) = alpha op(A) op(B) + beta C with A and B in bf16,
  // computed in float (cuBLAS's GemmEx with CUBLAS_COMPUTE_32F on the
  // GPU); TC is float or bf16 (then C is read, when beta != 0, and written
  // once, rounded to nearest even).
  template <typename TC>
  void GemmBf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const bf16* A, int64_t lda, const bf16* B,
                int64_t ldb, float beta, TC* C, int64_t ldc) const {
    static_assert(std::is_same_v<TC, float> || std::is_same_v<TC, bf16>);
    if (M == 0 || N == 0) return;
    // The stored extents of A and B: (rows, cols) with leading dimension ld.
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    const std::vector<float> a = Widen(A, a_rows, a_cols, lda);
    const std::vector<float> b = Widen(B, b_rows, b_cols, ldb);
    if constexpr (std::is_same_v<TC, float>) {
      Gemm<float>(trans_a, trans_b, M, N, K, alpha, a.data(), a_cols, b.data(),
                  b_cols, beta, C, ldc);
    } else {
      std::vector<float> c =
          beta == 0.0f ? std::vector<float>(static_cast<std::size_t>(M * N))
                       : Widen(C, M, N, ldc);
      Gemm<float>(trans_a, trans_b, M, N, K, alpha, a.data(), a_cols, b.data(),
                  b_cols, beta, c.data(), N);
      for (int64_t r = 0; r < M; ++r) {
        for (int64_t j = 0; j < N; ++j) C[r * ldc + j] = bf16(c[r * N + j]);
      }
    }
  }

  template <typename T>
  double Sum(const T* x, int64_t n) const {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
    return acc;
  }

 private:
  // The dense float copy of a (rows, cols) bf16 matrix with leading dimension ld.
  static std::vector<float> Widen(const bf16* x, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = static_cast<float>(x[r * ld + j]);
    }
    return out;
  }
};

}  // namespace stateflow::backend

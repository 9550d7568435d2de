// A row-major GEMM restated for a column-major library (cuBLAS): a row-major
// (r, c) matrix with leading dimension ld is, to a column-major library, its
// (c, r) transpose with the same ld, so C = op(A) op(B) becomes
// C^T = op(B)^T op(A)^T: swap the operands and M with N, keep the transpose
// flags. CudaExec (backend/cuda/grid_exec.cuh) calls cuBLAS with these
// arguments; this header has no CUDA in it so that the host tests check the
// swap (tests/backend/grid_ops_test.cc).
//
//   ColumnMajorGemm<float> g = AsColumnMajor(false, true, M, N, K, A, lda, B, ldb, C, ldc);
//   cublasSgemm(h, Op(g.trans_a), Op(g.trans_b), g.m, g.n, g.k, &alpha, g.A, g.lda, g.B, g.ldb, &beta, g.C, g.ldc);
//
// Dimensions: the row-major product's M, N, K (C is (M, N)).
#pragma once

#include <cstdint>

namespace stateflow::backend {

// Column-major C (m, n) = op(A) (m, k) op(B) (k, n), as BLAS names them.
// TC, C's element type, differs from T in a mixed-precision GEMM (bf16
// operands, float C: cublasGemmEx).
template <typename T, typename TC = T>
struct ColumnMajorGemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const T* A;
  int64_t lda;
  const T* B;
  int64_t ldb;
  TC* C;
  int64_t ldc;
};

template <typename T, typename TC>
ColumnMajorGemm<T, TC> AsColumnMajor(bool trans_a, bool trans_b, int64_t M,
                                     int64_t N, int64_t K, const T* A, int64_t lda,
                                     const T* B, int64_t ldb, TC* C, int64_t ldc) {
  return {trans_b, trans_a, N, M, K, B, ldb, A, lda, C, ldc};
}

}  // namespace stateflow::backend

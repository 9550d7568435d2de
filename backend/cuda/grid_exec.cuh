// CudaExec: the executor of GridOps (backend/device/grid_ops.h) on a GPU.
// ForEach launches one CUDA thread per index (a grid-stride loop over
// blocks of 256 threads) on the executor's stream, calling the same SF_HD
// functor the host-grid device runs; Gemm and GemmStridedBatched are cuBLAS
// calls with the row-major <-> column-major swap of column_major_gemm.h;
// GemmBf16 is cublasGemmEx (bf16 operands, float compute); Sum reduces on
// the device in one block, in an order fixed by n alone, and
// copies the double to the host (the one synchronising call).
//
// ForEachTile launches one thread block per tile (the ST passes' B_V: the
// launch's block shape). Streams and events (grid_ops.h's executor
// contract): a CudaStreams of the device holds stream 0 and the side
// stream 1, a cuBLAS handle bound to each, and kCudaExecEvents events;
// Stream(i) is an executor on stream i, Record / Wait are cudaEventRecord /
// cudaStreamWaitEvent. Without a CudaStreams (attention ops) everything
// stays on the one stream, whose FIFO order already satisfies every wait.
//
// Not memory or error handling: launches are asynchronous on the stream and
// their errors surface at the CUDA device's Synchronize (a void Ops call has
// no status to return them in). Compiled by nvcc only; it has not run on a
// GPU here (no device on the build machine).
//
//   CudaExec exec{cublas_handle, stream};   // handle already bound to stream
//   GridOps<float, CudaExec> ops{exec};
//
// Dimensions: as in grid_ops.h.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_ops.h"
#include "backend/device/bf16.h"
#include "backend/device/column_major_gemm.h"

namespace stateflow::backend {

inline constexpr int kGridThreads = 256;       // threads per block
inline constexpr int64_t kGridMaxBlocks = 1 << 16;  // then grid-stride

template <class F>
__global__ void GridForEachKernel(int64_t n, F f) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    f(i);
  }
}

// out[0] = sum of x[0, n) in double: thread t adds x[t], x[t + 256], ...;
// then a fixed tree over the 256 partial sums.
template <typename T>
__global__ void GridSumKernel(double* out, const T* x, int64_t n) {
  __shared__ double partial[kGridThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kGridThreads) {
    acc += static_cast<double>(x[i]);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = kGridThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = partial[0];
}

// Indices [tile * blockIdx.x, tile * (blockIdx.x + 1)) over blockDim.x
// threads (a tile wider than a block loops).
template <class F>
__global__ void GridForEachTileKernel(int64_t tile, F f) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tile;
  for (int64_t r = threadIdx.x; r < tile; r += blockDim.x) f(base + r);
}

inline constexpr int kCudaMaxTileThreads = 1024;

inline cublasOperation_t CublasOp(bool trans) {
  return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

struct CudaExec {
  cublasHandle_t handle;  // bound to `stream` (cublasSetStream)
  cudaStream_t stream;
  CudaStreams* streams = nullptr;  // the device's, or none: one stream

  template <class F>
  void ForEach(int64_t n, F f) const {
    if (n <= 0) return;
    int64_t blocks = (n + kGridThreads - 1) / kGridThreads;
    if (blocks > kGridMaxBlocks) blocks = kGridMaxBlocks;
    GridForEachKernel<<<static_cast<unsigned>(blocks), kGridThreads, 0, stream>>>(n, f);
  }
  // One thread block per tile (at most 2^31 - 1 tiles: heads x tiles).
  template <class F>
  void ForEachTile(int64_t tiles, int64_t tile, F f) const {
    if (tiles <= 0 || tile <= 0) return;
    const int threads = tile < kCudaMaxTileThreads ? static_cast<int>(tile)
                                                   : kCudaMaxTileThreads;
    GridForEachTileKernel<<<static_cast<unsigned>(tiles), threads, 0, stream>>>(tile, f);
  }

  CudaExec Stream(int i) const {
    if (streams == nullptr) return *this;
    return CudaExec{streams->handle[i], streams->stream[i], streams};
  }
  void Record(int e) const {
    if (streams != nullptr) cudaEventRecord(streams->event[e], stream);
  }
  void Wait(int e) const {
    if (streams != nullptr) cudaStreamWaitEvent(stream, streams->event[e], 0);
  }

  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
            float alpha, const float* A, int64_t lda, const float* B,
            int64_t ldb, float beta, float* C, int64_t ldc) const {
    if (M == 0 || N == 0) return;
    const ColumnMajorGemm<float> g =
        AsColumnMajor(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    cublasSgemm_64(handle, CublasOp(g.trans_a), CublasOp(g.trans_b), g.m, g.n,
                   g.k, &alpha, g.A, g.lda, g.B, g.ldb, &beta, g.C, g.ldc);
  }
  void Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
            double alpha, const double* A, int64_t lda, const double* B,
            int64_t ldb, double beta, double* C, int64_t ldc) const {
    if (M == 0 || N == 0) return;
    const ColumnMajorGemm<double> g =
        AsColumnMajor(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    cublasDgemm_64(handle, CublasOp(g.trans_a), CublasOp(g.trans_b), g.m, g.n,
                   g.k, &alpha, g.A, g.lda, g.B, g.ldb, &beta, g.C, g.ldc);
  }

  // bf16 A and B, float accumulation (CUBLAS_COMPUTE_32F), C in float or
  // bf16: HostExec::GemmBf16's contract.
  template <typename TC>
  void GemmBf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const bf16* A, int64_t lda, const bf16* B,
                int64_t ldb, float beta, TC* C, int64_t ldc) const {
    static_assert(std::is_same_v<TC, float> || std::is_same_v<TC, bf16>);
    if (M == 0 || N == 0) return;
    const ColumnMajorGemm<bf16, TC> g =
        AsColumnMajor(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    constexpr cudaDataType_t c_type =
        std::is_same_v<TC, float> ? CUDA_R_32F : CUDA_R_16BF;
    cublasGemmEx_64(handle, CublasOp(g.trans_a), CublasOp(g.trans_b), g.m, g.n,
                    g.k, &alpha, g.A, CUDA_R_16BF, g.lda, g.B, CUDA_R_16BF,
                    g.ldb, &beta, g.C, c_type, g.ldc, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT);
  }

  // The swap of column_major_gemm.h applied to every matrix of the batch
  // (the strides swap with their operands).
  void GemmStridedBatched(bool trans_a, bool trans_b, int64_t M, int64_t N,
                          int64_t K, float alpha, const float* A, int64_t lda,
                          int64_t stride_a, const float* B, int64_t ldb,
                          int64_t stride_b, float beta, float* C, int64_t ldc,
                          int64_t stride_c, int64_t batch) const {
    if (M == 0 || N == 0 || batch == 0) return;
    const ColumnMajorGemm<float> g =
        AsColumnMajor(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    cublasSgemmStridedBatched_64(handle, CublasOp(g.trans_a), CublasOp(g.trans_b),
                                 g.m, g.n, g.k, &alpha, g.A, g.lda, stride_b, g.B,
                                 g.ldb, stride_a, &beta, g.C, g.ldc, stride_c,
                                 batch);
  }
  void GemmStridedBatched(bool trans_a, bool trans_b, int64_t M, int64_t N,
                          int64_t K, double alpha, const double* A,
                          int64_t lda, int64_t stride_a, const double* B,
                          int64_t ldb, int64_t stride_b, double beta,
                          double* C, int64_t ldc, int64_t stride_c,
                          int64_t batch) const {
    if (M == 0 || N == 0 || batch == 0) return;
    const ColumnMajorGemm<double> g =
        AsColumnMajor(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc);
    cublasDgemmStridedBatched_64(handle, CublasOp(g.trans_a), CublasOp(g.trans_b),
                                 g.m, g.n, g.k, &alpha, g.A, g.lda, stride_b, g.B,
                                 g.ldb, stride_a, &beta, g.C, g.ldc, stride_c,
                                 batch);
  }

  // Synchronises the stream to bring the sum to the host. NaN when the
  // device scratch cannot be allocated (the caller's loss then shows it).
  template <typename T>
  double Sum(const T* x, int64_t n) const {
    if (n <= 0) return 0.0;
    double* d_sum = nullptr;
    if (cudaMallocAsync(&d_sum, sizeof(double), stream) != cudaSuccess) {
      return __builtin_nan("");
    }
    GridSumKernel<T><<<1, kGridThreads, 0, stream>>>(d_sum, x, n);
    double sum = 0.0;
    cudaMemcpyAsync(&sum, d_sum, sizeof(double), cudaMemcpyDeviceToHost, stream);
    cudaFreeAsync(d_sum, stream);
    cudaStreamSynchronize(stream);
    return sum;
  }
};

}  // namespace stateflow::backend

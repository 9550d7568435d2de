// The GPU's attention and RoPE as AttentionOps (device/ops.h):
// GridAttentionOps (device/grid_attention_ops.h) over the CUDA executor,
// every launch on `stream` (`cublas`, bound to it, is the executor's but the
// attention passes make no GEMM calls). Defined in cuda_ops.cu beside
// MakeCudaOps{F32,F64} (cuda_ops.h).
//
//   std::unique_ptr<AttentionOps<float>> attn = MakeCudaAttentionOpsF32(cublas, stream);
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "backend/device/ops.h"

namespace stateflow::backend {

std::unique_ptr<AttentionOps<float>> MakeCudaAttentionOpsF32(cublasHandle_t cublas,
                                                             cudaStream_t stream);
std::unique_ptr<AttentionOps<bf16>> MakeCudaAttentionOpsBf16(cublasHandle_t cublas,
                                                            cudaStream_t stream);
std::unique_ptr<AttentionOps<double>> MakeCudaAttentionOpsF64(cublasHandle_t cublas,
                                                              cudaStream_t stream);

}  // namespace stateflow::backend

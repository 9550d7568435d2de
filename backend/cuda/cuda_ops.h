// The GPU kernels as Ops (device/ops.h): GridOps (device/grid_ops.h) over the
// CUDA executor, every launch on `stream`, GEMMs through `cublas` (bound to
// the same stream). Defined in cuda_ops.cu.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "backend/device/ops.h"

namespace stateflow::backend {

std::unique_ptr<Ops<float>> MakeCudaOpsF32(cublasHandle_t cublas, cudaStream_t stream);
std::unique_ptr<Ops<double>> MakeCudaOpsF64(cublasHandle_t cublas, cudaStream_t stream);

}  // namespace stateflow::backend

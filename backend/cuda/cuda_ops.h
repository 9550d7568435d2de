// The GPU kernels as Ops (device/ops.h): GridOps (device/grid_ops.h) over the
// CUDA executor, every launch on stream 0 of `streams` but the overlapped GDN
// cores' side passes (stream 1), GEMMs through the handle bound to the
// launch's stream. Defined in cuda_ops.cu.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "backend/device/gdn_ops.h"
#include "backend/device/kda_ops.h"
#include "backend/device/mamba3_ops.h"
#include "backend/device/ops.h"

namespace stateflow::backend {

inline constexpr int kCudaExecEvents = 16;

// The device's two streams (0: its compute stream; 1: the side stream of the
// overlapped GDN cores, grid_ops.h), a cuBLAS handle bound to each, and the
// events ordering them. Created and destroyed by CudaDevice; the ops keep a
// pointer.
struct CudaStreams {
  cudaStream_t stream[2] = {nullptr, nullptr};
  cublasHandle_t handle[2] = {nullptr, nullptr};
  cudaEvent_t event[kCudaExecEvents] = {};
};

std::unique_ptr<Ops<float>> MakeCudaOpsF32(CudaStreams* streams);
std::unique_ptr<Ops<double>> MakeCudaOpsF64(CudaStreams* streams);
std::unique_ptr<Ops<bf16>> MakeCudaOpsBf16(CudaStreams* streams);

// Each recurrent family's kernels on the same streams (GridGdnOps,
// GridMamba3Ops over CudaExec), defined in the family's own .cu file
// (cuda_gdn_ops.cu, cuda_mamba3_ops.cu), and registered for GdnOpsOf and
// Mamba3OpsOf by register.cc.
template <typename T>
std::unique_ptr<GdnOps<T>> MakeCudaGdnOps(CudaStreams* streams);
template <typename T>
std::unique_ptr<Mamba3Ops<T>> MakeCudaMamba3Ops(CudaStreams* streams);
template <typename T>
std::unique_ptr<KdaOps<T>> MakeCudaKdaOps(CudaStreams* streams);

}  // namespace stateflow::backend

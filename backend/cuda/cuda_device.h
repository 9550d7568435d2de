// The CUDA device (device.h): one GPU of this rank, its compute stream, a
// cuBLAS handle on that stream, a caching allocator (allocation_cache.h over
// cudaMalloc) and the GPU kernels (GridOps over CudaExec: cuda_ops.h). Built
// only with SF_CUDA; it compiles and links on a machine without a GPU, where
// MakeCudaDevice reports that none is visible.
//
//   SF_ASSIGN_OR_RETURN(Device* gpu, MakeCudaDevice(/*local_rank=*/1));
//   TrackingAllocator alloc(/*stage=*/1, {}, gpu);
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_ops.h"
#include "backend/device/device.h"
#include "common/status.h"

namespace stateflow::backend {

// The process's CUDA device for GPU number local_rank modulo the visible
// GPUs (made on first use, then the same one). Errors: no GPU visible, or
// the CUDA runtime / cuBLAS failed to start (the CUDA error string).
Result<Device*> MakeCudaDevice(int local_rank);

// The compute stream of a device made by MakeCudaDevice (the NCCL comm orders
// its sends and receives against it). Error: not a CUDA device.
Result<cudaStream_t> CudaComputeStream(Device& device);

// The streams, handles and events of a device made by MakeCudaDevice, on
// which a family's CUDA kernels run (register.cc). Error: not a CUDA device.
Result<CudaStreams*> CudaStreamsOf(Device& device);

// The CUDA runtime's view, for `stateflow --version`-style reports and the
// GPU check: "CUDA runtime 13.0, driver 12.4, 2 GPUs" or why none.
std::string CudaRuntimeSummary();

}  // namespace stateflow::backend

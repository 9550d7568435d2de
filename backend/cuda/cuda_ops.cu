// GridOps <float|double|bf16, CudaExec> and GridAttentionOps <float|double, CudaExec>: the
// kernels every family shares and attention's, their grid functors instantiated as CUDA
// kernels (grid_exec.cuh). Each recurrent family's are in its own .cu (cuda_gdn_ops.cu, ...).
#include "backend/cuda/cuda_ops.h"

#include "backend/cuda/cuda_attention_ops.h"
#include "backend/cuda/grid_exec.cuh"
#include "backend/device/grid_attention_ops.h"
#include "backend/device/grid_ops.h"
#include "backend/device/grid_recurrent.h"

namespace stateflow::backend {

static_assert(kGridEvents <= kCudaExecEvents, "CudaStreams holds every event id");

template class GridOps<float, CudaExec>;
template class GridOps<double, CudaExec>;
template class GridAttentionOps<float, CudaExec>;
template class GridAttentionOps<double, CudaExec>;

std::unique_ptr<Ops<float>> MakeCudaOpsF32(CudaStreams* streams) {
  return std::make_unique<GridOps<float, CudaExec>>(
      CudaExec{streams->handle[0], streams->stream[0], streams});
}

std::unique_ptr<Ops<double>> MakeCudaOpsF64(CudaStreams* streams) {
  return std::make_unique<GridOps<double, CudaExec>>(
      CudaExec{streams->handle[0], streams->stream[0], streams});
}

// Not an explicit instantiation: GridOps<bf16> instantiates only what its
// virtual members use (the recurrent cores run on GridOps<float>).
std::unique_ptr<Ops<bf16>> MakeCudaOpsBf16(CudaStreams* streams) {
  return std::make_unique<GridOps<bf16, CudaExec>>(
      CudaExec{streams->handle[0], streams->stream[0], streams});
}

std::unique_ptr<AttentionOps<float>> MakeCudaAttentionOpsF32(
    cublasHandle_t handle, cudaStream_t stream) {
  return std::make_unique<GridAttentionOps<float, CudaExec>>(
      CudaExec{handle, stream, nullptr});
}

std::unique_ptr<AttentionOps<bf16>> MakeCudaAttentionOpsBf16(
    cublasHandle_t handle, cudaStream_t stream) {
  return std::make_unique<GridAttentionOps<bf16, CudaExec>>(
      CudaExec{handle, stream, nullptr});
}

std::unique_ptr<AttentionOps<double>> MakeCudaAttentionOpsF64(
    cublasHandle_t handle, cudaStream_t stream) {
  return std::make_unique<GridAttentionOps<double, CudaExec>>(
      CudaExec{handle, stream, nullptr});
}

}  // namespace stateflow::backend

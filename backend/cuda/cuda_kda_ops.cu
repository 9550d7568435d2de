// The Kimi Delta Attention family's kernels on the GPU: GridKdaOps<float|double|bf16, CudaExec>
// (grid_kda_ops.h), every grid functor instantiated as a CUDA kernel
// (grid_exec.cuh), on the device's two streams.
#include <memory>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/grid_exec.cuh"
#include "backend/device/grid_kda_ops.h"

namespace stateflow::backend {

template class GridKdaOps<float, CudaExec>;
template class GridKdaOps<double, CudaExec>;

template <typename T>
std::unique_ptr<KdaOps<T>> MakeCudaKdaOps(CudaStreams* streams) {
  return std::make_unique<GridKdaOps<T, CudaExec>>(
      CudaExec{streams->handle[0], streams->stream[0], streams});
}

template std::unique_ptr<KdaOps<float>> MakeCudaKdaOps<float>(CudaStreams*);
template std::unique_ptr<KdaOps<double>> MakeCudaKdaOps<double>(CudaStreams*);
// Not an explicit instantiation of the class: GridKdaOps<bf16> instantiates only
// what its virtual members use (its cores run on the float class).
template std::unique_ptr<KdaOps<bf16>> MakeCudaKdaOps<bf16>(CudaStreams*);

}  // namespace stateflow::backend

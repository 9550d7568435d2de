// The Gated DeltaNet family's kernels on the GPU: GridGdnOps<float|double|bf16, CudaExec>
// (grid_gdn_ops.h), every grid functor instantiated as a CUDA kernel
// (grid_exec.cuh), on the device's two streams.
#include <memory>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/grid_exec.cuh"
#include "backend/device/grid_gdn_ops.h"

namespace stateflow::backend {

template class GridGdnOps<float, CudaExec>;
template class GridGdnOps<double, CudaExec>;

template <typename T>
std::unique_ptr<GdnOps<T>> MakeCudaGdnOps(CudaStreams* streams) {
  return std::make_unique<GridGdnOps<T, CudaExec>>(
      CudaExec{streams->handle[0], streams->stream[0], streams});
}

template std::unique_ptr<GdnOps<float>> MakeCudaGdnOps<float>(CudaStreams*);
template std::unique_ptr<GdnOps<double>> MakeCudaGdnOps<double>(CudaStreams*);
// Not an explicit instantiation of the class: GridGdnOps<bf16> instantiates only
// what its virtual members use (its cores run on the float class).
template std::unique_ptr<GdnOps<bf16>> MakeCudaGdnOps<bf16>(CudaStreams*);

}  // namespace stateflow::backend

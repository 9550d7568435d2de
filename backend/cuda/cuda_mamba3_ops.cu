// The Mamba-3 family's kernels on the GPU: GridMamba3Ops<float|double|bf16, CudaExec>
// (grid_mamba3_ops.h), every grid functor instantiated as a CUDA kernel
// (grid_exec.cuh), on the device's two streams.
#include <memory>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/grid_exec.cuh"
#include "backend/device/grid_mamba3_ops.h"

namespace stateflow::backend {

template class GridMamba3Ops<float, CudaExec>;
template class GridMamba3Ops<double, CudaExec>;

template <typename T>
std::unique_ptr<Mamba3Ops<T>> MakeCudaMamba3Ops(CudaStreams* streams) {
  return std::make_unique<GridMamba3Ops<T, CudaExec>>(
      CudaExec{streams->handle[0], streams->stream[0], streams});
}

template std::unique_ptr<Mamba3Ops<float>> MakeCudaMamba3Ops<float>(CudaStreams*);
template std::unique_ptr<Mamba3Ops<double>> MakeCudaMamba3Ops<double>(CudaStreams*);
// Not an explicit instantiation of the class: GridMamba3Ops<bf16> instantiates only
// what its virtual members use (its cores run on the float class).
template std::unique_ptr<Mamba3Ops<bf16>> MakeCudaMamba3Ops<bf16>(CudaStreams*);

}  // namespace stateflow::backend

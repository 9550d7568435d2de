// Registers the CUDA device and the NCCL comm in CudaHooks() when the program
// starts (device/cuda_hooks.h). Linked as an object into the programs that
// carry the CUDA backend (`stateflow-cuda`, the GPU tests), never into a
// static library, so the linker cannot drop it.
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/device/cuda_hooks.h"

namespace stateflow::backend {
namespace {

const bool kRegistered = [] {
  CudaBackendHooks& hooks = CudaHooks();
  hooks.make_device = &MakeCudaDevice;
  hooks.make_nccl_comm_f32 = &MakeNcclComm<float>;
  hooks.make_nccl_comm_f64 = &MakeNcclComm<double>;
  hooks.make_nccl_comm_bf16 = &MakeNcclComm<bf16>;
  return true;
}();

}  // namespace
}  // namespace stateflow::backend

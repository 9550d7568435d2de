// Registers the CUDA device and the NCCL comm in CudaHooks() when the program
// starts (device/cuda_hooks.h), and each recurrent family's CUDA kernels
// where the family's lookup finds them (device/family_ops.h): one line per
// family. Linked as an object into the programs that
// carry the CUDA backend (`stateflow-cuda`, the GPU tests), never into a
// static library, so the linker cannot drop it.
#include <cuda_runtime_api.h>

#include <memory>
#include <typeindex>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/device/cuda_hooks.h"
#include "backend/device/family_ops.h"

namespace stateflow::backend {
namespace {

// A family's ops for element type T on a CUDA device: `Make` (a stateless
// templated lambda) over the device's streams.
template <template <typename> class Iface, typename T, class Make>
std::unique_ptr<FamilyOpsBase> MakeOn(Device& device) {
  Result<CudaStreams*> streams = CudaStreamsOf(device);
  if (!streams.ok()) return nullptr;
  return Make{}.template operator()<T>(*streams);
}

// Registers the family interface Iface's makers for float, double and bf16.
template <template <typename> class Iface, class Make>
void RegisterFamily(Make) {
  auto& makers = CudaFamilyOpsMakers();
  makers[std::type_index(typeid(Iface<float>))] = &MakeOn<Iface, float, Make>;
  makers[std::type_index(typeid(Iface<double>))] = &MakeOn<Iface, double, Make>;
  makers[std::type_index(typeid(Iface<bf16>))] = &MakeOn<Iface, bf16, Make>;
}

const bool kRegistered = [] {
  CudaBackendHooks& hooks = CudaHooks();
  hooks.make_device = &MakeCudaDevice;
  hooks.make_nccl_comm_f32 = &MakeNcclComm<float>;
  hooks.make_nccl_comm_f64 = &MakeNcclComm<double>;
  hooks.make_nccl_comm_bf16 = &MakeNcclComm<bf16>;
  hooks.visible_devices = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
  };
  RegisterFamily<GdnOps>([]<typename T>(CudaStreams* s) { return MakeCudaGdnOps<T>(s); });
  RegisterFamily<Mamba3Ops>([]<typename T>(CudaStreams* s) { return MakeCudaMamba3Ops<T>(s); });
  RegisterFamily<KdaOps>([]<typename T>(CudaStreams* s) { return MakeCudaKdaOps<T>(s); });
  return true;
}();

}  // namespace
}  // namespace stateflow::backend

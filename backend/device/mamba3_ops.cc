// Mamba3OpsOf (mamba3_ops.h): the Mamba-3 kernels of each kind of device.
#include "backend/device/mamba3_ops.h"

#include <memory>

#include "backend/device/device.h"
#include "backend/device/grid_mamba3_ops.h"
#include "backend/device/host_exec.h"

namespace stateflow::backend {
namespace {

template <typename T>
std::unique_ptr<Mamba3Ops<T>> MakeMamba3Ops(Device& device) {
  switch (device.kind()) {
    case DeviceKind::kCpu: return MakeCpuMamba3Ops<T>();
    case DeviceKind::kHostGrid: return std::make_unique<GridMamba3Ops<T, HostExec>>(HostExec{});
    case DeviceKind::kCuda: return MakeCudaFamilyOps<Mamba3Ops<T>>(device);
  }
  return nullptr;
}

}  // namespace

template <typename T>
Mamba3Ops<T>* Mamba3OpsOf(Device& device) {
  return device.FamilyOpsOf<Mamba3Ops<T>>(&MakeMamba3Ops<T>);
}

template Mamba3Ops<float>* Mamba3OpsOf<float>(Device&);
template Mamba3Ops<double>* Mamba3OpsOf<double>(Device&);
template Mamba3Ops<bf16>* Mamba3OpsOf<bf16>(Device&);

}  // namespace stateflow::backend

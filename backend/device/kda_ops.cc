// KdaOpsOf (kda_ops.h): the KDA kernels of each kind of device.
#include "backend/device/kda_ops.h"

#include <memory>

#include "backend/device/device.h"
#include "backend/device/grid_kda_ops.h"
#include "backend/device/host_exec.h"

namespace stateflow::backend {
namespace {

template <typename T>
std::unique_ptr<KdaOps<T>> MakeKdaOps(Device& device) {
  switch (device.kind()) {
    case DeviceKind::kCpu: return MakeCpuKdaOps<T>();
    case DeviceKind::kHostGrid: return std::make_unique<GridKdaOps<T, HostExec>>(HostExec{});
    case DeviceKind::kCuda: return MakeCudaFamilyOps<KdaOps<T>>(device);
  }
  return nullptr;
}

}  // namespace

template <typename T>
KdaOps<T>* KdaOpsOf(Device& device) {
  return device.FamilyOpsOf<KdaOps<T>>(&MakeKdaOps<T>);
}

template KdaOps<float>* KdaOpsOf<float>(Device&);
template KdaOps<double>* KdaOpsOf<double>(Device&);
template KdaOps<bf16>* KdaOpsOf<bf16>(Device&);

}  // namespace stateflow::backend

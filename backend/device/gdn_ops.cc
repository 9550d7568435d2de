// GdnOpsOf (gdn_ops.h): the GDN kernels of each kind of device.
#include "backend/device/gdn_ops.h"

#include <memory>

#include "backend/device/device.h"
#include "backend/device/grid_gdn_ops.h"
#include "backend/device/host_exec.h"

namespace stateflow::backend {
namespace {

template <typename T>
std::unique_ptr<GdnOps<T>> MakeGdnOps(Device& device) {
  switch (device.kind()) {
    case DeviceKind::kCpu: return MakeCpuGdnOps<T>();
    case DeviceKind::kHostGrid: return std::make_unique<GridGdnOps<T, HostExec>>(HostExec{});
    case DeviceKind::kCuda: return MakeCudaFamilyOps<GdnOps<T>>(device);
  }
  return nullptr;
}

}  // namespace

template <typename T>
GdnOps<T>* GdnOpsOf(Device& device) {
  return device.FamilyOpsOf<GdnOps<T>>(&MakeGdnOps<T>);
}

template GdnOps<float>* GdnOpsOf<float>(Device&);
template GdnOps<double>* GdnOpsOf<double>(Device&);
template GdnOps<bf16>* GdnOpsOf<bf16>(Device&);

}  // namespace stateflow::backend

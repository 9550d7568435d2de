// GetDevice (device.h): the devices by name.
#include <string>

#include "backend/device/device.h"
#include "backend/device/host_grid_device.h"
#include "backend/device/cuda_hooks.h"

namespace stateflow::backend {

Result<Device*> GetDevice(std::string_view name, int local_rank) {
  if (name == "cpu") return &CpuDevice();
  if (name == "host-grid") return &HostGridDevice();
  if (name == "cuda") {
    if (CudaHooks().make_device == nullptr) {
      return Status::Invalid(
          "--device cuda: this program has no CUDA backend (run stateflow-cuda, which a build "
          "with nvcc, cuBLAS and NCCL makes beside stateflow; -DSF_CUDA=ON requires it)");
    }
    return CudaHooks().make_device(local_rank);
  }
  return Status::Invalid("--device: unknown device '" + std::string(name) +
                         "' (known: cpu, host-grid, cuda)");
}

}  // namespace stateflow::backend

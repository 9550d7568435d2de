// GetDevice (device.h): the devices by name.
#include <string>

#include "backend/device/device.h"
#if SF_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#endif

namespace stateflow::backend {

Result<Device*> GetDevice(std::string_view name, int local_rank) {
  if (name == "cpu") return &CpuDevice();
  if (name == "cuda") {
#if SF_HAVE_CUDA
    return MakeCudaDevice(local_rank);
#else
    (void)local_rank;
    return Status::Invalid(
        "--device cuda: this build has no CUDA backend (configure with -DSF_CUDA=ON on a "
        "machine with nvcc, cuBLAS and NCCL)");
#endif
  }
  return Status::Invalid("--device: unknown device '" + std::string(name) +
                         "' (known: cpu, cuda)");
}

}  // namespace stateflow::backend

#include "backend/device/cuda_hooks.h"

namespace stateflow::backend {

CudaBackendHooks& CudaHooks() {
  static CudaBackendHooks hooks;
  return hooks;
}

}  // namespace stateflow::backend

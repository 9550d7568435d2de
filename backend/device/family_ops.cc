// The CUDA backend's family ops makers (family_ops.h).
#include "backend/device/family_ops.h"

namespace stateflow::backend {

std::map<std::type_index, FamilyOpsMaker>& CudaFamilyOpsMakers() {
  static auto* makers = new std::map<std::type_index, FamilyOpsMaker>();
  return *makers;
}

}  // namespace stateflow::backend

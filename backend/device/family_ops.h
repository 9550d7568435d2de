// How a model family's kernels join a device. Each family declares its own
// ops interface beside Ops<T> (gdn_ops.h, mamba3_ops.h, kda_ops.h), derived
// from FamilyOpsBase, with a lookup `XxxOpsOf<T>(Device&)` defined in its
// own file, which makes the device's implementation on first use (the CPU's,
// the host grid's, or the one the CUDA backend registered: cuda_hooks.h) and
// keeps it with the device (Device::FamilyOps). A new family therefore adds
// files and touches no device; a new device adds one case to each family's
// lookup.
//
//   template <typename T>
//   GdnOps<T>* GdnOpsOf(Device& d) { return d.FamilyOps<GdnOps<T>>(&MakeGdnOps<T>); }
#pragma once

#include <map>
#include <memory>
#include <typeindex>

namespace stateflow::backend {

class Device;

// The base of every family's ops interface, so that a Device can own them.
class FamilyOpsBase {
 public:
  virtual ~FamilyOpsBase() = default;
};

// The CUDA backend's makers of each family's ops (one per interface and
// element type, e.g. GdnOps<float>), registered at start-up by the programs
// that link it (backend/cuda/register.cc); empty in the others, where a
// family's lookup then finds no CUDA kernels.
using FamilyOpsMaker = std::unique_ptr<FamilyOpsBase> (*)(Device&);
std::map<std::type_index, FamilyOpsMaker>& CudaFamilyOpsMakers();

// The registered CUDA maker's ops for interface F on `device`, or nullptr.
template <class F>
std::unique_ptr<F> MakeCudaFamilyOps(Device& device) {
  const auto& makers = CudaFamilyOpsMakers();
  auto it = makers.find(std::type_index(typeid(F)));
  if (it == makers.end()) return nullptr;
  return std::unique_ptr<F>(static_cast<F*>(it->second(device).release()));
}

}  // namespace stateflow::backend

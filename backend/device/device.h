// A device the real backend runs on: its memory (memory.h) and its kernels
// (ops.h), chosen once per rank by name (`--device cpu|host-grid|cuda`).
// Everything above the seam -- layers, stage modules, the stage runtime, the
// trainer -- reaches kernels and storage only through a Device (via the
// TrackingAllocator it allocates from), so it does not know which one it runs
// on.
//
//   cpu        Eigen kernels on this process's threads (backend/kernels/).
//   host-grid  the CUDA kernels' arithmetic (SF_HD functions, grid_ops.h,
//              host_grid_device.h)
//              executed by host loops over the same grid: the GPU path's
//              arithmetic, tested on a machine without a GPU.
//   cuda       the same arithmetic launched as CUDA kernels, GEMMs in cuBLAS
//              (built only with SF_CUDA; the device chosen by local rank).
//
//   SF_ASSIGN_OR_RETURN(Device* dev, GetDevice("cpu", /*local_rank=*/0));
//   TrackingAllocator alloc(/*stage=*/0, {}, dev);
//   dev->ops<float>().SiluForward(y, x, n);
//
// Not a stream/event abstraction yet: every Ops call is ordered after the
// previous one; Synchronize waits for them (a no-op on the host); a timer
// (TimerStart / TimerStop) measures a span of them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeindex>

#include "backend/device/family_ops.h"
#include "backend/device/memory.h"
#include "backend/device/ops.h"
#include "common/status.h"

namespace stateflow::backend {

enum class DeviceKind { kCpu, kHostGrid, kCuda };

// "cpu", "host-grid", "cuda".
const char* DeviceKindName(DeviceKind kind);

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // For logs and reports: "cpu", "host-grid", "cuda:0 (NVIDIA A100-SXM4-80GB)".
  virtual std::string name() const = 0;
  virtual MemoryResource& memory() = 0;

  // REQUIRES for bf16: has_bf16() (the trainer refuses --dtype bf16 on a
  // device without it, before any work).
  template <typename T>
  Ops<T>& ops() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, bf16>);
    if constexpr (std::is_same_v<T, float>) {
      return ops_f32();
    } else if constexpr (std::is_same_v<T, double>) {
      return ops_f64();
    } else {
      return *ops_bf16();
    }
  }
  // Whether this device has bf16 kernels (Ops<bf16>: the grid devices; the
  // CPU's Eigen kernels are float and double only).
  bool has_bf16() { return ops_bf16() != nullptr; }
  // nullptr when this device has no attention kernels yet.
  template <typename T>
  AttentionOps<T>* attention_ops() {
    if constexpr (std::is_same_v<T, float>) {
      return attention_ops_f32();
    } else if constexpr (std::is_same_v<T, double>) {
      return attention_ops_f64();
    } else {
      return attention_ops_bf16();
    }
  }

  // A model family's kernels on this device (FamilyOps is the family's
  // interface for one element type: GdnOps<float>, ...; family_ops.h): made
  // by `make` on the first call for this interface and kept with the
  // device, so every layer of a rank shares one set. nullptr when `make`
  // gives none (the device has no such kernels). Thread-safe.
  template <class FamilyOps>
  FamilyOps* FamilyOpsOf(std::unique_ptr<FamilyOps> (*make)(Device&)) {
    static_assert(std::is_base_of_v<FamilyOpsBase, FamilyOps>);
    std::lock_guard<std::mutex> lock(family_mu_);
    const std::type_index key(typeid(FamilyOps));
    auto it = family_ops_.find(key);
    if (it == family_ops_.end()) it = family_ops_.emplace(key, make(*this)).first;
    return static_cast<FamilyOps*>(it->second.get());
  }

  // Waits until every Ops call issued so far has finished; reports a
  // device-side error (a failed launch, an illegal address) as a Status.
  virtual Status Synchronize() = 0;

  // Times a span of device work (the profiler's every sample):
  //   SF_RETURN_IF_ERROR(dev->TimerStart());
  //   ... Ops calls ...
  //   SF_ASSIGN_OR_RETURN(double seconds, dev->TimerStop());
  // TimerStop returns the seconds from TimerStart to the end of the work
  // issued in between, having waited for it. This default (the host
  // devices): the steady clock, read after Synchronize at both ends. The
  // CUDA device: two events recorded on its compute stream and
  // cudaEventElapsedTime, so host time spent issuing is not counted where
  // the GPU is busy. One span at a time per device. Errors: Synchronize's
  // (the device's), TimerStop without a TimerStart.
  virtual Status TimerStart();
  virtual Result<double> TimerStop();

 protected:
  virtual Ops<float>& ops_f32() = 0;
  virtual Ops<double>& ops_f64() = 0;
  virtual Ops<bf16>* ops_bf16() { return nullptr; }
  virtual AttentionOps<float>* attention_ops_f32() { return nullptr; }
  virtual AttentionOps<double>* attention_ops_f64() { return nullptr; }
  virtual AttentionOps<bf16>* attention_ops_bf16() { return nullptr; }

 private:
  double timer_start_s_ = -1;  // steady clock at TimerStart; -1: none open
  std::mutex family_mu_;
  std::map<std::type_index, std::unique_ptr<FamilyOpsBase>> family_ops_;  // guarded by family_mu_
};

// The process's CPU device (Eigen kernels, host memory).
Device& CpuDevice();

// The device named `name` ("cpu", "host-grid", "cuda"); for cuda, GPU number
// local_rank modulo the GPUs visible. Errors: an unknown name (lists the
// known ones); "cuda" in a build without SF_CUDA or on a machine without a
// GPU (says which).
Result<Device*> GetDevice(std::string_view name, int local_rank);

}  // namespace stateflow::backend

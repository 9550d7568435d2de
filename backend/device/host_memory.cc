// HostMemory (memory.h): aligned heap allocations and memcpy/memset.
#include <cstring>
#include <new>

#include "backend/device/memory.h"

namespace stateflow::backend {
namespace {

constexpr std::size_t kHostAlignmentBytes = 64;  // a cache line, any SIMD load

class HostMemoryResource final : public MemoryResource {
 public:
  Result<void*> Allocate(int64_t bytes) override {
    void* ptr = ::operator new(static_cast<std::size_t>(bytes),
                               std::align_val_t(kHostAlignmentBytes),
                               std::nothrow);
    if (ptr == nullptr) return Status::Resource("the system refused them");
    return ptr;
  }
  void Free(void* ptr, int64_t /*bytes*/) override {
    ::operator delete(ptr, std::align_val_t(kHostAlignmentBytes));
  }
  void Zero(void* dst, int64_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, static_cast<std::size_t>(bytes));
  }
  void Copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<std::size_t>(bytes));
  }
  void CopyToHost(void* host_dst, const void* src, int64_t bytes) override {
    Copy(host_dst, src, bytes);
  }
  void CopyFromHost(void* dst, const void* host_src, int64_t bytes) override {
    Copy(dst, host_src, bytes);
  }
  bool host_accessible() const override { return true; }
};

}  // namespace

MemoryResource& HostMemory() {
  static HostMemoryResource* const memory = new HostMemoryResource();
  return *memory;
}

}  // namespace stateflow::backend

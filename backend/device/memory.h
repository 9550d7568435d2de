// Where a device's bytes live: raw storage and the copies between it and the
// host. The TrackingAllocator (allocator.h) counts bytes by BufferClass and
// asks its device's MemoryResource for them; Tensor (tensor.h) fills and
// copies through it, so that nothing above the seam dereferences a pointer
// that may live on a GPU.
//
//   MemoryResource& mem = HostMemory();
//   SF_ASSIGN_OR_RETURN(void* p, mem.Allocate(4096));
//   mem.Zero(p, 4096);
//   mem.Free(p, 4096);
#pragma once

#include <cstdint>

#include "common/status.h"

namespace stateflow::backend {

class MemoryResource {
 public:
  virtual ~MemoryResource() = default;

  // `bytes` (> 0) of storage aligned to at least 64 bytes, uninitialised.
  // Error (kResource) when the device has no more.
  virtual Result<void*> Allocate(int64_t bytes) = 0;
  // Returns storage from Allocate with the same `bytes`.
  virtual void Free(void* ptr, int64_t bytes) = 0;

  // Within the device: dst[0, bytes) = 0; dst[0, bytes) = src[0, bytes).
  virtual void Zero(void* dst, int64_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, int64_t bytes) = 0;
  // Between the device and ordinary host memory (synchronous).
  virtual void CopyToHost(void* host_dst, const void* src, int64_t bytes) = 0;
  virtual void CopyFromHost(void* dst, const void* host_src,
                            int64_t bytes) = 0;

  // True when the host may read and write the storage directly (CPU memory);
  // host-only code paths check it and refuse otherwise.
  virtual bool host_accessible() const = 0;
  // Bytes held from the system beyond what is allocated (a caching
  // allocator's pool); 0 for plain host memory.
  virtual int64_t reserved_bytes() const { return 0; }
};

// Aligned host heap memory (one allocation per Allocate, no caching).
MemoryResource& HostMemory();

}  // namespace stateflow::backend

// The caching policy of a device allocator, apart from the device: blocks
// freed by the program are kept (keyed by size) and handed out again instead
// of returning to the driver, as PyTorch's CUDA caching allocator does, so
// that a training step does not pay cudaMalloc/cudaFree per tensor. Reports
// what it holds from the backing store (reserved) beside what the program
// holds (allocated): the simulator predicts the second; the OOM verdict on a
// GPU also depends on the first.
//
// Policy: sizes round up to kGranule bytes; a request takes the smallest
// cached block of at least its rounded size and at most twice it (so a small
// tensor never pins a huge block); on a backing failure every cached block is
// released and the request retried once. Not thread-safe (one rank, one
// stream).
//
// `Backing` provides `Result<void*> Raw(int64_t bytes)` and
// `void Release(void* ptr, int64_t bytes)` (cudaMalloc / cudaFree on a GPU;
// the tests use a counting fake).
//
//   AllocationCache<CudaBacking> cache(backing);
//   SF_ASSIGN_OR_RETURN(void* p, cache.Allocate(1000));   // 1024 reserved
//   cache.Free(p, 1000);                                   // kept, 0 allocated
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <unordered_map>

#include "common/status.h"

namespace stateflow::backend {

template <typename Backing>
class AllocationCache {
 public:
  static constexpr int64_t kGranule = 512;

  explicit AllocationCache(Backing backing) : backing_(std::move(backing)) {}
  AllocationCache(const AllocationCache&) = delete;
  AllocationCache& operator=(const AllocationCache&) = delete;
  // Returns every block to the backing store. REQUIRES: all freed.
  ~AllocationCache() { ReleaseCached(); }

  static int64_t Rounded(int64_t bytes) {
    return (bytes + kGranule - 1) / kGranule * kGranule;
  }

  // REQUIRES: bytes > 0.
  Result<void*> Allocate(int64_t bytes) {
    const int64_t want = Rounded(bytes);
    auto it = free_.lower_bound(want);
    if (it != free_.end() && it->first <= 2 * want) {
      void* ptr = it->second;
      live_[ptr] = it->first;
      allocated_ += it->first;
      free_.erase(it);
      return ptr;
    }
    Result<void*> raw = backing_.Raw(want);
    if (!raw.ok() && !free_.empty()) {
      ReleaseCached();
      raw = backing_.Raw(want);
    }
    if (!raw.ok()) return raw.status();
    live_[*raw] = want;
    allocated_ += want;
    reserved_ += want;
    return *raw;
  }

  // Keeps the block for reuse. REQUIRES: ptr from Allocate, not yet freed.
  void Free(void* ptr) {
    auto it = live_.find(ptr);
    if (it == live_.end()) return;
    allocated_ -= it->second;
    free_.emplace(it->second, ptr);
    live_.erase(it);
  }

  // Returns the cached (free) blocks to the backing store.
  void ReleaseCached() {
    for (const auto& [size, ptr] : free_) {
      backing_.Release(ptr, size);
      reserved_ -= size;
    }
    free_.clear();
  }

  int64_t allocated_bytes() const { return allocated_; }  // rounded sizes
  int64_t reserved_bytes() const { return reserved_; }    // from the backing
  int64_t cached_blocks() const { return static_cast<int64_t>(free_.size()); }
  Backing& backing() { return backing_; }

 private:
  Backing backing_;
  std::multimap<int64_t, void*> free_;        // size -> block
  std::unordered_map<void*, int64_t> live_;   // block -> size
  int64_t allocated_ = 0;
  int64_t reserved_ = 0;
};

}  // namespace stateflow::backend

#include "backend/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cassert>
#include <cstdio>
#include <new>

#include "backend/device/device.h"

#include <unistd.h>

namespace stateflow::backend {

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_bytes <= 0) return INT64_MAX;  // unknown: no limit
  return static_cast<int64_t>(pages) * page_bytes;
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024 && bytes > -1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

TrackingAllocator::TrackingAllocator(int stage,
                                     std::optional<int64_t> capacity_bytes,
                                     Device* device)
    : stage_(stage),
      capacity_bytes_(capacity_bytes),
      device_(device != nullptr ? device : &CpuDevice()),
      memory_(&device_->memory()) {
  assert(!capacity_bytes || *capacity_bytes >= 0);
}

TrackingAllocator::~TrackingAllocator() {
  assert(stats_.live_total_bytes == 0 && "tensors outlived their allocator");
}

Result<void*> TrackingAllocator::Allocate(int64_t bytes, BufferClass cls) {
  assert(bytes >= 0);
  if (bytes == 0) return static_cast<void*>(nullptr);
  const int c = static_cast<int>(cls);
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_bytes_ && stats_.live_total_bytes + bytes > *capacity_bytes_) {
    return Status::Resource(
        "stage " + std::to_string(stage_) + ": allocating " +
        FormatBytes(bytes) + " of " + std::string(BufferClassName(cls)) +
        " would exceed the capacity " + FormatBytes(*capacity_bytes_) +
        " (live " + FormatBytes(stats_.live_total_bytes) + ")");
  }
  Result<void*> got = memory_->Allocate(bytes);
  if (!got.ok()) {
    return Status::Resource("stage " + std::to_string(stage_) + ": " +
                            FormatBytes(bytes) + " of " +
                            std::string(BufferClassName(cls)) + ": " +
                            got.status().message());
  }
  void* ptr = *got;
  stats_.live_bytes[c] += bytes;
  stats_.live_total_bytes += bytes;
  ++stats_.num_allocations;
  if (stats_.live_bytes[c] > stats_.peak_bytes[c]) {
    stats_.peak_bytes[c] = stats_.live_bytes[c];
  }
  if (stats_.live_total_bytes > stats_.peak_total_bytes) {
    stats_.peak_total_bytes = stats_.live_total_bytes;
    stats_.at_total_peak_bytes = stats_.live_bytes;
  }
  return ptr;
}

void TrackingAllocator::Free(void* ptr, int64_t bytes, BufferClass cls) {
  if (ptr == nullptr) return;
  const int c = static_cast<int>(cls);
  memory_->Free(ptr, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  assert(stats_.live_bytes[c] >= bytes && "freeing more than was allocated");
  stats_.live_bytes[c] -= bytes;
  stats_.live_total_bytes -= bytes;
}

MemoryStats TrackingAllocator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int64_t TrackingAllocator::LiveBytes(BufferClass cls) const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.live_bytes[static_cast<int>(cls)];
}

int64_t TrackingAllocator::PeakBytes(BufferClass cls) const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.peak_bytes[static_cast<int>(cls)];
}

int64_t TrackingAllocator::LiveTotalBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.live_total_bytes;
}

int64_t TrackingAllocator::PeakTotalBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_.peak_total_bytes;
}

void TrackingAllocator::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes = stats_.live_bytes;
  stats_.peak_total_bytes = stats_.live_total_bytes;
  stats_.at_total_peak_bytes = stats_.live_bytes;
}

void KeepFreedHostMemory() {
#if defined(__GLIBC__)
  // glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);  // never, short of 1 GiB free at the top
#endif
}

}  // namespace stateflow::backend

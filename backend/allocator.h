// The per-rank tracking allocator: every byte the backend holds (weights,
// gradients, optimizer state, saved activations, boundary states, K/V buffers,
// workspace, logits) is allocated here and counted by BufferClass, so that the
// backend's memory ledger can be compared with the simulator's class by class
// (ARCHITECTURE.md, invariant 3).
//
// It counts live and peak bytes per class, the peak of the total, and the
// per-class bytes at the moment the total peaked. With a capacity set, an
// allocation that would exceed it fails with a Status (kResource) instead of
// allocating. The bytes come from a Device's MemoryResource (device/device.h:
// host heap memory on the CPU, a caching pool on a GPU); the allocator itself
// is not a pool. Layers reach their device's kernels through it (device()).
//
//   TrackingAllocator alloc(/*stage=*/1, /*capacity_bytes=*/64 << 20);
//   Result<void*> p = alloc.Allocate(4 << 20, BufferClass::kActivations);
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "common/buffer_class.h"
#include "common/status.h"

namespace stateflow::backend {

class Device;
class MemoryResource;

// Bytes per BufferClass, indexed by static_cast<int>(BufferClass).
using ClassBytes = std::array<int64_t, kNumBufferClasses>;

// "0 B", "512 B", "4.0 KiB", "62.1 MiB", "1.5 GiB" (one decimal above bytes).
std::string FormatBytes(int64_t bytes);

// This machine's physical memory (sysconf), the natural capacity of an
// allocator that must fail with a Status rather than be killed or throw.
int64_t PhysicalMemoryBytes();

// A snapshot of the allocator's counters.
struct MemoryStats {
  ClassBytes live_bytes{};            // now, per class
  ClassBytes peak_bytes{};            // the peak of each class on its own
  ClassBytes at_total_peak_bytes{};   // per class, when the total peaked
  int64_t live_total_bytes = 0;
  int64_t peak_total_bytes = 0;
  int64_t num_allocations = 0;        // successful Allocate calls so far
};

class TrackingAllocator {
 public:
  // Every allocation is aligned to this many bytes (a cache line; enough for
  // any SIMD load Eigen issues).
  static constexpr int64_t kAlignmentBytes = 64;

  // `stage` names this rank in error messages. capacity_bytes: none means
  // unlimited. `device` (nullptr: the CPU device) provides the memory and the
  // kernels; it must outlive the allocator. REQUIRES: capacity_bytes >= 0
  // when given.
  explicit TrackingAllocator(int stage,
                             std::optional<int64_t> capacity_bytes = {},
                             Device* device = nullptr);
  // REQUIRES: every allocation has been freed (asserted in debug builds).
  ~TrackingAllocator();

  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  // Allocates `bytes` (>= 0) of class `cls`, aligned to kAlignmentBytes,
  // uninitialised. Zero bytes gives nullptr and counts nothing. Error
  // (kResource) if the live total would exceed the capacity:
  // "stage 1: allocating 4.0 MiB of activations would exceed the capacity
  // 64.0 MiB (live 62.1 MiB)". Thread-safe.
  Result<void*> Allocate(int64_t bytes, BufferClass cls);

  // Returns memory from Allocate with the same `bytes` and `cls`. nullptr is a
  // no-op. Thread-safe.
  void Free(void* ptr, int64_t bytes, BufferClass cls);

  MemoryStats Stats() const;
  int64_t LiveBytes(BufferClass cls) const;
  int64_t PeakBytes(BufferClass cls) const;
  int64_t LiveTotalBytes() const;
  int64_t PeakTotalBytes() const;

  // Forgets the peaks: each class's peak becomes its live bytes, the total
  // peak the live total (e.g. to measure one step after warm-up).
  void ResetPeaks();

  int stage() const { return stage_; }
  Device& device() const { return *device_; }
  MemoryResource& memory() const { return *memory_; }
  std::optional<int64_t> capacity_bytes() const { return capacity_bytes_; }

 private:
  const int stage_;
  const std::optional<int64_t> capacity_bytes_;
  Device* const device_;
  MemoryResource* const memory_;
  mutable std::mutex mu_;
  MemoryStats stats_;  // guarded by mu_
};

// Keeps the host memory a process frees in its heap (glibc: no trimming of
// the heap's top, blocks up to 32 MiB from the heap rather than their own
// mappings), so that a step's activations, freed at each backward, are
// reused by the next forward without the kernel mapping and zeroing their
// pages again: the caching a GPU framework's allocator does, for the host.
// Without it, on a 2-core KVM guest, a GDN layer's forward in `profile` took
// 2 to 6 ms where the training run's took 0.5 (its pages faulted in on every
// repetition) and a P 1 training step 270 ms where it takes 140
// (docs/performance.md, "Host memory kept in the heap"). The bytes the
// TrackingAllocators count do not change. Called once by `stateflow`'s
// main(); a no-op where the C library is not glibc.
void KeepFreedHostMemory();

}  // namespace stateflow::backend

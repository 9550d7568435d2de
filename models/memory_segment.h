// MemorySegment: the summary of a sequence of allocations and frees on one
// stage's memory ledger, enough to know what the sequence does to the
// ledger's peaks: its net change, the live bytes at the moment its total was
// first highest, and each buffer class's own highest level, all relative to
// the level before the sequence. Segments compose (this one, then the next)
// exactly as the events they summarise would, so a layer's events are
// summarised once and a stage's action is the composition of its layers'
// segments (models/memory_model.h), and a step the composition of its actions.
//
// Not a ledger over time (no clock, no samples) and not a cost model: the
// events come from CostModel (cost_model.h).
//
//   MemorySegment s;  s.Add(BufferClass::kWorkspace, 4096);  s.Add(BufferClass::kWorkspace, -4096);
//   s.Append(next);   // s.peak_total() == max(4096, next's peak)
#pragma once

#include <algorithm>
#include <array>

#include "common/buffer_class.h"

namespace stateflow::models {

// Bytes per BufferClass, indexed by static_cast<int>(BufferClass).
using ClassBytes = std::array<double, kNumBufferClasses>;

inline double TotalBytes(const ClassBytes& bytes) {
  double total = 0;
  for (double b : bytes) total += b;
  return total;
}

class MemorySegment {
 public:
  // The empty sequence: nothing changes, every peak is 0 (the level before).
  MemorySegment() = default;

  // Appends one allocation (bytes > 0) or free (bytes < 0). The same, bit
  // for bit, as Append of the one-event segment (AddByAppend below), with
  // the classes it leaves alone skipped: adding 0 to a level changes nothing
  // (no level is ever -0), and each class's peak is at least its level.
  void Add(BufferClass cls, double bytes) {
    const int k = Index(cls);
    const double rise = bytes > 0 ? bytes : 0.0;  // the event's own peak
    if (TotalBytes(net_) + rise > peak_total()) {
      at_peak_ = net_;
      at_peak_[k] = net_[k] + rise;
    }
    class_peak_[k] = std::max(class_peak_[k], net_[k] + rise);
    net_[k] += bytes;
  }

  // Add by its definition: Append of the segment of that one event (the
  // reference Add is tested against).
  void AddByAppend(BufferClass cls, double bytes) {
    MemorySegment one;
    one.net_[Index(cls)] = bytes;
    if (bytes > 0) {
      one.at_peak_[Index(cls)] = bytes;
      one.class_peak_[Index(cls)] = bytes;
    }
    Append(one);
  }

  // This sequence followed by `next`. A later maximum replaces an earlier one
  // only if strictly higher (the first moment of the peak is kept, as the
  // backend's TrackingAllocator and the simulator's engine keep it).
  void Append(const MemorySegment& next) {
    if (TotalBytes(net_) + next.peak_total() > peak_total()) {
      for (int c = 0; c < kNumBufferClasses; ++c) at_peak_[c] = net_[c] + next.at_peak_[c];
    }
    for (int c = 0; c < kNumBufferClasses; ++c) {
      class_peak_[c] = std::max(class_peak_[c], net_[c] + next.class_peak_[c]);
      net_[c] += next.net_[c];
    }
  }

  // Live bytes after the sequence minus before, per class.
  const ClassBytes& net() const { return net_; }
  // Per class, at the first moment the total was highest (all zero if it
  // never rose above the level before).
  const ClassBytes& at_peak() const { return at_peak_; }
  double peak_total() const { return TotalBytes(at_peak_); }
  // Each class's own highest level (>= 0).
  const ClassBytes& class_peak() const { return class_peak_; }

  double net(BufferClass cls) const { return net_[Index(cls)]; }
  double class_peak(BufferClass cls) const { return class_peak_[Index(cls)]; }

 private:
  static int Index(BufferClass cls) { return static_cast<int>(cls); }

  ClassBytes net_{};
  ClassBytes at_peak_{};
  ClassBytes class_peak_{};
};

}  // namespace stateflow::models

// The tracking allocator's accounting against a simple model kept in the test
// (live bytes per class, per-class peaks, total peak and the breakdown at that
// moment), its capacity error, and the Tensor type built on it.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/tensor.h"

namespace stateflow::backend {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

TEST(FormatBytes, UnitsAndOneDecimal) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(kKiB), "1.0 KiB");
  EXPECT_EQ(FormatBytes(4 * kMiB), "4.0 MiB");
  EXPECT_EQ(FormatBytes(3 * kMiB / 2), "1.5 MiB");
  EXPECT_EQ(FormatBytes(5 * kMiB * 1024), "5.0 GiB");
}

// The model: what the counters must be after any sequence of allocations and
// frees, computed independently of the allocator.
struct LedgerModel {
  ClassBytes live{}, peak{}, at_peak{};
  int64_t total = 0, total_peak = 0;
  void Add(BufferClass c, int64_t bytes) {
    live[static_cast<int>(c)] += bytes;
    total += bytes;
    peak[static_cast<int>(c)] = std::max(peak[static_cast<int>(c)], live[static_cast<int>(c)]);
    if (total > total_peak) {
      total_peak = total;
      at_peak = live;
    }
  }
  void Remove(BufferClass c, int64_t bytes) {
    live[static_cast<int>(c)] -= bytes;
    total -= bytes;
  }
};

TEST(TrackingAllocator, CountsMatchAModelOverRandomAllocations) {
  TrackingAllocator alloc(/*stage=*/0);
  LedgerModel model;
  struct Block {
    void* ptr;
    int64_t bytes;
    BufferClass cls;
  };
  std::vector<Block> blocks;
  std::mt19937_64 rng(5);
  for (int step = 0; step < 500; ++step) {
    const bool allocate = blocks.empty() || rng() % 3 != 0;
    if (allocate) {
      const auto cls = static_cast<BufferClass>(rng() % kNumBufferClasses);
      const int64_t bytes = static_cast<int64_t>(rng() % 5000);
      Result<void*> p = alloc.Allocate(bytes, cls);
      ASSERT_TRUE(p.ok());
      if (bytes > 0) {
        ASSERT_NE(*p, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) %
                      TrackingAllocator::kAlignmentBytes, 0u);
      }
      blocks.push_back({*p, bytes, cls});
      model.Add(cls, bytes);
    } else {
      const size_t i = rng() % blocks.size();
      alloc.Free(blocks[i].ptr, blocks[i].bytes, blocks[i].cls);
      model.Remove(blocks[i].cls, blocks[i].bytes);
      blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
    }
    const MemoryStats s = alloc.Stats();
    ASSERT_EQ(s.live_bytes, model.live) << "step " << step;
    ASSERT_EQ(s.peak_bytes, model.peak) << "step " << step;
    ASSERT_EQ(s.at_total_peak_bytes, model.at_peak) << "step " << step;
    ASSERT_EQ(s.live_total_bytes, model.total) << "step " << step;
    ASSERT_EQ(s.peak_total_bytes, model.total_peak) << "step " << step;
  }
  for (const Block& b : blocks) alloc.Free(b.ptr, b.bytes, b.cls);
  EXPECT_EQ(alloc.LiveTotalBytes(), 0);
}

// The breakdown at the total peak is the moment's, not each class's own peak.
TEST(TrackingAllocator, BreakdownAtTotalPeakIsThatMoment) {
  TrackingAllocator alloc(0);
  void* w = *alloc.Allocate(100, BufferClass::kWeights);
  void* a = *alloc.Allocate(200, BufferClass::kActivations);
  alloc.Free(a, 200, BufferClass::kActivations);
  void* ws = *alloc.Allocate(250, BufferClass::kWorkspace);  // total 350: new peak
  alloc.Free(ws, 250, BufferClass::kWorkspace);
  void* a2 = *alloc.Allocate(150, BufferClass::kActivations);  // total 250
  const MemoryStats s = alloc.Stats();
  EXPECT_EQ(s.peak_total_bytes, 100 + 250);
  EXPECT_EQ(s.at_total_peak_bytes[static_cast<int>(BufferClass::kWeights)], 100);
  EXPECT_EQ(s.at_total_peak_bytes[static_cast<int>(BufferClass::kWorkspace)], 250);
  EXPECT_EQ(s.at_total_peak_bytes[static_cast<int>(BufferClass::kActivations)], 0);
  EXPECT_EQ(alloc.PeakBytes(BufferClass::kActivations), 200);
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 150);
  alloc.ResetPeaks();
  EXPECT_EQ(alloc.PeakTotalBytes(), 250);
  EXPECT_EQ(alloc.PeakBytes(BufferClass::kWorkspace), 0);
  alloc.Free(w, 100, BufferClass::kWeights);
  alloc.Free(a2, 150, BufferClass::kActivations);
}

TEST(TrackingAllocator, CapacityErrorNamesStageClassAndSizes) {
  TrackingAllocator alloc(/*stage=*/1, /*capacity_bytes=*/64 * kMiB);
  // Live 62.1 MiB (to one decimal) before the failing 4 MiB request.
  const int64_t live = 62 * kMiB + kMiB / 10;
  void* p = *alloc.Allocate(live, BufferClass::kWeights);
  const MemoryStats before = alloc.Stats();
  Result<void*> r = alloc.Allocate(4 * kMiB, BufferClass::kActivations);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kResource);
  EXPECT_EQ(r.status().message(),
            "stage 1: allocating 4.0 MiB of activations would exceed the "
            "capacity 64.0 MiB (live 62.1 MiB)");
  // A refused allocation changes nothing.
  const MemoryStats after = alloc.Stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_EQ(after.peak_total_bytes, before.peak_total_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  // Exactly up to the capacity is allowed.
  void* q = *alloc.Allocate(64 * kMiB - live, BufferClass::kLogits);
  EXPECT_EQ(alloc.LiveTotalBytes(), 64 * kMiB);
  alloc.Free(q, 64 * kMiB - live, BufferClass::kLogits);
  alloc.Free(p, live, BufferClass::kWeights);
}

TEST(Tensor, ZerosCountsItsBytesAndFreesThemOnDestruction) {
  TrackingAllocator alloc(0);
  {
    Result<Tensor<float>> t =
        Tensor<float>::Zeros(alloc, BufferClass::kActivations, {3, 4, 5});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->numel(), 60);
    EXPECT_EQ(t->bytes(), 60 * 4);
    EXPECT_EQ(t->buffer_class(), BufferClass::kActivations);
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 240);
    EXPECT_EQ(t->flat().sum(), 0.0f);
    // The (12, 5) row-major view: element (r, c) is data()[r * 5 + c].
    EXPECT_EQ(t->matrix().rows(), 12);
    EXPECT_EQ(t->matrix().cols(), 5);
    t->matrix()(2, 3) = 7.0f;
    EXPECT_EQ(t->data()[2 * 5 + 3], 7.0f);
  }
  EXPECT_EQ(alloc.LiveTotalBytes(), 0);
  EXPECT_EQ(alloc.PeakBytes(BufferClass::kActivations), 240);
}

TEST(Tensor, MoveTransfersOwnershipAndCloneIsACountedCopy) {
  TrackingAllocator alloc(0);
  Tensor<double> a =
      std::move(Tensor<double>::Zeros(alloc, BufferClass::kWeights, {2, 3}))
          .value();
  a.matrix().setConstant(1.5);
  Tensor<double> b = std::move(a);
  EXPECT_EQ(a.numel(), 0);          // NOLINT: moved-from is empty on purpose
  EXPECT_EQ(a.data(), nullptr);     // NOLINT
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kWeights), 48);  // counted once
  Result<Tensor<double>> c = b.CloneAs(BufferClass::kOptimizerState);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kOptimizerState), 48);
  EXPECT_EQ(c->flat().sum(), 1.5 * 6);
  EXPECT_NE(c->data(), b.data());
  Tensor<double> d;
  d = std::move(b);                 // move-assign into an empty tensor
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kWeights), 48);
  d = std::move(*c);                // frees d's old bytes
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kWeights), 0);
  EXPECT_EQ(d.buffer_class(), BufferClass::kOptimizerState);
}

TEST(Tensor, ErrorsNameTheProblem) {
  TrackingAllocator alloc(/*stage=*/2, /*capacity_bytes=*/1000);
  Result<Tensor<float>> neg =
      Tensor<float>::Zeros(alloc, BufferClass::kWorkspace, {4, -1});
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(),
            "tensor shape (4, -1): dimension 1 is negative");
  Result<Tensor<float>> big =
      Tensor<float>::Zeros(alloc, BufferClass::kKvBuffers, {10, 30});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Status::Code::kResource);
  EXPECT_EQ(big.status().message(),
            "stage 2: allocating 1.2 KiB of kv_buffers would exceed the "
            "capacity 1000 B (live 0 B)");
}

TEST(Tensor, EmptyShapesAndScalars) {
  TrackingAllocator alloc(0);
  Tensor<float> empty =
      std::move(Tensor<float>::Zeros(alloc, BufferClass::kWorkspace, {0, 7})).value();
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.matrix().rows(), 0);
  Tensor<float> scalar =
      std::move(Tensor<float>::Zeros(alloc, BufferClass::kWorkspace, {})).value();
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(alloc.LiveTotalBytes(), 4);
}

}  // namespace
}  // namespace stateflow::backend

// The device seam's host side: the CPU device's memory and tensors through
// it, the registry's errors, the caching policy of a GPU allocator
// (AllocationCache, over a counting fake), and the order in which an
// order-matching transport (NCCL) must issue its receives (LinkOrder).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/comm/link_order.h"
#include "backend/device/allocation_cache.h"
#include "backend/device/device.h"
#include "backend/tensor.h"
#include "schedule/action.h"
#include "schedule/policies.h"

namespace stateflow::backend {
namespace {

TEST(CpuDevice, TensorsFillCopyAndCrossToTheHost) {
  TrackingAllocator alloc(0);
  EXPECT_EQ(&alloc.device(), &CpuDevice());
  EXPECT_TRUE(alloc.memory().host_accessible());
  auto t = Tensor<double>::Zeros(alloc, BufferClass::kActivations, {2, 3});
  ASSERT_TRUE(t.ok());
  t->FromHost({1, 2, 3, 4, 5, 6});
  auto c = t->Clone();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ToHost(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  c->SetZero();
  EXPECT_EQ(c->ToHost(), std::vector<double>(6, 0.0));
  c->CopyFrom(*t);
  EXPECT_EQ(c->ToHost()[5], 6.0);
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 2 * 6 * 8);
}

TEST(CpuDevice, OpsMatchTheirDefinitions) {
  Ops<double>& ops = CpuDevice().ops<double>();
  std::vector<double> y = {1, 2, 3}, x = {10, 20, 30};
  ops.Add(y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<double>{11, 22, 33}));
  ops.Mul(y.data(), y.data(), x.data(), 3);
  EXPECT_EQ(y, (std::vector<double>{110, 440, 990}));
  EXPECT_EQ(ops.Sum(y.data(), 3), 1540.0);
  ops.Fill(y.data(), 0.5, 3);
  EXPECT_EQ(y, (std::vector<double>{0.5, 0.5, 0.5}));
  // (x rstd) w over a (2, 3) matrix.
  const std::vector<double> m = {1, 2, 3, 4, 5, 6}, rstd = {2, 3}, w = {1, 10, 100};
  std::vector<double> out(6);
  ops.RmsNormApply(out.data(), m.data(), rstd.data(), w.data(), 2, 3);
  EXPECT_EQ(out, (std::vector<double>{2, 40, 600, 12, 150, 1800}));
  EXPECT_NE(CpuDevice().attention_ops<double>(), nullptr);
}

// The host devices' timer: the steady clock between TimerStart and
// TimerStop (a 30 ms sleep measures at least 30 ms and, on a machine that is
// not stalled, well under a second), one span at a time, and TimerStop
// without TimerStart an error naming the device.
TEST(DeviceTimer, HostDevicesTimeASpanWithTheSteadyClock) {
  for (const char* name : {"cpu", "host-grid"}) {
    Result<Device*> dev = GetDevice(name, 0);
    ASSERT_TRUE(dev.ok()) << dev.status().message();
    Result<double> none = (*dev)->TimerStop();
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find(name), std::string::npos) << none.status().message();
    ASSERT_TRUE((*dev)->TimerStart().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Result<double> s = (*dev)->TimerStop();
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_GE(*s, 0.030) << name;
    EXPECT_LT(*s, 1.0) << name;
    EXPECT_FALSE((*dev)->TimerStop().ok()) << name << ": the span was closed";
  }
}

TEST(GetDevice, NamesTheDeviceOrSaysWhyNot) {
  auto cpu = GetDevice("cpu", 0);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->kind(), DeviceKind::kCpu);
  auto bad = GetDevice("tpu", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown device 'tpu'"), std::string::npos);
  auto cuda = GetDevice("cuda", 0);
  // Built without CUDA, or no GPU here: a one-line reason, never a device.
  if (!cuda.ok()) {
    EXPECT_NE(cuda.status().message().find("--device cuda"), std::string::npos)
        << cuda.status().message();
    EXPECT_EQ(cuda.status().message().find('\n'), std::string::npos);
  }
}

// A backing store that counts and can be told to fail.
struct FakeBacking {
  int64_t held = 0;
  int64_t limit = 1 << 20;
  int raw_calls = 0;
  std::map<void*, int64_t>* blocks;
  Result<void*> Raw(int64_t bytes) {
    ++raw_calls;
    if (held + bytes > limit) return Status::Resource("fake: out of memory");
    held += bytes;
    void* p = ::operator new(static_cast<size_t>(bytes));
    (*blocks)[p] = bytes;
    return p;
  }
  void Release(void* p, int64_t bytes) {
    EXPECT_EQ((*blocks)[p], bytes);
    blocks->erase(p);
    held -= bytes;
    ::operator delete(p);
  }
};

TEST(AllocationCache, ReusesFreedBlocksAndReportsReserved) {
  std::map<void*, int64_t> blocks;
  AllocationCache<FakeBacking> cache(FakeBacking{.blocks = &blocks});
  auto a = cache.Allocate(1000);  // rounds to 1024
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(cache.allocated_bytes(), 1024);
  EXPECT_EQ(cache.reserved_bytes(), 1024);
  cache.Free(*a);
  EXPECT_EQ(cache.allocated_bytes(), 0);
  EXPECT_EQ(cache.reserved_bytes(), 1024);  // kept
  auto b = cache.Allocate(600);             // 1024 <= 2 x 1024: reused
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(cache.backing().raw_calls, 1);
  auto c = cache.Allocate(100);  // 512: the free list is empty, a new block
  ASSERT_TRUE(c.ok());
  cache.Free(*b);
  auto d = cache.Allocate(256);  // 512 wants <= 1024: the 1024 block may serve
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, *a);
  cache.Free(*c);
  cache.Free(*d);
  auto e = cache.Allocate(100);  // smallest fitting: the 512 block, not the 1024
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, *c);
  cache.Free(*e);
}

TEST(AllocationCache, ReleasesTheCacheAndRetriesBeforeFailing) {
  std::map<void*, int64_t> blocks;
  AllocationCache<FakeBacking> cache(FakeBacking{.limit = 4096, .blocks = &blocks});
  auto a = cache.Allocate(3072);
  ASSERT_TRUE(a.ok());
  cache.Free(*a);  // cached: 3072 reserved
  auto b = cache.Allocate(512);  // 3072 > 2 x 512: not reused; fits beside it
  ASSERT_TRUE(b.ok());
  auto c = cache.Allocate(1024);  // 3072 > 2 x 1024; 3072 + 512 + 1024 > 4096:
  ASSERT_TRUE(c.ok());            // the cache is released and the call retried
  EXPECT_EQ(cache.reserved_bytes(), 512 + 1024);
  EXPECT_EQ(cache.cached_blocks(), 0);
  auto d = cache.Allocate(4096);  // cannot fit even with nothing cached
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Status::Code::kResource);
  cache.Free(*b);
  cache.Free(*c);
  cache.ReleaseCached();
  EXPECT_TRUE(blocks.empty());
}

// Every stage's receives, issued in the order LinkOrder gives while the
// runtime posts them in its own order, pair with the sender's sends in
// order: what NCCL requires.
TEST(LinkOrder, IssuesInTheSendersOrderWhateverThePostingOrder) {
  for (const char* policy : {"stateflow", "1f1b", "gpipe"}) {
    const int chunks = std::string(policy) == "1f1b" ? 1 : 2;
    auto plan = schedule::MakePlan(policy, /*P=*/3, /*M=*/3, chunks);
    ASSERT_TRUE(plan.ok()) << policy;
    for (int r = 0; r < plan->stages(); ++r) {
      LinkOrder order(*plan, r);
      std::map<int, std::vector<MessageKey>> issued;
      // Post in the receiver's consumption order (its actions' inputs).
      for (const schedule::Action& a : plan->stage(r)) {
        const std::optional<int> from = schedule::InputFrom(a, plan->stages());
        if (!from) continue;
        const MessageKey key{a.microbatch, a.chunk, a.pass};
        ASSERT_TRUE(order.Post(*from, key).ok());
        for (const MessageKey& k : order.Issuable(*from)) issued[*from].push_back(k);
        if (!order.issued(*from, key)) {  // the runtime waits on it: force
          std::vector<MessageKey> unposted;
          auto forced = order.ForceUpTo(*from, key, &unposted);
          ASSERT_TRUE(forced.ok());
          for (const MessageKey& k : *forced) issued[*from].push_back(k);
        }
        EXPECT_TRUE(order.issued(*from, key));
      }
      for (int from : {r - 1, r + 1}) {
        EXPECT_EQ(issued[from], order.Expected(from)) << policy << " stage " << r;
      }
    }
  }
}

TEST(LinkOrder, ForcingIssuesPredecessorsAndNamesTheUnposted) {
  auto plan = schedule::MakePlan("gpipe", /*P=*/2, /*M=*/3, /*N=*/1);
  ASSERT_TRUE(plan.ok());
  LinkOrder order(*plan, 1);
  const std::vector<MessageKey>& expected = order.Expected(0);
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_TRUE(order.Post(0, expected[2]).ok());
  EXPECT_TRUE(order.Issuable(0).empty());  // its predecessors are not posted
  std::vector<MessageKey> unposted;
  auto forced = order.ForceUpTo(0, expected[2], &unposted);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(*forced, expected);
  EXPECT_EQ(unposted, (std::vector<MessageKey>{expected[0], expected[1]}));
  EXPECT_FALSE(order.Post(0, expected[2]).ok());  // already issued
  EXPECT_FALSE(order.Post(0, MessageKey{7, 0, schedule::Pass::kForward}).ok());
}

}  // namespace
}  // namespace stateflow::backend

// The grid devices' two streams and the ST tile (grid_ops.h): the overlapped
// GDN cores (GridGdnOps::GdnCoreForwardOverlapped / GdnCoreBackwardOverlapped:
// Pre and Out of a segment of blocks on stream 1, its ST on stream 0, events
// between) run by a checking executor that records every pass with its
// stream and the events, then executes the passes in adversarial orders that
// respect only each stream's FIFO order and the waits: stream 0 as far ahead
// as allowed, stream 1 as far ahead as allowed, and random topological
// orders over several seeds. Each must give the sequential kernel's bits.
// And the waits are all needed: dropping any one of them (the executor's
// test-only DropWait) lets some order read an element before it is written
// (inputs, outputs and workspace start as NaN), which changes the result.
// The same for the overlapped Mamba-3 cores (Mamba3CoreForwardOverlapped /
// Mamba3CoreBackwardOverlapped) in float64 and float32, at block counts
// whose segments hold one or two blocks, the last block short, with and
// without boundary states.
// Also: every ST tile B_V (1, 16, 48, 64, Dv = 128) gives the untiled bits,
// on the host executor and on the checking one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/device/grid_mamba3_ops.h"
#include "backend/device/grid_gdn_ops.h"
#include "backend/device/grid_ops.h"
#include "backend/device/host_exec.h"
#include "tests/backend/gdn_test_inputs.h"
#include "tests/backend/mamba3_test_inputs.h"
#include "tests/sanitized.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h, gdn_test_inputs.h, mamba3_test_inputs.h

// How the checking executor picks the next pass among those allowed.
struct Order {
  enum Kind { kStream0First, kStream1First, kRandom } kind;
  uint64_t seed = 0;
  std::string Name() const {
    if (kind == kStream0First) return "stream 0 first";
    if (kind == kStream1First) return "stream 1 first";
    return "random seed " + std::to_string(seed);
  }
};

// What the checking executor recorded: passes (and event records, as empty
// passes) per stream in issue order, each with the passes it must follow.
class Recording {
 public:
  // Appends a pass on `stream`, after the waits issued on it since its last.
  void Issue(int stream, std::function<void()> run) {
    passes_.push_back({stream, std::move(run), std::move(pending_[stream])});
    pending_[stream].clear();
    queue_[stream].push_back(static_cast<int>(passes_.size()) - 1);
  }
  void Record(int stream, int event) {
    Issue(stream, [] {});
    last_record_[event] = static_cast<int>(passes_.size()) - 1;
  }
  void Wait(int stream, int event) {
    const int n = waits_++;
    if (n == drop_wait_) return;  // the test-only hook: this wait is lost
    auto it = last_record_.find(event);
    if (it != last_record_.end()) pending_[stream].push_back(it->second);
  }
  void DropWait(int n) { drop_wait_ = n; }
  int waits() const { return waits_; }
  int passes_on(int stream) const {
    int n = 0;
    for (const Pass& p : passes_) n += p.stream == stream ? 1 : 0;
    return n;
  }

  // Runs every recorded pass once, in an order allowed by FIFO and the
  // waits, chosen by `order`. False on a deadlock (a wait never satisfied).
  bool Run(const Order& order) {
    for (int s = 0; s < 2; ++s) {
      if (!pending_[s].empty()) Issue(s, [] {});  // trailing waits
    }
    std::mt19937_64 rng(order.seed);
    std::vector<bool> done(passes_.size(), false);
    size_t head[2] = {0, 0};
    for (size_t ran = 0; ran < passes_.size(); ++ran) {
      std::vector<int> ready;  // streams whose head may run
      for (int s = 0; s < 2; ++s) {
        if (head[s] == queue_[s].size()) continue;
        const Pass& p = passes_[queue_[s][head[s]]];
        if (std::all_of(p.after.begin(), p.after.end(), [&](int a) { return done[a]; })) {
          ready.push_back(s);
        }
      }
      if (ready.empty()) return false;
      int s = ready[0];
      if (ready.size() == 2) {
        if (order.kind == Order::kStream0First) s = 0;
        if (order.kind == Order::kStream1First) s = 1;
        if (order.kind == Order::kRandom) s = static_cast<int>(rng() % 2);
      }
      const int id = queue_[s][head[s]++];
      passes_[id].run();
      done[id] = true;
    }
    passes_.clear();
    queue_[0].clear();
    queue_[1].clear();
    return true;
  }

 private:
  struct Pass {
    int stream;
    std::function<void()> run;
    std::vector<int> after;
  };
  std::vector<Pass> passes_;
  std::vector<int> queue_[2];
  std::vector<int> pending_[2];
  std::map<int, int> last_record_;  // event -> its latest record pass
  int waits_ = 0;
  int drop_wait_ = -1;
};

// The executor concept of grid_ops.h, deferred: each pass is recorded on the
// executor's stream (the arithmetic is HostExec's) and runs at
// Recording::Run.
struct CheckingExec {
  std::shared_ptr<Recording> rec;
  int stream = 0;

  template <class F>
  void ForEach(int64_t n, F f) const {
    rec->Issue(stream, [n, f] { HostExec{}.ForEach(n, f); });
  }
  template <class F>
  void ForEachTile(int64_t tiles, int64_t tile, F f) const {
    rec->Issue(stream, [tiles, tile, f] { HostExec{}.ForEachTile(tiles, tile, f); });
  }
  template <typename T>
  void Gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
            int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) const {
    rec->Issue(stream, [=] { HostExec{}.Gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
  }
  template <typename T>
  void GemmStridedBatched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                          const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb,
                          int64_t sb, T beta, T* C, int64_t ldc, int64_t sc,
                          int64_t batch) const {
    rec->Issue(stream, [=] {
      HostExec{}.GemmStridedBatched(ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C,
                                    ldc, sc, batch);
    });
  }
  template <typename T>
  double Sum(const T*, int64_t) const {
    ADD_FAILURE() << "Sum synchronises; the GDN cores never call it";
    return 0;
  }
  CheckingExec Stream(int i) const { return {rec, i}; }
  void Record(int e) const { rec->Record(stream, e); }
  void Wait(int e) const { rec->Wait(stream, e); }
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
using Bufs = std::vector<std::vector<T>>;

// nullptr for an absent (empty) buffer: a boundary state not given.
template <typename T>
T* Ptr(std::vector<T>& b) {
  return b.empty() ? nullptr : b.data();
}

// One GDN core call's buffers: inputs {q, k, v, g, beta, S_in} (+ {dO, dS_out}),
// outputs forward {o, S_out}, backward {dq, dk, dv, dg, dbeta, dS_in}.
struct CoreCall {
  GdnShape s;
  int64_t block, tile;
  bool backward;
  std::vector<Buffer> in;   // the real values
  std::vector<Buffer> out;  // sized, NaN
};

CoreCall MakeCall(const GdnShape& s, int64_t block, int64_t tile, bool backward, uint64_t seed) {
  std::mt19937_64 rng(seed);
  CoreCall c{s, block, tile, backward, LayerLikeInputs(s, rng), {}};
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk;
  if (backward) {
    c.in.push_back(RandomVector(rng, nv, -1, 1));
    c.in.push_back(RandomVector(rng, ns, -1, 1));
    for (int64_t n : {nk, nk, nv, s.T * s.H, s.T * s.H, ns}) c.out.emplace_back(n, kNaN);
  } else {
    for (int64_t n : {nv, ns}) c.out.emplace_back(n, kNaN);
  }
  return c;
}

// One Mamba-3 core call's buffers: inputs {q, k, v, a, gamma, beta, S_in,
// k_in, v_in} (+ {dO, dS_out, dk_out, dv_out}), outputs forward {o, S_out,
// k_out, v_out}, backward {dq, dk, dv, da, dgamma, dbeta, dS_in, dk_in,
// dv_in}. Without boundaries, the boundary states in and out (and their
// gradients) are absent (empty, passed as nullptr): a sequence's only chunk.
struct Mamba3Call {
  Mamba3CoreShape s;
  int64_t block;
  bool backward;
  int64_t tile;             // the ST tile B_V (0: untiled)
  std::vector<Buffer> in;   // the real values
  std::vector<Buffer> out;  // sized, NaN
};

Mamba3Call MakeMamba3Call(const Mamba3CoreShape& s, int64_t block, bool boundaries,
                          bool backward, uint64_t seed, int64_t tile = 0) {
  std::mt19937_64 rng(seed);
  Mamba3Call c{s, block, backward, tile, LayerLikeInputs(s, rng), {}};
  const int64_t nk = s.T * s.H * s.Dk, nv = s.T * s.H * s.Dv, ns = s.H * s.Dv * s.Dk,
                nh = s.T * s.H;
  // Present or absent boundary state sizes: S, k carry, v carry.
  const int64_t bs = boundaries ? ns : 0, bk = boundaries ? s.H * s.Dk : 0,
                bv = boundaries ? s.H * s.Dv : 0;
  for (int i : {kSIn, kKIn, kVIn}) {
    if (!boundaries) c.in[i].clear();
  }
  if (backward) {
    c.in.push_back(RandomVector(rng, nv, -1, 1));
    c.in.push_back(RandomVector(rng, bs, -1, 1));
    c.in.push_back(RandomVector(rng, bk, -1, 1));
    c.in.push_back(RandomVector(rng, bv, -1, 1));
    for (int64_t n : {nk, nk, nv, nh, nh, nh, bs, bk, bv}) c.out.emplace_back(n, kNaN);
  } else {
    for (int64_t n : {nv, bs, bk, bv}) c.out.emplace_back(n, kNaN);
  }
  return c;
}

// Issues the call on `ops` with inputs at `in`, outputs into `out`, the
// workspace (NaN) in `ws`.
template <typename T, class Exec>
void Issue(GridGdnOps<T, Exec>& ops, const CoreCall& c, bool overlapped, Bufs<T>& in,
           Bufs<T>& out, std::vector<T>& ws) {
  const GdnShape& s = c.s;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  if (!c.backward) {
    ws.assign(ops.GdnCoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), nan);
    auto f = overlapped ? &GdnOps<T>::GdnCoreForwardOverlapped : &GdnOps<T>::GdnCoreForward;
    (ops.*f)(out[0].data(), out[1].data(), ws.data(), in[0].data(), in[1].data(), in[2].data(),
             in[3].data(), in[4].data(), in[5].data(), s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
    return;
  }
  ws.assign(ops.GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), nan);
  auto f = overlapped ? &GdnOps<T>::GdnCoreBackwardOverlapped : &GdnOps<T>::GdnCoreBackward;
  (ops.*f)(out[0].data(), out[1].data(), out[2].data(), out[3].data(), out[4].data(),
           out[5].data(), ws.data(), in[6].data(), in[7].data(), in[0].data(), in[1].data(),
           in[2].data(), in[3].data(), in[4].data(), in[5].data(), s.T, s.H, s.Dk, s.Dv,
           c.block, c.tile);
}

template <typename T, class Exec>
void Issue(GridMamba3Ops<T, Exec>& ops, const Mamba3Call& c, bool overlapped, Bufs<T>& in,
           Bufs<T>& out, std::vector<T>& ws) {
  const Mamba3CoreShape& s = c.s;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  if (!c.backward) {
    ws.assign(ops.Mamba3CoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), nan);
    auto f = overlapped ? &Mamba3Ops<T>::Mamba3CoreForwardOverlapped : &Mamba3Ops<T>::Mamba3CoreForward;
    (ops.*f)(out[0].data(), Ptr(out[1]), Ptr(out[2]), Ptr(out[3]), ws.data(), in[kQ].data(),
             in[kK].data(), in[kV].data(), in[kA].data(), in[kGamma].data(), in[kBeta].data(),
             Ptr(in[kSIn]), Ptr(in[kKIn]), Ptr(in[kVIn]), s.T, s.H, s.Dk, s.Dv, c.block,
             c.tile);
    return;
  }
  ws.assign(ops.Mamba3CoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), nan);
  auto f = overlapped ? &Mamba3Ops<T>::Mamba3CoreBackwardOverlapped : &Mamba3Ops<T>::Mamba3CoreBackward;
  (ops.*f)(out[0].data(), out[1].data(), out[2].data(), out[3].data(), out[4].data(),
           out[5].data(), Ptr(out[6]), Ptr(out[7]), Ptr(out[8]), ws.data(), in[9].data(),
           Ptr(in[10]), Ptr(in[11]), Ptr(in[12]), in[kQ].data(), in[kK].data(), in[kV].data(),
           in[kA].data(), in[kGamma].data(), in[kBeta].data(), Ptr(in[kSIn]), Ptr(in[kKIn]),
           Ptr(in[kVIn]), s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
}

template <typename T>
Bufs<T> CastAll(const std::vector<Buffer>& b) {
  Bufs<T> out;
  for (const Buffer& x : b) out.push_back(Cast<T>(x));
  return out;
}
template <typename T>
std::vector<Buffer> ToDoubleAll(const Bufs<T>& b) {
  std::vector<Buffer> out;
  for (const std::vector<T>& x : b) out.push_back(ToDouble(x));
  return out;
}

// The family's grid ops that run a call.
template <class Call, typename T, class Exec>
using FamilyGridOps = std::conditional_t<std::is_same_v<Call, Mamba3Call>,
                                         GridMamba3Ops<T, Exec>, GridGdnOps<T, Exec>>;

// The call in precision T on the host executor (passes in issue order);
// the results in double (exactly).
template <typename T = double, class Call>
std::vector<Buffer> RunHost(const Call& c, bool overlapped) {
  FamilyGridOps<Call, T, HostExec> ops{HostExec{}};
  Bufs<T> in = CastAll<T>(c.in), out = CastAll<T>(c.out);
  std::vector<T> ws;
  Issue(ops, c, overlapped, in, out, ws);
  return ToDoubleAll(out);
}

// The overlapped call on the checking executor, bracketed by stream 0's
// work around it as a caller's would be: the inputs copied in from staging
// before (they start as NaN), the outputs copied out after. Nullopt-like
// empty result on a deadlock.
struct CheckedRun {
  std::vector<Buffer> results;
  int waits = 0, side_passes = 0;
  bool deadlock = false;
};

template <typename T = double, class Call>
CheckedRun RunChecked(const Call& c, const Order& order, int drop_wait = -1) {
  auto rec = std::make_shared<Recording>();
  rec->DropWait(drop_wait);
  FamilyGridOps<Call, T, CheckingExec> ops{CheckingExec{rec, 0}};
  GridOps<T, CheckingExec> common{CheckingExec{rec, 0}};  // the copies, on stream 0
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const Bufs<T> staged = CastAll<T>(c.in);
  Bufs<T> in, out = CastAll<T>(c.out), results = CastAll<T>(c.out);
  for (const std::vector<T>& b : staged) in.emplace_back(b.size(), nan);
  std::vector<T> ws;
  for (size_t i = 0; i < in.size(); ++i) {
    common.Copy(in[i].data(), staged[i].data(), static_cast<int64_t>(in[i].size()));
  }
  Issue(ops, c, /*overlapped=*/true, in, out, ws);
  for (size_t i = 0; i < out.size(); ++i) {
    common.Copy(results[i].data(), out[i].data(), static_cast<int64_t>(out[i].size()));
  }
  CheckedRun r;
  r.waits = rec->waits();
  r.side_passes = rec->passes_on(1);
  r.deadlock = !rec->Run(order);
  r.results = ToDoubleAll(results);
  return r;
}

std::vector<Order> Orders() {
  std::vector<Order> orders = {{Order::kStream0First}, {Order::kStream1First}};
  for (uint64_t seed = 1; seed <= 6; ++seed) orders.push_back({Order::kRandom, seed});
  return orders;
}

struct Case {
  GdnShape s;
  int64_t block, tile;
  std::string Name() const {
    return s.Name() + " block " + std::to_string(block) + " st_tile " + std::to_string(tile);
  }
};

// 8 blocks in 4 segments; 5 blocks (the last partial) in uneven segments
// with a tile that does not divide Dv; 2 blocks in 2 segments.
const std::vector<Case> kCases = {
    {{256, 2, 8, 12}, 32, 0}, {{150, 2, 6, 12}, 32, 5}, {{64, 1, 8, 8}, 32, 3}};

TEST(GridStreams, OverlappedEqualsSequentialInEveryOrder) {
  for (const Case& k : kCases) {
    for (bool backward : {false, true}) {
      const CoreCall c = MakeCall(k.s, k.block, k.tile, backward, 31);
      const std::string what = k.Name() + (backward ? " backward" : " forward");
      const std::vector<Buffer> ref = RunHost(c, /*overlapped=*/false);
      EXPECT_EQ(RunHost(c, /*overlapped=*/true), ref) << what << " on the host executor";
      for (const Order& order : Orders()) {
        const CheckedRun run = RunChecked(c, order);
        ASSERT_FALSE(run.deadlock) << what << ", " << order.Name();
        EXPECT_GT(run.side_passes, 0) << what;  // two streams really used
        for (size_t i = 0; i < ref.size(); ++i) {
          EXPECT_EQ(run.results[i], ref[i]) << what << ", " << order.Name() << ", output " << i;
        }
      }
    }
  }
}

// Every wait the overlapped cores issue is needed: without it some allowed
// order reads an element before it is written. Under a sanitizer
// (tests/sanitized.h), the two shorter cases: several blocks with a partial
// last one, and one block (the ST ignores the tile, so the first case's
// waits are the second's, more of them).
TEST(GridStreams, EveryDroppedWaitIsCaught) {
  for (const Case& k : stateflow::testing::SanitizedOr(kCases, {kCases[1], kCases[2]})) {
    for (bool backward : {false, true}) {
      const CoreCall c = MakeCall(k.s, k.block, k.tile, backward, 32);
      const std::string what = k.Name() + (backward ? " backward" : " forward");
      const std::vector<Buffer> ref = RunHost(c, /*overlapped=*/false);
      const int waits = RunChecked(c, {Order::kStream0First}).waits;
      EXPECT_GE(waits, 4) << what;
      for (int w = 0; w < waits; ++w) {
        bool caught = false;
        for (const Order& order : Orders()) {
          const CheckedRun run = RunChecked(c, order, w);
          caught = caught || run.deadlock || run.results != ref;
        }
        EXPECT_TRUE(caught) << what << ": dropping wait " << w << " went unnoticed";
      }
    }
  }
}

// ---- the Mamba-3 cores ----------------------------------------------------

struct Mamba3Case {
  Mamba3CoreShape s;
  int64_t block;
  bool boundaries;
  std::string Name() const {
    return "mamba3 " + s.Name() + " block " + std::to_string(block) +
           (boundaries ? "" : " without boundary states");
  }
};

// Segments of blocks (StreamSegments): 8 blocks in 4 segments of 2; 5
// (the last partial) in 1, 1, 1, 2; 6 (the last partial) in 1, 2, 1, 2; 3
// (the last partial) in 1, 1, 1; 2 in 1, 1; the segments of one block are
// where a segment's ST reads only the Pre of the segment before
// (Mamba3STFn), with S_out (the last ST also reads the last block's Pre) and
// without.
const std::vector<Mamba3Case> kMamba3Cases = {
    {{256, 2, 8, 6}, 32, true}, {{150, 2, 6, 8}, 32, true}, {{180, 1, 4, 5}, 32, true},
    {{70, 1, 4, 4}, 24, true},  {{64, 1, 8, 4}, 32, true},  {{150, 2, 6, 8}, 32, false},
    {{70, 1, 4, 4}, 24, false}};

template <typename T>
void ExpectMamba3InEveryOrder(const Mamba3Case& k, bool backward) {
  const Mamba3Call c = MakeMamba3Call(k.s, k.block, k.boundaries, backward, 41);
  const std::string what = k.Name() + (backward ? " backward" : " forward") +
                           (std::is_same_v<T, float> ? " float32" : " float64");
  const std::vector<Buffer> ref = RunHost<T>(c, /*overlapped=*/false);
  EXPECT_EQ(RunHost<T>(c, /*overlapped=*/true), ref) << what << " on the host executor";
  for (const Order& order : Orders()) {
    const CheckedRun run = RunChecked<T>(c, order);
    ASSERT_FALSE(run.deadlock) << what << ", " << order.Name();
    EXPECT_GT(run.side_passes, 0) << what;  // two streams really used
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(run.results[i], ref[i]) << what << ", " << order.Name() << ", output " << i;
    }
  }
}

TEST(GridStreams, Mamba3OverlappedEqualsSequentialInEveryOrder) {
  for (const Mamba3Case& k : kMamba3Cases) {
    for (bool backward : {false, true}) {
      ExpectMamba3InEveryOrder<double>(k, backward);
      ExpectMamba3InEveryOrder<float>(k, backward);
    }
  }
}

// Every wait the overlapped Mamba-3 cores issue is needed.
TEST(GridStreams, Mamba3EveryDroppedWaitIsCaught) {
  for (const Mamba3Case& k : kMamba3Cases) {
    for (bool backward : {false, true}) {
      const Mamba3Call c = MakeMamba3Call(k.s, k.block, k.boundaries, backward, 42);
      const std::string what = k.Name() + (backward ? " backward" : " forward");
      const std::vector<Buffer> ref = RunHost(c, /*overlapped=*/false);
      const int waits = RunChecked(c, {Order::kStream0First}).waits;
      EXPECT_GE(waits, 4) << what;
      for (int w = 0; w < waits; ++w) {
        bool caught = false;
        for (const Order& order : Orders()) {
          const CheckedRun run = RunChecked(c, order, w);
          caught = caught || run.deadlock || run.results != ref;
        }
        EXPECT_TRUE(caught) << what << ": dropping wait " << w << " went unnoticed";
      }
    }
  }
}

// Under two blocks (an empty chunk, one block) the overlapped cores are the
// sequential ones: one stream, the same bits.
TEST(GridStreams, Mamba3UnderTwoBlocksIsSequential) {
  for (const Mamba3CoreShape& s : {Mamba3CoreShape{0, 2, 4, 3}, Mamba3CoreShape{20, 2, 4, 3}}) {
    for (bool backward : {false, true}) {
      const Mamba3Call c = MakeMamba3Call(s, 32, true, backward, 43);
      const std::string what = s.Name() + (backward ? " backward" : " forward");
      const CheckedRun run = RunChecked(c, {Order::kRandom, 5});
      EXPECT_EQ(run.side_passes, 0) << what;
      EXPECT_EQ(run.results, RunHost(c, /*overlapped=*/false)) << what;
    }
  }
}

// The ST tile is the grid's launch shape only: every B_V gives the untiled
// bits (each state row's arithmetic is the same), sequential and overlapped.
TEST(GridStreams, StTilesGiveTheUntiledBits) {
  const GdnShape s{96, 2, 8, 128};
  for (bool backward : {false, true}) {
    const std::vector<Buffer> ref = RunHost(MakeCall(s, 32, 0, backward, 33), false);
    for (int64_t tile : {1, 16, 48, 64, 128, 1000}) {
      const CoreCall c = MakeCall(s, 32, tile, backward, 33);
      const std::string what = (backward ? "backward st_tile " : "forward st_tile ") +
                               std::to_string(tile);
      EXPECT_EQ(RunHost(c, false), ref) << what;
      EXPECT_EQ(RunHost(c, true), ref) << what << " overlapped";
      EXPECT_EQ(RunChecked(c, {Order::kRandom, 9}).results, ref) << what << " checked";
    }
  }
}

// The same for the Mamba-3 cores' two ST passes (Mamba3STFn, Mamba3STGradFn):
// with boundary states and without, a tile that does not divide Dv, one of
// a single row, Dv itself and beyond; the checked executor in a random order.
TEST(GridStreams, Mamba3StTilesGiveTheUntiledBits) {
  for (const Mamba3Case& k : {kMamba3Cases[0], kMamba3Cases[1], kMamba3Cases[5]}) {
    for (bool backward : {false, true}) {
      const std::vector<Buffer> ref =
          RunHost(MakeMamba3Call(k.s, k.block, k.boundaries, backward, 44), false);
      for (int64_t tile : {1, 3, 5, 8, 100}) {
        const Mamba3Call c = MakeMamba3Call(k.s, k.block, k.boundaries, backward, 44, tile);
        const std::string what = k.Name() + (backward ? " backward st_tile " : " forward st_tile ") +
                                 std::to_string(tile);
        EXPECT_EQ(RunHost(c, false), ref) << what;
        EXPECT_EQ(RunHost(c, true), ref) << what << " overlapped";
        EXPECT_EQ(RunChecked(c, {Order::kRandom, 9}).results, ref) << what << " checked";
      }
    }
  }
}

TEST(GridStreams, StTilesDecodeEveryRowOnce) {
  for (int64_t Dv : {1, 7, 12, 128}) {
    for (int64_t tile : {0, 1, 5, 12, 64, 200}) {
      const grid::StTiles st = grid::StTiles::Make(Dv, tile);
      std::vector<int> seen(2 * Dv, 0);
      for (int64_t idx = 0; idx < st.tiles(2) * st.tile; ++idx) {
        int64_t h, i;
        if (st.Decode(idx, Dv, &h, &i)) ++seen[h * Dv + i];
      }
      EXPECT_EQ(seen, std::vector<int>(2 * Dv, 1)) << "Dv " << Dv << " tile " << tile;
    }
  }
}

}  // namespace
}  // namespace stateflow::backend

// The grid devices' two streams and the ST tile (grid_ops.h): the overlapped
// GDN cores (GridOps::GdnCoreForwardOverlapped / GdnCoreBackwardOverlapped:
// Pre and Out of a segment of blocks on stream 1, its ST on stream 0, events
// between) run by a checking executor that records every pass with its
// stream and the events, then executes the passes in adversarial orders that
// respect only each stream's FIFO order and the waits: stream 0 as far ahead
// as allowed, stream 1 as far ahead as allowed, and random topological
// orders over several seeds. Each must give the sequential kernel's bits.
// And the waits are all needed: dropping any one of them (the executor's
// test-only DropWait) lets some order read an element before it is written
// (inputs, outputs and workspace start as NaN), which changes the result.
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
#include <vector>

#include "backend/device/grid_ops.h"
#include "backend/device/host_exec.h"
#include "tests/backend/gdn_test_inputs.h"

namespace stateflow::backend {
namespace {

using namespace kernel_test;  // kernel_test_util.h, gdn_test_inputs.h

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

// One core call's buffers: inputs {q, k, v, g, beta, S_in} (+ {dO, dS_out}),
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

// Issues the call on `ops` with inputs at `in`, outputs into `out`, the
// workspace (NaN) in `ws`.
template <class Exec>
void Issue(GridOps<double, Exec>& ops, const CoreCall& c, bool overlapped,
           std::vector<Buffer>& in, std::vector<Buffer>& out, Buffer& ws) {
  const GdnShape& s = c.s;
  if (!c.backward) {
    ws.assign(ops.GdnCoreForwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), kNaN);
    auto f = overlapped ? &Ops<double>::GdnCoreForwardOverlapped : &Ops<double>::GdnCoreForward;
    (ops.*f)(out[0].data(), out[1].data(), ws.data(), in[0].data(), in[1].data(), in[2].data(),
             in[3].data(), in[4].data(), in[5].data(), s.T, s.H, s.Dk, s.Dv, c.block, c.tile);
    return;
  }
  ws.assign(ops.GdnCoreBackwardWorkspaceSize(s.T, s.H, s.Dk, s.Dv, c.block), kNaN);
  auto f = overlapped ? &Ops<double>::GdnCoreBackwardOverlapped : &Ops<double>::GdnCoreBackward;
  (ops.*f)(out[0].data(), out[1].data(), out[2].data(), out[3].data(), out[4].data(),
           out[5].data(), ws.data(), in[6].data(), in[7].data(), in[0].data(), in[1].data(),
           in[2].data(), in[3].data(), in[4].data(), in[5].data(), s.T, s.H, s.Dk, s.Dv,
           c.block, c.tile);
}

// The call on the host executor (passes in issue order).
std::vector<Buffer> RunHost(const CoreCall& c, bool overlapped) {
  GridOps<double, HostExec> ops{HostExec{}};
  std::vector<Buffer> in = c.in, out = c.out;
  Buffer ws;
  Issue(ops, c, overlapped, in, out, ws);
  return out;
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

CheckedRun RunChecked(const CoreCall& c, const Order& order, int drop_wait = -1) {
  auto rec = std::make_shared<Recording>();
  rec->DropWait(drop_wait);
  GridOps<double, CheckingExec> ops{CheckingExec{rec, 0}};
  std::vector<Buffer> in, out = c.out, results = c.out;
  for (const Buffer& b : c.in) in.emplace_back(b.size(), kNaN);
  Buffer ws;
  for (size_t i = 0; i < in.size(); ++i) {
    ops.Copy(in[i].data(), c.in[i].data(), static_cast<int64_t>(in[i].size()));
  }
  Issue(ops, c, /*overlapped=*/true, in, out, ws);
  for (size_t i = 0; i < out.size(); ++i) {
    ops.Copy(results[i].data(), out[i].data(), static_cast<int64_t>(out[i].size()));
  }
  CheckedRun r;
  r.waits = rec->waits();
  r.side_passes = rec->passes_on(1);
  r.deadlock = !rec->Run(order);
  r.results = std::move(results);
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
// order reads an element before it is written.
TEST(GridStreams, EveryDroppedWaitIsCaught) {
  for (const Case& k : kCases) {
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

// The order of the messages on each link of a plan, and the bookkeeping a
// transport that matches messages by order (not by tag) needs: NCCL's
// point-to-point send and receive pair the k-th send on a communicator with
// the k-th receive, so a receiver must issue its receives in the SENDER's
// order, which the plan fixes (a stage sends in its issue order) -- while the
// stage runtime posts receive buffers in its own consumption order
// (stage_runtime.h, one action ahead). LinkOrder reconciles the two:
//
//   - Expected(from): the keys stage `from` sends to this stage, in order.
//   - Post(from, key) records a posted buffer; Issuable(from) lists the keys
//     that may be issued now, in sender order: the longest run of posted
//     keys at the head of the link's remaining sequence.
//   - ForceUpTo(from, key): the keys that must be issued, in order, before
//     `key` can complete (a consumer waits on a key whose predecessors in
//     the sender's order it has not posted): those without a posted buffer
//     are issued into buffers the transport provides itself.
//
// Pure bookkeeping, no transport: tested on the CPU against schedules whose
// consumption order differs from their send order (link_order_test.cc); the
// NCCL comm (backend/cuda/nccl_comm.cc) drives its ncclRecv calls with it.
//
//   LinkOrder order(plan, /*stage=*/1);
//   order.Post(0, key);                       // from PostRecv
//   for (const MessageKey& k : order.Issuable(0)) IssueRecv(0, k);
#pragma once

#include <map>
#include <set>
#include <vector>

#include "backend/comm/comm.h"
#include "common/status.h"
#include "schedule/plan.h"

namespace stateflow::backend {

class LinkOrder {
 public:
  // The links into `stage` (from stage - 1 and stage + 1) of `plan`.
  LinkOrder(const schedule::Plan& plan, int stage);

  // The keys stage `from` sends to this stage, in its send order (empty for
  // a stage that is not a neighbour).
  const std::vector<MessageKey>& Expected(int from) const;

  // Records that the runtime posted a buffer for `key` from `from`.
  // Error: `key` is not a message of that link, or was posted already.
  Status Post(int from, const MessageKey& key);

  // Takes (marks issued) and returns the keys that can be issued now: from
  // the link's next unissued key on, every key already posted, in order.
  std::vector<MessageKey> Issuable(int from);

  // Takes and returns every unissued key up to and including `key`, in
  // order; `unposted` gets those of them without a posted buffer. Error: not
  // a key of the link.
  Result<std::vector<MessageKey>> ForceUpTo(int from, const MessageKey& key,
                                            std::vector<MessageKey>* unposted);

  bool issued(int from, const MessageKey& key) const;

 private:
  struct Link {
    std::vector<MessageKey> order;      // sender order
    std::map<MessageKey, int> index;    // key -> position
    std::set<MessageKey> posted;        // posted, not yet issued
    int next = 0;                       // order[0, next) issued
  };
  Link* Find(int from);
  const Link* Find(int from) const;

  int stage_;
  std::map<int, Link> links_;  // by the sending stage
};

}  // namespace stateflow::backend

// Point-to-point messages between neighbouring pipeline stages: the
// activation of chunk i of microbatch a (forward, stage r to r + 1) and its
// gradient (backward, stage r to r - 1), as seen from one stage. Two
// implementations: MPI (one rank per stage, mpi_comm.h) and in-process (one
// process runs every stage, in_process_comm.h), so the stage runtime runs the
// same code either way.
//
// Nonblocking: PostRecv and Send return at once; Arrived tests a receive,
// Wait blocks on it, Progress completes finished sends, Flush waits for all.
// A message is named by its MessageKey (microbatch, chunk, pass, and with
// virtual stages the receiving model stage's index on its rank); within one
// step each key is received at most once per stage, so the key alone names
// it. Without virtual stages activations come only from r - 1 and gradients
// only from r + 1; with them (schedule/plan.h) a loop's last stage sends to
// stage 0 and back, and a model stage may send to the next one on its own
// rank (P = 1, the V's turn): the peers a comm accepts are r - 1, r and
// r + 1 modulo P.
//
// Not a collective library (group.h) and not a scheduler: the runtime
// decides what to post and when. Not thread-safe: one stage, one thread.
//
// Dimensions: s = tokens of the chunk, H = hidden size.
//
//   comm->PostRecv(r - 1, {a, i, Pass::kForward}, std::move(buffer_sH));
//   SF_ASSIGN_OR_RETURN(Tensor<T> x, comm->Wait({a, i, Pass::kForward}));
#pragma once

#include <string>

#include "backend/tensor.h"
#include "common/status.h"
#include "schedule/action.h"

namespace stateflow::backend {

// Which message: pass kForward is the activation of (microbatch, chunk),
// pass kBackward its gradient; `virtual_index` is k of the model stage that
// receives it (Plan::VirtualIndex, 0 without virtual stages): the two model
// stages of a loop's rank receive the same (a, i, pass) from the same peer.
struct MessageKey {
  int microbatch = 0;  // a
  int chunk = 0;       // i
  schedule::Pass pass = schedule::Pass::kForward;
  int virtual_index = 0;  // k, 0 .. v - 1

  auto operator<=>(const MessageKey&) const = default;
};

// "activation of microbatch 2 chunk 5" / "gradient of microbatch 2 chunk 5".
std::string ToString(const MessageKey& key);

// The MPI tag of `key`: ((microbatch * v + virtual_index) * chunks + chunk) * 2
// + (pass is B), v = `virtual_stages`.
// REQUIRES: 0 <= chunk < chunks, microbatch >= 0, 0 <= virtual_index < v.
long long MessageTag(const MessageKey& key, int chunks, int virtual_stages = 1);

// Ok if every tag of M microbatches, N chunks and v virtual stages, up to
// 2 M N v - 1, fits `tag_upper_bound` (MPI_TAG_UB); else an error naming M,
// N, v and the bound.
Status CheckTagRange(int microbatches, int chunks, long long tag_upper_bound,
                     int virtual_stages = 1);

// Whether stage `other` is a peer of stage `stage` among `stages`: r - 1, r
// or r + 1 modulo P (see the header comment).
inline bool IsPeer(int stage, int other, int stages) {
  if (other < 0 || other >= stages) return false;
  const int d = ((other - stage) % stages + stages) % stages;
  return d == 0 || d == 1 || d == stages - 1;
}

template <typename T>
class Comm {
 public:
  virtual ~Comm() = default;

  virtual int stage() const = 0;   // r
  virtual int stages() const = 0;  // P

  // Posts the receive of `key` from stage `from`; the message fills
  // `buffer`, which must have exactly the sent number of elements. The comm
  // holds the buffer until Wait hands it back. Error: `from` is not a
  // peer (r - 1, r or r + 1 modulo P), the key is already posted, or the transport failed.
  virtual Status PostRecv(int from, const MessageKey& key, Tensor<T> buffer) = 0;

  // Whether the posted receive of `key` has completed (never blocks).
  // Error: `key` was not posted.
  virtual Result<bool> Arrived(const MessageKey& key) = 0;

  // Blocks until the receive of `key` completes and hands over its buffer.
  // Error: not posted, a size mismatch (names both sizes), a transport
  // failure, or (in-process) a wait that could never end.
  virtual Result<Tensor<T>> Wait(const MessageKey& key) = 0;

  // Starts sending `data` to stage `to`; the comm owns `data` until the
  // send completes (Progress or Flush frees it). Error: `to` is not a
  // neighbour or the transport failed.
  virtual Status Send(int to, const MessageKey& key, Tensor<T> data) = 0;

  // Frees the buffers of sends that have completed (never blocks).
  virtual Status Progress() = 0;

  // Blocks until every send of this stage has completed.
  virtual Status Flush() = 0;

  // Sends not yet completed (their buffers are still held).
  virtual int pending_sends() const = 0;
};

}  // namespace stateflow::backend

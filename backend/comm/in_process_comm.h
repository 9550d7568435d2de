// The in-process implementation of Comm (comm.h): one process runs every
// pipeline stage itself, each stage with its own endpoint, allocator and
// module. A message is copied from the sender's tensor into the receiver's
// posted buffer as soon as both exist, the same bytes an MPI transfer moves:
// until then the sender's tensor stays held (counted on the sender's
// allocator, as an MPI send buffer is), and after the copy it is freed.
//
// Not concurrent: the stages are driven by one thread (stage_runtime.h's
// RunStepInProcess), so a Wait on a message nobody has sent can never end and
// is an error instead of a hang.
//
//   std::vector<std::unique_ptr<Comm<double>>> comms = MakeInProcessComms<double>(4);
//   comms[0]->Send(1, key, std::move(y));  // comms[1]->PostRecv(0, key, ...) gets it
#pragma once

#include <memory>
#include <vector>

#include "backend/comm/comm.h"

namespace stateflow::backend {

// One endpoint per stage 0..stages-1, sharing one network.
// REQUIRES: stages >= 1.
template <typename T>
std::vector<std::unique_ptr<Comm<T>>> MakeInProcessComms(int stages);

}  // namespace stateflow::backend

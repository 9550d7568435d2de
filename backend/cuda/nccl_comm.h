// The pipeline's point-to-point transport on GPUs (comm/comm.h over NCCL):
// one rank per GPU, bootstrapped over MPI (the lower rank of each link makes
// an ncclUniqueId and sends it to the upper one). Each link between stages r
// and r + 1 has two 2-rank communicators, one per direction (activations
// r -> r + 1, gradients r + 1 -> r), each with its own stream: a direction's
// sends and receives are then a single ordered queue on both ends, so
// neither direction's blocked send can hold up the other (the classic 1F1B
// NCCL deadlock). Receives are issued in the sender's order, which the plan
// fixes (LinkOrder, comm/link_order.h, tested on the CPU); a receive the
// runtime has not posted yet when a later one is awaited gets a buffer of its
// own from `transport`. Sends wait for the compute stream (an event), receives
// hand their buffer over with the compute stream waiting on the receive's
// event; waits poll with the MPI watchdog's deadline and end the job with the
// key and peer named (ncclCommAbort).
//
//   SF_ASSIGN_OR_RETURN(auto comm, MakeNcclComm<float>(plan, rank, *gpu, &transport_alloc,
//                                                      message_numel));
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "backend/comm/comm.h"
#include "backend/device/device.h"
#include "schedule/plan.h"

namespace stateflow::backend {

// REQUIRES: MPI initialised, one rank per stage (MPI rank == stage), `device`
// a CUDA device (MakeCudaDevice), `transport` allocating on it.
// message_numel(key): the element count of the message `key` (the runtime's
// B s x C). Errors: NCCL or CUDA failures at set-up, named.
template <typename T>
Result<std::unique_ptr<Comm<T>>> MakeNcclComm(
    const schedule::Plan& plan, int stage, Device& device, TrackingAllocator* transport,
    std::function<int64_t(const MessageKey&)> message_numel);

}  // namespace stateflow::backend

// A Comm (comm.h) for a device whose memory the transport cannot read: each
// message is copied to host memory, moved by a host comm (MPI without CUDA
// support, or in-process), and copied back into the receiver's device
// buffer. This is how two ranks share one GPU (NCCL refuses two ranks on
// one device) and how ranks talk where NCCL is missing: `train --device cuda
// --device-link host`.
//
// The device buffers are the runtime's, counted on its allocators exactly
// as with NCCL; the host copies are staging on the CPU device (`host`),
// outside the device's peak. Each Send copies its tensor to the host at
// once (the copy waits for the device's work before it) and frees it, so a
// send holds host memory only until the host comm completes it.
//
//   std::unique_ptr<Comm<float>> mpi = ...;  // MakeMpiComm<float>(M, N)
//   auto comm = MakeHostStagedComm<float>(std::move(mpi), gpu->memory(), &host_alloc);
#pragma once

#include <memory>

#include "backend/allocator.h"
#include "backend/comm/comm.h"
#include "backend/device/memory.h"

namespace stateflow::backend {

// REQUIRES: `host_comm` moves host tensors; `device_memory` is the memory of
// every tensor passed in; `host` (host memory) outlives the comm.
template <typename T>
std::unique_ptr<Comm<T>> MakeHostStagedComm(std::unique_ptr<Comm<T>> host_comm,
                                            MemoryResource& device_memory,
                                            TrackingAllocator* host);

}  // namespace stateflow::backend

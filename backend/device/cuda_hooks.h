// How the CUDA backend joins a program that links it: its device and its
// NCCL comm register themselves here (backend/cuda/register.cc, linked only
// into the `stateflow-cuda` program), and GetDevice("cuda") and the trainer
// find them here. The ordinary `stateflow` program does not link CUDA at all:
// loading cuBLAS and NCCL costs every command about 0.1 s of start-up, which
// simulate, sweep and the tests should not pay. Empty hooks mean "no CUDA in
// this program", and GetDevice says which program has it.
//
//   if (CudaHooks().make_device == nullptr) { /* no CUDA here */ }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "backend/comm/comm.h"
#include "backend/device/device.h"
#include "common/status.h"
#include "schedule/plan.h"

namespace stateflow::backend {

template <typename T>
using NcclCommFactory = Result<std::unique_ptr<Comm<T>>> (*)(
    const schedule::Plan& plan, int stage, Device& device, TrackingAllocator* transport,
    std::function<int64_t(const MessageKey&)> message_numel);

struct CudaBackendHooks {
  Result<Device*> (*make_device)(int local_rank) = nullptr;  // MakeCudaDevice
  NcclCommFactory<float> make_nccl_comm_f32 = nullptr;       // MakeNcclComm<float>
  NcclCommFactory<double> make_nccl_comm_f64 = nullptr;
  NcclCommFactory<bf16> make_nccl_comm_bf16 = nullptr;
  int (*visible_devices)() = nullptr;  // cudaGetDeviceCount, 0 on an error
};

// The process's hooks (all null until the CUDA backend registers).
CudaBackendHooks& CudaHooks();

}  // namespace stateflow::backend

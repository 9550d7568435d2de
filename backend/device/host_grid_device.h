// The host-grid device (`--device host-grid`): the CUDA kernels' arithmetic
// (GridOps over the SF_HD functors of grid_kernels/) run by host loops
// (HostExec), in host memory. It runs the GPU path's every kernel on a
// machine without a GPU, so that layers, stage modules and the trainer can be
// tested on it against the CPU device.
//
// Not fast (one call per element, row or tile): a test and reference device.
//
//   Device& dev = HostGridDevice();
//   dev.ops<double>().SiluForward(y, x, n);
#pragma once

#include <string>

#include "backend/device/device.h"
#include "backend/device/grid_attention_ops.h"
#include "backend/device/grid_ops.h"
#include "backend/device/host_exec.h"

namespace stateflow::backend {

class HostGrid final : public Device {
 public:
  HostGrid()
      : f32_(HostExec{}), f64_(HostExec{}), bf16_(HostExec{}), attn32_(HostExec{}),
        attn64_(HostExec{}), attnbf16_(HostExec{}) {}
  HostGrid(const HostGrid&) = delete;
  HostGrid& operator=(const HostGrid&) = delete;

  DeviceKind kind() const override { return DeviceKind::kHostGrid; }
  std::string name() const override { return "host-grid"; }
  MemoryResource& memory() override { return HostMemory(); }
  // Host loops finish before each call returns: nothing to wait for.
  Status Synchronize() override { return Status::Ok(); }

 protected:
  Ops<float>& ops_f32() override { return f32_; }
  Ops<double>& ops_f64() override { return f64_; }
  Ops<bf16>* ops_bf16() override { return &bf16_; }
  AttentionOps<float>* attention_ops_f32() override { return &attn32_; }
  AttentionOps<double>* attention_ops_f64() override { return &attn64_; }
  AttentionOps<bf16>* attention_ops_bf16() override { return &attnbf16_; }

 private:
  GridOps<float, HostExec> f32_;
  GridOps<double, HostExec> f64_;
  GridOps<bf16, HostExec> bf16_;
  GridAttentionOps<float, HostExec> attn32_;
  GridAttentionOps<double, HostExec> attn64_;
  GridAttentionOps<bf16, HostExec> attnbf16_;
};

// The process's host-grid device (constructed on first use).
Device& HostGridDevice();

}  // namespace stateflow::backend

// MakeCudaDevice (cuda_device.h): the device's memory (a AllocationCache over
// cudaMalloc, copies and fills on the compute stream), its stream and cuBLAS
// handle, and the GridOps kernels from cuda_ops.cu.
#include "backend/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_attention_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/device/allocation_cache.h"

namespace stateflow::backend {
namespace {

// cudaMalloc / cudaFree for the AllocationCache.
struct CudaBacking {
  Result<void*> Raw(int64_t bytes) {
    void* ptr = nullptr;
    const cudaError_t rc = cudaMalloc(&ptr, static_cast<size_t>(bytes));
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky-free error state
      return Status::Resource(std::string("cudaMalloc: ") + cudaGetErrorString(rc));
    }
    return ptr;
  }
  void Release(void* ptr, int64_t /*bytes*/) { (void)cudaFree(ptr); }
};

class CudaMemory final : public MemoryResource {
 public:
  explicit CudaMemory(cudaStream_t stream) : stream_(stream), cache_(CudaBacking{}) {}

  Result<void*> Allocate(int64_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.Allocate(bytes);
  }
  // A block goes back to the cache only after the stream's work on it is
  // done: the cache may hand it out at once, and the next user's kernels are
  // ordered after this stream's (one compute stream per device).
  void Free(void* ptr, int64_t /*bytes*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.Free(ptr);
  }
  void Zero(void* dst, int64_t bytes) override {
    if (bytes > 0) (void)cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), stream_);
  }
  void Copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) {
      (void)cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                            stream_);
    }
  }
  void CopyToHost(void* host_dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    (void)cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                          stream_);
    (void)cudaStreamSynchronize(stream_);
  }
  void CopyFromHost(void* dst, const void* host_src, int64_t bytes) override {
    if (bytes <= 0) return;
    (void)cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                          stream_);
    (void)cudaStreamSynchronize(stream_);  // host_src may be freed on return
  }
  bool host_accessible() const override { return false; }
  int64_t reserved_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.reserved_bytes();
  }

 private:
  cudaStream_t stream_;
  mutable std::mutex mu_;
  AllocationCache<CudaBacking> cache_;  // guarded by mu_
};

class CudaDevice final : public Device {
 public:
  static Result<std::unique_ptr<CudaDevice>> Make(int index) {
    SF_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
    cudaDeviceProp prop{};
    SF_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, index));
    auto dev = std::unique_ptr<CudaDevice>(new CudaDevice(index, prop.name));
    SF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&dev->stream_, cudaStreamNonBlocking));
    SF_CUBLAS_RETURN_IF_ERROR(cublasCreate(&dev->cublas_));
    SF_CUBLAS_RETURN_IF_ERROR(cublasSetStream(dev->cublas_, dev->stream_));
    // The side stream of the overlapped GDN cores, its handle, the events.
    CudaStreams& st = dev->streams_;
    st.stream[0] = dev->stream_;
    st.handle[0] = dev->cublas_;
    SF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&st.stream[1], cudaStreamNonBlocking));
    SF_CUBLAS_RETURN_IF_ERROR(cublasCreate(&st.handle[1]));
    SF_CUBLAS_RETURN_IF_ERROR(cublasSetStream(st.handle[1], st.stream[1]));
    for (cudaEvent_t& e : st.event) {
      SF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    dev->memory_ = std::make_unique<CudaMemory>(dev->stream_);
    dev->ops_f32_ = MakeCudaOpsF32(&dev->streams_);
    dev->ops_f64_ = MakeCudaOpsF64(&dev->streams_);
    dev->ops_bf16_ = MakeCudaOpsBf16(&dev->streams_);
    dev->attn_f32_ = MakeCudaAttentionOpsF32(dev->cublas_, dev->stream_);
    dev->attn_f64_ = MakeCudaAttentionOpsF64(dev->cublas_, dev->stream_);
    dev->attn_bf16_ = MakeCudaAttentionOpsBf16(dev->cublas_, dev->stream_);
    SF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&dev->timer_start_));
    SF_CUDA_RETURN_IF_ERROR(cudaEventCreate(&dev->timer_stop_));
    return dev;
  }
  ~CudaDevice() override {
    ops_f32_.reset();
    ops_f64_.reset();
    ops_bf16_.reset();
    attn_f32_.reset();
    attn_f64_.reset();
    attn_bf16_.reset();
    memory_.reset();
    if (timer_start_ != nullptr) cudaEventDestroy(timer_start_);
    if (timer_stop_ != nullptr) cudaEventDestroy(timer_stop_);
    for (cudaEvent_t e : streams_.event) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (streams_.handle[1] != nullptr) cublasDestroy(streams_.handle[1]);
    if (streams_.stream[1] != nullptr) cudaStreamDestroy(streams_.stream[1]);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  std::string name() const override {
    return "cuda:" + std::to_string(index_) + " (" + gpu_name_ + ")";
  }
  MemoryResource& memory() override { return *memory_; }
  cudaStream_t stream() const { return stream_; }
  CudaStreams* streams() { return &streams_; }
  Status Synchronize() override {
    SF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return CudaStatus(cudaGetLastError(), ("kernels on " + name()).c_str());
  }
  // The span between two events on the compute stream (device.h).
  Status TimerStart() override {
    SF_CUDA_RETURN_IF_ERROR(cudaEventRecord(timer_start_, stream_));
    timer_open_ = true;
    return Status::Ok();
  }
  Result<double> TimerStop() override {
    if (!timer_open_) return Status::Internal("device " + name() + ": TimerStop without TimerStart");
    timer_open_ = false;
    SF_CUDA_RETURN_IF_ERROR(cudaEventRecord(timer_stop_, stream_));
    SF_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(timer_stop_));
    SF_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), ("kernels on " + name()).c_str()));
    float ms = 0;
    SF_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, timer_start_, timer_stop_));
    return static_cast<double>(ms) * 1e-3;
  }

 protected:
  Ops<float>& ops_f32() override { return *ops_f32_; }
  Ops<double>& ops_f64() override { return *ops_f64_; }
  Ops<bf16>* ops_bf16() override { return ops_bf16_.get(); }
  AttentionOps<float>* attention_ops_f32() override { return attn_f32_.get(); }
  AttentionOps<double>* attention_ops_f64() override { return attn_f64_.get(); }
  AttentionOps<bf16>* attention_ops_bf16() override { return attn_bf16_.get(); }

 private:
  CudaDevice(int index, std::string gpu_name) : index_(index), gpu_name_(std::move(gpu_name)) {}

  int index_;
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudaEvent_t timer_start_ = nullptr, timer_stop_ = nullptr;  // TimerStart/Stop
  bool timer_open_ = false;
  CudaStreams streams_;  // stream_ and cublas_ as stream 0, the side stream 1
  std::unique_ptr<CudaMemory> memory_;
  std::unique_ptr<Ops<float>> ops_f32_;
  std::unique_ptr<Ops<double>> ops_f64_;
  std::unique_ptr<Ops<bf16>> ops_bf16_;
  std::unique_ptr<AttentionOps<float>> attn_f32_;
  std::unique_ptr<AttentionOps<double>> attn_f64_;
  std::unique_ptr<AttentionOps<bf16>> attn_bf16_;
};

}  // namespace

Result<Device*> MakeCudaDevice(int local_rank) {
  static std::mutex mu;
  static std::unique_ptr<CudaDevice>* device = new std::unique_ptr<CudaDevice>();
  std::lock_guard<std::mutex> lock(mu);
  if (*device != nullptr) return static_cast<Device*>(device->get());
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    return Status::Invalid(std::string("--device cuda: no GPU is visible to this process (") +
                           (rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices") + ")");
  }
  SF_ASSIGN_OR_RETURN(*device, CudaDevice::Make(local_rank % count));
  return static_cast<Device*>(device->get());
}

Result<cudaStream_t> CudaComputeStream(Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  if (cuda == nullptr) {
    return Status::Internal("device " + device.name() + " is not a CUDA device");
  }
  return cuda->stream();
}

Result<CudaStreams*> CudaStreamsOf(Device& device) {
  auto* cuda = dynamic_cast<CudaDevice*>(&device);
  if (cuda == nullptr) {
    return Status::Internal("device " + device.name() + " is not a CUDA device");
  }
  return cuda->streams();
}

std::string CudaRuntimeSummary() {
  int runtime = 0, driver = 0, count = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  const cudaError_t drc = cudaDriverGetVersion(&driver);
  const cudaError_t crc = cudaGetDeviceCount(&count);
  auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  std::string s = "CUDA runtime " + version(runtime);
  s += drc == cudaSuccess && driver > 0 ? ", driver " + version(driver) : ", no driver";
  s += crc == cudaSuccess ? ", " + std::to_string(count) + " GPUs"
                          : std::string(", no GPU (") + cudaGetErrorString(crc) + ")";
  return s;
}

}  // namespace stateflow::backend

// MakeHostStagedComm (staged_comm.h).
#include "backend/comm/staged_comm.h"

#include <map>
#include <utility>

#include "backend/device/bf16.h"

namespace stateflow::backend {
namespace {

template <typename T>
class HostStagedComm final : public Comm<T> {
 public:
  HostStagedComm(std::unique_ptr<Comm<T>> inner, MemoryResource& device, TrackingAllocator* host)
      : inner_(std::move(inner)), device_(device), host_(host) {}

  int stage() const override { return inner_->stage(); }
  int stages() const override { return inner_->stages(); }

  Status PostRecv(int from, const MessageKey& key, Tensor<T> buffer) override {
    if (device_buffers_.count(key) != 0) {
      return Status::Internal(ToString(key) + ": receive posted twice on stage " +
                              std::to_string(stage()));
    }
    SF_ASSIGN_OR_RETURN(Tensor<T> staging,
                        Tensor<T>::Uninitialized(*host_, BufferClass::kWorkspace, buffer.shape()));
    SF_RETURN_IF_ERROR(inner_->PostRecv(from, key, std::move(staging)));
    device_buffers_.emplace(key, std::move(buffer));
    return Status::Ok();
  }

  Result<bool> Arrived(const MessageKey& key) override { return inner_->Arrived(key); }

  Result<Tensor<T>> Wait(const MessageKey& key) override {
    auto it = device_buffers_.find(key);
    if (it == device_buffers_.end()) {
      return Status::Internal(ToString(key) + " was not posted on stage " +
                              std::to_string(stage()));
    }
    SF_ASSIGN_OR_RETURN(Tensor<T> staging, inner_->Wait(key));
    Tensor<T> buffer = std::move(it->second);
    device_buffers_.erase(it);
    if (staging.numel() != buffer.numel()) {
      return Status::Internal(ToString(key) + ": " + std::to_string(staging.numel()) +
                              " elements arrived for a buffer of " +
                              std::to_string(buffer.numel()));
    }
    if (buffer.numel() > 0) device_.CopyFromHost(buffer.data(), staging.data(), buffer.bytes());
    return buffer;
  }

  Status Send(int to, const MessageKey& key, Tensor<T> data) override {
    SF_ASSIGN_OR_RETURN(Tensor<T> staging,
                        Tensor<T>::Uninitialized(*host_, BufferClass::kWorkspace, data.shape()));
    if (data.numel() > 0) device_.CopyToHost(staging.data(), data.data(), data.bytes());
    return inner_->Send(to, key, std::move(staging));  // `data` is freed here
  }

  Status Progress() override { return inner_->Progress(); }
  Status Flush() override { return inner_->Flush(); }
  int pending_sends() const override { return inner_->pending_sends(); }

 private:
  std::unique_ptr<Comm<T>> inner_;
  MemoryResource& device_;
  TrackingAllocator* host_;
  std::map<MessageKey, Tensor<T>> device_buffers_;  // posted, not yet waited
};

}  // namespace

template <typename T>
std::unique_ptr<Comm<T>> MakeHostStagedComm(std::unique_ptr<Comm<T>> host_comm,
                                            MemoryResource& device_memory,
                                            TrackingAllocator* host) {
  return std::make_unique<HostStagedComm<T>>(std::move(host_comm), device_memory, host);
}

template std::unique_ptr<Comm<float>> MakeHostStagedComm(std::unique_ptr<Comm<float>>,
                                                         MemoryResource&, TrackingAllocator*);
template std::unique_ptr<Comm<double>> MakeHostStagedComm(std::unique_ptr<Comm<double>>,
                                                          MemoryResource&, TrackingAllocator*);
template std::unique_ptr<Comm<bf16>> MakeHostStagedComm(std::unique_ptr<Comm<bf16>>,
                                                        MemoryResource&, TrackingAllocator*);

}  // namespace stateflow::backend

// MakeNcclComm (nccl_comm.h).
#include "backend/cuda/nccl_comm.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/comm/link_order.h"
#include "backend/comm/mpi.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"

namespace stateflow::backend {
namespace {

constexpr int kIdTag = 31000;  // MPI tags of the unique-id bootstrap

// One direction of one link: a 2-rank communicator and its stream.
struct Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int peer = 0;  // the other end's rank in the 2-rank communicator
};

template <typename T>
class NcclComm final : public Comm<T> {
 public:
  NcclComm(const schedule::Plan& plan, int stage, cudaStream_t compute,
           TrackingAllocator* transport, std::function<int64_t(const MessageKey&)> numel)
      : stage_(stage),
        stages_(plan.stages()),
        compute_(compute),
        transport_(transport),
        numel_(std::move(numel)),
        order_(plan, stage) {}

  ~NcclComm() override {
    for (auto& [key, r] : recvs_) {
      if (r.done != nullptr) cudaEventDestroy(r.done);
    }
    for (PendingSend& s : sends_) cudaEventDestroy(s.done);
    for (auto* channels : {&out_, &in_}) {
      for (auto& [peer, ch] : *channels) {
        if (ch.comm != nullptr) ncclCommDestroy(ch.comm);
        if (ch.stream != nullptr) cudaStreamDestroy(ch.stream);
      }
    }
  }

  // Both directions of the links to stage - 1 and stage + 1, in increasing
  // link order on every rank (so that no two ranks wait on each other).
  Status Connect() {
    for (int link = stage_ - 1; link <= stage_; ++link) {
      if (link < 0 || link + 1 >= stages_) continue;
      const bool lower = link == stage_;
      const int other = lower ? stage_ + 1 : stage_ - 1;
      ncclUniqueId ids[2];
      if (lower) {
        for (ncclUniqueId& id : ids) SF_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
        const int rc = MPI_Send(ids, sizeof(ids), MPI_BYTE, other, kIdTag + link, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return Status::Internal("MPI_Send of the NCCL unique ids failed");
      } else {
        const int rc = MPI_Recv(ids, sizeof(ids), MPI_BYTE, other, kIdTag + link, MPI_COMM_WORLD,
                                MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return Status::Internal("MPI_Recv of the NCCL unique ids failed");
      }
      // ids[0]: lower -> upper (activations), ids[1]: upper -> lower.
      Channel& to = out_[other];
      Channel& from = in_[other];
      const int me = lower ? 0 : 1;
      to.peer = from.peer = 1 - me;
      SF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&to.stream, cudaStreamNonBlocking));
      SF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&from.stream, cudaStreamNonBlocking));
      SF_NCCL_RETURN_IF_ERROR(ncclGroupStart());
      SF_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&to.comm, 2, ids[lower ? 0 : 1], me));
      SF_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&from.comm, 2, ids[lower ? 1 : 0], me));
      SF_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
    }
    return Status::Ok();
  }

  int stage() const override { return stage_; }
  int stages() const override { return stages_; }

  Status PostRecv(int from, const MessageKey& key, Tensor<T> buffer) override {
    SF_RETURN_IF_ERROR(Neighbour(from, "receive from"));
    if (recvs_.count(key) != 0 && recvs_[key].posted) {
      return Status::Internal(Where(key) + " posted twice");
    }
    if (order_.issued(from, key)) {  // issued early into a buffer of its own
      Recv& r = recvs_[key];
      r.posted = true;
      r.spare = std::move(buffer);  // dropped at Wait: the early buffer holds the data
      return Status::Ok();
    }
    SF_RETURN_IF_ERROR(order_.Post(from, key));
    Recv& r = recvs_[key];
    r.from = from;
    r.posted = true;
    r.buffer = std::move(buffer);
    for (const MessageKey& k : order_.Issuable(from)) SF_RETURN_IF_ERROR(Issue(from, k));
    return Status::Ok();
  }

  Result<bool> Arrived(const MessageKey& key) override {
    auto it = recvs_.find(key);
    if (it == recvs_.end() || !it->second.posted) {
      return Status::Internal(Where(key) + " was not posted");
    }
    if (it->second.done == nullptr) return false;  // not issued yet
    const cudaError_t rc = cudaEventQuery(it->second.done);
    if (rc == cudaErrorNotReady) return false;
    SF_RETURN_IF_ERROR(CudaStatus(rc, "cudaEventQuery"));
    return true;
  }

  Result<Tensor<T>> Wait(const MessageKey& key) override {
    auto it = recvs_.find(key);
    if (it == recvs_.end() || !it->second.posted) {
      return Status::Internal(Where(key) + " was not posted");
    }
    const int from = it->second.from;
    if (it->second.done == nullptr) {  // issue it and every predecessor
      std::vector<MessageKey> unposted;
      SF_ASSIGN_OR_RETURN(std::vector<MessageKey> keys, order_.ForceUpTo(from, key, &unposted));
      for (const MessageKey& k : keys) {
        Recv& r = recvs_[k];
        if (!r.posted) {  // the runtime has not asked for it yet: our buffer
          r.from = from;
          SF_ASSIGN_OR_RETURN(r.buffer, Tensor<T>::Uninitialized(*transport_,
                                                                 BufferClass::kWorkspace,
                                                                 {numel_(k)}));
        }
        SF_RETURN_IF_ERROR(Issue(from, k));
      }
    }
    Recv& r = recvs_[key];
    SF_RETURN_IF_ERROR(Poll(r.done, "the " + ToString(key) + " from stage " +
                                        std::to_string(from)));
    SF_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, r.done, 0));
    Tensor<T> buffer = std::move(r.buffer);
    if (r.spare.numel() > 0) {  // posted after an early issue: hand over its shape
      if (r.spare.numel() != buffer.numel()) {
        return Status::Internal(Where(key) + ": " + std::to_string(buffer.numel()) +
                                " elements arrived, the receive has " +
                                std::to_string(r.spare.numel()));
      }
      r.spare.CopyFrom(buffer);
      buffer = std::move(r.spare);
    }
    cudaEventDestroy(r.done);
    recvs_.erase(key);
    return buffer;
  }

  Status Send(int to, const MessageKey& key, Tensor<T> data) override {
    SF_RETURN_IF_ERROR(Neighbour(to, "send to"));
    Channel& ch = out_.at(to);
    cudaEvent_t ready = nullptr, done = nullptr;
    SF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    SF_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, compute_));
    SF_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(ch.stream, ready, 0));
    cudaEventDestroy(ready);
    SF_NCCL_RETURN_IF_ERROR(ncclSend(data.data(), static_cast<size_t>(data.numel()), kType,
                                     ch.peer, ch.comm, ch.stream));
    SF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SF_CUDA_RETURN_IF_ERROR(cudaEventRecord(done, ch.stream));
    sends_.push_back(PendingSend{key, to, std::move(data), done});
    return Status::Ok();
  }

  Status Progress() override {
    for (auto it = sends_.begin(); it != sends_.end();) {
      const cudaError_t rc = cudaEventQuery(it->done);
      if (rc == cudaErrorNotReady) {
        ++it;
        continue;
      }
      SF_RETURN_IF_ERROR(CudaStatus(rc, "cudaEventQuery"));
      cudaEventDestroy(it->done);
      it = sends_.erase(it);
    }
    return Status::Ok();
  }

  Status Flush() override {
    for (PendingSend& s : sends_) {
      SF_RETURN_IF_ERROR(Poll(s.done, "the " + ToString(s.key) + " to stage " +
                                          std::to_string(s.to)));
    }
    return Progress();
  }

  int pending_sends() const override { return static_cast<int>(sends_.size()); }

 private:
  static constexpr ncclDataType_t kType = std::is_same_v<T, bf16>    ? ncclBfloat16
                                          : std::is_same_v<T, float> ? ncclFloat
                                                                     : ncclDouble;

  struct Recv {
    int from = 0;
    bool posted = false;
    Tensor<T> buffer;          // where ncclRecv writes
    Tensor<T> spare;           // the runtime's buffer when the receive was issued early
    cudaEvent_t done = nullptr;
  };
  struct PendingSend {
    MessageKey key;
    int to = 0;
    Tensor<T> data;
    cudaEvent_t done = nullptr;
  };

  std::string Where(const MessageKey& key) const {
    return "stage " + std::to_string(stage_) + ": the receive of " + ToString(key);
  }
  Status Neighbour(int peer, const char* what) const {
    if (peer == stage_ - 1 || peer == stage_ + 1) {
      if (peer >= 0 && peer < stages_) return Status::Ok();
    }
    return Status::Internal("stage " + std::to_string(stage_) + ": " + what + " stage " +
                            std::to_string(peer) + ", not a neighbour");
  }

  Status Issue(int from, const MessageKey& key) {
    Recv& r = recvs_[key];
    Channel& ch = in_.at(from);
    SF_NCCL_RETURN_IF_ERROR(ncclRecv(r.buffer.data(), static_cast<size_t>(r.buffer.numel()),
                                     kType, ch.peer, ch.comm, ch.stream));
    SF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming));
    SF_CUDA_RETURN_IF_ERROR(cudaEventRecord(r.done, ch.stream));
    return Status::Ok();
  }

  // Polls `event` until it completes or the MPI watchdog's deadline passes
  // (then aborts the communicators so that the job ends, naming the wait).
  Status Poll(cudaEvent_t event, const std::string& what) {
    const double limit = MpiWatchdogSeconds();
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t rc = cudaEventQuery(event);
      if (rc == cudaSuccess) return Status::Ok();
      if (rc != cudaErrorNotReady) return CudaStatus(rc, "cudaEventQuery");
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (limit > 0 && waited > limit) {
        for (auto* channels : {&out_, &in_}) {
          for (auto& [peer, ch] : *channels) ncclCommAbort(ch.comm), ch.comm = nullptr;
        }
        return Status::Internal("stage " + std::to_string(stage_) + ": waited " +
                                std::to_string(static_cast<int>(waited)) + " s for " + what +
                                " (watchdog; NCCL communicators aborted)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int stage_;
  int stages_;
  cudaStream_t compute_;
  TrackingAllocator* transport_;
  std::function<int64_t(const MessageKey&)> numel_;
  LinkOrder order_;
  std::map<int, Channel> out_;  // by peer stage: this stage sends
  std::map<int, Channel> in_;   // by peer stage: this stage receives
  std::map<MessageKey, Recv> recvs_;
  std::vector<PendingSend> sends_;
};

}  // namespace

template <typename T>
Result<std::unique_ptr<Comm<T>>> MakeNcclComm(
    const schedule::Plan& plan, int stage, Device& device, TrackingAllocator* transport,
    std::function<int64_t(const MessageKey&)> message_numel) {
  SF_ASSIGN_OR_RETURN(cudaStream_t compute, CudaComputeStream(device));
  auto comm = std::make_unique<NcclComm<T>>(plan, stage, compute, transport,
                                            std::move(message_numel));
  SF_RETURN_IF_ERROR(comm->Connect());
  return std::unique_ptr<Comm<T>>(std::move(comm));
}

template Result<std::unique_ptr<Comm<float>>> MakeNcclComm<float>(
    const schedule::Plan&, int, Device&, TrackingAllocator*,
    std::function<int64_t(const MessageKey&)>);
template Result<std::unique_ptr<Comm<double>>> MakeNcclComm<double>(
    const schedule::Plan&, int, Device&, TrackingAllocator*,
    std::function<int64_t(const MessageKey&)>);
template Result<std::unique_ptr<Comm<bf16>>> MakeNcclComm<bf16>(
    const schedule::Plan&, int, Device&, TrackingAllocator*,
    std::function<int64_t(const MessageKey&)>);

}  // namespace stateflow::backend

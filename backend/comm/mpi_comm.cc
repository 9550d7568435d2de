#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/comm/mpi.h"
#include "backend/comm/mpi_wait.h"

namespace stateflow::backend {
namespace {

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<std::size_t>(length));
}

template <typename T>
MPI_Datatype Datatype() {
  if constexpr (std::is_same_v<T, bf16>) {
    return MPI_UINT16_T;  // bf16's bits, moved as they are
  } else {
    return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
  }
}

template <typename T>
class MpiComm final : public Comm<T> {
 public:
  // `comm`: the P ranks of this rank's pipeline (replica), stage = rank in it.
  MpiComm(MPI_Comm comm, int stage, int stages, int chunks, int virtual_stages)
      : comm_(comm), stage_(stage), stages_(stages), chunks_(chunks),
        virtual_stages_(virtual_stages) {}

  // Pending requests would be unsafe to free: the runtime flushes every
  // step, and after a failure the job is aborted.
  ~MpiComm() override {
    if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int stage() const override { return stage_; }
  int stages() const override { return stages_; }

  Status PostRecv(int from, const MessageKey& key, Tensor<T> buffer) override {
    SF_RETURN_IF_ERROR(CheckPeer(from, "receive from"));
    SF_RETURN_IF_ERROR(CheckCount(buffer, key));
    if (recvs_.count(key) > 0) {
      return Status::Internal(Where() + "the receive of the " + ToString(key) +
                              " is already posted");
    }
    Recv& recv = recvs_[key];
    recv.buffer = std::move(buffer);
    recv.from = from;
    const int rc = MPI_Irecv(recv.buffer.data(), static_cast<int>(recv.buffer.numel()),
                             Datatype<T>(), from, Tag(key), comm_, &recv.request);
    if (rc != MPI_SUCCESS) {
      recvs_.erase(key);
      return Status::Resource(Where() + "MPI_Irecv of the " + ToString(key) + ": " +
                              MpiError(rc));
    }
    return Status::Ok();
  }

  Result<bool> Arrived(const MessageKey& key) override {
    SF_ASSIGN_OR_RETURN(Recv * recv, Find(key));
    if (recv->done) return true;
    int flag = 0;
    const int rc = MPI_Test(&recv->request, &flag, &recv->status);
    if (rc != MPI_SUCCESS) return Failed("MPI_Test", key, rc);
    recv->done = flag != 0;
    return recv->done;
  }

  Result<Tensor<T>> Wait(const MessageKey& key) override {
    SF_ASSIGN_OR_RETURN(Recv * recv, Find(key));
    if (!recv->done) {
      SF_RETURN_IF_ERROR(WaitWithWatchdog(&recv->request, &recv->status,
                                          Where() + "waiting for the " + ToString(key) +
                                              " from stage " + std::to_string(recv->from)));
      recv->done = true;
    }
    int count = 0;
    MPI_Get_count(&recv->status, Datatype<T>(), &count);
    if (count != recv->buffer.numel()) {
      return Status::Internal(Where() + "the " + ToString(key) + " from stage " +
                              std::to_string(recv->from) + " has " + std::to_string(count) +
                              " elements, the receive " +
                              std::to_string(recv->buffer.numel()));
    }
    Tensor<T> out = std::move(recv->buffer);
    recvs_.erase(key);
    return out;
  }

  Status Send(int to, const MessageKey& key, Tensor<T> data) override {
    SF_RETURN_IF_ERROR(CheckPeer(to, "send to"));
    SF_RETURN_IF_ERROR(CheckCount(data, key));
    sends_.push_back(SendSlot{std::move(data), MPI_REQUEST_NULL, key, to});
    SendSlot& send = sends_.back();
    const int rc = MPI_Isend(send.data.data(), static_cast<int>(send.data.numel()),
                             Datatype<T>(), to, Tag(key), comm_, &send.request);
    if (rc != MPI_SUCCESS) {
      sends_.pop_back();
      return Failed("MPI_Isend", key, rc);
    }
    return Status::Ok();
  }

  Status Progress() override {
    for (std::size_t k = 0; k < sends_.size();) {
      int flag = 0;
      const int rc = MPI_Test(&sends_[k].request, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Status::Resource(Where() + "MPI_Test of a send: " + MpiError(rc));
      if (flag != 0) {
        sends_[k] = std::move(sends_.back());
        sends_.pop_back();
      } else {
        ++k;
      }
    }
    return Status::Ok();
  }

  Status Flush() override {
    for (SendSlot& send : sends_) {
      SF_RETURN_IF_ERROR(WaitWithWatchdog(&send.request, MPI_STATUS_IGNORE,
                                          Where() + "sending the " + ToString(send.key) +
                                              " to stage " + std::to_string(send.to)));
    }
    sends_.clear();
    return Status::Ok();
  }

  int pending_sends() const override { return static_cast<int>(sends_.size()); }

 private:
  struct Recv {
    Tensor<T> buffer;  // (B s, H)
    int from = -1;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Status status{};
    bool done = false;
  };
  struct SendSlot {
    Tensor<T> data;  // (B s, H), held until the send completes
    MPI_Request request = MPI_REQUEST_NULL;
    MessageKey key;  // for the watchdog's message
    int to = -1;
  };

  std::string Where() const { return "stage " + std::to_string(stage_) + ": "; }

  MPI_Comm comm_;
  int Tag(const MessageKey& key) const {
    return static_cast<int>(MessageTag(key, chunks_, virtual_stages_));
  }

  Status CheckPeer(int other, const char* what) const {
    if (IsPeer(stage_, other, stages_)) return Status::Ok();
    return Status::Internal(Where() + "cannot " + what + " stage " + std::to_string(other) +
                            " (not a neighbour among " + std::to_string(stages_) + " stages)");
  }
  Status CheckCount(const Tensor<T>& t, const MessageKey& key) const {
    if (t.numel() <= INT_MAX) return Status::Ok();
    return Status::Invalid(Where() + "the " + ToString(key) + " has " +
                           std::to_string(t.numel()) +
                           " elements, more than one MPI message can count (2^31 - 1)");
  }
  Result<Recv*> Find(const MessageKey& key) {
    auto it = recvs_.find(key);
    if (it == recvs_.end()) {
      return Status::Internal(Where() + "no receive posted for the " + ToString(key));
    }
    return &it->second;
  }
  Status Failed(const char* call, const MessageKey& key, int rc) const {
    return Status::Resource(Where() + call + " of the " + ToString(key) + ": " + MpiError(rc));
  }

  int stage_;
  int stages_;
  int chunks_;
  int virtual_stages_;
  std::map<MessageKey, Recv> recvs_;  // node-based: requests keep their address
  std::vector<SendSlot> sends_;       // MPI_Isend's request is copied out, so moves are safe
};

}  // namespace

bool LaunchedByMpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    status_ = Status::Resource("MPI_Init_thread failed (error " + std::to_string(rc) + ")");
    return;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_size(node, &ranks_on_node_);
    MPI_Comm_free(&node);
  }
}

MpiSession::~MpiSession() {
  if (status_.ok()) MPI_Finalize();
}

template <typename T>
Result<std::unique_ptr<Comm<T>>> MakeMpiComm(int microbatches, int chunks, int replicas,
                                             int virtual_stages) {
  int rank = 0, size = 1, flag = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (replicas < 1 || size % replicas != 0) {
    return Status::Internal("MPI comm: " + std::to_string(size) + " ranks are not a whole " +
                            "number of pipelines of " + std::to_string(replicas) + " replicas");
  }
  void* tag_ub = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  // The standard guarantees at least 32767 when the attribute is missing.
  const long long bound = flag != 0 ? *static_cast<int*>(tag_ub) : 32767;
  SF_RETURN_IF_ERROR(CheckTagRange(microbatches, chunks, bound, virtual_stages));
  const int stage = rank / replicas, replica = rank % replicas;
  MPI_Comm pipeline = MPI_COMM_WORLD;
  if (replicas > 1) {
    // Replica d's P ranks, ordered by stage (GridRank).
    const int rc = MPI_Comm_split(MPI_COMM_WORLD, replica, stage, &pipeline);
    if (rc != MPI_SUCCESS) return MpiFailed("MPI_Comm_split", rc);
    MPI_Comm_set_errhandler(pipeline, MPI_ERRORS_RETURN);
  }
  return std::unique_ptr<Comm<T>>(
      std::make_unique<MpiComm<T>>(pipeline, stage, size / replicas, chunks, virtual_stages));
}

template Result<std::unique_ptr<Comm<float>>> MakeMpiComm<float>(int, int, int, int);
template Result<std::unique_ptr<Comm<double>>> MakeMpiComm<double>(int, int, int, int);
template Result<std::unique_ptr<Comm<bf16>>> MakeMpiComm<bf16>(int, int, int, int);

void AbortMpiJob(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace stateflow::backend

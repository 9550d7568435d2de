#include <mpi.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/comm/mpi.h"
#include "backend/comm/mpi_wait.h"

namespace stateflow::backend {
namespace {

// An MPI count is an int: large buffers go in pieces.
constexpr std::int64_t kPieceElements = std::int64_t{1} << 28;

class MpiReplicaSync final : public ReplicaSync {
 public:
  MpiReplicaSync(MPI_Comm comm, int stage, int replica, int replicas)
      : comm_(comm), stage_(stage), replica_(replica), replicas_(replicas) {}
  ~MpiReplicaSync() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int replicas() const override { return replicas_; }
  int first_local() const override { return replica_; }
  int local_count() const override { return 1; }

  Status AllReduceSum(std::span<float* const> local, std::int64_t n) override {
    return Reduce(local, n, -1);
  }
  Status AllReduceSum(std::span<double* const> local, std::int64_t n) override {
    return Reduce(local, n, -1);
  }
  Status ReduceSum(std::span<float* const> local, std::int64_t n, int root) override {
    return Reduce(local, n, root);
  }
  Status ReduceSum(std::span<double* const> local, std::int64_t n, int root) override {
    return Reduce(local, n, root);
  }

  Status Broadcast(std::span<void* const> local, std::int64_t bytes, int root) override {
    SF_RETURN_IF_ERROR(Check(local.size(), root));
    auto* data = static_cast<char*>(local[0]);
    for (std::int64_t at = 0; at < bytes; at += kPieceElements) {
      const int count = static_cast<int>(std::min(kPieceElements, bytes - at));
      MPI_Request request = MPI_REQUEST_NULL;
      const int rc = MPI_Ibcast(data + at, count, MPI_BYTE, root, comm_, &request);
      if (rc != MPI_SUCCESS) return MpiFailed("MPI_Ibcast", rc).WithPrefix(Where("a broadcast"));
      SF_RETURN_IF_ERROR(WaitWithWatchdog(&request, MPI_STATUS_IGNORE, Where("a broadcast")));
    }
    return Status::Ok();
  }

 private:
  std::string Where(const char* what) const {
    return "stage " + std::to_string(stage_) + " replica " + std::to_string(replica_) + ": " +
           what + " among the stage's " + std::to_string(replicas_) + " data-parallel replicas";
  }

  Status Check(std::size_t buffers, int root) const {
    if (buffers != 1 || root < -1 || root >= replicas_) {
      return Status::Internal(Where("a sync") + ": " + std::to_string(buffers) +
                              " buffers, root " + std::to_string(root));
    }
    return Status::Ok();
  }

  template <typename T>
  Status Reduce(std::span<T* const> local, std::int64_t n, int root) {
    SF_RETURN_IF_ERROR(Check(local.size(), root));
    const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
    for (std::int64_t at = 0; at < n; at += kPieceElements) {
      const int count = static_cast<int>(std::min(kPieceElements, n - at));
      T* data = local[0] + at;
      MPI_Request request = MPI_REQUEST_NULL;
      int rc = MPI_SUCCESS;
      if (root < 0) {
        rc = MPI_Iallreduce(MPI_IN_PLACE, data, count, type, MPI_SUM, comm_, &request);
      } else if (root == replica_) {
        rc = MPI_Ireduce(MPI_IN_PLACE, data, count, type, MPI_SUM, root, comm_, &request);
      } else {
        rc = MPI_Ireduce(data, nullptr, count, type, MPI_SUM, root, comm_, &request);
      }
      if (rc != MPI_SUCCESS) return MpiFailed("MPI_Ireduce", rc).WithPrefix(Where("a gradient sum"));
      SF_RETURN_IF_ERROR(WaitWithWatchdog(&request, MPI_STATUS_IGNORE, Where("a gradient sum")));
    }
    return Status::Ok();
  }

  MPI_Comm comm_;
  int stage_, replica_, replicas_;
};

}  // namespace

Result<std::unique_ptr<ReplicaSync>> MakeMpiReplicaSync(int replicas, int tensors) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (replicas < 1 || tensors < 1 || size % (replicas * tensors) != 0) {
    return Status::Internal("replica sync: " + std::to_string(size) + " ranks are not a " +
                            "whole number of pipelines of " + std::to_string(replicas) +
                            " replicas x " + std::to_string(tensors) + " tensor ranks");
  }
  const int column = rank % (replicas * tensors);
  const int stage = rank / (replicas * tensors), replica = column / tensors;
  const int tensor = column % tensors;
  MPI_Comm comm = MPI_COMM_NULL;
  // Stage r's D ranks of tensor rank t, ordered by replica (GridRank).
  const int rc = MPI_Comm_split(MPI_COMM_WORLD, stage * tensors + tensor, replica, &comm);
  if (rc != MPI_SUCCESS) return MpiFailed("MPI_Comm_split", rc);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<ReplicaSync>(
      std::make_unique<MpiReplicaSync>(comm, stage, replica, replicas));
}

}  // namespace stateflow::backend

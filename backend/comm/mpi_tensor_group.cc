#include <mpi.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/comm/mpi.h"
#include "backend/comm/mpi_wait.h"

namespace stateflow::backend {
namespace {

// An MPI count is an int: a gather of TP pieces of at most this many
// elements each stays below 2^31 for TP <= 8 (larger TP: smaller pieces).
constexpr std::int64_t kGatherElements = std::int64_t{1} << 27;

class MpiTensorGroup final : public TensorGroup {
 public:
  MpiTensorGroup(MPI_Comm comm, int stage, int replica, int tensor, int tensors)
      : comm_(comm), stage_(stage), replica_(replica), tensor_(tensor), tensors_(tensors) {}
  ~MpiTensorGroup() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const override { return tensor_; }
  int size() const override { return tensors_; }

  Status AllReduceSum(float* data, std::int64_t n) override { return Sum(data, n); }
  Status AllReduceSum(double* data, std::int64_t n) override { return Sum(data, n); }
  Status AllGather(const float* in, float* out, std::int64_t n) override {
    return Gather(in, out, n);
  }
  Status AllGather(const double* in, double* out, std::int64_t n) override {
    return Gather(in, out, n);
  }

 private:
  std::string Where() const {
    return "stage " + std::to_string(stage_) + " replica " + std::to_string(replica_) +
           " tensor rank " + std::to_string(tensor_) + ": a sum among the stage's " +
           std::to_string(tensors_) + " tensor-parallel ranks";
  }

  std::int64_t Piece() const { return std::max<std::int64_t>(1, kGatherElements * 8 / tensors_); }

  // Every rank's n elements of `in`, gathered piece by piece: for each piece
  // of `count` elements from element `at`, consume(at, count, buf) with buf
  // holding the ranks' pieces rank-major (count each).
  template <typename T, typename Consume>
  Status GatherPieces(const T* in, std::int64_t n, Consume consume) {
    const MPI_Datatype type = std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
    const std::int64_t piece = Piece();
    std::vector<T> buf;
    for (std::int64_t at = 0; at < n; at += piece) {
      const std::int64_t count = std::min(piece, n - at);
      buf.resize(static_cast<std::size_t>(count * tensors_));
      MPI_Request request = MPI_REQUEST_NULL;
      const int rc = MPI_Iallgather(in + at, static_cast<int>(count), type, buf.data(),
                                    static_cast<int>(count), type, comm_, &request);
      if (rc != MPI_SUCCESS) return MpiFailed("MPI_Iallgather", rc).WithPrefix(Where());
      SF_RETURN_IF_ERROR(WaitWithWatchdog(&request, MPI_STATUS_IGNORE, Where()));
      consume(at, count, buf);
    }
    return Status::Ok();
  }

  // out (tensors_ n) = every rank's n elements, rank-major.
  template <typename T>
  Status Gather(const T* in, T* out, std::int64_t n) {
    return GatherPieces(in, n, [&](std::int64_t at, std::int64_t count, const std::vector<T>& buf) {
      for (int t = 0; t < tensors_; ++t) {
        std::copy(buf.begin() + t * count, buf.begin() + (t + 1) * count, out + t * n + at);
      }
    });
  }

  // Gathered, then added in rank order (the same bits on every rank).
  template <typename T>
  Status Sum(T* data, std::int64_t n) {
    return GatherPieces(data, n, [&](std::int64_t at, std::int64_t count, const std::vector<T>& buf) {
      for (std::int64_t e = 0; e < count; ++e) {
        T sum = buf[static_cast<std::size_t>(e)];
        for (int t = 1; t < tensors_; ++t) sum += buf[static_cast<std::size_t>(t * count + e)];
        data[at + e] = sum;
      }
    });
  }

  MPI_Comm comm_;
  int stage_, replica_, tensor_, tensors_;
};

}  // namespace

Result<std::unique_ptr<TensorGroup>> MakeMpiTensorGroup(int replicas, int tensors) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (replicas < 1 || tensors < 1 || size % (replicas * tensors) != 0) {
    return Status::Internal("tensor group: " + std::to_string(size) + " ranks are not a " +
                            "whole number of stages of " + std::to_string(replicas) + " x " +
                            std::to_string(tensors) + " ranks");
  }
  const int column = rank % (replicas * tensors), stage = rank / (replicas * tensors);
  const int replica = column / tensors, tensor = column % tensors;
  MPI_Comm comm = MPI_COMM_NULL;
  // The TP ranks of (stage, replica): consecutive world ranks, ordered by t.
  const int rc = MPI_Comm_split(MPI_COMM_WORLD, stage * replicas + replica, tensor, &comm);
  if (rc != MPI_SUCCESS) return MpiFailed("MPI_Comm_split", rc);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<TensorGroup>(
      std::make_unique<MpiTensorGroup>(comm, stage, replica, tensor, tensors));
}

}  // namespace stateflow::backend

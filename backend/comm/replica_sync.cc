#include "backend/comm/replica_sync.h"

#include <cstring>
#include <string>

namespace stateflow::backend {
namespace {

class InProcessReplicaSync final : public ReplicaSync {
 public:
  explicit InProcessReplicaSync(int replicas) : replicas_(replicas) {}

  int replicas() const override { return replicas_; }
  int first_local() const override { return 0; }
  int local_count() const override { return replicas_; }

  Status AllReduceSum(std::span<float* const> local, std::int64_t n) override {
    return Sum(local, n, -1);
  }
  Status AllReduceSum(std::span<double* const> local, std::int64_t n) override {
    return Sum(local, n, -1);
  }
  Status ReduceSum(std::span<float* const> local, std::int64_t n, int root) override {
    return Sum(local, n, root);
  }
  Status ReduceSum(std::span<double* const> local, std::int64_t n, int root) override {
    return Sum(local, n, root);
  }

  Status Broadcast(std::span<void* const> local, std::int64_t bytes, int root) override {
    SF_RETURN_IF_ERROR(Check(local.size(), root));
    for (int d = 0; d < replicas_; ++d) {
      if (d != root && bytes > 0) std::memcpy(local[d], local[root], static_cast<std::size_t>(bytes));
    }
    return Status::Ok();
  }

 private:
  Status Check(std::size_t buffers, int root) const {
    if (static_cast<int>(buffers) != replicas_ || root < -1 || root >= replicas_) {
      return Status::Internal("replica sync: " + std::to_string(buffers) + " buffers, root " +
                              std::to_string(root) + ", for " + std::to_string(replicas_) +
                              " replicas in one process");
    }
    return Status::Ok();
  }

  // Sums in replica order into every buffer (root -1) or into `root`'s.
  template <typename T>
  Status Sum(std::span<T* const> local, std::int64_t n, int root) {
    SF_RETURN_IF_ERROR(Check(local.size(), root));
    for (std::int64_t i = 0; i < n; ++i) {
      T sum = local[0][i];
      for (int d = 1; d < replicas_; ++d) sum += local[d][i];
      if (root >= 0) {
        local[root][i] = sum;
      } else {
        for (int d = 0; d < replicas_; ++d) local[d][i] = sum;
      }
    }
    return Status::Ok();
  }

  int replicas_;
};

}  // namespace

std::unique_ptr<ReplicaSync> MakeInProcessReplicaSync(int replicas) {
  return std::make_unique<InProcessReplicaSync>(replicas);
}

}  // namespace stateflow::backend

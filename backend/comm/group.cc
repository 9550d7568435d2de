#include "backend/comm/group.h"

namespace stateflow::backend {
namespace {

class SoloGroup final : public Group {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Result<Agreement> AgreeOrFail(const Status& local) override { return Agreement{local}; }
  Result<double> Broadcast(double value, int root) override {
    if (root != 0) return Status::Internal("broadcast from rank " + std::to_string(root) +
                                           " in a group of one");
    return value;
  }
  Result<double> Sum(double value) override { return value; }
  Result<std::vector<std::vector<double>>> GatherToRoot(
      const std::vector<double>& local) override {
    return std::vector<std::vector<double>>{local};
  }
  Status Barrier() override { return Status::Ok(); }
};

}  // namespace

std::unique_ptr<Group> MakeSoloGroup() { return std::make_unique<SoloGroup>(); }

}  // namespace stateflow::backend

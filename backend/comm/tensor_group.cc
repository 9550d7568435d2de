#include "backend/comm/tensor_group.h"

#include <algorithm>

namespace stateflow::backend {
namespace {

class SoloTensorGroup final : public TensorGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status AllReduceSum(float*, std::int64_t) override { return Status::Ok(); }
  Status AllReduceSum(double*, std::int64_t) override { return Status::Ok(); }
  Status AllGather(const float* in, float* out, std::int64_t n) override {
    std::copy(in, in + n, out);
    return Status::Ok();
  }
  Status AllGather(const double* in, double* out, std::int64_t n) override {
    std::copy(in, in + n, out);
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<TensorGroup> MakeSoloTensorGroup() { return std::make_unique<SoloTensorGroup>(); }

}  // namespace stateflow::backend

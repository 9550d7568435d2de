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

class TimingTensorGroup final : public TensorGroup {
 public:
  explicit TimingTensorGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  Status AllReduceSum(float*, std::int64_t) override { return Status::Ok(); }
  Status AllReduceSum(double*, std::int64_t) override { return Status::Ok(); }
  Status AllGather(const float* in, float* out, std::int64_t n) override {
    return Repeat(in, out, n);
  }
  Status AllGather(const double* in, double* out, std::int64_t n) override {
    return Repeat(in, out, n);
  }

 private:
  template <typename T>
  Status Repeat(const T* in, T* out, std::int64_t n) {
    for (int t = 0; t < size_; ++t) std::copy(in, in + n, out + t * n);
    return Status::Ok();
  }
  int size_;
};

}  // namespace

std::unique_ptr<TensorGroup> MakeTimingTensorGroup(int size) {
  return std::make_unique<TimingTensorGroup>(size);
}

std::unique_ptr<TensorGroup> MakeSoloTensorGroup() { return std::make_unique<SoloTensorGroup>(); }

}  // namespace stateflow::backend

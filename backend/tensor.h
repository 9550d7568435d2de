// A dense row-major tensor of float or double whose storage comes from a
// TrackingAllocator and is counted under one BufferClass for its whole life.
// Move-only (copying is deleted; Clone() makes an explicit, counted copy); the
// bytes are returned to the allocator on destruction. The storage lives on the
// allocator's device (device/device.h): kernels see it as raw pointers through
// the device's Ops; fills and copies go through the device's MemoryResource;
// ToHost()/FromHost() move values to and from ordinary host memory. The
// Eigen::Map views (matrix(), flat()) are for host-accessible storage only
// (the CPU and host-grid devices; asserted).
//
// Not a view type, not broadcasting, not autograd: shapes are checked only
// where a tensor is made or reshaped into a view; kernels take raw pointers.
//
//   SF_ASSIGN_OR_RETURN(auto x, Tensor<float>::Zeros(alloc, BufferClass::kActivations, {T, C}));
//   x.matrix().row(0).setOnes();   // (T, C) row-major Eigen::Map
#pragma once

#include <Eigen/Core>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/device/bf16.h"
#include "backend/device/memory.h"
#include "common/buffer_class.h"
#include "common/status.h"

namespace stateflow::backend {

using Shape = std::vector<int64_t>;

// "(2, 3, 4)".
inline std::string ShapeString(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

template <typename T>
class Tensor {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, bf16>,
                "Tensor holds float, double or bf16");

 public:
  using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic,
                                  Eigen::RowMajor>;
  using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using MatrixMap = Eigen::Map<RowMatrix, Eigen::Aligned64>;
  using ConstMatrixMap = Eigen::Map<const RowMatrix, Eigen::Aligned64>;
  using VectorMap = Eigen::Map<Vector, Eigen::Aligned64>;
  using ConstVectorMap = Eigen::Map<const Vector, Eigen::Aligned64>;

  // An empty tensor: no allocator, no bytes, shape (0).
  Tensor() = default;

  // A zero-filled tensor of `shape` (every dimension >= 0; the empty shape is
  // a scalar). Errors: a negative dimension (names it), or the allocator's
  // capacity error.
  static Result<Tensor> Zeros(TrackingAllocator& alloc, BufferClass cls,
                              Shape shape) {
    SF_ASSIGN_OR_RETURN(Tensor t, Uninitialized(alloc, cls, std::move(shape)));
    t.SetZero();
    return t;
  }

  // As Zeros, without filling (for buffers that are written before read).
  static Result<Tensor> Uninitialized(TrackingAllocator& alloc,
                                      BufferClass cls, Shape shape) {
    int64_t numel = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] < 0) {
        return Status::Invalid("tensor shape " + ShapeString(shape) +
                               ": dimension " + std::to_string(i) +
                               " is negative");
      }
      numel *= shape[i];
    }
    SF_ASSIGN_OR_RETURN(void* ptr,
                        alloc.Allocate(numel * int64_t{sizeof(T)}, cls));
    return Tensor(&alloc, cls, std::move(shape), numel, static_cast<T*>(ptr));
  }

  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& other) noexcept { MoveFrom(other); }
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      Release();
      MoveFrom(other);
    }
    return *this;
  }
  ~Tensor() { Release(); }

  // A counted copy with the same allocator, class and shape.
  // REQUIRES: the tensor has an allocator (was made by Zeros/Uninitialized).
  Result<Tensor> Clone() const { return CloneAs(cls_); }
  Result<Tensor> CloneAs(BufferClass cls) const {
    assert(alloc_ != nullptr);
    SF_ASSIGN_OR_RETURN(Tensor t, Uninitialized(*alloc_, cls, shape_));
    if (numel_ > 0) alloc_->memory().Copy(t.data_, data_, bytes());
    return t;
  }

  // The values, in order, in host memory; and back (REQUIRES: host.size()
  // == numel()). Synchronous. REQUIRES (both): an allocator.
  std::vector<T> ToHost() const {
    std::vector<T> host(static_cast<size_t>(numel_));
    if (numel_ > 0) alloc_->memory().CopyToHost(host.data(), data_, bytes());
    return host;
  }
  void FromHost(const std::vector<T>& host) {
    assert(static_cast<int64_t>(host.size()) == numel_);
    if (numel_ > 0) alloc_->memory().CopyFromHost(data_, host.data(), bytes());
  }
  // this = other's values, on their common device. REQUIRES: the same
  // numel and both allocated on one device.
  void CopyFrom(const Tensor& other) {
    assert(other.numel_ == numel_);
    if (numel_ > 0) alloc_->memory().Copy(data_, other.data_, bytes());
  }
  // True when the host may dereference data() (no allocator: empty, true).
  bool host_accessible() const {
    return alloc_ == nullptr || alloc_->memory().host_accessible();
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // REQUIRES: 0 <= i < rank().
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * int64_t{sizeof(T)}; }
  BufferClass buffer_class() const { return cls_; }

  void SetZero() {
    if (numel_ > 0) alloc_->memory().Zero(data_, bytes());
  }

  // The tensor as a (numel / last dim, last dim) row-major matrix; a scalar
  // or rank-1 tensor is one row.
  // REQUIRES (the views): host_accessible().
  MatrixMap matrix() {
    assert(host_accessible());
    return MatrixMap(data_, Rows(), Cols());
  }
  ConstMatrixMap matrix() const {
    assert(host_accessible());
    return ConstMatrixMap(data_, Rows(), Cols());
  }
  // REQUIRES: rows * cols == numel().
  MatrixMap matrix(int64_t rows, int64_t cols) {
    assert(rows * cols == numel_ && host_accessible());
    return MatrixMap(data_, rows, cols);
  }
  ConstMatrixMap matrix(int64_t rows, int64_t cols) const {
    assert(rows * cols == numel_ && host_accessible());
    return ConstMatrixMap(data_, rows, cols);
  }
  VectorMap flat() {
    assert(host_accessible());
    return VectorMap(data_, numel_);
  }
  ConstVectorMap flat() const {
    assert(host_accessible());
    return ConstVectorMap(data_, numel_);
  }

 private:
  Tensor(TrackingAllocator* alloc, BufferClass cls, Shape shape,
         int64_t numel, T* data)
      : alloc_(alloc), cls_(cls), shape_(std::move(shape)), numel_(numel),
        data_(data) {}

  int64_t Cols() const { return shape_.empty() ? 1 : shape_.back(); }
  int64_t Rows() const {
    const int64_t cols = Cols();
    return cols == 0 ? 0 : numel_ / cols;
  }

  void Release() {
    if (alloc_ != nullptr) alloc_->Free(data_, bytes(), cls_);
    alloc_ = nullptr;
    data_ = nullptr;
    numel_ = 0;
    shape_ = {0};
  }
  void MoveFrom(Tensor& other) {
    alloc_ = std::exchange(other.alloc_, nullptr);
    cls_ = other.cls_;
    shape_ = std::exchange(other.shape_, Shape{0});
    numel_ = std::exchange(other.numel_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }

  TrackingAllocator* alloc_ = nullptr;  // not owned; outlives the tensor
  BufferClass cls_ = BufferClass::kWorkspace;
  Shape shape_ = {0};
  int64_t numel_ = 0;
  T* data_ = nullptr;
};

}  // namespace stateflow::backend

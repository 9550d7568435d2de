// The W store of one chunk's split backward (issue 27): what each block's
// B leaves for its W, and the W itself.
//
// As a layer's B starts, the stage module makes the layer's store: one
// kActivations buffer of exactly the elements the memory model gives it
// (models::WeightGradStoreElementsPerToken, times the chunk's B s rows), the
// allocation models::ActionMemory puts there. While the layer's backward
// runs, the store is the active weight-gradient sink (backend/kernels/
// weight_grad_sink.h): each linear's output gradient dy is copied in, and
// its input x unless a linear of the layer read those rows before (the
// projections that share one input, as the model's GEMMs group them, or
// one sequence's rows of it). When
// the layer's backward has ended, End checks that it filled the buffer
// exactly: a family whose backward defers other linears than the model's
// GEMMs is an error naming the layer, never a silent difference between
// the simulator's memory and the backend's.
//
// Weight(ops) runs the weight gradients in the order they were deferred,
// each through ops.LinearBackward with dx null (the same kernel, the same
// inputs, the same accumulation order per gradient: bit for bit the fused
// backward's when W passes run in B order), then frees the buffers.
//
//   WeightGradStore<float> store(alloc);
//   SF_RETURN_IF_ERROR(store.BeginLayer("block 3", rows * per_token));
//   { ScopedSink sink(&store); ... layer backward ... }
//   SF_RETURN_IF_ERROR(store.EndLayer());
//   ... later, the chunk's W:
//   store.Weight(ops);
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/device/ops.h"
#include "backend/device/precision.h"
#include "backend/kernels/weight_grad_sink.h"
#include "backend/tensor.h"
#include "common/status.h"

namespace stateflow::backend {

template <typename T>
class WeightGradStore final : public WeightGradSink<T, GradOf<T>> {
 public:
  explicit WeightGradStore(TrackingAllocator* alloc) : alloc_(alloc) {}

  // A layer's buffer of `elements` (class kActivations). REQUIRES: no layer
  // open.
  Status BeginLayer(std::string layer, int64_t elements) {
    layer_ = std::move(layer);
    SF_ASSIGN_OR_RETURN(Tensor<T> buffer,
                        Tensor<T>::Uninitialized(*alloc_, BufferClass::kActivations, {elements}));
    buffers_.push_back(std::move(buffer));
    used_ = 0;
    overflow_ = 0;
    inputs_.clear();
    return Status::Ok();
  }

  void DeferLinear(GradOf<T>* dw, GradOf<T>* db, const T* dy, const T* x, int64_t R, int64_t C,
                   int64_t D) override {
    Tensor<T>& buffer = buffers_.back();
    Entry e{dw, db, 0, 0, R, C, D};
    e.dy = Put(buffer, dy, R * D);
    // Rows of an input stored already: a linear of the layer read them
    // (the same input, or one sequence's rows of it, as attention's k and v
    // projections run per sequence).
    const auto same = std::find_if(inputs_.begin(), inputs_.end(), [&](const Input& in) {
      return in.cols == C && x >= in.x && x + R * C <= in.x + in.rows * in.cols &&
             (x - in.x) % C == 0;
    });
    if (same != inputs_.end()) {
      e.x = same->at + (x - same->x);
    } else {
      e.x = Put(buffer, x, R * C);
      inputs_.push_back({x, R, C, e.x});
    }
    entries_.push_back(e);
    owners_.push_back(buffers_.size() - 1);
  }

  // Checks the open layer's buffer was filled exactly.
  Status EndLayer() {
    const int64_t size = buffers_.back().numel();
    if (overflow_ > 0 || used_ != size) {
      return Status::Internal(layer_ + ": its split backward deferred weight gradients needing " +
                              std::to_string(used_ + overflow_) + " elements, but the memory "
                              "model's W store holds " + std::to_string(size) +
                              " (models::WeightGradStoreElementsPerToken)");
    }
    return Status::Ok();
  }

  // Runs the deferred weight gradients in order and frees the buffers.
  void Weight(Ops<T>& ops) {
    for (std::size_t k = 0; k < entries_.size(); ++k) {
      const Entry& e = entries_[k];
      const T* base = buffers_[owners_[k]].data();
      ops.LinearBackward(nullptr, e.dw, e.db, base + e.dy, base + e.x, nullptr, e.rows, e.cols,
                         e.out);
    }
    entries_.clear();
    owners_.clear();
    buffers_.clear();
  }

  bool empty() const { return buffers_.empty(); }

 private:
  struct Entry {
    GradOf<T>* dw;
    GradOf<T>* db;
    int64_t dy, x;  // offsets into the layer's buffer
    int64_t rows, cols, out;
  };

  // Copies n elements to the buffer's next free place; its offset.
  int64_t Put(Tensor<T>& buffer, const T* src, int64_t n) {
    const int64_t at = used_;
    if (used_ + n > buffer.numel()) {
      overflow_ += n;
      return 0;
    }
    alloc_->memory().Copy(buffer.data() + at, src, n * int64_t{sizeof(T)});
    used_ += n;
    return at;
  }

  TrackingAllocator* alloc_;
  std::string layer_;
  std::vector<Tensor<T>> buffers_;  // one per layer, in B's layer order
  std::vector<Entry> entries_;
  std::vector<std::size_t> owners_;  // entries_[k]'s buffer
  int64_t used_ = 0, overflow_ = 0;
  // The open layer's inputs stored so far: linears that read one input
  // (the same saved tensor, unchanged during the layer's backward) share
  // its copy.
  struct Input {
    const T* x;
    int64_t rows, cols, at;
  };
  std::vector<Input> inputs_;
};

// Makes `store` the calling thread's sink for its scope.
template <typename T>
class ScopedWeightGradSink {
 public:
  explicit ScopedWeightGradSink(WeightGradSink<T, GradOf<T>>* sink)
      : saved_(ActiveWeightGradSink<T, GradOf<T>>()) {
    ActiveWeightGradSink<T, GradOf<T>>() = sink;
  }
  ~ScopedWeightGradSink() { ActiveWeightGradSink<T, GradOf<T>>() = saved_; }
  ScopedWeightGradSink(const ScopedWeightGradSink&) = delete;
  ScopedWeightGradSink& operator=(const ScopedWeightGradSink&) = delete;

 private:
  WeightGradSink<T, GradOf<T>>* saved_;
};

}  // namespace stateflow::backend

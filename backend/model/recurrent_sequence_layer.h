// The SequenceLayer (sequence_layer.h) of every recurrent family: per
// microbatch, each chunk's saved tensors, the boundary state entering each
// chunk that ran forward and not yet backward, and the d(state out) the
// last backward handed down; the family's layer does the rest. Used by the
// layer-family registry (layer_family.h) for every family alike.
//
//   RecurrentSequenceLayer<float, GdnFamilyTraits> layer(std::move(gdn), alloc, recompute);
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/allocator.h"
#include "backend/model/sequence_layer.h"

namespace stateflow::backend {

// A recurrence layer of a family (Family: its traits, e.g. GdnFamilyTraits in
// gdn_layer.h, whose Layer<T> is called as RecurrentEntry makes it): per microbatch, chunk i's saved
// tensors, the state entering every chunk that ran forward and not yet
// backward, and the d(state out) the last backward handed down.
template <typename T, typename Family>
class RecurrentSequenceLayer final : public SequenceLayer<T> {
 public:
  using Layer = typename Family::template Layer<T>;
  using State = typename Layer::State;
  using Saved = typename Layer::Saved;

  RecurrentSequenceLayer(Layer layer, TrackingAllocator* alloc, models::Recompute recompute)
      : layer_(std::move(layer)), alloc_(alloc), recompute_(recompute) {}

  int layer() const override { return layer_.layer(); }
  const char* kind_name() const override { return Family::kName; }
  std::vector<Param<T>>& params() override { return layer_.params(); }

  void BeginStep(int microbatches, std::int64_t batch,
                 const schedule::Partition* partition) override {
    (void)microbatches;  // a microbatch's slots exist from F(a, 0) to B(a, 0)
    batch_ = batch;
    partition_ = partition;
    mb_.clear();
  }

  Status StartSequence(int a) override {
    Microbatch& m = mb_[a];
    m.saved.resize(partition_->num_chunks());
    m.states_in.resize(partition_->num_chunks());
    SF_ASSIGN_OR_RETURN(m.states_in[0], State::Zeros(*alloc_, layer_.dims(), batch_,
                                                     BufferClass::kBoundaryStates));
    return Status::Ok();
  }

  Status Forward(Tensor<T>* y, int a, int i, const Tensor<T>& x) override {
    Microbatch& m = mb_.at(a);
    State* state_out = i + 1 < partition_->num_chunks() ? &m.states_in[i + 1] : nullptr;
    return layer_.Forward(y, state_out, &m.saved[i], x, batch_, m.states_in[i], recompute_);
  }

  Status Backward(Tensor<T>* dx, int a, int i, const Tensor<T>& dy) override {
    Microbatch& m = mb_.at(a);
    const State* dstate_out = i + 1 < partition_->num_chunks() ? &m.dstate : nullptr;
    State dstate_in;
    SF_RETURN_IF_ERROR(layer_.Backward(dx, i > 0 ? &dstate_in : nullptr, &m.saved[i], dy, batch_,
                                       dstate_out, m.states_in[i]));
    m.dstate = std::move(dstate_in);  // frees the d(state out) it was handed
    return Status::Ok();
  }

  void FinishBackward(int a, int i) override {
    if (i == 0) {
      mb_.erase(a);  // its last backward: every tensor of it is freed already
    } else {
      mb_.at(a).states_in[i] = State{};
    }
  }

 private:
  struct Microbatch {
    std::vector<Saved> saved;      // (N)
    std::vector<State> states_in;  // (N) live from the forward before to B(i)
    State dstate;                  // d(state in) of the chunk that ran backward last
  };

  Layer layer_;
  TrackingAllocator* alloc_;  // not owned
  models::Recompute recompute_;
  std::int64_t batch_ = 1;
  const schedule::Partition* partition_ = nullptr;
  // The microbatches between F(a, 0) and B(a, 0) on this stage, so that the
  // host memory follows the microbatches in flight, not M (issue 31).
  std::unordered_map<int, Microbatch> mb_;
};

}  // namespace stateflow::backend

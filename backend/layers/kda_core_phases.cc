// The KDA core one phase at a time (core_phases.h), on a chunk of B
// sequences of s tokens at the layer's shapes (kda_layer.h's legend):
// unit-norm q, k rows, log decays per channel in [-0.5, -0.01], beta in
// [0.1, 0.9], a state and gradients of a mean loss's size.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "backend/layers/core_phases.h"
#include "backend/layers/kda_layer.h"

namespace stateflow::backend {
namespace {

template <typename T>
class KdaPhaseRunner final : public CorePhaseRunner<T> {
 public:
  KdaPhaseRunner(KdaOps<T>* ops, const KdaLayerDims& d, std::int64_t B, std::int64_t s)
      : ops_(ops), d_(d), B_(B), s_(s) {}

  Status Allocate(TrackingAllocator& alloc) {
    auto make = [&](auto* t, Shape shape) -> Status {
      using Made = std::remove_pointer_t<decltype(t)>;  // Tensor<T> or Tensor<StatOf<T>>
      SF_ASSIGN_OR_RETURN(*t, Made::Zeros(alloc, BufferClass::kWorkspace, std::move(shape)));
      return Status::Ok();
    };
    const std::int64_t S = B_ * s_, state = d_.H * d_.Dv * d_.K;
    for (Tensor<T>* t : {&q_, &k_, &dq_, &dk_}) SF_RETURN_IF_ERROR(make(t, {S, d_.HK()}));
    for (Tensor<T>* t : {&v_, &dO_, &o_, &dv_}) SF_RETURN_IF_ERROR(make(t, {S, d_.HV()}));
    for (Tensor<T>* t : {&g_, &dg_}) SF_RETURN_IF_ERROR(make(t, {S, d_.HK()}));
    for (Tensor<T>* t : {&beta_, &dbeta_}) SF_RETURN_IF_ERROR(make(t, {S, d_.H}));
    for (Tensor<StatOf<T>>* t : {&S_in_, &dS_out_, &S_out_, &dS_in_}) {
      SF_RETURN_IF_ERROR(make(t, {B_, state}));
    }
    const std::int64_t fws = ops_->KdaCoreForwardPhaseWorkspaceSize(s_, d_.H, d_.K, d_.Dv,
                                                                    d_.block_size);
    const std::int64_t bws = ops_->KdaCoreBackwardPhaseWorkspaceSize(s_, d_.H, d_.K, d_.Dv,
                                                                     d_.block_size);
    SF_RETURN_IF_ERROR(make(&fws_, {B_, std::max<std::int64_t>(1, fws)}));
    SF_RETURN_IF_ERROR(make(&bws_, {B_, std::max<std::int64_t>(1, bws)}));
    FillPattern(&q_, 31, 1.0 / std::sqrt(static_cast<double>(d_.K)));
    FillPattern(&k_, 37, 1.0 / std::sqrt(static_cast<double>(d_.K)));
    FillPattern(&v_, 41, 1.0);
    FillRange(&g_, 43, -0.5, -0.01);
    FillRange(&beta_, 47, 0.1, 0.9);
    FillPattern(&S_in_, 53, 0.5);
    FillPattern(&dO_, 59, 1.0 / static_cast<double>(S));
    FillPattern(&dS_out_, 61, 1.0 / static_cast<double>(S));
    return Status::Ok();
  }

  void Run(CorePhase p, bool backward) override {
    const std::int64_t HK = d_.HK(), HV = d_.HV(), H = d_.H, st = d_.H * d_.Dv * d_.K, s = s_;
    for (std::int64_t b = 0; b < B_; ++b) {
      if (!backward) {
        ops_->KdaCoreForwardPhase(
            p, SequencePart(o_, b, s, HV), SequencePart(S_out_, b, 1, st),
            SequencePart(fws_, b, 1, fws_.dim(1)), SequencePart(q_, b, s, HK),
            SequencePart(k_, b, s, HK), SequencePart(v_, b, s, HV), SequencePart(g_, b, s, HK),
            SequencePart(beta_, b, s, H), SequencePart(S_in_, b, 1, st), s, d_.H, d_.K, d_.Dv,
            d_.block_size, d_.st_tile);
        continue;
      }
      ops_->KdaCoreBackwardPhase(
          p, SequencePart(dq_, b, s, HK), SequencePart(dk_, b, s, HK),
          SequencePart(dv_, b, s, HV), SequencePart(dg_, b, s, HK), SequencePart(dbeta_, b, s, H),
          SequencePart(dS_in_, b, 1, st), SequencePart(bws_, b, 1, bws_.dim(1)),
          SequencePart(dO_, b, s, HV), SequencePart(dS_out_, b, 1, st),
          SequencePart(q_, b, s, HK), SequencePart(k_, b, s, HK), SequencePart(v_, b, s, HV),
          SequencePart(g_, b, s, HK), SequencePart(beta_, b, s, H),
          SequencePart(S_in_, b, 1, st), s, d_.H, d_.K, d_.Dv, d_.block_size, d_.st_tile);
    }
  }

 private:
  KdaOps<T>* ops_;  // the device's
  KdaLayerDims d_;
  std::int64_t B_, s_;
  Tensor<T> q_, k_, v_, g_, beta_, dO_;                      // inputs
  Tensor<T> o_, dq_, dk_, dv_, dg_, dbeta_;                  // outputs
  Tensor<StatOf<T>> S_in_, dS_out_, S_out_, dS_in_;          // states, gradients
  Tensor<StatOf<T>> fws_, bws_;                              // (B, phase workspace)
};

}  // namespace

template <typename T>
Result<std::unique_ptr<CorePhaseRunner<T>>> KdaFamilyTraits::MakePhaseRunner(
    const KdaLayerDims& dims, TrackingAllocator& alloc, std::int64_t batch,
    std::int64_t tokens) {
  KdaOps<T>* ops = KdaOpsOf<T>(alloc.device());
  if (ops == nullptr) {
    return Status::Invalid("profile: device " + alloc.device().name() +
                           " has no KDA kernels in this dtype");
  }
  auto runner = std::make_unique<KdaPhaseRunner<T>>(ops, dims, batch, tokens);
  SF_RETURN_IF_ERROR(runner->Allocate(alloc));
  return std::unique_ptr<CorePhaseRunner<T>>(std::move(runner));
}

#define SF_INSTANTIATE(T)                                                                    \
  template Result<std::unique_ptr<CorePhaseRunner<T>>> KdaFamilyTraits::MakePhaseRunner<T>( \
      const KdaLayerDims&, TrackingAllocator&, std::int64_t, std::int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

// The Mamba-3 core one phase at a time (core_phases.h), on a chunk of B
// sequences of s tokens at the layer's shapes (mamba3_layer.h's legend):
// unit-scale q, k entries (normalised and rotated), log decays in
// [-0.5, -0.01], gamma and beta (lambda dt, (1 - lambda) dt) in
// [0.01, 0.5], the carried k and v, a state and gradients of a mean loss's
// size.
#include <algorithm>
#include <memory>
#include <utility>

#include "backend/layers/core_phases.h"
#include "backend/layers/mamba3_layer.h"

namespace stateflow::backend {
namespace {

template <typename T>
class Mamba3PhaseRunner final : public CorePhaseRunner<T> {
 public:
  Mamba3PhaseRunner(Mamba3Ops<T>* ops, const Mamba3LayerDims& d, std::int64_t B, std::int64_t s)
      : ops_(ops), d_(d), B_(B), s_(s) {}

  Status Allocate(TrackingAllocator& alloc) {
    auto make = [&](auto* t, Shape shape) -> Status {
      using Made = std::remove_pointer_t<decltype(t)>;  // Tensor<T> or Tensor<StatOf<T>>
      SF_ASSIGN_OR_RETURN(*t, Made::Zeros(alloc, BufferClass::kWorkspace, std::move(shape)));
      return Status::Ok();
    };
    // The core's Dk is the state dim, Dv the head dim.
    const std::int64_t S = B_ * s_, HK = d_.HDs(), HV = d_.HDp(), state = d_.H * d_.Dp * d_.Ds;
    for (Tensor<T>* t : {&q_, &k_, &dq_, &dk_}) SF_RETURN_IF_ERROR(make(t, {S, HK}));
    for (Tensor<T>* t : {&v_, &dO_, &o_, &dv_}) SF_RETURN_IF_ERROR(make(t, {S, HV}));
    for (Tensor<T>* t : {&a_, &beta_, &da_, &dbeta_}) SF_RETURN_IF_ERROR(make(t, {S, d_.H}));
    for (Tensor<StatOf<T>>* t : {&S_in_, &dS_out_, &S_out_, &dS_in_}) {
      SF_RETURN_IF_ERROR(make(t, {B_, state}));
    }
    for (Tensor<T>* t : {&gamma_, &dgamma_}) SF_RETURN_IF_ERROR(make(t, {S, d_.H}));
    for (Tensor<T>* t : {&k_in_, &dk_out_, &k_out_, &dk_in_}) SF_RETURN_IF_ERROR(make(t, {B_, HK}));
    for (Tensor<T>* t : {&v_in_, &dv_out_, &v_out_, &dv_in_}) SF_RETURN_IF_ERROR(make(t, {B_, HV}));
    const std::int64_t fws = ops_->Mamba3CoreForwardPhaseWorkspaceSize(s_, d_.H, d_.Ds, d_.Dp,
                                                                       d_.block_size);
    const std::int64_t bws = ops_->Mamba3CoreBackwardPhaseWorkspaceSize(s_, d_.H, d_.Ds, d_.Dp,
                                                                        d_.block_size);
    SF_RETURN_IF_ERROR(make(&fws_, {B_, std::max<std::int64_t>(1, fws)}));
    SF_RETURN_IF_ERROR(make(&bws_, {B_, std::max<std::int64_t>(1, bws)}));
    FillPattern(&q_, 31, 1.0);
    FillPattern(&k_, 37, 1.0);
    FillPattern(&v_, 41, 1.0);
    FillRange(&a_, 43, -0.5, -0.01);
    FillRange(&beta_, 47, 0.01, 0.5);
    FillRange(&gamma_, 67, 0.01, 0.5);
    FillPattern(&k_in_, 71, 1.0);
    FillPattern(&v_in_, 73, 1.0);
    FillPattern(&dk_out_, 79, 1.0 / static_cast<double>(S));
    FillPattern(&dv_out_, 83, 1.0 / static_cast<double>(S));
    FillPattern(&S_in_, 53, 0.5);
    FillPattern(&dO_, 59, 1.0 / static_cast<double>(S));
    FillPattern(&dS_out_, 61, 1.0 / static_cast<double>(S));
    return Status::Ok();
  }

  void Run(CorePhase p, bool backward) override {
    const std::int64_t HK = d_.HDs(), HV = d_.HDp(), H = d_.H, st = d_.H * d_.Dp * d_.Ds;
    const std::int64_t s = s_;
    auto Part = [](auto& t, std::int64_t b, std::int64_t rows, std::int64_t w) {
      return SequencePart(t, b, rows, w);
    };
    for (std::int64_t b = 0; b < B_; ++b) {
      if (!backward) {
        ops_->Mamba3CoreForwardPhase(
            p, Part(o_, b, s, HV), Part(S_out_, b, 1, st), Part(k_out_, b, 1, HK), Part(v_out_, b, 1, HV),
            Part(fws_, b, 1, fws_.dim(1)), Part(q_, b, s, HK), Part(k_, b, s, HK), Part(v_, b, s, HV),
            Part(a_, b, s, H), Part(gamma_, b, s, H), Part(beta_, b, s, H), Part(S_in_, b, 1, st),
            Part(k_in_, b, 1, HK), Part(v_in_, b, 1, HV), s, d_.H, d_.Ds, d_.Dp, d_.block_size,
            d_.st_tile);
        continue;
      }
      ops_->Mamba3CoreBackwardPhase(
          p, Part(dq_, b, s, HK), Part(dk_, b, s, HK), Part(dv_, b, s, HV), Part(da_, b, s, H),
          Part(dgamma_, b, s, H), Part(dbeta_, b, s, H), Part(dS_in_, b, 1, st), Part(dk_in_, b, 1, HK),
          Part(dv_in_, b, 1, HV), Part(bws_, b, 1, bws_.dim(1)), Part(dO_, b, s, HV),
          Part(dS_out_, b, 1, st), Part(dk_out_, b, 1, HK), Part(dv_out_, b, 1, HV), Part(q_, b, s, HK),
          Part(k_, b, s, HK), Part(v_, b, s, HV), Part(a_, b, s, H), Part(gamma_, b, s, H),
          Part(beta_, b, s, H), Part(S_in_, b, 1, st), Part(k_in_, b, 1, HK), Part(v_in_, b, 1, HV), s,
          d_.H, d_.Ds, d_.Dp, d_.block_size, d_.st_tile);
    }
  }

 private:
  Mamba3Ops<T>* ops_;  // the device's
  Mamba3LayerDims d_;
  std::int64_t B_, s_;
  Tensor<T> q_, k_, v_, a_, gamma_, beta_, k_in_, v_in_;            // inputs
  Tensor<T> dO_, dk_out_, dv_out_;                                  // backward inputs
  Tensor<T> o_, k_out_, v_out_;                                     // forward outputs
  Tensor<T> dq_, dk_, dv_, da_, dgamma_, dbeta_, dk_in_, dv_in_;   // backward outputs
  Tensor<StatOf<T>> S_in_, dS_out_, S_out_, dS_in_;                 // states, gradients
  Tensor<StatOf<T>> fws_, bws_;                                     // (B, phase workspace)
};

}  // namespace

template <typename T>
Result<std::unique_ptr<CorePhaseRunner<T>>> Mamba3FamilyTraits::MakePhaseRunner(
    const Mamba3LayerDims& dims, TrackingAllocator& alloc, std::int64_t batch,
    std::int64_t tokens) {
  Mamba3Ops<T>* ops = Mamba3OpsOf<T>(alloc.device());
  if (ops == nullptr) {
    return Status::Invalid("profile: device " + alloc.device().name() +
                           " has no Mamba-3 kernels in this dtype");
  }
  auto runner = std::make_unique<Mamba3PhaseRunner<T>>(ops, dims, batch, tokens);
  SF_RETURN_IF_ERROR(runner->Allocate(alloc));
  return std::unique_ptr<CorePhaseRunner<T>>(std::move(runner));
}

#define SF_INSTANTIATE(T)                                                                       \
  template Result<std::unique_ptr<CorePhaseRunner<T>>> Mamba3FamilyTraits::MakePhaseRunner<T>( \
      const Mamba3LayerDims&, TrackingAllocator&, std::int64_t, std::int64_t);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

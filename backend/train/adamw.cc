#include "backend/train/adamw.h"

#include <cmath>

namespace stateflow::backend {

template <typename T>
Result<AdamW<T>> AdamW<T>::Make(std::vector<ParamRef<T>> params, TrackingAllocator& alloc,
                                const AdamWOptions& options) {
  using M = MasterOf<T>;
  AdamW opt(std::move(params), options, &alloc.device());
  for (const ParamRef<T>& p : opt.params_) {
    if constexpr (kHasMaster<T>) {
      SF_ASSIGN_OR_RETURN(Tensor<M> w, Tensor<M>::Uninitialized(
                                           alloc, BufferClass::kOptimizerState,
                                           p.value->shape()));
      alloc.device().ops<T>().Widen(w.data(), p.value->data(), p.value->numel());
      opt.master_.push_back(std::move(w));
    }
    SF_ASSIGN_OR_RETURN(Tensor<M> m, Tensor<M>::Zeros(alloc, BufferClass::kOptimizerState,
                                                      p.value->shape()));
    SF_ASSIGN_OR_RETURN(Tensor<M> v, Tensor<M>::Zeros(alloc, BufferClass::kOptimizerState,
                                                      p.value->shape()));
    opt.m_.push_back(std::move(m));
    opt.v_.push_back(std::move(v));
  }
  return opt;
}

template <typename T>
void AdamW<T>::Step() {
  ++steps_taken_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double correction1 = 1.0 - std::pow(b1, steps_taken_);
  const double correction2 = 1.0 - std::pow(b2, steps_taken_);
  using M = MasterOf<T>;
  const M lr = static_cast<M>(options_.learning_rate);
  AdamWCoefficients<M> c;
  c.beta1 = static_cast<M>(b1);
  c.one_minus_beta1 = static_cast<M>(1 - b1);
  c.beta2 = static_cast<M>(b2);
  c.one_minus_beta2 = static_cast<M>(1 - b2);
  c.step_size = static_cast<M>(options_.learning_rate / correction1);
  c.inv_sqrt_c2 = static_cast<M>(1.0 / std::sqrt(correction2));
  c.eps = static_cast<M>(options_.epsilon);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const M decay = params_[k].value->rank() >= 2 ? static_cast<M>(options_.weight_decay) : M(0);
    c.lr_decay = lr * decay;
    const int64_t n = params_[k].value->numel();
    if constexpr (kHasMaster<T>) {
      device_->ops<M>().AdamWUpdate(master_[k].data(), m_[k].data(), v_[k].data(),
                                    params_[k].grad->data(), n, c);
      device_->ops<T>().Narrow(params_[k].value->data(), master_[k].data(), n);
    } else {
      device_->ops<T>().AdamWUpdate(params_[k].value->data(), m_[k].data(), v_[k].data(),
                                    params_[k].grad->data(), n, c);
    }
  }
}

template <typename T>
void AdamW<T>::NarrowMasters() {
  if constexpr (kHasMaster<T>) {
    for (std::size_t k = 0; k < params_.size(); ++k) {
      device_->ops<T>().Narrow(params_[k].value->data(), master_[k].data(),
                               params_[k].value->numel());
    }
  }
}

template class AdamW<float>;
template class AdamW<double>;
template class AdamW<bf16>;

}  // namespace stateflow::backend

#include "backend/train/adamw.h"

#include <cmath>

namespace stateflow::backend {

template <typename T>
Result<AdamW<T>> AdamW<T>::Make(std::vector<ParamRef<T>> params, TrackingAllocator& alloc,
                                const AdamWOptions& options) {
  AdamW opt(std::move(params), options, &alloc.device());
  for (const ParamRef<T>& p : opt.params_) {
    SF_ASSIGN_OR_RETURN(Tensor<T> m, Tensor<T>::Zeros(alloc, BufferClass::kOptimizerState,
                                                      p.value->shape()));
    SF_ASSIGN_OR_RETURN(Tensor<T> v, Tensor<T>::Zeros(alloc, BufferClass::kOptimizerState,
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
  const T lr = static_cast<T>(options_.learning_rate);
  AdamWCoefficients<T> c;
  c.beta1 = static_cast<T>(b1);
  c.one_minus_beta1 = static_cast<T>(1 - b1);
  c.beta2 = static_cast<T>(b2);
  c.one_minus_beta2 = static_cast<T>(1 - b2);
  c.step_size = static_cast<T>(options_.learning_rate / correction1);
  c.inv_sqrt_c2 = static_cast<T>(1.0 / std::sqrt(correction2));
  c.eps = static_cast<T>(options_.epsilon);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const T decay = params_[k].value->rank() >= 2 ? static_cast<T>(options_.weight_decay) : T(0);
    c.lr_decay = lr * decay;
    device_->ops<T>().AdamWUpdate(params_[k].value->data(), m_[k].data(), v_[k].data(),
                                  params_[k].grad->data(), params_[k].value->numel(), c);
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace stateflow::backend

#include "backend/train/adamw.h"

#include <cmath>

namespace stateflow::backend {

template <typename T>
Result<AdamW<T>> AdamW<T>::Make(std::vector<ParamRef<T>> params, TrackingAllocator& alloc,
                                const AdamWOptions& options) {
  AdamW opt(std::move(params), options);
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
  const T step_size = static_cast<T>(options_.learning_rate / correction1);
  const T inv_sqrt_c2 = static_cast<T>(1.0 / std::sqrt(correction2));
  const T eps = static_cast<T>(options_.epsilon);
  for (std::size_t k = 0; k < params_.size(); ++k) {
    T* w = params_[k].value->data();
    const T* g = params_[k].grad->data();
    T* m = m_[k].data();
    T* v = v_[k].data();
    const T decay = params_[k].value->rank() >= 2 ? static_cast<T>(options_.weight_decay) : T(0);
    const std::int64_t n = params_[k].value->numel();
    for (std::int64_t e = 0; e < n; ++e) {
      m[e] = static_cast<T>(b1) * m[e] + static_cast<T>(1 - b1) * g[e];
      v[e] = static_cast<T>(b2) * v[e] + static_cast<T>(1 - b2) * g[e] * g[e];
      w[e] -= step_size * m[e] / (std::sqrt(v[e]) * inv_sqrt_c2 + eps) + lr * decay * w[e];
    }
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace stateflow::backend

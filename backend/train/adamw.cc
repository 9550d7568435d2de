#include "backend/train/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace stateflow::backend {

template <typename T>
Result<AdamW<T>> AdamW<T>::Make(std::vector<ParamRef<T>> params, TrackingAllocator& alloc,
                                const AdamWOptions& options, ParamRange range) {
  using M = MasterOf<T>;
  AdamW opt(std::move(params), options, &alloc.device());
  std::int64_t total = 0;
  for (const ParamRef<T>& p : opt.params_) total += p.value->numel();
  const std::int64_t begin = range.count < 0 ? 0 : range.begin;
  const std::int64_t end = range.count < 0 ? total : range.begin + range.count;
  if (begin < 0 || end > total || begin > end) {
    return Status::Internal("optimizer range [" + std::to_string(begin) + ", " +
                            std::to_string(end) + ") outside the stage's " +
                            std::to_string(total) + " parameters");
  }
  opt.sharded_ = begin != 0 || end != total;
  std::int64_t at = 0;  // the first element of parameter k
  for (std::size_t k = 0; k < opt.params_.size(); ++k) {
    const Tensor<T>& value = *opt.params_[k].value;
    const std::int64_t lo = std::max(begin, at), hi = std::min(end, at + value.numel());
    at += value.numel();
    if (opt.sharded_ && lo >= hi) continue;
    const Piece piece{k, opt.sharded_ ? lo - (at - value.numel()) : 0,
                      opt.sharded_ ? hi - lo : value.numel()};
    const Shape shape = opt.sharded_ ? Shape{piece.count} : value.shape();
    if constexpr (kHasMaster<T>) {
      SF_ASSIGN_OR_RETURN(Tensor<M> w, Tensor<M>::Uninitialized(
                                           alloc, BufferClass::kOptimizerState, shape));
      alloc.device().ops<T>().Widen(w.data(), value.data() + piece.offset, piece.count);
      opt.master_.push_back(std::move(w));
    }
    SF_ASSIGN_OR_RETURN(Tensor<M> m, Tensor<M>::Zeros(alloc, BufferClass::kOptimizerState, shape));
    SF_ASSIGN_OR_RETURN(Tensor<M> v, Tensor<M>::Zeros(alloc, BufferClass::kOptimizerState, shape));
    opt.m_.push_back(std::move(m));
    opt.v_.push_back(std::move(v));
    opt.pieces_.push_back(piece);
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
  for (std::size_t j = 0; j < pieces_.size(); ++j) {
    const Piece& piece = pieces_[j];
    const ParamRef<T>& p = params_[piece.param];
    const M decay = p.value->rank() >= 2 ? static_cast<M>(options_.weight_decay) : M(0);
    c.lr_decay = lr * decay;
    const int64_t n = piece.count;
    T* value = p.value->data() + piece.offset;
    const GradOf<T>* grad = p.grad->data() + piece.offset;
    if constexpr (kHasMaster<T>) {
      device_->ops<M>().AdamWUpdate(master_[j].data(), m_[j].data(), v_[j].data(), grad, n, c);
      device_->ops<T>().Narrow(value, master_[j].data(), n);
    } else {
      device_->ops<T>().AdamWUpdate(value, m_[j].data(), v_[j].data(), grad, n, c);
    }
  }
}

template <typename T>
void AdamW<T>::NarrowMasters() {
  if constexpr (kHasMaster<T>) {
    for (std::size_t j = 0; j < pieces_.size(); ++j) {
      const Piece& piece = pieces_[j];
      device_->ops<T>().Narrow(params_[piece.param].value->data() + piece.offset,
                               master_[j].data(), piece.count);
    }
  }
}

template class AdamW<float>;
template class AdamW<double>;
template class AdamW<bf16>;

}  // namespace stateflow::backend

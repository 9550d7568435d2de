#include "backend/layers/head_layer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/kernels/output_loss.h"
#include "backend/kernels/rmsnorm.h"
#include "backend/layers/block_norm.h"
#include "backend/layers/copy.h"

namespace stateflow::backend {

namespace {
constexpr BufferClass kAct = BufferClass::kActivations;
constexpr BufferClass kWs = BufferClass::kWorkspace;
enum { kNorm = 0, kOutput = 1, kNormBias = 2 };
}  // namespace

template <typename T>
Result<HeadLayer<T>> HeadLayer<T>::Make(TrackingAllocator& alloc, int64_t C,
                                        int64_t V, int64_t vocab_slice,
                                        int layer, std::uint64_t seed,
                                        const models::BlockShape& shape, const TpShard& tp) {
  HeadLayer head(&alloc, C, tp.Part(V), std::max<int64_t>(vocab_slice, 1), layer, shape);
  head.tp_ = tp;
  SF_ASSIGN_OR_RETURN(Param<T> norm, MakeParam<T>(alloc, "norm.weight", {C},
                                                  InitSpec::Constant(1.0),
                                                  seed, layer));
  SF_ASSIGN_OR_RETURN(Param<T> out,
                      MakeParam<T>(alloc, "output.weight", {tp.Part(V), C},
                                   InitSpec::Normal(0.02), seed, layer,
                                   tp.on() ? ParamSplit::Along(0, tp.size, tp.rank)
                                           : ParamSplit::Whole()));
  head.params_.push_back(std::move(norm));
  head.params_.push_back(std::move(out));
  if (shape.layer_norm) {
    SF_ASSIGN_OR_RETURN(Param<T> bias, MakeParam<T>(alloc, "norm.bias", {C},
                                                    InitSpec::Constant(0.0), seed, layer));
    head.params_.push_back(std::move(bias));
  }
  return head;
}

template <typename T>
Status HeadLayer<T>::Forward(double* loss_sum, HeadSaved<T>* saved,
                             const Tensor<T>& x, const int32_t* targets) {
  if (x.rank() != 2 || x.dim(1) != C_) {
    return Status::Invalid("layer " + std::to_string(layer_) +
                           " (head): input has shape " +
                           ShapeString(x.shape()) + ", expected (S, " +
                           std::to_string(C_) + ")");
  }
  const int64_t S = x.dim(0), Vs = std::min(Vs_, V_);
  *saved = HeadSaved<T>{};
  SF_ASSIGN_OR_RETURN(saved->x, CopyTensor(*alloc_, kAct, x));
  SF_ASSIGN_OR_RETURN(saved->xn, Tensor<T>::Uninitialized(*alloc_, kAct, {S, C_}));
  SF_ASSIGN_OR_RETURN(saved->rstd, NewNormStats<T>(*alloc_, kAct, S, shape_.layer_norm));
  SF_ASSIGN_OR_RETURN(saved->lse, Tensor<StatOf<T>>::Uninitialized(*alloc_, kAct, {S}));
  NormForward(ops(), shape_, saved->xn.data(), saved->rstd.data(), x.data(),
              params_[kNorm].value.data(),
              shape_.layer_norm ? params_[kNormBias].value.data() : nullptr, S, C_);
  SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> logits, Tensor<StatOf<T>>::Uninitialized(
                                                    *alloc_, BufferClass::kLogits, {S, Vs}));
  SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> losses,
                      Tensor<StatOf<T>>::Uninitialized(*alloc_, kWs, {S}));
  ops().OutputLossForward(losses.data(), saved->lse.data(), logits.data(),
                       saved->xn.data(), params_[kOutput].value.data(),
                       targets, S, C_, V_, Vs);
  if (tp_.on()) return CombineVocabShards(loss_sum, saved->lse.data(), losses.data(), S);
  *loss_sum = alloc_->device().template ops<StatOf<T>>().Sum(losses.data(), S);
  return Status::Ok();
}

// Each rank's lse_t over its columns and loss_t = lse_t - z_target (z_target
// 0 where the target is another rank's): the whole vocabulary's
// lse = m + log sum_t exp(lse_t - m), m = max_t lse_t, and
// loss = lse + sum_t (loss_t - lse_t), in rank order on every rank (host
// memory). lse is overwritten with the whole lse the backward's softmax needs.
template <typename T>
Status HeadLayer<T>::CombineVocabShards(double* loss_sum, StatOf<T>* lse, StatOf<T>* losses,
                                        int64_t S) {
  using F = StatOf<T>;
  const int P = tp_.size;
  std::vector<F> mine(static_cast<std::size_t>(2 * S)), all(static_cast<std::size_t>(2 * S * P));
  std::copy(lse, lse + S, mine.begin());
  std::copy(losses, losses + S, mine.begin() + S);
  SF_RETURN_IF_ERROR(tp_.group->AllGather(mine.data(), all.data(), 2 * S));
  double total = 0.0;
  for (int64_t n = 0; n < S; ++n) {
    F m = all[static_cast<std::size_t>(n)];
    for (int t = 1; t < P; ++t) m = std::max(m, all[static_cast<std::size_t>(2 * S * t + n)]);
    F sum = 0, target = 0;
    for (int t = 0; t < P; ++t) {
      const F lse_t = all[static_cast<std::size_t>(2 * S * t + n)];
      sum += std::exp(lse_t - m);
      target += all[static_cast<std::size_t>(2 * S * t + S + n)] - lse_t;
    }
    lse[n] = m + std::log(sum);
    const F loss = lse[n] + target;
    losses[n] = loss;
    total += static_cast<double>(loss);
  }
  *loss_sum = total;
  return Status::Ok();
}

template <typename T>
Status HeadLayer<T>::Backward(Tensor<T>* dx, HeadSaved<T>* saved,
                              const int32_t* targets, double loss_scale) {
  if (saved->x.rank() != 2) {
    return Status::Invalid("layer " + std::to_string(layer_) +
                           " (head): backward without a saved forward");
  }
  const int64_t S = saved->x.dim(0), Vs = std::min(Vs_, V_);
  SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> dlosses,
                      Tensor<StatOf<T>>::Uninitialized(*alloc_, kWs, {S}));
  alloc_->device().template ops<StatOf<T>>().Fill(
      dlosses.data(), static_cast<StatOf<T>>(loss_scale), S);
  SF_ASSIGN_OR_RETURN(Tensor<T> dxn, Tensor<T>::Uninitialized(*alloc_, kWs, {S, C_}));
  {
    SF_ASSIGN_OR_RETURN(Tensor<StatOf<T>> logits, Tensor<StatOf<T>>::Uninitialized(
                                                      *alloc_, BufferClass::kLogits, {S, Vs}));
    // bf16: the slice's d(logits) rounded for the GEMMs (ops.h); else none.
    const int64_t dl_n = ops().OutputLossBackwardWorkspaceSize(S, V_, Vs);
    Tensor<T> dl;
    if (dl_n > 0) {
      SF_ASSIGN_OR_RETURN(dl, Tensor<T>::Uninitialized(*alloc_, BufferClass::kLogits, {dl_n}));
    }
    ops().OutputLossBackward(dxn.data(), params_[kOutput].grad.data(),
                          logits.data(), dlosses.data(), saved->lse.data(),
                          saved->xn.data(), params_[kOutput].value.data(),
                          targets, S, C_, V_, Vs, dl_n > 0 ? dl.data() : nullptr);
  }
  SF_RETURN_IF_ERROR(TpAllReduceSum(tp_, dxn.data(), S * C_));  // vocabulary-parallel
  SF_ASSIGN_OR_RETURN(*dx, Tensor<T>::Uninitialized(*alloc_, kWs, {S, C_}));
  NormBackward(ops(), shape_, dx->data(), params_[kNorm].grad.data(),
               shape_.layer_norm ? params_[kNormBias].grad.data() : nullptr, dxn.data(),
               saved->x.data(), params_[kNorm].value.data(), saved->rstd.data(), S, C_);
  *saved = HeadSaved<T>{};
  return Status::Ok();
}

template class HeadLayer<float>;
template class HeadLayer<double>;
template class HeadLayer<bf16>;

}  // namespace stateflow::backend

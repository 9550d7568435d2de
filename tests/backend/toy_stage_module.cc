#include "tests/backend/toy_stage_module.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/train/text_data.h"

namespace stateflow::backend::testing {
namespace {

// Dimensions: s tokens of a chunk, H hidden, V vocabulary.

// Deterministic values in [-scale, scale) from (seed, layer, parameter, index).
template <typename T>
void Fill(Tensor<T>& t, std::uint64_t seed, int layer, int param, double scale, double offset) {
  const std::uint64_t base = Mix64(Mix64(Mix64(seed) ^ static_cast<std::uint64_t>(layer)) ^
                                   static_cast<std::uint64_t>(param));
  for (std::int64_t k = 0; k < t.numel(); ++k) {
    const std::uint64_t h = Mix64(base ^ static_cast<std::uint64_t>(k));
    const double unit = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
    t.data()[k] = static_cast<T>(offset + scale * (2.0 * unit - 1.0));
  }
}

template <typename T>
struct Param {
  std::string name;
  Tensor<T> value;
  Tensor<T> grad;
};

template <typename T>
class ToyModule final : public StageModule<T> {
 public:
  using Matrix = typename Tensor<T>::RowMatrix;

  ToyModule(int num_layers, int hidden, models::StageLayers layers, TrackingAllocator* alloc)
      : num_layers_(num_layers), H_(hidden), layers_(layers), alloc_(alloc) {}

  Status Init(std::uint64_t seed) {
    for (int l = layers_.first; l < layers_.last; ++l) {
      if (l == 0) {
        SF_RETURN_IF_ERROR(Add(l, "embedding", {kToyVocab, H_}, seed, 0, 0.5, 0.0));
      } else if (l == num_layers_ + 1) {
        SF_RETURN_IF_ERROR(Add(l, "head", {kToyVocab, H_}, seed, 0, 0.5, 0.0));
      } else {
        const double w = 0.5 / std::sqrt(static_cast<double>(H_));
        SF_RETURN_IF_ERROR(Add(l, "W", {H_, H_}, seed, 0, w, 0.0));
        SF_RETURN_IF_ERROR(Add(l, "u", {H_}, seed, 1, w, 0.0));
        SF_RETURN_IF_ERROR(Add(l, "v", {H_}, seed, 2, 0.3, 0.0));
        SF_RETURN_IF_ERROR(Add(l, "lambda", {1}, seed, 3, 0.2, 0.7));
      }
    }
    return Status::Ok();
  }

  bool is_first() const override { return layers_.first == 0; }
  bool is_last() const override { return layers_.last == num_layers_ + 2; }
  std::int64_t hidden_size() const override { return H_; }
  int microbatch_size() const override { return 1; }

  Status BeginStep(const Batch* batch, const schedule::Partition* partition,
                   double loss_scale) override {
    if (!saved_.empty()) return Status::Internal("toy: BeginStep with chunks still saved");
    batch_ = batch;
    partition_ = partition;
    scale_ = loss_scale;
    loss_ = 0;
    states_.clear();
    dstates_.clear();
    next_forward_.assign(batch->microbatches, 0);
    next_backward_.assign(batch->microbatches, partition->num_chunks() - 1);
    return Status::Ok();
  }

  Result<Tensor<T>> Forward(int a, int i, const Tensor<T>* x) override {
    if (i != next_forward_[a]) return OutOfOrder("forward", a, i);
    ++next_forward_[a];
    const std::int64_t s = partition_->length(i);
    Saved& saved = saved_[{a, i}];
    Tensor<T> h;
    if (is_first()) {
      SF_ASSIGN_OR_RETURN(h, Embed(a, i));
    } else {
      if (x == nullptr || x->numel() != s * H_) return Status::Internal("toy: bad forward input");
      SF_ASSIGN_OR_RETURN(h, x->CloneAs(BufferClass::kWorkspace));
    }
    for (int l = FirstLayer(); l < LastLayer(); ++l) {
      SF_ASSIGN_OR_RETURN(h, LayerForward(l, a, i, std::move(h), &saved));
    }
    if (!is_last()) return h;
    SF_ASSIGN_OR_RETURN(saved.head_input, h.CloneAs(BufferClass::kActivations));
    loss_ += HeadLoss(saved.head_input, Targets(a, i));
    return Tensor<T>();
  }

  Result<Tensor<T>> Backward(int a, int i, const Tensor<T>* dy) override {
    auto it = saved_.find({a, i});
    if (it == saved_.end() || i != next_backward_[a]) return OutOfOrder("backward", a, i);
    --next_backward_[a];
    Saved& saved = it->second;
    Tensor<T> g;
    if (is_last()) {
      SF_ASSIGN_OR_RETURN(g, HeadBackward(saved.head_input, Targets(a, i)));
    } else {
      if (dy == nullptr) return Status::Internal("toy: missing output gradient");
      SF_ASSIGN_OR_RETURN(g, dy->CloneAs(BufferClass::kWorkspace));
    }
    for (int l = LastLayer() - 1; l >= FirstLayer(); --l) {
      SF_ASSIGN_OR_RETURN(g, LayerBackward(l, a, i, std::move(g), &saved));
    }
    saved_.erase(it);
    if (!is_first()) return g;
    EmbedBackward(a, i, g);
    return Tensor<T>();
  }

  double loss() const override { return loss_; }

  std::vector<ParamRef<T>> Parameters() override {
    std::vector<ParamRef<T>> out;
    for (auto& [key, p] : params_) out.push_back({p.name, &p.value, &p.grad});
    return out;
  }
  void ZeroGrads() override {
    for (auto& [key, p] : params_) p.grad.SetZero();
  }

 private:
  struct Saved {
    std::map<int, Tensor<T>> layer_input;   // per layer, (s, H)
    std::map<int, Tensor<T>> layer_states;  // per layer, (s + 1): s_{-1} .. s_{s-1}
    Tensor<T> head_input;                   // (s, H)
  };

  Status Add(int layer, const std::string& name, Shape shape, std::uint64_t seed, int id,
             double scale, double offset) {
    Param<T> p;
    p.name = "layer" + std::to_string(layer) + "." + name;
    SF_ASSIGN_OR_RETURN(p.value, Tensor<T>::Zeros(*alloc_, BufferClass::kWeights, shape));
    SF_ASSIGN_OR_RETURN(p.grad, Tensor<T>::Zeros(*alloc_, BufferClass::kGradients, shape));
    Fill(p.value, seed, layer, id, scale, offset);
    params_.emplace(std::make_pair(layer, name), std::move(p));
    return Status::Ok();
  }
  Param<T>& P(int layer, const char* name) { return params_.at({layer, name}); }

  int FirstLayer() const { return std::max(layers_.first, 1); }
  int LastLayer() const { return std::min(layers_.last, num_layers_ + 1); }
  const std::int32_t* Tokens(int a, int i) const {
    return batch_->inputs(a) + partition_->start(i);
  }
  const std::int32_t* Targets(int a, int i) const {
    return batch_->targets(a) + partition_->start(i);
  }
  Status OutOfOrder(const char* pass, int a, int i) const {
    return Status::Internal(std::string("toy: ") + pass + " of microbatch " + std::to_string(a) +
                            " chunk " + std::to_string(i) + " out of order");
  }

  Result<Tensor<T>> Embed(int a, int i) {
    const std::int64_t s = partition_->length(i);
    SF_ASSIGN_OR_RETURN(Tensor<T> h, Tensor<T>::Uninitialized(*alloc_, BufferClass::kWorkspace,
                                                              {s, H_}));
    const auto E = P(0, "embedding").value.matrix();
    for (std::int64_t t = 0; t < s; ++t) h.matrix().row(t) = E.row(Tokens(a, i)[t]);
    return h;
  }
  void EmbedBackward(int a, int i, const Tensor<T>& g) {
    auto dE = P(0, "embedding").grad.matrix();
    for (std::int64_t t = 0; t < g.dim(0); ++t) dE.row(Tokens(a, i)[t]) += g.matrix().row(t);
  }

  // The state entering chunk i of microbatch a for layer l.
  T StateIn(int l, int a, int i) {
    if (i == 0) return T(0);
    return states_.at({a, l}).data()[0];
  }

  Result<Tensor<T>> LayerForward(int l, int a, int i, Tensor<T> x, Saved* saved) {
    const std::int64_t s = x.dim(0);
    const auto W = P(l, "W").value.matrix();
    const auto u = P(l, "u").value.flat();
    const auto v = P(l, "v").value.flat();
    const T lambda = P(l, "lambda").value.data()[0];
    SF_ASSIGN_OR_RETURN(Tensor<T> states, Tensor<T>::Uninitialized(
                                              *alloc_, BufferClass::kActivations, {s + 1}));
    SF_ASSIGN_OR_RETURN(Tensor<T> y, Tensor<T>::Uninitialized(*alloc_, BufferClass::kWorkspace,
                                                              {s, H_}));
    states.data()[0] = StateIn(l, a, i);
    const Matrix z = x.matrix() * W.transpose();  // (s, H)
    for (std::int64_t t = 0; t < s; ++t) {
      const T st = lambda * states.data()[t] + x.matrix().row(t).dot(u.transpose());
      states.data()[t + 1] = st;
      y.matrix().row(t) = x.matrix().row(t) + z.row(t).array().tanh().matrix() + st * v.transpose();
    }
    SF_RETURN_IF_ERROR(SetStateOut(l, a, states.data()[s]));
    SF_ASSIGN_OR_RETURN(saved->layer_input[l], x.CloneAs(BufferClass::kActivations));
    saved->layer_states[l] = std::move(states);
    return y;
  }

  // Keeps the state leaving this chunk for the next one (kBoundaryStates).
  Status SetStateOut(int l, int a, T value) {
    auto it = states_.find({a, l});
    if (it == states_.end()) {
      SF_ASSIGN_OR_RETURN(Tensor<T> t, Tensor<T>::Zeros(*alloc_, BufferClass::kBoundaryStates, {1}));
      it = states_.emplace(std::make_pair(a, l), std::move(t)).first;
    }
    it->second.data()[0] = value;
    return Status::Ok();
  }

  Result<Tensor<T>> LayerBackward(int l, int a, int i, Tensor<T> dy, Saved* saved) {
    const Tensor<T>& x = saved->layer_input.at(l);
    const T* states = saved->layer_states.at(l).data();
    const std::int64_t s = x.dim(0);
    const auto W = P(l, "W").value.matrix();
    const auto u = P(l, "u").value.flat();
    const auto v = P(l, "v").value.flat();
    const T lambda = P(l, "lambda").value.data()[0];
    auto dW = P(l, "W").grad.matrix();
    auto du = P(l, "u").grad.flat();
    auto dv = P(l, "v").grad.flat();
    T& dlambda = P(l, "lambda").grad.data()[0];
    SF_ASSIGN_OR_RETURN(Tensor<T> dx, Tensor<T>::Uninitialized(*alloc_, BufferClass::kWorkspace,
                                                               {s, H_}));
    const Matrix z = x.matrix() * W.transpose();
    const Matrix dz = (dy.matrix().array() * (T(1) - z.array().tanh().square())).matrix();  // (s, H)
    dx.matrix() = dy.matrix() + dz * W;
    dW += dz.transpose() * x.matrix();
    T g = DStateOut(l, a, i);  // d loss / d s_{t} from later tokens
    for (std::int64_t t = s - 1; t >= 0; --t) {
      const T ds = dy.matrix().row(t).dot(v.transpose()) + g;
      dv += states[t + 1] * dy.matrix().row(t).transpose();
      du += ds * x.matrix().row(t).transpose();
      dx.matrix().row(t) += ds * u.transpose();
      dlambda += ds * states[t];
      g = lambda * ds;
    }
    SF_RETURN_IF_ERROR(SetDStateIn(l, a, i, g));
    return dx;
  }

  T DStateOut(int l, int a, int i) {
    if (i == partition_->num_chunks() - 1) return T(0);
    return dstates_.at({a, l}).data()[0];
  }
  // Hands d s_in to chunk i - 1's backward; after chunk 0 the microbatch's
  // boundary tensors are freed.
  Status SetDStateIn(int l, int a, int i, T value) {
    if (i == 0) {
      dstates_.erase({a, l});
      states_.erase({a, l});
      return Status::Ok();
    }
    auto it = dstates_.find({a, l});
    if (it == dstates_.end()) {
      SF_ASSIGN_OR_RETURN(Tensor<T> t, Tensor<T>::Zeros(*alloc_, BufferClass::kBoundaryStates, {1}));
      it = dstates_.emplace(std::make_pair(a, l), std::move(t)).first;
    }
    it->second.data()[0] = value;
    return Status::Ok();
  }

  double HeadLoss(const Tensor<T>& x, const std::int32_t* targets) {
    const Matrix logits = x.matrix() * P(num_layers_ + 1, "head").value.matrix().transpose();
    double total = 0;
    for (std::int64_t t = 0; t < logits.rows(); ++t) {
      const T m = logits.row(t).maxCoeff();
      const T lse = m + std::log((logits.row(t).array() - m).exp().sum());
      total += static_cast<double>(lse - logits(t, targets[t]));
    }
    return total * scale_;
  }

  Result<Tensor<T>> HeadBackward(const Tensor<T>& x, const std::int32_t* targets) {
    auto& head = P(num_layers_ + 1, "head");
    Matrix dlogits = x.matrix() * head.value.matrix().transpose();  // (s, V)
    for (std::int64_t t = 0; t < dlogits.rows(); ++t) {
      const T m = dlogits.row(t).maxCoeff();
      dlogits.row(t) = (dlogits.row(t).array() - m).exp().matrix();
      dlogits.row(t) /= dlogits.row(t).sum();
      dlogits(t, targets[t]) -= 1;
    }
    dlogits *= static_cast<T>(scale_);
    SF_ASSIGN_OR_RETURN(Tensor<T> dx, Tensor<T>::Uninitialized(*alloc_, BufferClass::kWorkspace,
                                                               {x.dim(0), H_}));
    dx.matrix() = dlogits * head.value.matrix();
    head.grad.matrix() += dlogits.transpose() * x.matrix();
    return dx;
  }

  int num_layers_;
  std::int64_t H_;
  models::StageLayers layers_;
  TrackingAllocator* alloc_;
  std::map<std::pair<int, std::string>, Param<T>> params_;  // (layer, name)
  const Batch* batch_ = nullptr;
  const schedule::Partition* partition_ = nullptr;
  double scale_ = 1;
  double loss_ = 0;
  std::map<std::pair<int, int>, Saved> saved_;         // (a, i)
  std::map<std::pair<int, int>, Tensor<T>> states_;    // (a, layer): s leaving the last chunk
  std::map<std::pair<int, int>, Tensor<T>> dstates_;   // (a, layer): d s entering it
  std::vector<int> next_forward_, next_backward_;      // (M)
};

}  // namespace

template <typename T>
Result<std::unique_ptr<StageModule<T>>> MakeToyStageModule(int num_layers, int hidden,
                                                           models::StageLayers layers,
                                                           std::uint64_t seed,
                                                           TrackingAllocator* alloc) {
  if (layers.first < 0 || layers.last > num_layers + 2 || layers.first >= layers.last) {
    return Status::Invalid("toy: layers [" + std::to_string(layers.first) + ", " +
                           std::to_string(layers.last) + ") outside the layer list");
  }
  auto module = std::make_unique<ToyModule<T>>(num_layers, hidden, layers, alloc);
  SF_RETURN_IF_ERROR(module->Init(seed));
  return std::unique_ptr<StageModule<T>>(std::move(module));
}

template Result<std::unique_ptr<StageModule<float>>> MakeToyStageModule<float>(
    int, int, models::StageLayers, std::uint64_t, TrackingAllocator*);
template Result<std::unique_ptr<StageModule<double>>> MakeToyStageModule<double>(
    int, int, models::StageLayers, std::uint64_t, TrackingAllocator*);

}  // namespace stateflow::backend::testing

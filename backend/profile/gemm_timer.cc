#include "backend/profile/gemm_timer.h"

#include <algorithm>
#include <cmath>

#include "backend/allocator.h"
#include "backend/device/precision.h"
#include "backend/layers/core_phases.h"
#include "backend/tensor.h"

namespace stateflow::backend {
namespace {

Status CheckShape(const LinearShape& s) {
  const std::pair<const char*, std::int64_t> dims[] = {
      {"rows", s.rows}, {"in", s.in}, {"out", s.out}};
  for (const auto& [name, value] : dims) {
    if (value < 1) {
      return Status::Invalid(std::string("linear shape: ") + name + " " +
                             std::to_string(value) + " must be at least 1");
    }
  }
  constexpr double kMaxElements = 2147483648.0;
  const double r = static_cast<double>(s.rows), c = static_cast<double>(s.in),
               d = static_cast<double>(s.out);
  if (r * c > kMaxElements || r * d > kMaxElements || c * d > kMaxElements) {
    return Status::Invalid("linear shape: " + std::to_string(s.rows) + " x " +
                           std::to_string(s.in) + " x " + std::to_string(s.out) +
                           " has an operand of more than 2^31 elements");
  }
  return Status::Ok();
}

}  // namespace

const char* LinearPassName(LinearPass pass) {
  switch (pass) {
    case LinearPass::kForward: return "forward";
    case LinearPass::kInputGrad: return "input-grad";
    case LinearPass::kWeightGrad: return "weight-grad";
  }
  return "?";
}

template <typename T>
Result<std::vector<double>> TimeLinear(Device* device, const LinearShape& shape,
                                       const TimingOptions& options) {
  SF_RETURN_IF_ERROR(CheckShape(shape));
  if (options.repetitions < 1 || options.warmup < 0) {
    return Status::Invalid("linear timing: repetitions must be at least 1 and warmup at least 0");
  }
  TrackingAllocator alloc(0, std::nullopt, device);
  Device& dev = alloc.device();
  Ops<T>& ops = dev.ops<T>();
  const std::int64_t R = shape.rows, C = shape.in, D = shape.out;
  SF_ASSIGN_OR_RETURN(Tensor<T> x, Tensor<T>::Uninitialized(alloc, BufferClass::kWorkspace, {R, C}));
  SF_ASSIGN_OR_RETURN(Tensor<T> w, Tensor<T>::Uninitialized(alloc, BufferClass::kWorkspace, {D, C}));
  SF_ASSIGN_OR_RETURN(Tensor<T> y, Tensor<T>::Uninitialized(alloc, BufferClass::kWorkspace, {R, D}));
  FillPattern(&x, 1, 1.0);
  FillPattern(&w, 2, 1.0 / static_cast<double>(C));
  FillPattern(&y, 3, 1.0);
  Tensor<T> dx;
  Tensor<GradOf<T>> dw;
  if (shape.pass == LinearPass::kInputGrad) {
    SF_ASSIGN_OR_RETURN(dx, Tensor<T>::Uninitialized(alloc, BufferClass::kWorkspace, {R, C}));
  }
  if (shape.pass == LinearPass::kWeightGrad) {
    SF_ASSIGN_OR_RETURN(dw, Tensor<GradOf<T>>::Zeros(alloc, BufferClass::kWorkspace, {D, C}));
  }
  const auto call = [&] {
    switch (shape.pass) {
      case LinearPass::kForward:
        ops.LinearForward(y.data(), x.data(), w.data(), nullptr, R, C, D);
        break;
      case LinearPass::kInputGrad:  // y stands for dy
        ops.LinearBackward(dx.data(), nullptr, nullptr, y.data(), x.data(), w.data(), R, C, D);
        break;
      case LinearPass::kWeightGrad:
        ops.LinearBackward(nullptr, dw.data(), nullptr, y.data(), x.data(), w.data(), R, C, D);
        break;
    }
  };
  // Calls per span: one, or enough for kMinSpanS, from the slowest of two
  // single calls (after a first untimed one: page faults, lazy set-up).
  call();
  double one = 0;
  for (int i = 0; i < 2; ++i) {
    SF_RETURN_IF_ERROR(dev.TimerStart());
    call();
    SF_ASSIGN_OR_RETURN(const double s, dev.TimerStop());
    one = std::max(one, s);
  }
  const int calls =
      one >= kMinSpanS ? 1 : static_cast<int>(std::min(1e4, std::ceil(kMinSpanS / std::max(one, 1e-9))));
  std::vector<double> seconds;
  for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
    SF_RETURN_IF_ERROR(dev.TimerStart());
    for (int c = 0; c < calls; ++c) call();
    SF_ASSIGN_OR_RETURN(const double s, dev.TimerStop());
    if (rep >= options.warmup) seconds.push_back(s / calls);
  }
  return seconds;
}

pb::GemmPoint GemmPointOf(const LinearShape& shape, double seconds, const std::string& dtype) {
  pb::GemmPoint p;
  const double R = static_cast<double>(shape.rows), C = static_cast<double>(shape.in),
               D = static_cast<double>(shape.out);
  switch (shape.pass) {
    case LinearPass::kForward: p.set_m(R); p.set_n(D); p.set_k(C); break;
    case LinearPass::kInputGrad: p.set_m(R); p.set_n(C); p.set_k(D); break;
    case LinearPass::kWeightGrad: p.set_m(C); p.set_n(D); p.set_k(R); break;
  }
  p.set_dtype(dtype);
  // A span the clock could not resolve counts as a nanosecond.
  p.set_flops_per_s(2 * R * C * D / std::max(seconds, 1e-9));
  return p;
}

template Result<std::vector<double>> TimeLinear<float>(Device*, const LinearShape&,
                                                       const TimingOptions&);
template Result<std::vector<double>> TimeLinear<double>(Device*, const LinearShape&,
                                                        const TimingOptions&);
template Result<std::vector<double>> TimeLinear<bf16>(Device*, const LinearShape&,
                                                      const TimingOptions&);

}  // namespace stateflow::backend

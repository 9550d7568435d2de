#include "backend/layers/param.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "backend/threading.h"

namespace stateflow::backend {

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t ParamStreamKey(std::uint64_t seed, int layer,
                             std::string_view name) {
  // FNV-1a of the name, then the three parts mixed in turn.
  std::uint64_t name_hash = 0xCBF29CE484222325ull;
  for (char c : name) {
    name_hash = (name_hash ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  }
  std::uint64_t key = SplitMix64(seed);
  key = SplitMix64(key ^ static_cast<std::uint64_t>(layer));
  return SplitMix64(key ^ name_hash);
}

double CounterUniform(std::uint64_t key, std::uint64_t counter) {
  const std::uint64_t bits = SplitMix64(key ^ SplitMix64(counter)) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;  // in (0, 1)
}

double InitValue(const InitSpec& spec, std::uint64_t key, std::uint64_t e) {
  const double u = CounterUniform(key, 2 * e);
  switch (spec.kind) {
    case InitSpec::Kind::kConstant:
      return spec.a;
    case InitSpec::Kind::kNormal: {  // Box-Muller, cosine branch
      const double u2 = CounterUniform(key, 2 * e + 1);
      return spec.a * std::sqrt(-2.0 * std::log(u)) *
             std::cos(2.0 * std::numbers::pi * u2);
    }
    case InitSpec::Kind::kUniform:
      return spec.a + (spec.b - spec.a) * u;
    case InitSpec::Kind::kGdnALog:
      return std::log(spec.a + (spec.b - spec.a) * u);
    case InitSpec::Kind::kGdnDtBias: {
      const double log_lo = std::log(spec.a), log_hi = std::log(spec.b);
      const double dt = std::max(std::exp(log_lo + (log_hi - log_lo) * u), 1e-4);
      return dt + std::log(-std::expm1(-dt));  // softplus(dt_bias) = dt
    }
  }
  return 0.0;
}

template <typename T>
void InitParam(Tensor<T>* value, const InitSpec& spec, std::uint64_t seed,
               int layer, std::string_view name, const ParamSplit& split) {
  const std::uint64_t key = ParamStreamKey(seed, layer, name);
  // The part's elements as (outer, along, inner) blocks of the whole: element
  // (o, a, i) of the part is (o, index * along + a, i) of the whole.
  std::int64_t outer = 1, along = value->numel(), inner = 1;
  if (split.dim >= 0 && split.dim < value->rank() && split.parts > 1) {
    for (int k = 0; k < split.dim; ++k) outer *= value->dim(k);
    along = value->dim(split.dim);
    for (int k = split.dim + 1; k < value->rank(); ++k) inner *= value->dim(k);
  }
  const std::int64_t parts = split.dim >= 0 && split.parts > 1 ? split.parts : 1;
  const std::int64_t first = parts > 1 ? split.index * along : 0;
  // Drawn on the host, then copied to the tensor's device. Each element is
  // its own counter's draw, so the kernel threads share the elements with
  // the same values at any thread count (a 15B model's layer has 10^8 to
  // 10^9 elements: 20 s on one thread, as profiling one on a GPU showed).
  const std::int64_t n = value->numel();
  std::vector<T> v(static_cast<size_t>(n));
  const int threads = n >= (std::int64_t{1} << 16) ? KernelThreads() : 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (std::int64_t e = 0; e < n; ++e) {
    const std::int64_t o = e / (along * inner), a = (e / inner) % along, i = e % inner;
    const std::int64_t whole = (o * along * parts + first + a) * inner + i;
    v[static_cast<size_t>(e)] =
        static_cast<T>(InitValue(spec, key, static_cast<std::uint64_t>(whole)));
  }
  value->FromHost(v);
}

template <typename T>
Result<Param<T>> MakeParam(TrackingAllocator& alloc, std::string name,
                           Shape shape, const InitSpec& spec,
                           std::uint64_t seed, int layer, const ParamSplit& split) {
  Param<T> p;
  SF_ASSIGN_OR_RETURN(p.value, Tensor<T>::Uninitialized(
                                   alloc, BufferClass::kWeights, shape));
  SF_ASSIGN_OR_RETURN(p.grad, Tensor<GradOf<T>>::Zeros(alloc, BufferClass::kGradients,
                                                       std::move(shape)));
  InitParam(&p.value, spec, seed, layer, name, split);
  p.tp_split_dim = split.parts > 1 ? split.dim : -1;
  p.name = std::move(name);
  return p;
}

#define SF_INSTANTIATE(T)                                                    \
  template void InitParam<T>(Tensor<T>*, const InitSpec&, std::uint64_t,     \
                             int, std::string_view, const ParamSplit&);      \
  template Result<Param<T>> MakeParam<T>(TrackingAllocator&, std::string,    \
                                         Shape, const InitSpec&,             \
                                         std::uint64_t, int, const ParamSplit&);
SF_INSTANTIATE(float)
SF_INSTANTIATE(double)
SF_INSTANTIATE(bf16)
#undef SF_INSTANTIATE

}  // namespace stateflow::backend

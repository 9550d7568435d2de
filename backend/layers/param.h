// A named parameter of a layer (its value in BufferClass::kWeights, its
// gradient in kGradients) and the counter-based initialisation that makes a
// model's parameters depend on (seed, global layer index, parameter name)
// ONLY: element e of parameter "q_proj.weight" of layer 3 gets the same value
// whether layer 3 sits in a one-process model or on pipeline stage 1 of 4.
// That is what lets P ranks reproduce one process exactly.
//
// The generator is stateless: u(seed, layer, name, e) hashes the four with
// SplitMix64's finaliser; normals come from Box-Muller over two such uniforms
// (counters 2e and 2e + 1). Not a general random-number library.
//
//   SF_ASSIGN_OR_RETURN(Param<float> p, MakeParam<float>(alloc, "q_proj.weight", {64, 64},
//                                                        InitSpec::Normal(0.02), seed, 3));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "backend/device/precision.h"
#include "backend/tensor.h"
#include "common/status.h"

namespace stateflow::backend {

// In bf16 the value is bf16 and the gradient float (GradOf, precision.h);
// the fp32 master weights are the optimizer's (adamw.h).
template <typename T>
struct Param {
  std::string name;          // within its layer, e.g. "q_proj.weight"
  Tensor<T> value;           // kWeights
  Tensor<GradOf<T>> grad;    // kGradients, same shape, zero after MakeParam
  // Under tensor parallelism (tensor_parallel.h): a parameter every TP rank
  // holds whole but whose gradient each rank computes from its own heads only
  // (a norm shared by the heads, Mamba-3's B/C projections): the trainer sums
  // its gradient over the TP group before the optimizer. False for sharded
  // parameters and for whole ones whose gradient every rank computes alike.
  bool tp_partial_grad = false;
  // The dimension this rank's part was split along (ParamSplit::dim), -1 when
  // it holds the whole parameter.
  int tp_split_dim = -1;
};

// Which part of a parameter this tensor-parallel rank holds: block `index` of
// `parts` equal blocks along dimension `dim` (-1: the whole parameter). The
// values are the whole parameter's, element for element: InitParam draws
// element e of the part with the counter of its place in the whole.
struct ParamSplit {
  int dim = -1;
  int parts = 1;
  int index = 0;
  static ParamSplit Whole() { return {}; }
  static ParamSplit Along(int dim, int parts, int index) { return {dim, parts, index}; }
};

// How a parameter's elements are drawn (a, b as documented per kind).
struct InitSpec {
  enum class Kind {
    kConstant,     // every element = a
    kNormal,       // N(0, a^2)
    kUniform,      // U(a, b)
    kGdnALog,      // log(U(a, b)): GDN's A_log, A ~ U(0, 16)
    kGdnDtBias,    // softplus^{-1}(dt), dt = exp(U(log a, log b)) clamped
                   // below at 1e-4: GDN's dt_bias, dt in [0.001, 0.1]
  };
  Kind kind = Kind::kConstant;
  double a = 0.0;
  double b = 0.0;

  static InitSpec Constant(double value) { return {Kind::kConstant, value, 0.0}; }
  static InitSpec Normal(double stddev) { return {Kind::kNormal, stddev, 0.0}; }
  static InitSpec Uniform(double lo, double hi) { return {Kind::kUniform, lo, hi}; }
  static InitSpec GdnALog() { return {Kind::kGdnALog, 0.0, 16.0}; }
  static InitSpec GdnDtBias() { return {Kind::kGdnDtBias, 0.001, 0.1}; }
};

// SplitMix64's output function: a bijective 64-bit mixer.
std::uint64_t SplitMix64(std::uint64_t x);

// The stream key of one parameter: a hash of (seed, layer, name).
std::uint64_t ParamStreamKey(std::uint64_t seed, int layer, std::string_view name);

// The uniform in (0, 1) with counter `counter` of stream `key` (53 bits).
double CounterUniform(std::uint64_t key, std::uint64_t counter);

// Element `e` of a parameter initialised by `spec` from stream `key`.
double InitValue(const InitSpec& spec, std::uint64_t key, std::uint64_t e);

// Fills `value` (any shape) from (seed, layer, name) by `spec`.
// With `split`, `value` is that part of the whole parameter.
template <typename T>
void InitParam(Tensor<T>* value, const InitSpec& spec, std::uint64_t seed,
               int layer, std::string_view name, const ParamSplit& split = {});

// A parameter of `shape` named `name`, initialised by InitParam, with a zero
// gradient. Errors: the allocator's (capacity).
// `shape` is the part's (the whole's divided along split.dim).
template <typename T>
Result<Param<T>> MakeParam(TrackingAllocator& alloc, std::string name,
                           Shape shape, const InitSpec& spec,
                           std::uint64_t seed, int layer, const ParamSplit& split = {});

}  // namespace stateflow::backend

// Test helpers for the layers and the stage module: tensors from and to
// std::vector<double>, small hand-made GDN model specs, seeded parameter
// perturbation keyed by parameter name (so that differently split models get
// the same perturbation), and the normalised relative error.
// Not a harness for the pipeline: see PipelineHarness in
// model_stage_module_test.cc.
//
//   Tensor<double> x = FromVector<double>(alloc, BufferClass::kWorkspace, {S, C}, values);
//   std::vector<double> back = ToVector(x);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/stage_module.h"
#include "backend/tensor.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend::testing {

// A tensor of `shape` holding `values` (converted to T).
template <typename T>
Tensor<T> FromVector(TrackingAllocator& alloc, BufferClass cls, Shape shape,
                     const std::vector<double>& values) {
  Result<Tensor<T>> t = Tensor<T>::Uninitialized(alloc, cls, std::move(shape));
  EXPECT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->numel(), static_cast<int64_t>(values.size()));
  for (int64_t e = 0; e < t->numel(); ++e) t->data()[e] = static_cast<T>(values[e]);
  return std::move(t).value();
}

template <typename T>
std::vector<double> ToVector(const Tensor<T>& t) {
  return std::vector<double>(t.data(), t.data() + t.numel());
}

template <typename T>
void Assign(Tensor<T>* t, const std::vector<double>& values) {
  ASSERT_EQ(t->numel(), static_cast<int64_t>(values.size()));
  for (int64_t e = 0; e < t->numel(); ++e) t->data()[e] = static_cast<T>(values[e]);
}

inline std::vector<double> Uniform(std::mt19937_64& rng, int64_t n, double lo,
                                   double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(n);
  for (double& v : out) v = dist(rng);
  return out;
}

// ||a - b|| / ||b|| (0 when both are zero).
inline double RelError(const std::vector<double>& a,
                       const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (num == 0) return 0;
  return std::sqrt(num) / std::sqrt(den);
}

// A small recurrent GDN model: hidden 16, 2 heads of d_k = 8, d_v = 6 (so
// that a mix-up of d_k and d_v cannot pass), MLP 24, vocabulary 40, conv
// width 4, `blocks` blocks, untied embeddings.
inline pb::ModelSpec SmallGdnModel(int blocks = 3) {
  pb::ModelSpec m;
  m.set_name("gdn-test");
  m.set_architecture("gdn");
  m.set_layer_pattern("recurrent");
  m.set_num_layers(blocks);
  m.set_hidden_size(16);
  m.set_num_heads(2);
  m.set_head_dim_k(8);
  m.set_head_dim_v(6);
  m.set_conv_width(4);
  m.set_mlp_size(24);
  m.set_vocab_size(40);
  m.set_untied_embeddings(true);
  return m;
}

// A small model of each family the backend runs, of `blocks` layers: "gdn",
// "mamba3", and their 3:1 hybrids "gdn-hybrid", "mamba3-hybrid" (every
// fourth layer softmax attention with GQA groups of 2).
inline pb::ModelSpec SmallModel(const std::string& family, int blocks = 4) {
  pb::ModelSpec m = SmallGdnModel(blocks);
  m.set_name(family + "-test");
  const bool mamba = family.rfind("mamba3", 0) == 0;
  if (mamba) {
    m.set_architecture("mamba3");
    m.set_head_dim_k(0);
    m.set_head_dim_v(6);  // dp
    m.set_state_dim(8);   // ds: 2 rotary angles
  }
  if (family.find("hybrid") != std::string::npos) {
    m.set_layer_pattern("hybrid");
    m.set_hybrid_period(3);
    m.set_attn_heads(4);
    m.set_attn_head_dim(8);
    m.set_gqa_group_size(2);
  }
  return m;
}

// A deterministic perturbation of every parameter, keyed by its name: each
// element gets U(-amplitude, amplitude) added, from a generator seeded by the
// name's hash. Makes gradients larger than the 0.02-scale initialisation
// gives while keeping different splits of a model identical.
template <typename T>
void PerturbParams(StageModule<T>* module, double amplitude) {
  for (ParamRef<T>& p : module->Parameters()) {
    std::mt19937_64 rng(std::hash<std::string>{}(p.name));
    std::uniform_real_distribution<double> dist(-amplitude, amplitude);
    for (int64_t e = 0; e < p.value->numel(); ++e) {
      p.value->data()[e] += static_cast<T>(dist(rng));
    }
  }
}

}  // namespace stateflow::backend::testing

// Helpers for the runtime and trainer tests: a scenario of the gdn-tiny layer
// list on the cpu preset cut into equal chunks at granularity 1, its
// TrainSetup, a factory of toy modules (toy_stage_module.h), and reading
// parameters and gradients by name.
//
//   TrainSetup setup = ToySetup({.stages = 2, .microbatches = 3, .chunks = 4});
//   StageModuleFactory<double> factory = ToyFactory<double>(setup, /*seed=*/7);
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/train/train_setup.h"
#include "backend/train/trainer.h"
#include "models/model.h"
#include "tests/backend/toy_stage_module.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend::testing {

using ::stateflow::testing::MustResolve;

inline constexpr int kToyHidden = 8;

// The value of a Result that the test expects to be ok (move-only values too).
template <typename V>
V Take(Result<V> result) {
  EXPECT_TRUE(result.ok()) << result.status().message();
  return std::move(result).value();
}

struct ToyShape {
  int stages = 1;
  int microbatches = 1;
  int chunks = 1;
  std::int64_t seq_len = 24;
  std::string policy = "stateflow";
  int virtual_stages = 0;  // schedule.virtual_stages (0: the policy's default)
};

inline pb::Scenario ToyScenario(const ToyShape& shape) {
  pb::Scenario s;
  s.set_name("toy");
  *s.mutable_model() = *models::ModelPreset("gdn-tiny");
  *s.mutable_cluster() = *models::ClusterPreset("cpu");
  pb::ParallelSpec* par = s.mutable_parallel();
  par->set_pipeline_size(shape.stages);
  par->set_microbatches(shape.microbatches);
  par->set_tensor_size(1);
  par->set_data_size(1);
  par->set_microbatch_size(1);
  s.set_seq_len(shape.seq_len);
  pb::ScheduleSpec* sched = s.mutable_schedule();
  sched->set_policy(shape.policy);
  sched->set_chunks(shape.chunks);
  if (shape.virtual_stages > 0) {
    sched->set_virtual_stages(static_cast<std::uint32_t>(shape.virtual_stages));
  }
  sched->set_granularity(1);
  sched->set_recompute("none");
  return s;
}

inline TrainSetup ToySetup(const ToyShape& shape) {
  Result<TrainSetup> setup = MakeTrainSetup(MustResolve(ToyScenario(shape)), nullptr);
  EXPECT_TRUE(setup.ok()) << setup.status().message();
  return std::move(setup).value();
}

inline int ToyBlocks(const TrainSetup& setup) {
  return static_cast<int>(setup.model.num_layers());
}

template <typename T>
StageModuleFactory<T> ToyFactory(const TrainSetup& setup, std::uint64_t seed) {
  const int blocks = ToyBlocks(setup);
  return [blocks, seed](int, const models::StageLayers& layers, TrackingAllocator* alloc) {
    return MakeToyStageModule<T>(blocks, kToyHidden, layers, seed, alloc);
  };
}

// Every parameter's value or gradient (as double) by name.
using Named = std::map<std::string, std::vector<double>>;

template <typename T>
void Collect(StageModule<T>& module, bool grads, Named* out) {
  for (const ParamRef<T>& p : module.Parameters()) {
    const Tensor<T>& t = grads ? *p.grad : *p.value;
    (*out)[p.name] = std::vector<double>(t.data(), t.data() + t.numel());
  }
}

template <typename T>
Named CollectAll(Trainer<T>& trainer, bool grads) {
  Named out;
  for (int k = 0; k < trainer.num_local_stages(); ++k) Collect(trainer.module(k), grads, &out);
  return out;
}

// ||a - b|| / ||b|| (0 when both are 0).
inline double RelError(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    num += (a[k] - b[k]) * (a[k] - b[k]);
    den += b[k] * b[k];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Every name of `ref` in `actual`, each within `tolerance` relative error.
inline ::testing::AssertionResult SameNamed(const Named& actual, const Named& ref,
                                            double tolerance) {
  if (actual.size() != ref.size()) {
    return ::testing::AssertionFailure() << actual.size() << " tensors vs " << ref.size();
  }
  for (const auto& [name, values] : ref) {
    auto it = actual.find(name);
    if (it == actual.end()) return ::testing::AssertionFailure() << name << " missing";
    if (it->second.size() != values.size()) {
      return ::testing::AssertionFailure() << name << ": size differs";
    }
    const double err = RelError(it->second, values);
    if (!(err < tolerance)) {
      return ::testing::AssertionFailure() << name << ": relative error " << err;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace stateflow::backend::testing

// The GDN StageModule in one process: exactness of sequence chunking (N
// chunks equal N = 1, loss and every parameter gradient, relative error
// < 1e-10 in float64, chunks run in the stateflow plan's order with M = 2
// microbatches interleaved), a model split over 2 and 3 chained stage modules
// equal to one module (1e-12; this proves the seeding rule), the memory
// ledger following the plan exactly (saved activations, boundary states and
// in-flight tensors after every action; the paper's peak formula), float32
// against float64, and errors (never crashes) for misuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/model/model_stage_module.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "schedule/partition.h"
#include "schedule/plan.h"
#include "schedule/policies.h"
#include "tests/backend/layer_test_util.h"
#include "tests/family_presets.h"
#include "tests/sanitized.h"

namespace stateflow::backend {
namespace {

using models::Recompute;
using models::StageLayers;
using schedule::Action;
using schedule::Partition;
using schedule::Pass;
using schedule::Plan;
using testing::RelError;
using testing::SmallGdnModel;
using testing::SmallModel;
using testing::ToVector;

constexpr std::uint64_t kSeed = 1234;
using NamedValues = std::map<std::string, std::vector<double>>;

// M microbatches of B sequences of T + 1 random tokens.
Batch RandomBatch(int M, std::int64_t T, std::int64_t V, std::uint64_t seed, int B = 1) {
  Batch b;
  b.microbatches = M;
  b.microbatch_size = B;
  b.seq_len = T;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(V - 1));
  b.tokens.resize(static_cast<size_t>(M) * B * (T + 1));
  for (std::int32_t& t : b.tokens) t = dist(rng);
  return b;
}

Partition MustPartition(std::vector<std::int64_t> boundaries) {
  Result<Partition> p = schedule::MakeFromBoundaries(std::move(boundaries));
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

// Equal chunks at granularity 1 (uneven when N does not divide T).
Partition EqualPartition(std::int64_t T, int N) {
  Result<Partition> p = schedule::MakePartition(T, N, 0.0, {1.0, 0.0}, 1);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

std::vector<StageLayers> SingleStage(const pb::ModelSpec& m) {
  return {{0, static_cast<int>(m.num_layers()) + 2}};
}

// P stage modules, each with its own allocator (as the ranks have), run in
// one process: each stage runs its plan actions in order, an action waiting
// until its input from the neighbouring stage exists (the order a real
// pipeline respects). In-flight activations and gradients are held here.
template <typename T>
class PipelineHarness {
 public:
  using Hook = std::function<void(int stage, const Action& action)>;

  Status Init(const pb::ModelSpec& model, const std::vector<StageLayers>& stages,
              Recompute recompute, double perturb, int microbatch_size = 1,
              bool split_backward = false) {
    for (size_t r = 0; r < stages.size(); ++r) {
      allocs_.push_back(std::make_unique<TrackingAllocator>(static_cast<int>(r)));
      SF_ASSIGN_OR_RETURN(auto m, MakeStageModule<T>(model, stages[r],
                                                     {.recompute = recompute,
                                                      .seed = kSeed,
                                                      .microbatch_size = microbatch_size,
                                                      .split_backward = split_backward},
                                                     allocs_.back().get()));
      if (perturb > 0) testing::PerturbParams(m.get(), perturb);
      modules_.push_back(std::move(m));
    }
    return Status::Ok();
  }

  Status Step(const Batch& batch, const Partition& partition, const Plan& plan,
              const Hook& after_action = {}) {
    const int P = static_cast<int>(modules_.size());
    for (auto& m : modules_) {
      SF_RETURN_IF_ERROR(m->BeginStep(
          &batch, &partition,
          1.0 / (static_cast<double>(batch.microbatches) * batch.microbatch_size * batch.seq_len)));
    }
    std::vector<size_t> next(P, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < P; ++r) {
        while (next[r] < plan.stage(r).size()) {
          SF_ASSIGN_OR_RETURN(bool ran, TryRun(r, plan.stage(r)[next[r]]));
          if (!ran) break;
          if (after_action) after_action(r, plan.stage(r)[next[r]]);
          ++next[r];
          progress = true;
        }
      }
    }
    for (int r = 0; r < P; ++r) {
      if (next[r] < plan.stage(r).size()) return Status::Internal("harness: stage blocked");
    }
    return Status::Ok();
  }

  double loss() const { return modules_.back()->loss(); }
  NamedValues Grads() { return Collect(/*grads=*/true); }
  NamedValues Values() { return Collect(/*grads=*/false); }
  TrackingAllocator& alloc(int r) { return *allocs_[r]; }
  StageModule<T>& module(int r) { return *modules_[r]; }
  // Bytes of the activations and gradients stage r produced that the next
  // action has not consumed yet (they live in stage r's allocator).
  std::int64_t InFlightBytes(int r) const {
    std::int64_t bytes = 0;
    for (const auto* map : {&acts_, &grads_}) {
      for (const auto& [key, t] : *map) bytes += std::get<0>(key) == r ? t.bytes() : 0;
    }
    return bytes;
  }

 private:
  using Key = std::tuple<int, int, int>;  // (producing stage, microbatch, chunk)

  Result<bool> TryRun(int r, const Action& act) {
    const int P = static_cast<int>(modules_.size());
    if (act.pass == Pass::kWeight) {  // nothing in, nothing out
      SF_RETURN_IF_ERROR(modules_[r]->Weight(act.microbatch, act.chunk));
      return true;
    }
    const bool fwd = act.pass == Pass::kForward;
    auto& inbox = fwd ? acts_ : grads_;
    const int from = fwd ? r - 1 : r + 1;
    const Key in_key{from, act.microbatch, act.chunk};
    const Tensor<T>* in = nullptr;
    if (from >= 0 && from < P) {
      auto it = inbox.find(in_key);
      if (it == inbox.end()) return false;
      in = &it->second;
    }
    Result<Tensor<T>> out = fwd ? modules_[r]->Forward(act.microbatch, act.chunk, in)
                                : modules_[r]->Backward(act.microbatch, act.chunk, in);
    if (!out.ok()) return out.status();
    if (in != nullptr) inbox.erase(in_key);
    const int to = fwd ? r + 1 : r - 1;
    if (to >= 0 && to < P) inbox[Key{r, act.microbatch, act.chunk}] = std::move(out).value();
    return true;
  }

  NamedValues Collect(bool grads) {
    NamedValues out;
    for (auto& m : modules_) {
      for (ParamRef<T>& p : m->Parameters()) {
        EXPECT_EQ(out.count(p.name), 0u) << p.name << " held twice";
        out[p.name] = ToVector(grads ? *p.grad : *p.value);
      }
    }
    return out;
  }

  // Declared in this order so that tensors die before their allocators.
  std::vector<std::unique_ptr<TrackingAllocator>> allocs_;
  std::vector<std::unique_ptr<StageModule<T>>> modules_;
  std::map<Key, Tensor<T>> acts_, grads_;
};

struct StepResult {
  double loss = 0;
  NamedValues grads;
};

template <typename T>
StepResult RunStep(const pb::ModelSpec& model, const std::vector<StageLayers>& stages,
                   Recompute recompute, const Batch& batch, const Partition& partition,
                   double perturb = 0.3, const std::string& policy = "stateflow") {
  PipelineHarness<T> h;
  Result<Plan> plan = schedule::MakePlan(policy, static_cast<int>(stages.size()),
                                         batch.microbatches, partition.num_chunks());
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  Status st = h.Init(model, stages, recompute, perturb, batch.microbatch_size,
                     schedule::SplitsBackward(*plan));
  EXPECT_TRUE(st.ok()) << st.message();
  st = h.Step(batch, partition, *plan);
  EXPECT_TRUE(st.ok()) << st.message();
  return {h.loss(), h.Grads()};
}

std::string PartitionName(const Partition& p) {
  std::ostringstream s;
  s << "boundaries";
  for (std::int64_t b : p.boundaries()) s << " " << b;
  return s.str();
}

// Loss and every gradient within `tol` (relative; per tensor normalised).
void ExpectSameStep(const StepResult& got, const StepResult& want, double tol) {
  EXPECT_LE(std::abs(got.loss - want.loss), tol * std::abs(want.loss))
      << got.loss << " vs " << want.loss;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (const auto& [name, g] : want.grads) {
    ASSERT_TRUE(got.grads.count(name)) << name;
    const double norm = std::sqrt(std::inner_product(g.begin(), g.end(), g.begin(), 0.0));
    EXPECT_GT(norm, 0.0) << name << ": a zero gradient checks nothing";
    EXPECT_LT(RelError(got.grads.at(name), g), tol) << name;
  }
}

// ---- chunking exactness (P = 1) ---------------------------------------------

TEST(ModelStageModuleTest, ChunkingIsExactForEveryPartition) {
  const pb::ModelSpec model = SmallGdnModel(3);
  const std::int64_t T = 150;  // not a multiple of T_C = 64
  const Batch batch = RandomBatch(2, T, model.vocab_size(), 5);
  std::vector<Partition> partitions;
  for (int N : {2, 3, 4, 8}) partitions.push_back(EqualPartition(T, N));
  // 1- and 2-token chunks (shorter than W - 1 = 3) at the start and in the
  // middle; a chunk ending exactly on a kernel block.
  partitions.push_back(MustPartition({0, 1, 3, 70, T}));
  partitions.push_back(MustPartition({0, 64, 65, 67, 131, T}));
  partitions.push_back(MustPartition({0, 100, 101, 102, 103, T}));
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    const StepResult whole = RunStep<double>(model, SingleStage(model), mode, batch,
                                             MustPartition({0, T}));
    for (const Partition& p : partitions) {
      SCOPED_TRACE(PartitionName(p) + " recompute " + std::string(models::RecomputeName(mode)));
      ExpectSameStep(RunStep<double>(model, SingleStage(model), mode, batch, p), whole, 1e-10);
    }
  }
}

TEST(ModelStageModuleTest, TinyPresetChunkingIsExact) {
  Result<pb::ModelSpec> model = models::ModelPreset("gdn-tiny");
  ASSERT_TRUE(model.ok());
  const std::int64_t T = 130;
  const Batch batch = RandomBatch(2, T, model->vocab_size(), 8);
  const StepResult whole = RunStep<double>(*model, SingleStage(*model), Recompute::kNone,
                                           batch, MustPartition({0, T}), 0.0);
  ExpectSameStep(RunStep<double>(*model, SingleStage(*model), Recompute::kNone, batch,
                                 EqualPartition(T, 4), 0.0),
                 whole, 1e-10);
}

TEST(ModelStageModuleTest, RecomputeFullEqualsNone) {
  const pb::ModelSpec model = SmallGdnModel(2);
  const Batch batch = RandomBatch(2, 90, model.vocab_size(), 3);
  const Partition p = EqualPartition(90, 3);
  const StepResult none = RunStep<double>(model, SingleStage(model), Recompute::kNone, batch, p);
  const StepResult full = RunStep<double>(model, SingleStage(model), Recompute::kFull, batch, p);
  EXPECT_EQ(none.loss, full.loss);
  EXPECT_EQ(none.grads, full.grads);
}

// ---- several sequences per microbatch -------------------------------------------

// M microbatches of B sequences hold the same sequences, in the same order,
// as M B microbatches of one: the step is the same up to the order of sums.
TEST(ModelStageModuleTest, MicrobatchOfThreeEqualsThreeMicrobatches) {
  const pb::ModelSpec model = SmallGdnModel(2);
  const std::int64_t T = 70;
  Batch three = RandomBatch(1, T, model.vocab_size(), 21, /*B=*/3);
  Batch ones = three;
  ones.microbatches = 3;
  ones.microbatch_size = 1;
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    SCOPED_TRACE(std::string("recompute ") + std::string(models::RecomputeName(mode)));
    const Partition p = EqualPartition(T, 3);
    ExpectSameStep(RunStep<double>(model, SingleStage(model), mode, three, p),
                   RunStep<double>(model, SingleStage(model), mode, ones, p), 1e-12);
  }
}

TEST(ModelStageModuleTest, ChunkingIsExactWithSeveralSequencesPerMicrobatch) {
  const pb::ModelSpec model = SmallGdnModel(2);
  const std::int64_t T = 100;
  const Batch batch = RandomBatch(2, T, model.vocab_size(), 22, /*B=*/3);
  const StepResult whole =
      RunStep<double>(model, SingleStage(model), Recompute::kNone, batch, MustPartition({0, T}));
  for (int N : {2, 3, 8}) {
    SCOPED_TRACE("N " + std::to_string(N));
    ExpectSameStep(RunStep<double>(model, {{0, 2}, {2, 4}}, Recompute::kNone, batch,
                                   EqualPartition(T, N)),
                   whole, 1e-10);
  }
}

TEST(ModelStageModuleTest, ABatchOfAnotherMicrobatchSizeIsAnError) {
  const pb::ModelSpec model = SmallGdnModel(1);
  TrackingAllocator alloc(0);
  auto m = MakeStageModule<double>(model, SingleStage(model)[0],
                                   {.seed = 1, .microbatch_size = 2}, &alloc);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Batch batch = RandomBatch(1, 10, model.vocab_size(), 1, /*B=*/3);
  const Partition p = EqualPartition(10, 2);
  const Status st = (*m)->BeginStep(&batch, &p, 0.1);
  EXPECT_EQ(st.code(), Status::Code::kInvalidInput);
  EXPECT_NE(st.message().find("microbatch_size 2"), std::string::npos) << st.message();
  EXPECT_FALSE(MakeStageModule<double>(model, SingleStage(model)[0],
                                       {.seed = 1, .microbatch_size = 0}, &alloc)
                   .ok());
}

// ---- every family (issue 11) ------------------------------------------------------

// The families the backend runs.
std::vector<std::string> Families() { return {"gdn", "mamba3", "gdn-hybrid", "mamba3-hybrid"}; }

// The alpha partition of T into N chunks as the simulator makes it: Cost_i's
// coefficients from the cost model of the whole layer list, granularity 1.
Partition AlphaPartition(const pb::ModelSpec& model, std::int64_t T, int N, double alpha) {
  Result<models::CostModel> cm = models::CostModel::Make(
      model, *models::PrecisionForDtype("float64"), *models::ClusterPreset("cpu"), {});
  EXPECT_TRUE(cm.ok()) << cm.status().message();
  Result<Partition> p = schedule::MakePartition(
      T, N, alpha, cm->ChunkCoefficients(0, cm->num_layers()), 1);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

class FamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTest, ChunkedEqualsUnchunked) {
  const pb::ModelSpec model = SmallModel(GetParam());
  const std::int64_t T = 150;  // not a multiple of T_C = 64
  const Batch batch = RandomBatch(2, T, model.vocab_size(), 31);
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    const StepResult whole =
        RunStep<double>(model, SingleStage(model), mode, batch, MustPartition({0, T}));
    for (int N : {1, 2, 3, 4, 8}) {
      for (double alpha : {0.0, 0.5, 1.0, 1.25}) {
        const Partition p = AlphaPartition(model, T, N, alpha);
        SCOPED_TRACE(PartitionName(p) + " alpha " + std::to_string(alpha) + " recompute " +
                     std::string(models::RecomputeName(mode)));
        ExpectSameStep(RunStep<double>(model, SingleStage(model), mode, batch, p), whole, 1e-10);
      }
    }
  }
}

TEST_P(FamilyTest, RecomputeFullEqualsNoneBitForBit) {
  const pb::ModelSpec model = SmallModel(GetParam());
  const Batch batch = RandomBatch(2, 90, model.vocab_size(), 32);
  const Partition p = EqualPartition(90, 3);
  const StepResult none = RunStep<double>(model, SingleStage(model), Recompute::kNone, batch, p);
  const StepResult full = RunStep<double>(model, SingleStage(model), Recompute::kFull, batch, p);
  EXPECT_EQ(none.loss, full.loss);
  EXPECT_EQ(none.grads, full.grads);
}

TEST_P(FamilyTest, StagesEqualOneProcess) {
  const pb::ModelSpec model = SmallModel(GetParam());  // layer list of 6
  const std::int64_t T = 75;
  const Batch batch = RandomBatch(3, T, model.vocab_size(), 33);
  const Partition p = AlphaPartition(model, T, 4, 1.0);
  const StepResult whole = RunStep<double>(model, SingleStage(model), Recompute::kNone, batch, p);
  for (int P : {2, 4}) {
    Result<std::vector<StageLayers>> split = models::AssignStages(std::vector<double>(6, 1.0), P);
    ASSERT_TRUE(split.ok()) << split.status().message();
    SCOPED_TRACE("P " + std::to_string(P));
    ExpectSameStep(RunStep<double>(model, *split, Recompute::kNone, batch, p), whole, 1e-12);
  }
}

TEST_P(FamilyTest, SeveralSequencesPerMicrobatch) {
  const pb::ModelSpec model = SmallModel(GetParam());
  const std::int64_t T = 70;
  const Batch three = RandomBatch(2, T, model.vocab_size(), 34, /*B=*/3);
  Batch ones = three;
  ones.microbatches = 6;
  ones.microbatch_size = 1;
  const StepResult reference =
      RunStep<double>(model, SingleStage(model), Recompute::kNone, ones, MustPartition({0, T}));
  for (int N : {1, 3}) {
    SCOPED_TRACE("N " + std::to_string(N));
    ExpectSameStep(RunStep<double>(model, {{0, 3}, {3, 6}}, Recompute::kNone, three,
                                   EqualPartition(T, N)),
                   reference, 1e-10);
  }
}

TEST_P(FamilyTest, ParameterCountMatchesTheModel) {
  const pb::ModelSpec model = SmallModel(GetParam());
  TrackingAllocator alloc(0);
  auto m = MakeStageModule<double>(model, SingleStage(model)[0], {.seed = 1}, &alloc);
  ASSERT_TRUE(m.ok()) << m.status().message();
  double count = 0;
  for (const ParamRef<double>& p : (*m)->Parameters()) count += p.value->numel();
  EXPECT_EQ(count, models::ModelParamCount(model));
}

INSTANTIATE_TEST_SUITE_P(Issue11, FamilyTest, ::testing::ValuesIn(Families()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

// ---- the split backward (issue 27) ---------------------------------------------

// The zero-bubble plans split each backward into B and W; W runs each
// deferred weight gradient through the same kernel with the same inputs,
// in B's order, so the step is the fused backward's bit for bit: loss and
// every gradient EXPECT_EQ against StateFlow-1F1B, every family (the tiny
// presets, attention hybrids and KDA included): float64 at P = 1 to 3 and
// both recompute modes (under a sanitizer one pair per preset), float32 at
// P = 2 without recompute.
template <typename T>
void ExpectSplitEqualsFused(const std::string& preset, const std::vector<int>& stage_counts,
                            const std::vector<Recompute>& modes) {
  const pb::ModelSpec model = *models::ModelPreset(preset);
  const std::int64_t T_len = 96;
  const Batch batch = RandomBatch(3, T_len, model.vocab_size(), 41);
  const Partition p = EqualPartition(T_len, 3);
  const int L = static_cast<int>(models::LayerList(model).size());
  for (int P : stage_counts) {
    Result<std::vector<StageLayers>> split =
        models::AssignStages(std::vector<double>(static_cast<std::size_t>(L), 1.0), P);
    ASSERT_TRUE(split.ok()) << split.status().message();
    for (Recompute mode : modes) {
      const StepResult fused = RunStep<T>(model, *split, mode, batch, p, 0.3, "stateflow");
      for (const char* policy : {"zb-h1", "zb-h2"}) {
        SCOPED_TRACE(preset + " P " + std::to_string(P) + " " + policy + " recompute " +
                     std::string(models::RecomputeName(mode)));
        const StepResult zb = RunStep<T>(model, *split, mode, batch, p, 0.3, policy);
        EXPECT_EQ(zb.loss, fused.loss);
        EXPECT_EQ(zb.grads, fused.grads);
      }
    }
  }
}

TEST(SplitBackward, EqualsTheFusedBackwardBitForBitFloat64) {
  const std::vector<std::string> presets = ::stateflow::testing::TinyFamilyPresets();
  for (std::size_t i = 0; i < presets.size(); ++i) {
    if (::stateflow::testing::kSanitized) {
      // One (P, recompute) pair per preset, in turn: P 2 and 3, both modes.
      ExpectSplitEqualsFused<double>(presets[i], {2 + static_cast<int>(i % 2)},
                                     {i / 2 % 2 == 0 ? Recompute::kNone : Recompute::kFull});
    } else {
      ExpectSplitEqualsFused<double>(presets[i], {1, 2, 3}, {Recompute::kNone, Recompute::kFull});
    }
  }
}

TEST(SplitBackward, EqualsTheFusedBackwardBitForBitFloat32) {
  for (const std::string& preset : ::stateflow::testing::TinyFamilyPresets()) {
    ExpectSplitEqualsFused<float>(preset, {2}, {Recompute::kNone});
  }
}

// Misuse of the split: W on a module that does not split, W before its B
// or twice, and a step that ends with a W not run: one-line errors.
TEST(SplitBackward, MisuseIsAnError) {
  const pb::ModelSpec model = SmallModel("gdn");
  const Batch batch = RandomBatch(1, 32, model.vocab_size(), 42);
  const Partition p = EqualPartition(32, 2);
  for (bool split : {false, true}) {
    PipelineHarness<double> h;
    ASSERT_TRUE(h.Init(model, SingleStage(model), Recompute::kNone, 0.0, 1, split).ok());
    StageModule<double>& m = h.module(0);
    ASSERT_TRUE(m.BeginStep(&batch, &p, 1.0).ok());
    ASSERT_TRUE(m.Forward(0, 0, nullptr).ok());
    ASSERT_TRUE(m.Forward(0, 1, nullptr).ok());
    ASSERT_TRUE(m.Backward(0, 1, nullptr).ok());
    const Status w = m.Weight(0, 1);
    if (!split) {
      ASSERT_FALSE(w.ok());
      EXPECT_NE(w.message().find("does not split its backward"), std::string::npos)
          << w.message();
      continue;
    }
    ASSERT_TRUE(w.ok()) << w.message();
    const Status twice = m.Weight(0, 1);
    ASSERT_FALSE(twice.ok());
    EXPECT_NE(twice.message().find("W before its B (or twice)"), std::string::npos)
        << twice.message();
    ASSERT_TRUE(m.Backward(0, 0, nullptr).ok());
    const Status early = m.BeginStep(&batch, &p, 1.0);  // 0W0.0 has not run
    ASSERT_FALSE(early.ok());
    EXPECT_NE(early.message().find("has not run backward and W"), std::string::npos)
        << early.message();
  }
}

// ---- split stages ---------------------------------------------------------------

TEST(ModelStageModuleTest, ChainedStagesEqualOneModule) {
  const pb::ModelSpec model = SmallGdnModel(3);  // layer list of 5
  const std::int64_t T = 75;
  const Batch batch = RandomBatch(2, T, model.vocab_size(), 9);
  const Partition p = MustPartition({0, 2, 40, T});
  PipelineHarness<double> single;
  ASSERT_TRUE(single.Init(model, SingleStage(model), Recompute::kNone, 0.0).ok());
  const NamedValues init = single.Values();
  const StepResult whole = RunStep<double>(model, SingleStage(model), Recompute::kNone, batch, p, 0.0);
  Result<std::vector<StageLayers>> balanced = models::AssignStages(std::vector<double>(5, 1.0), 3);
  ASSERT_TRUE(balanced.ok());
  const std::vector<std::vector<StageLayers>> splits = {
      {{0, 2}, {2, 5}}, {{0, 1}, {1, 4}, {4, 5}}, *balanced, {{0, 3}, {3, 4}, {4, 5}}};
  for (const auto& split : splits) {
    std::string name = "stages";
    for (const StageLayers& s : split) name += " [" + std::to_string(s.first) + "," + std::to_string(s.last) + ")";
    SCOPED_TRACE(name);
    PipelineHarness<double> h;
    ASSERT_TRUE(h.Init(model, split, Recompute::kNone, 0.0).ok());
    EXPECT_EQ(h.Values(), init);  // seeded by (seed, layer, name) only: bit-equal
    ExpectSameStep(RunStep<double>(model, split, Recompute::kNone, batch, p, 0.0), whole, 1e-12);
  }
}

TEST(ModelStageModuleTest, ParameterCountMatchesTheModel) {
  for (const pb::ModelSpec& model : {SmallGdnModel(3), *models::ModelPreset("gdn-tiny")}) {
    TrackingAllocator alloc(0);
    auto m = MakeStageModule<double>(model, SingleStage(model)[0], {.recompute = Recompute::kNone, .seed = 1}, &alloc);
    ASSERT_TRUE(m.ok()) << m.status().message();
    double count = 0;
    for (const ParamRef<double>& p : (*m)->Parameters()) count += p.value->numel();
    EXPECT_EQ(count, models::ModelParamCount(model)) << model.name();
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kWeights), count * sizeof(double));
    EXPECT_EQ(alloc.LiveBytes(BufferClass::kGradients), count * sizeof(double));
  }
}

TEST(ModelStageModuleTest, GradientsAccumulateOverStepsUntilZeroed) {
  const pb::ModelSpec model = SmallGdnModel(1);
  const Batch batch = RandomBatch(1, 20, model.vocab_size(), 2);
  const Partition p = EqualPartition(20, 2);
  const Plan plan = *schedule::MakePlan("stateflow", 1, 1, 2);
  PipelineHarness<double> h;
  ASSERT_TRUE(h.Init(model, SingleStage(model), Recompute::kNone, 0.3).ok());
  ASSERT_TRUE(h.Step(batch, p, plan).ok());
  const NamedValues once = h.Grads();
  const double loss = h.loss();
  ASSERT_TRUE(h.Step(batch, p, plan).ok());
  EXPECT_EQ(h.loss(), loss);  // the loss restarts with each step
  for (const auto& [name, g] : h.Grads()) {
    // Not bit-equal: the second step adds its chunks onto the first's sum
    // (with fused multiply-adds in the native build an element where the
    // chunks' contributions cancel can lose a few more bits), so the bound is
    // relative to the tensor's largest element; a missed or doubled
    // accumulation is off by a factor, far outside it.
    double scale = 0;
    for (double v : g) scale = std::max(scale, std::abs(v));
    for (size_t e = 0; e < g.size(); ++e) {
      EXPECT_NEAR(g[e], 2 * once.at(name)[e], 1e-13 * scale) << name << "[" << e << "]";
    }
  }
  h.module(0).ZeroGrads();
  for (const auto& [name, g] : h.Grads()) {
    EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](double v) { return v == 0; })) << name;
  }
}

// ---- memory ---------------------------------------------------------------------

// The ledger of one stage derived from its layers and the actions run so far:
// per token of a live chunk (forward run, backward not), the saved elements
//   GDN layer, recompute none: 4C + 2F + 2 + 4 HK + 5 HV + 6 H (gdn_layer.h)
//   GDN layer, recompute full: C (the layer input only)
//   head: 2C + 2 (x, xn, rstd, lse);   embedding: 0 (ids stay in the batch);
// per microbatch a, with f_a forwards and b_a backwards run: the states in of
// chunks j < min(f_a + 1, N, N - b_a) (when f_a >= 1) and one state gradient
// while 1 <= b_a <= N - 1, each of H Dv K + (W-1)(2 HK + HV) elements per
// layer.
struct StageLedgerModel {
  std::int64_t act_per_token = 0;  // elements
  std::int64_t state = 0;          // elements of one state of all GDN layers
  std::vector<int> f, b;           // (M) forwards, backwards run

  StageLedgerModel(const pb::ModelSpec& m, StageLayers layers, Recompute mode, int M)
      : f(M, 0), b(M, 0) {
    const std::int64_t C = m.hidden_size(), F = m.mlp_size(), H = m.num_heads(),
                       HK = H * m.head_dim_k(), HV = H * m.head_dim_v(), W = m.conv_width();
    const int head = static_cast<int>(m.num_layers()) + 1;
    for (int l = layers.first; l < layers.last; ++l) {
      if (l == 0) continue;
      if (l == head) {
        act_per_token += 2 * C + 2;
        continue;
      }
      act_per_token += mode == Recompute::kNone
                           ? 4 * C + 2 * F + 2 + 4 * HK + 5 * HV + 6 * H : C;
      state += H * m.head_dim_v() * m.head_dim_k() + (W - 1) * (2 * HK + HV);
    }
  }
  void Apply(const Action& a) { ++(a.pass == Pass::kForward ? f : b)[a.microbatch]; }
  std::int64_t Activations(const Partition& p) const {
    std::int64_t tokens = 0;
    for (size_t a = 0; a < f.size(); ++a) {
      for (int i = 0; i < std::min(f[a], p.num_chunks() - b[a]); ++i) tokens += p.length(i);
    }
    return tokens * act_per_token;
  }
  std::int64_t States(int N) const {
    std::int64_t n = 0;
    for (size_t a = 0; a < f.size(); ++a) {
      if (f[a] >= 1) n += std::min({f[a] + 1, N, N - b[a]});
      if (b[a] >= 1 && b[a] <= N - 1) n += 1;
    }
    return n * state;
  }
};

struct MemoryCase {
  int P, M, N;
  Recompute mode;
};

TEST(ModelStageModuleTest, LedgerFollowsThePlanAndPeakMatchesThePaper) {
  const pb::ModelSpec model = SmallGdnModel(3);
  const std::int64_t T = 96;  // divisible by every N below
  const std::int64_t bytes = sizeof(double);
  for (const MemoryCase c : {MemoryCase{1, 2, 1, Recompute::kNone}, MemoryCase{1, 2, 4, Recompute::kNone},
                             MemoryCase{2, 3, 1, Recompute::kNone}, MemoryCase{2, 3, 2, Recompute::kNone},
                             MemoryCase{2, 3, 4, Recompute::kFull}, MemoryCase{3, 4, 8, Recompute::kNone},
                             MemoryCase{3, 2, 3, Recompute::kFull}}) {
    SCOPED_TRACE("P=" + std::to_string(c.P) + " M=" + std::to_string(c.M) + " N=" +
                 std::to_string(c.N) + " recompute " + std::string(models::RecomputeName(c.mode)));
    Result<std::vector<StageLayers>> stages =
        models::AssignStages(std::vector<double>(model.num_layers() + 2, 1.0), c.P);
    ASSERT_TRUE(stages.ok());
    const Batch batch = RandomBatch(c.M, T, model.vocab_size(), 4);
    const Partition p = EqualPartition(T, c.N);
    const Plan plan = *schedule::MakePlan("stateflow", c.P, c.M, c.N);
    std::vector<StageLedgerModel> ledger;
    for (const StageLayers& s : *stages) ledger.emplace_back(model, s, c.mode, c.M);
    std::vector<std::int64_t> model_peak(c.P, 0);
    PipelineHarness<double> h;
    ASSERT_TRUE(h.Init(model, *stages, c.mode, 0.0).ok());
    auto check = [&](int r, const Action& act) {
      ledger[r].Apply(act);
      model_peak[r] = std::max(model_peak[r], ledger[r].Activations(p) * bytes);
      for (int q = 0; q < c.P; ++q) {
        TrackingAllocator& alloc = h.alloc(q);
        ASSERT_EQ(alloc.LiveBytes(BufferClass::kActivations), ledger[q].Activations(p) * bytes)
            << "stage " << q << " after " << schedule::ToString(act);
        ASSERT_EQ(alloc.LiveBytes(BufferClass::kBoundaryStates), ledger[q].States(c.N) * bytes)
            << "stage " << q << " after " << schedule::ToString(act);
        ASSERT_EQ(alloc.LiveBytes(BufferClass::kWorkspace), h.InFlightBytes(q))
            << "stage " << q << " after " << schedule::ToString(act);
        ASSERT_EQ(alloc.LiveBytes(BufferClass::kLogits), 0);
      }
    };
    ASSERT_TRUE(h.Step(batch, p, plan, check).ok());
    for (int r = 0; r < c.P; ++r) {
      TrackingAllocator& alloc = h.alloc(r);
      for (BufferClass cls : {BufferClass::kActivations, BufferClass::kBoundaryStates,
                              BufferClass::kWorkspace, BufferClass::kLogits}) {
        EXPECT_EQ(alloc.LiveBytes(cls), 0) << "stage " << r << " " << BufferClassName(cls);
      }
      EXPECT_EQ(alloc.PeakBytes(BufferClass::kActivations), model_peak[r]) << "stage " << r;
      // The paper's Mem_SF(r) = min(MN, N + P - r - 1) A_r / N for equal
      // chunks (with N = 1 it is 1F1B's min(M, P - r) A_r).
      const std::int64_t units = std::min(c.M * c.N, c.N + c.P - r - 1);
      EXPECT_EQ(model_peak[r], units * (T / c.N) * ledger[r].act_per_token * bytes)
          << "stage " << r;
      // Transient logits: one (s_i, min(V, slice)) buffer at a time, so their
      // peak is exactly 1/N of N = 1's.
      const std::int64_t logits = r + 1 == c.P ? (T / c.N) * std::min<std::int64_t>(
                                                     model.vocab_size(), kHeadVocabSlice) * bytes
                                               : 0;
      EXPECT_EQ(alloc.PeakBytes(BufferClass::kLogits), logits) << "stage " << r;
    }
  }
}

// ---- float32 --------------------------------------------------------------------

TEST(ModelStageModuleTest, Float32AgreesWithFloat64) {
  const pb::ModelSpec model = SmallGdnModel(2);
  const Batch batch = RandomBatch(2, 100, model.vocab_size(), 12);
  const Partition p = MustPartition({0, 1, 50, 100});
  const StepResult r64 = RunStep<double>(model, SingleStage(model), Recompute::kNone, batch, p);
  const StepResult r32 = RunStep<float>(model, SingleStage(model), Recompute::kNone, batch, p);
  EXPECT_NEAR(r32.loss, r64.loss, 1e-5 * std::abs(r64.loss));
  for (const auto& [name, g] : r64.grads) EXPECT_LT(RelError(r32.grads.at(name), g), 1e-3) << name;
}

// ---- errors ---------------------------------------------------------------------

class ModuleErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SmallGdnModel(2);
    batch_ = RandomBatch(2, 12, model_.vocab_size(), 1);
    partition_ = EqualPartition(12, 3);
    auto m = MakeStageModule<double>(model_, SingleStage(model_)[0], {.recompute = Recompute::kNone, .seed = 1}, &alloc_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    module_ = std::move(*m);
  }
  void ExpectError(const Status& st, const std::string& needle) {
    EXPECT_EQ(st.code(), Status::Code::kInvalidInput) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }

  TrackingAllocator alloc_{0};
  pb::ModelSpec model_;
  Batch batch_;
  Partition partition_;
  std::unique_ptr<StageModule<double>> module_;
};

TEST_F(ModuleErrorTest, OrderViolationsAreErrors) {
  ExpectError(module_->Forward(0, 0, nullptr).status(), "before BeginStep");
  ASSERT_TRUE(module_->BeginStep(&batch_, &partition_, 1.0).ok());
  ExpectError(module_->Backward(0, 0, nullptr).status(), "backward before its forward");
  ExpectError(module_->Backward(0, 2, nullptr).status(), "backward before its forward");
  ExpectError(module_->Forward(0, 1, nullptr).status(), "forward before the forward of chunk 0");
  ExpectError(module_->Forward(2, 0, nullptr).status(), "microbatch 2 outside [0, 2)");
  ExpectError(module_->Forward(0, 3, nullptr).status(), "chunk 3 outside [0, 3)");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(module_->Forward(0, i, nullptr).ok());
  ExpectError(module_->Forward(0, 2, nullptr).status(), "forward ran already");
  ExpectError(module_->Backward(0, 1, nullptr).status(), "backward before the backward of chunk 2");
  ASSERT_TRUE(module_->Backward(0, 2, nullptr).ok());
  ExpectError(module_->Backward(0, 2, nullptr).status(), "backward ran already");
  ExpectError(module_->BeginStep(&batch_, &partition_, 1.0), "microbatch 0 chunk 1 has not run backward");
  ASSERT_TRUE(module_->Backward(0, 1, nullptr).ok());
  ASSERT_TRUE(module_->Backward(0, 0, nullptr).ok());
  ExpectError(module_->BeginStep(&batch_, &partition_, 1.0), "microbatch 1 chunk 2 has not run backward");
}

TEST_F(ModuleErrorTest, BadBatchesAreErrors) {
  Batch short_batch = batch_;
  short_batch.tokens.pop_back();
  ExpectError(module_->BeginStep(&short_batch, &partition_, 1.0), "batch.tokens has");
  Batch bad_id = batch_;
  bad_id.tokens[5] = static_cast<std::int32_t>(model_.vocab_size());
  ExpectError(module_->BeginStep(&bad_id, &partition_, 1.0), "batch.tokens");
  const Partition other = EqualPartition(13, 3);
  ExpectError(module_->BeginStep(&batch_, &other, 1.0), "partition covers 13 tokens");
  ExpectError(module_->BeginStep(nullptr, &partition_, 1.0), "needs a batch");
}

TEST_F(ModuleErrorTest, WrongActivationsAreErrors) {
  pb::ModelSpec m = SmallGdnModel(2);
  TrackingAllocator alloc(1);
  auto middle = MakeStageModule<double>(m, {1, 2}, {.recompute = Recompute::kNone, .seed = 1}, &alloc);
  ASSERT_TRUE(middle.ok());
  ASSERT_TRUE((*middle)->BeginStep(&batch_, &partition_, 1.0).ok());
  ExpectError((*middle)->Forward(0, 0, nullptr).status(), "input x is missing, expected (4, 16)");
  auto wrong = Tensor<double>::Zeros(alloc, BufferClass::kWorkspace, {5, 16});
  ASSERT_TRUE(wrong.ok());
  ExpectError((*middle)->Forward(0, 0, &*wrong).status(), "input x has shape (5, 16)");
  ASSERT_TRUE(module_->BeginStep(&batch_, &partition_, 1.0).ok());
  ExpectError(module_->Forward(0, 0, &*wrong).status(), "x must be null");
}

TEST(ModelStageModuleFactoryTest, UnsupportedModelsAreOneLineErrors) {
  TrackingAllocator alloc(0);
  Result<std::unique_ptr<StageModule<double>>> m = Status::Internal("unset");
  pb::ModelSpec tied = SmallGdnModel(2);
  tied.set_untied_embeddings(false);
  m = MakeStageModule<double>(tied, {0, 4}, {.recompute = Recompute::kNone, .seed = 1}, &alloc);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.untied_embeddings"), std::string::npos);
  pb::ModelSpec zero = SmallGdnModel(2);
  zero.set_hidden_size(0);
  m = MakeStageModule<double>(zero, {0, 4}, {.recompute = Recompute::kNone, .seed = 1}, &alloc);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.hidden_size"), std::string::npos);
  for (StageLayers bad : {StageLayers{2, 2}, StageLayers{-1, 2}, StageLayers{0, 5}}) {
    m = MakeStageModule<double>(SmallGdnModel(2), bad, {.recompute = Recompute::kNone, .seed = 1}, &alloc);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("stage layers"), std::string::npos);
  }
  EXPECT_FALSE(MakeStageModule<double>(SmallGdnModel(2), {0, 4}, {.recompute = Recompute::kNone, .seed = 1}, nullptr).ok());
  EXPECT_EQ(alloc.LiveTotalBytes(), 0);
}

TEST(ModelStageModuleFactoryTest, OverCapacityIsAResourceErrorAndTheStepCanRestart) {
  const pb::ModelSpec model = SmallGdnModel(2);
  TrackingAllocator probe(0);
  std::int64_t weights_and_grads = 0;
  {
    auto m = MakeStageModule<double>(model, {0, 4}, {.recompute = Recompute::kNone, .seed = 1}, &probe);
    ASSERT_TRUE(m.ok());
    weights_and_grads = probe.LiveTotalBytes();
  }
  // Room for the parameters and a little more: the first forward fails.
  TrackingAllocator alloc(0, weights_and_grads + 4096);
  auto m = MakeStageModule<double>(model, {0, 4}, {.recompute = Recompute::kNone, .seed = 1}, &alloc);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Batch batch = RandomBatch(1, 64, model.vocab_size(), 1);
  const Partition p = EqualPartition(64, 1);
  ASSERT_TRUE((*m)->BeginStep(&batch, &p, 1.0).ok());
  Result<Tensor<double>> out = (*m)->Forward(0, 0, nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Status::Code::kResource);
  EXPECT_NE(out.status().message().find("stage 0"), std::string::npos);
  // The failed step refuses more work, and a new step may begin.
  EXPECT_EQ((*m)->Backward(0, 0, nullptr).status().code(), Status::Code::kInvalidInput);
  const Partition small = EqualPartition(64, 64);
  EXPECT_TRUE((*m)->BeginStep(&batch, &small, 1.0).ok());
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kActivations), 0);
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kBoundaryStates), 0);
}

}  // namespace
}  // namespace stateflow::backend

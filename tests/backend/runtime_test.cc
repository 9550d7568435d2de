// The pipeline runtime in one process: the in-process comm's semantics, the
// toy test module's own gradients (central differences), pipelined execution
// equal to one stage (loss and every gradient, float64, relative error
// < 1e-10) for many (P, M, N, policy), and the memory ledger's in-flight
// chunk counts against the paper's formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "backend/comm/in_process_comm.h"
#include "backend/runtime/stage_runtime.h"
#include "backend/train/text_data.h"
#include "backend/train/trainer.h"
#include "schedule/plan.h"
#include "schedule/policies.h"
#include "tests/backend/train_test_util.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend::testing {

using ::stateflow::testing::MustResolve;
namespace {

using schedule::Pass;

Tensor<double> Filled(TrackingAllocator& alloc, std::int64_t n, double value) {
  Tensor<double> t = Take(Tensor<double>::Zeros(alloc, BufferClass::kWorkspace, {n}));
  for (std::int64_t k = 0; k < n; ++k) t.data()[k] = value + k;
  return t;
}

// ---------------------------------------------------------------- comm ----

TEST(InProcessComm, DeliversWhicheverSideComesFirst) {
  TrackingAllocator a0(0), a1(1);
  auto comms = MakeInProcessComms<double>(2);
  const MessageKey early{0, 0, Pass::kForward}, late{0, 1, Pass::kForward};
  // Receive posted first.
  ASSERT_TRUE(comms[1]->PostRecv(0, early, Filled(a1, 3, 0)).ok());
  EXPECT_FALSE(*comms[1]->Arrived(early));
  ASSERT_TRUE(comms[0]->Send(1, early, Filled(a0, 3, 10)).ok());
  EXPECT_TRUE(*comms[1]->Arrived(early));
  EXPECT_EQ(comms[0]->pending_sends(), 0);
  // Send first: the sender's tensor stays held (on its allocator) until posted.
  ASSERT_TRUE(comms[0]->Send(1, late, Filled(a0, 3, 20)).ok());
  EXPECT_EQ(comms[0]->pending_sends(), 1);
  EXPECT_EQ(a0.LiveBytes(BufferClass::kWorkspace), 3 * 8);
  ASSERT_TRUE(comms[1]->PostRecv(0, late, Filled(a1, 3, 0)).ok());
  EXPECT_EQ(comms[0]->pending_sends(), 0);
  EXPECT_EQ(a0.LiveBytes(BufferClass::kWorkspace), 0);
  Tensor<double> got = Take(comms[1]->Wait(late));
  EXPECT_EQ(got.data()[2], 22);
  EXPECT_EQ(comms[1]->Wait(early)->data()[0], 10);
  EXPECT_TRUE(comms[0]->Flush().ok());
}

TEST(InProcessComm, ErrorsInsteadOfHangs) {
  TrackingAllocator a0(0), a1(1), a2(2);
  auto comms = MakeInProcessComms<double>(4);
  const MessageKey key{1, 2, Pass::kBackward};
  // Waiting for a message nobody sent can never end in one process.
  ASSERT_TRUE(comms[1]->PostRecv(2, key, Filled(a1, 2, 0)).ok());
  Result<Tensor<double>> wait = comms[1]->Wait(key);
  ASSERT_FALSE(wait.ok());
  EXPECT_NE(wait.status().message().find("gradient of microbatch 1 chunk 2"), std::string::npos)
      << wait.status().message();
  // A size mismatch names both sizes.
  Status bad = comms[2]->Send(1, key, Filled(a2, 5, 0));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("5 elements"), std::string::npos) << bad.message();
  // Not a peer: two stages away (r - 1, r and r + 1 modulo P are).
  Status far = comms[0]->Send(2, key, Filled(a0, 2, 0));
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.message().find("not a neighbour among 4 stages"), std::string::npos)
      << far.message();
  // A send nobody receives is reported by Flush.
  ASSERT_TRUE(comms[1]->Send(0, key, Filled(a1, 2, 0)).ok());
  EXPECT_FALSE(comms[1]->Flush().ok());
}

// Virtual stages (issue 27): a loop's last stage sends to stage 0 and back,
// and a model stage to the next one on its own stage; the key's
// virtual_index keeps apart the two model stages of one stage that receive
// the same (a, i, pass) from the same peer.
TEST(InProcessComm, RingAndSelfMessagesWithVirtualIndices) {
  TrackingAllocator a0(0), a2(2);
  auto comms = MakeInProcessComms<double>(3);
  const MessageKey k0{0, 1, Pass::kForward, 0}, k1{0, 1, Pass::kForward, 1};
  ASSERT_TRUE(comms[0]->PostRecv(2, k1, Filled(a0, 2, 0)).ok());  // from the last stage
  ASSERT_TRUE(comms[0]->PostRecv(0, k0, Filled(a0, 2, 0)).ok());  // from itself
  ASSERT_TRUE(comms[2]->Send(0, k1, Filled(a2, 2, 7)).ok());
  ASSERT_TRUE(comms[0]->Send(0, k0, Filled(a0, 2, 3)).ok());
  Result<Tensor<double>> ring = comms[0]->Wait(k1);
  Result<Tensor<double>> self = comms[0]->Wait(k0);
  ASSERT_TRUE(ring.ok()) << ring.status().message();
  ASSERT_TRUE(self.ok()) << self.status().message();
  EXPECT_EQ(ring->data()[0], 7);
  EXPECT_EQ(self->data()[0], 3);
  EXPECT_TRUE(comms[0]->Flush().ok());
  EXPECT_TRUE(comms[2]->Flush().ok());
  EXPECT_TRUE(IsPeer(0, 2, 3));
  EXPECT_TRUE(IsPeer(1, 1, 3));
  EXPECT_FALSE(IsPeer(0, 2, 5));
  EXPECT_FALSE(IsPeer(0, 3, 3));
}

TEST(MessageTag, UniquePerMessageAndChecked) {
  const int M = 5, N = 7;
  std::set<long long> tags;
  for (int a = 0; a < M; ++a) {
    for (int i = 0; i < N; ++i) {
      for (Pass p : {Pass::kForward, Pass::kBackward}) {
        const long long tag = MessageTag({a, i, p}, N);
        EXPECT_GE(tag, 0);
        EXPECT_LE(tag, 2LL * M * N - 1);
        tags.insert(tag);
      }
    }
  }
  EXPECT_EQ(tags.size(), static_cast<std::size_t>(2 * M * N));
  EXPECT_TRUE(CheckTagRange(M, N, 2LL * M * N - 1).ok());
  Status s = CheckTagRange(M, N, 2LL * M * N - 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MPI_TAG_UB"), std::string::npos);
  // With v virtual stages: 2 M N v tags, one per (microbatch, index, chunk, pass).
  const int v = 3;
  std::set<long long> virtual_tags;
  for (int a = 0; a < M; ++a) {
    for (int k = 0; k < v; ++k) {
      for (int i = 0; i < N; ++i) {
        for (Pass p : {Pass::kForward, Pass::kBackward}) {
          const long long tag = MessageTag({a, i, p, k}, N, v);
          EXPECT_LE(tag, 2LL * M * N * v - 1);
          virtual_tags.insert(tag);
        }
      }
    }
  }
  EXPECT_EQ(virtual_tags.size(), static_cast<std::size_t>(2 * M * N * v));
  EXPECT_TRUE(CheckTagRange(M, N, 2LL * M * N * v - 1, v).ok());
  Status sv = CheckTagRange(M, N, 2LL * M * N * v - 2, v);
  ASSERT_FALSE(sv.ok());
  EXPECT_NE(sv.message().find("x virtual stages 3"), std::string::npos) << sv.message();
}

// ---------------------------------------------------------- toy module ----

struct Reference {
  double loss = 0;
  Named grads;
};

// One module with every layer, each microbatch as one chunk: the plain
// computation every pipelined run must reproduce.
Reference RunReference(const TrainSetup& setup, const Batch& batch, std::uint64_t seed) {
  TrackingAllocator alloc(0);
  const int blocks = ToyBlocks(setup);
  auto module = Take(MakeToyStageModule<double>(blocks, kToyHidden, {0, blocks + 2}, seed, &alloc));
  const schedule::Partition whole({0, setup.seq_len});
  const double scale = 1.0 / (setup.microbatches * static_cast<double>(setup.seq_len));
  EXPECT_TRUE(module->BeginStep(&batch, &whole, scale).ok());
  for (int a = 0; a < setup.microbatches; ++a) {
    EXPECT_TRUE(module->Forward(a, 0, nullptr).ok());
    EXPECT_TRUE(module->Backward(a, 0, nullptr).ok());
  }
  Reference ref;
  ref.loss = module->loss();
  Collect(*module, /*grads=*/true, &ref.grads);
  return ref;
}

Batch TestBatch(const TrainSetup& setup, int step = 0) {
  return *TextData::Load(kDefaultTextPath)->MakeBatch(3, step, setup.microbatches, setup.seq_len);
}

TEST(ToyModule, GradientsMatchCentralDifferences) {
  const TrainSetup setup = ToySetup({.microbatches = 2, .chunks = 1, .seq_len = 9});
  const Batch batch = TestBatch(setup);
  const Reference ref = RunReference(setup, batch, 11);
  // Loss as a function of one parameter element, by a fresh forward.
  const int blocks = ToyBlocks(setup);
  auto loss_with = [&](const std::string& name, std::size_t index, double delta) {
    TrackingAllocator alloc(0);
    auto module = Take(MakeToyStageModule<double>(blocks, kToyHidden, {0, blocks + 2}, 11, &alloc));
    for (const ParamRef<double>& p : module->Parameters()) {
      if (p.name == name) p.value->data()[index] += delta;
    }
    const schedule::Partition whole({0, setup.seq_len});
    EXPECT_TRUE(module->BeginStep(&batch, &whole, 1.0 / (2 * 9.0)).ok());
    for (int a = 0; a < 2; ++a) {
      EXPECT_TRUE(module->Forward(a, 0, nullptr).ok());
      EXPECT_TRUE(module->Backward(a, 0, nullptr).ok());
    }
    return module->loss();
  };
  const double h = 1e-6;
  int checked = 0;
  for (const auto& [name, grad] : ref.grads) {
    // A few elements of each parameter, including the largest gradient.
    std::size_t largest = 0;
    for (std::size_t k = 0; k < grad.size(); ++k) {
      if (std::abs(grad[k]) > std::abs(grad[largest])) largest = k;
    }
    for (std::size_t k : {std::size_t{0}, grad.size() / 2, largest}) {
      const double numeric = (loss_with(name, k, h) - loss_with(name, k, -h)) / (2 * h);
      EXPECT_NEAR(grad[k], numeric, 1e-7 + 1e-5 * std::abs(numeric)) << name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 3 * (2 + 4 * 4));
}

// --------------------------------------------------- pipelined == one ----

struct Case {
  int stages, microbatches, chunks;
  std::int64_t seq_len;
  const char* policy;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.policy << " P=" << c.stages << " M=" << c.microbatches << " N=" << c.chunks
      << " T=" << c.seq_len;
}

class PipelinedEqualsOneStage : public ::testing::TestWithParam<Case> {};

TEST_P(PipelinedEqualsOneStage, LossAndEveryGradient) {
  const Case& c = GetParam();
  const TrainSetup setup = ToySetup({c.stages, c.microbatches, c.chunks, c.seq_len, c.policy});
  const TextData text = *TextData::Load(kDefaultTextPath);
  TrainOptions options;
  options.seed = 3;
  auto trainer = Take(Trainer<double>::Make(setup, options, text, ToyFactory<double>(setup, 11),
                                        Take(MakeSingleProcessTransport<double>(c.stages))));
  const StepResult step = *trainer->Step(0);
  const Reference ref = RunReference(setup, TestBatch(setup), 11);
  EXPECT_NEAR(step.loss, ref.loss, 1e-10 * std::abs(ref.loss));
  EXPECT_TRUE(SameNamed(CollectAll(*trainer, /*grads=*/true), ref.grads, 1e-10));
  ASSERT_EQ(step.stages.size(), static_cast<std::size_t>(c.stages));
  for (const StageStepStats& s : step.stages) {
    // After the step only weights, gradients and optimizer state are live.
    for (BufferClass cls : {BufferClass::kActivations, BufferClass::kBoundaryStates,
                            BufferClass::kWorkspace}) {
      EXPECT_EQ(s.memory.live_bytes[static_cast<int>(cls)], 0)
          << "stage " << s.stage << " " << BufferClassName(cls);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PipelinedEqualsOneStage,
    ::testing::Values(Case{1, 1, 1, 24, "stateflow"}, Case{2, 1, 1, 24, "1f1b"},
                      Case{2, 3, 1, 24, "1f1b"}, Case{2, 3, 4, 24, "stateflow"},
                      Case{4, 2, 3, 25, "stateflow"},  // uneven chunk lengths
                      Case{4, 5, 8, 16, "stateflow"}, Case{3, 2, 5, 23, "gpipe"},
                      Case{4, 3, 2, 24, "gpipe"}, Case{2, 4, 24, 24, "stateflow"}));

TEST(Trainer, PoliciesGiveTheSameLossesAndParameters) {
  auto run = [](const char* policy, int chunks) {
    const TrainSetup setup = ToySetup({2, 3, chunks, 20, policy});
    const TextData text = *TextData::Load(kDefaultTextPath);
    TrainOptions options;
    auto trainer = Take(Trainer<double>::Make(setup, options, text, ToyFactory<double>(setup, 5),
                                          Take(MakeSingleProcessTransport<double>(2))));
    TrainRun r = Train(*trainer, 3, nullptr);
    EXPECT_TRUE(r.status.ok()) << r.status.message();
    std::vector<double> losses;
    for (const StepResult& s : r.steps) losses.push_back(s.loss);
    return std::make_pair(losses, CollectAll(*trainer, /*grads=*/false));
  };
  const auto base = run("1f1b", 1);
  for (auto [policy, chunks] : {std::pair{"gpipe", 1}, {"gpipe", 4}, {"stateflow", 4},
                                {"stateflow", 5}}) {
    const auto other = run(policy, chunks);
    EXPECT_LT(RelError(other.first, base.first), 1e-10) << policy << " N=" << chunks;
    EXPECT_TRUE(SameNamed(other.second, base.second, 1e-10)) << policy << " N=" << chunks;
  }
  EXPECT_NE(base.first[0], base.first[2]);  // the optimizer moved the parameters
}

// ------------------------------------------------------ memory ledger ----

// Toy saved bytes per chunk of s tokens on a stage: per block its input
// (s, H) and its states (s + 1), on the last stage the head input (s, H).
double ToySavedBytes(const TrainSetup& setup, int r, std::int64_t s) {
  const models::StageLayers layers = setup.stage_layers[r];
  const int blocks = ToyBlocks(setup);
  const int first_block = std::max(layers.first, 1), last_block = std::min(layers.last, blocks + 1);
  double bytes = (last_block - first_block) * (s * kToyHidden + s + 1) * 8.0;
  if (layers.last == blocks + 2) bytes += s * kToyHidden * 8.0;
  return bytes;
}

TEST(Trainer, ActivationPeaksFollowThePapersInFlightCounts) {
  const int P = 4, M = 3, T = 24;
  for (int N : {1, 2, 4}) {
    const char* policy = N == 1 ? "1f1b" : "stateflow";
    const TrainSetup setup = ToySetup({P, M, N, T, policy});
    const TextData text = *TextData::Load(kDefaultTextPath);
    auto trainer = Take(Trainer<double>::Make(setup, TrainOptions{}, text,
                                          ToyFactory<double>(setup, 5),
                                          Take(MakeSingleProcessTransport<double>(P))));
    const StepResult step = *trainer->Step(0);
    for (int r = 0; r < P; ++r) {
      // 1F1B holds min(M, P - r) microbatches; StateFlow min(MN, N + P - r - 1) chunks.
      const int held = std::min(M * N, N + P - r - 1);
      const double expected = held * ToySavedBytes(setup, r, T / N);
      EXPECT_EQ(step.stages[r].memory.peak_bytes[static_cast<int>(BufferClass::kActivations)],
                expected)
          << policy << " N=" << N << " stage " << r;
    }
  }
}

TEST(Trainer, RecordsEveryActionInPlanOrderWithOrderedTimes) {
  const TrainSetup setup = ToySetup({3, 2, 3, 18, "stateflow"});
  const TextData text = *TextData::Load(kDefaultTextPath);
  auto trainer = Take(Trainer<float>::Make(setup, TrainOptions{}, text, ToyFactory<float>(setup, 5),
                                       Take(MakeSingleProcessTransport<float>(3))));
  ASSERT_TRUE(Train(*trainer, 2, nullptr).status.ok());
  const std::vector<StageTimeline> timelines = *trainer->GatherTimelines();
  ASSERT_EQ(timelines.size(), 3u);
  for (const StageTimeline& t : timelines) {
    const std::vector<schedule::Action>& plan = setup.plan.stage(t.stage);
    ASSERT_EQ(t.actions.size(), 2 * plan.size());
    ASSERT_EQ(t.memory.size(), t.actions.size());
    ASSERT_EQ(t.optimizer_start_s.size(), 2u);
    for (std::size_t k = 0; k < t.actions.size(); ++k) {
      EXPECT_EQ(t.actions[k].action, plan[k % plan.size()]);
      EXPECT_LE(t.actions[k].start_s, t.actions[k].end_s);
      if (k > 0) {
        EXPECT_LE(t.actions[k - 1].end_s, t.actions[k].start_s);
      }
    }
  }
}

// --------------------------------------------------------------- errors ----

TEST(Trainer, OverCapacityNamesTheStageAndClass) {
  const TrainSetup setup = ToySetup({2, 2, 2, 24, "stateflow"});
  const TextData text = *TextData::Load(kDefaultTextPath);
  // Room for the weights, gradients and moments of every stage, not for activations.
  TrainOptions options;
  options.capacity_bytes = 0;
  for (int r = 0; r < 2; ++r) {
    TrackingAllocator probe(r);
    auto m = Take(MakeToyStageModule<float>(ToyBlocks(setup), kToyHidden, setup.stage_layers[r], 1,
                                        &probe));
    options.capacity_bytes = std::max(*options.capacity_bytes, 2 * probe.LiveTotalBytes());
  }
  auto trainer = Take(Trainer<float>::Make(setup, options, text, ToyFactory<float>(setup, 5),
                                       Take(MakeSingleProcessTransport<float>(2))));
  TrainRun run = Train(*trainer, 2, nullptr);
  ASSERT_FALSE(run.status.ok());
  EXPECT_EQ(run.status.code(), Status::Code::kResource);
  EXPECT_NE(run.status.message().find("stage "), std::string::npos) << run.status.message();
  EXPECT_NE(run.status.message().find("would exceed the capacity"), std::string::npos);
  EXPECT_TRUE(run.status.message().find("activations") != std::string::npos ||
              run.status.message().find("workspace") != std::string::npos ||
              run.status.message().find("boundary_states") != std::string::npos)
      << run.status.message();
}

TEST(Trainer, WeightsOverCapacityFailAtMake) {
  const TrainSetup setup = ToySetup({2, 1, 1, 24, "1f1b"});
  const TextData text = *TextData::Load(kDefaultTextPath);
  TrainOptions options;
  options.capacity_bytes = 100;
  auto made = Trainer<float>::Make(setup, options, text, ToyFactory<float>(setup, 5),
                                   Take(MakeSingleProcessTransport<float>(2)));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("stage 0: allocating"), std::string::npos)
      << made.status().message();
  EXPECT_NE(made.status().message().find("weights"), std::string::npos);
}

TEST(Trainer, NonFiniteLossStopsWithTheStepNumber) {
  const TrainSetup setup = ToySetup({2, 2, 2, 24, "stateflow"});
  const TextData text = *TextData::Load(kDefaultTextPath);
  TrainOptions options;
  options.adamw.learning_rate = 1e30;
  auto trainer = Take(Trainer<float>::Make(setup, options, text, ToyFactory<float>(setup, 5),
                                       Take(MakeSingleProcessTransport<float>(2))));
  TrainRun run = Train(*trainer, 20, nullptr);
  ASSERT_FALSE(run.status.ok());
  ASSERT_FALSE(run.steps.empty());
  EXPECT_FALSE(std::isfinite(run.steps.back().loss));
  const std::string step = "step " + std::to_string(run.steps.back().step) + ":";
  EXPECT_EQ(run.status.message().rfind(step, 0), 0u) << run.status.message();
  EXPECT_TRUE(run.on_every_rank);
  EXPECT_LT(run.steps.size(), 20u);
}

TEST(TrainSetup, RejectsMismatchedAndBrokenPlans) {
  const pb::Scenario scenario = ToyScenario({2, 3, 2, 24, "stateflow"});
  const schedule::Plan other = *schedule::MakePlan("stateflow", 2, 4, 2);
  Result<TrainSetup> s = MakeTrainSetup(MustResolve(scenario), &other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("plan is for stages 2 microbatches 4 chunks 2"),
            std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("parallel.microbatches 3"), std::string::npos);
  // Right shape, broken order: a backward before its forward.
  schedule::Plan good = *schedule::MakePlan("stateflow", 2, 3, 2);
  std::vector<std::vector<schedule::Action>> lists = good.per_stage();
  std::reverse(lists[1].begin(), lists[1].end());
  const schedule::Plan broken("stateflow", 2, 3, 2, lists);
  Result<TrainSetup> b = MakeTrainSetup(MustResolve(scenario), &broken);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("stage 1"), std::string::npos) << b.status().message();
}

TEST(TrainSetup, SequenceShorterThanTheChunks) {
  Result<TrainSetup> s = MakeTrainSetup(MustResolve(ToyScenario({2, 1, 8, 5, "stateflow"})), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cannot be cut into 8"), std::string::npos)
      << s.status().message();
}

// The backend implements only StateFlow's sliced loss: a framework's system
// is a one-line error naming the field.
TEST(TrainSetup, RejectsAFrameworkSystem) {
  pb::Scenario scenario = ToyScenario({2, 3, 2, 24, "stateflow"});
  scenario.mutable_schedule()->set_system("megatron-core");
  Result<TrainSetup> s = MakeTrainSetup(MustResolve(scenario), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "schedule.system 'megatron-core' cannot be trained: the "
                                  "backend runs only system stateflow");
  scenario.mutable_schedule()->set_system("stateflow");
  EXPECT_TRUE(MakeTrainSetup(MustResolve(scenario), nullptr).ok());
}

TEST(TrainSetup, OptionsDefaultsAndErrors) {
  pb::TrainSpec spec;
  TrainOptions o = *TrainOptionsFromSpec(spec);
  EXPECT_EQ(o.text_path, kDefaultTextPath);
  EXPECT_EQ(o.dtype, "float32");
  spec.set_dtype("bf16");
  EXPECT_NE(TrainOptionsFromSpec(spec).status().message().find("train.dtype"), std::string::npos);
  spec.set_dtype("float64");
  spec.set_learning_rate(-1);
  EXPECT_NE(TrainOptionsFromSpec(spec).status().message().find("train.learning_rate"),
            std::string::npos);
}

// ---------------------------------------------------- data, optimizer ----

TEST(TextData, BatchesAreWindowsOfTheTextAndDeterministic) {
  const TextData text = TextData::FromBytes("abcdefghijklmnopqrstuvwxyz", "alphabet");
  const Batch b = *text.MakeBatch(9, 4, 3, 5);
  const Batch again = *text.MakeBatch(9, 4, 3, 5);
  EXPECT_EQ(b.tokens, again.tokens);
  EXPECT_NE(b.tokens, text.MakeBatch(9, 5, 3, 5)->tokens);
  for (int a = 0; a < 3; ++a) {
    for (int t = 0; t < 5; ++t) EXPECT_EQ(b.inputs(a)[t] + 1, b.inputs(a)[t + 1]);  // consecutive
    EXPECT_EQ(b.targets(a)[0], b.inputs(a)[1]);
  }
  Result<Batch> too_long = text.MakeBatch(9, 0, 1, 26);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("26 bytes, fewer than seq_len + 1 = 27"),
            std::string::npos)
      << too_long.status().message();
}

TEST(AdamW, MatchesTheFormulaElementByElement) {
  TrackingAllocator alloc(0);
  Tensor<double> w = Take(Tensor<double>::Zeros(alloc, BufferClass::kWeights, {2, 2}));
  Tensor<double> g = Take(Tensor<double>::Zeros(alloc, BufferClass::kGradients, {2, 2}));
  Tensor<double> b = Take(Tensor<double>::Zeros(alloc, BufferClass::kWeights, {2}));
  Tensor<double> gb = Take(Tensor<double>::Zeros(alloc, BufferClass::kGradients, {2}));
  const AdamWOptions o{.learning_rate = 0.1, .beta1 = 0.8, .beta2 = 0.9, .epsilon = 1e-8,
                       .weight_decay = 0.5};
  AdamW<double> opt = Take(AdamW<double>::Make({{"w", &w, &g}, {"b", &b, &gb}}, alloc, o));
  EXPECT_EQ(alloc.LiveBytes(BufferClass::kOptimizerState), 2 * (4 + 2) * 8);
  double m = 0, v = 0, ref_w = 1.0, ref_b = 1.0;  // element 0 of each
  w.data()[0] = b.data()[0] = 1.0;
  for (int t = 1; t <= 3; ++t) {
    const double grad = 0.3 * t;
    g.data()[0] = gb.data()[0] = grad;
    opt.Step();
    m = 0.8 * m + 0.2 * grad;
    v = 0.9 * v + 0.1 * grad * grad;
    const double update = 0.1 * (m / (1 - std::pow(0.8, t))) /
                          (std::sqrt(v / (1 - std::pow(0.9, t))) + 1e-8);
    ref_w -= update + 0.1 * 0.5 * ref_w;  // decay on matrices
    ref_b -= update;                      // not on vectors
    EXPECT_NEAR(w.data()[0], ref_w, 1e-12);
    EXPECT_NEAR(b.data()[0], ref_b, 1e-12);
  }
}

}  // namespace
}  // namespace stateflow::backend::testing

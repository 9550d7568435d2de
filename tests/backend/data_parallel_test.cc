// Data parallelism in one process (issue 26): D replicas of the pipeline,
// each on its own M microbatches, with their gradients summed before the
// optimizer step (plain) or reduce-scattered to the replicas' shards of the
// optimizer and the updated shards gathered back (the distributed
// optimizer), against one replica of M D microbatches: every family,
// float64, chunked and not. mpi_test.cc runs the same grid under mpirun;
// memory_check_test.cc checks its memory against the simulator's.
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/model/model_stage_module.h"
#include "backend/train/checkpoint.h"
#include "tests/backend/train_test_util.h"
#include "tests/family_presets.h"
#include "tests/sanitized.h"

namespace stateflow::backend::testing {
namespace {

struct DpConfig {
  std::string preset = "gdn-tiny";
  int stages = 2, microbatches = 2, chunks = 3;
  std::int64_t seq_len = 48;
  int replicas = 1;
  bool distributed = false;
  std::string dtype = "float64";  // or "bf16" (on host-grid)
};

pb::Scenario DpScenario(const DpConfig& c) {
  pb::Scenario s;
  s.set_name("dp");
  *s.mutable_model() = *models::ModelPreset(c.preset);
  *s.mutable_cluster() = *models::ClusterPreset("cpu");
  pb::ParallelSpec* par = s.mutable_parallel();
  par->set_pipeline_size(c.stages);
  par->set_microbatches(c.microbatches);
  par->set_data_size(c.replicas);
  par->set_distributed_optimizer(c.distributed);
  s.set_seq_len(c.seq_len);
  pb::ScheduleSpec* sched = s.mutable_schedule();
  sched->set_policy(c.chunks == 1 ? "1f1b" : "stateflow");
  sched->set_chunks(c.chunks);
  sched->set_granularity(1);
  if (c.dtype == "bf16") s.mutable_train()->set_device("host-grid");
  return s;
}

const TextData& Text() {
  static const TextData text = *TextData::Load(kDefaultTextPath);
  return text;
}

template <typename T>
std::unique_ptr<Trainer<T>> MakeDpTrainer(const DpConfig& c, TrainSetup* setup_out = nullptr) {
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(DpScenario(c)), nullptr));
  if (setup_out != nullptr) *setup_out = setup;
  TrainOptions options;
  options.seed = 3;
  options.adamw.weight_decay = 0.01;
  options.dtype = c.dtype;
  if (c.dtype == "bf16") options.device = "host-grid";
  const pb::ModelSpec model = setup.model;
  const models::Recompute recompute = setup.recompute;
  StageModuleFactory<T> factory = [model, recompute](int, const models::StageLayers& layers,
                                                     TrackingAllocator* alloc) {
    return MakeStageModule<T>(model, layers, {.recompute = recompute, .seed = 11}, alloc);
  };
  return Take(Trainer<T>::Make(setup, options, Text(), factory,
                               Take(MakeSingleProcessTransport<T>(setup.stages, c.replicas))));
}

struct DpOutcome {
  std::vector<double> losses;
  std::vector<Named> params;  // per replica
  Named grads0;               // replica 0's gradients after the last step
};

template <typename T>
Named CollectReplica(Trainer<T>& trainer, int replica, bool grads) {
  Named out;
  for (int k = 0; k < trainer.num_local_stages(); ++k) {
    if (trainer.local_replica(k) != replica) continue;
    for (const ParamRef<T>& p : trainer.module(k).Parameters()) {
      std::vector<double>& v = out[p.name];
      if (grads) {
        v.assign(p.grad->data(), p.grad->data() + p.grad->numel());
      } else {
        for (std::int64_t i = 0; i < p.value->numel(); ++i) {
          v.push_back(static_cast<double>(static_cast<float>(p.value->data()[i])));
        }
      }
    }
  }
  return out;
}

template <typename T = double>
DpOutcome RunDp(const DpConfig& c, int steps) {
  auto trainer = MakeDpTrainer<T>(c);
  const TrainRun run = Train(*trainer, steps, nullptr);
  EXPECT_TRUE(run.status.ok()) << run.status.message();
  DpOutcome o;
  for (const StepResult& s : run.steps) o.losses.push_back(s.loss);
  for (int d = 0; d < c.replicas; ++d) o.params.push_back(CollectReplica(*trainer, d, false));
  o.grads0 = CollectReplica(*trainer, 0, true);
  return o;
}

// D replicas of M microbatches == one replica of M D: the loss, every
// gradient after the sum, every parameter after two AdamW steps, within
// 1e-12 (the sums' order differs: replica shares, then their sum); the
// replicas hold the same parameters bit for bit.
class DataParallelEqualsOneReplica : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(DataParallelEqualsOneReplica, LossesGradientsAndParameters) {
  const auto& [preset, chunks] = GetParam();
  DpConfig one{.preset = preset, .stages = 2, .microbatches = 4, .chunks = chunks};
  DpConfig two = one;
  two.microbatches = 2;
  two.replicas = 2;
  // One step: the summed gradients.
  const DpOutcome g_one = RunDp(one, 1), g_two = RunDp(two, 1);
  EXPECT_TRUE(SameNamed(g_two.grads0, g_one.grads0, 1e-12));
  // Two steps: losses and parameters.
  const DpOutcome a = RunDp(one, 2), b = RunDp(two, 2);
  ASSERT_EQ(b.losses.size(), 2u);
  EXPECT_LT(RelError(b.losses, a.losses), 1e-12);
  EXPECT_TRUE(SameNamed(b.params[0], a.params[0], 1e-12));
  EXPECT_EQ(b.params[1], b.params[0]);
  EXPECT_NE(a.losses[0], a.losses[1]);  // the parameters moved
}

INSTANTIATE_TEST_SUITE_P(Families, DataParallelEqualsOneReplica,
                         ::testing::Combine(::testing::ValuesIn(
                                                ::stateflow::testing::TinyFamilyPresets()),
                                            ::testing::Values(1, 3)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) + "_N" +
                                              std::to_string(std::get<1>(info.param));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// The distributed optimizer updates, shard by shard, what plain AdamW
// updates whole: the same parameters bit for bit at the same D (the shards'
// sums are the all-reduce's, element by element), with uneven shards (D = 3).
TEST(DistributedOptimizer, EqualsPlainAdamWBitForBit) {
  // Under a sanitizer D = 3 alone (shards of unequal sizes).
  for (int replicas : ::stateflow::testing::SanitizedOr<int>({2, 3}, {3})) {
    for (const char* preset : {"gdn-hybrid-tiny", "mamba3-tiny"}) {
      DpConfig plain{.preset = preset, .stages = 2, .microbatches = 2, .chunks = 2};
      plain.replicas = replicas;
      DpConfig sharded = plain;
      sharded.distributed = true;
      const DpOutcome a = RunDp(plain, 3), b = RunDp(sharded, 3);
      EXPECT_EQ(b.losses, a.losses) << preset << " D=" << replicas;
      for (int d = 0; d < replicas; ++d) {
        EXPECT_EQ(b.params[d], a.params[0]) << preset << " D=" << replicas << " replica " << d;
      }
    }
  }
}

// bf16 (host-grid): fp32 master weights sharded with the moments; the bf16
// values each replica reads are gathered from the shards' owners.
TEST(DistributedOptimizer, Bf16MastersShardedEqualPlain) {
  DpConfig plain{.preset = "gdn-tiny", .stages = 2, .microbatches = 2, .chunks = 2};
  plain.replicas = 2;
  plain.dtype = "bf16";
  DpConfig sharded = plain;
  sharded.distributed = true;
  const DpOutcome a = RunDp<bf16>(plain, 3), b = RunDp<bf16>(sharded, 3);
  EXPECT_EQ(b.losses, a.losses);
  EXPECT_EQ(b.params[0], a.params[0]);
  EXPECT_EQ(b.params[1], a.params[0]);
}

TEST(DistributedOptimizer, EachReplicaHoldsItsShardOfTheOptimizerState) {
  for (int replicas : {2, 3}) {
    DpConfig c{.preset = "gdn-tiny", .stages = 2, .microbatches = 1, .chunks = 1};
    c.replicas = replicas;
    c.distributed = true;
    auto trainer = MakeDpTrainer<double>(c);
    const StepResult step = Take(trainer->Step(0));
    ASSERT_EQ(step.stages.size(), 2u);  // replica 0's
    for (int k = 0; k < trainer->num_local_stages(); ++k) {
      std::int64_t n = 0;
      for (const ParamRef<double>& p : trainer->module(k).Parameters()) n += p.value->numel();
      const models::Shard shard = models::ShardOf(n, replicas, trainer->local_replica(k));
      if (trainer->local_replica(k) != 0) continue;
      const int stage = trainer->local_stage(k);
      // m and v: two doubles per parameter of the shard.
      EXPECT_EQ(step.stages[stage].memory.live_bytes[static_cast<int>(BufferClass::kOptimizerState)],
                shard.count * 2 * 8)
          << "stage " << stage << " D=" << replicas;
    }
  }
}

// Checkpoints across replicas: replica 0 writes (the replicas are equal),
// or with the distributed optimizer every replica its shard; a resumed DP
// run equals the uninterrupted one bit for bit (float64, and bf16 with
// sharded fp32 masters); another D, or the optimizer sharded or not, is
// refused naming the field.
TEST(DataParallelCheckpoint, ResumesBitForBitAndRefusesAnotherGrid) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::temp_directory_path() / "sf-dp-checkpoint-test").string();
  for (const char* dtype : {"float64", "bf16"}) {
    for (bool distributed : {false, true}) {
      // Under a sanitizer two of the four: float64 plain, bf16 distributed.
      if (::stateflow::testing::kSanitized && distributed != (dtype == std::string("bf16"))) {
        continue;
      }
      SCOPED_TRACE(std::string(dtype) + (distributed ? " distributed" : " plain"));
      fs::remove_all(dir);
      DpConfig c{.preset = "gdn-tiny", .stages = 2, .microbatches = 2, .chunks = 2};
      c.replicas = 2;
      c.distributed = distributed;
      c.dtype = dtype;
      const auto check = [&](auto zero) {
        using T = decltype(zero);
        const DpOutcome whole = RunDp<T>(c, 3);
        {
          auto first = MakeDpTrainer<T>(c);
          const TrainRun r = Train(*first, 2, nullptr, {.checkpoint_dir = dir});
          ASSERT_TRUE(r.status.ok()) << r.status.message();
        }
        // One file per stage, or per stage and shard.
        int files = 0;
        for (const auto& e : fs::directory_iterator(dir)) files += e.path().extension() == ".ckpt";
        EXPECT_EQ(files, distributed ? 4 : 2);
        auto resumed = MakeDpTrainer<T>(c);
        const int step = Take(resumed->LoadCheckpoint(dir));
        EXPECT_EQ(step, 2);
        TrainLoop loop;
        loop.first_step = step;
        const TrainRun rest = Train(*resumed, 3, nullptr, loop);
        ASSERT_TRUE(rest.status.ok()) << rest.status.message();
        EXPECT_EQ(rest.steps.back().loss, whole.losses.back());
        EXPECT_EQ(CollectReplica(*resumed, 1, false), whole.params[0]);
        EXPECT_EQ(CollectReplica(*resumed, 0, false), whole.params[0]);

        DpConfig other = c;
        other.replicas = 1;  // same M, another global batch
        Result<int> refused = MakeDpTrainer<T>(other)->LoadCheckpoint(dir);
        ASSERT_FALSE(refused.ok());
        EXPECT_NE(refused.status().message().find("parallel.data_size 2, this run 1"),
                  std::string::npos)
            << refused.status().message();
        DpConfig flipped = c;
        flipped.distributed = !distributed;
        refused = MakeDpTrainer<T>(flipped)->LoadCheckpoint(dir);
        ASSERT_FALSE(refused.ok());
        EXPECT_NE(refused.status().message().find(
                      std::string("parallel.distributed_optimizer ") +
                      (distributed ? "true, this run false" : "false, this run true")),
                  std::string::npos)
            << refused.status().message();
      };
      if (std::string(dtype) == "bf16") {
        check(bf16{});
      } else {
        check(double{});
      }
    }
  }
  fs::remove_all(dir);
}

// Tensor parallelism splits heads, MLP columns and vocabulary rows into
// equal blocks: a size that does not divide is refused naming the field (the
// heads already when the scenario resolves).
TEST(TensorParallelSetup, SizesThatDoNotDivideAreRefusedNamingTheField) {
  pb::Scenario s = DpScenario({});
  s.mutable_parallel()->set_tensor_size(2);
  s.mutable_model()->set_num_heads(4);
  EXPECT_TRUE(MakeTrainSetup(MustResolve(s), nullptr).ok());
  const struct {
    const char* field;
    void (*set)(pb::ModelSpec*);
  } cases[] = {{"model.mlp_size 129", [](pb::ModelSpec* m) { m->set_mlp_size(129); }},
               {"model.vocab_size 257", [](pb::ModelSpec* m) { m->set_vocab_size(257); }}};
  for (const auto& c : cases) {
    pb::Scenario bad = s;
    c.set(bad.mutable_model());
    const Result<TrainSetup> setup = MakeTrainSetup(MustResolve(bad), nullptr);
    ASSERT_FALSE(setup.ok()) << c.field;
    EXPECT_NE(setup.status().message().find(std::string(c.field) +
                                            " is not divisible by parallel.tensor_size 2"),
              std::string::npos)
        << setup.status().message();
  }
}

}  // namespace
}  // namespace stateflow::backend::testing

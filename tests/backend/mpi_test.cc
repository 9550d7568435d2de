// P ranks under mpirun give what one process gives: the same per-step losses
// and the same final parameters (float64, relative error < 1e-10), with the
// toy module and with the Gated DeltaNet module. The test starts mpirun on
// sf_backend_mpi_worker (mpi_worker.cc) itself and computes the one-process
// reference in-process with the same trainer.
#include <gtest/gtest.h>

#include <sstream>

#include "backend/model/model_stage_module.h"
#include "tests/backend/subprocess_util.h"
#include "tests/backend/train_test_util.h"

namespace stateflow::backend::testing {
namespace {

struct Outcome {
  std::vector<double> losses;
  Named params;
};

std::string TempPrefix(const std::string& name) {
  return std::string(SF_BINARY_DIR) + "/test-tmp-mpi-" + name;
}

// Reads "<prefix>.rank<r>" for every rank (or the one file `prefix`).
Outcome ReadWorkerFiles(const std::string& prefix, int ranks, bool exact_path = false) {
  Outcome o;
  for (int r = 0; r < ranks; ++r) {
    std::istringstream in(Slurp(exact_path ? prefix : prefix + ".rank" + std::to_string(r)));
    std::string kind;
    while (in >> kind) {
      if (kind == "loss") {
        int step = 0;
        double v = 0;
        in >> step >> v;
        o.losses.push_back(v);
      } else {
        std::string name;
        std::size_t n = 0;
        in >> name >> n;
        std::vector<double>& values = o.params[name];
        values.resize(n);
        for (double& v : values) in >> v;
      }
    }
  }
  return o;
}

struct Config {
  const char* module;  // "toy" or "gdn"
  int stages, microbatches, chunks;
  std::int64_t seq_len;
  const char* policy;
  int steps;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << c.module << " " << c.policy << " P=" << c.stages << " M=" << c.microbatches
      << " N=" << c.chunks << " T=" << c.seq_len;
}

Outcome RunOneProcess(const Config& c) {
  const TrainSetup setup = ToySetup({c.stages, c.microbatches, c.chunks, c.seq_len, c.policy});
  StageModuleFactory<double> factory = ToyFactory<double>(setup, 11);
  if (std::string(c.module) == "gdn") {
    factory = [&setup](int, const models::StageLayers& layers, TrackingAllocator* alloc) {
      return MakeStageModule<double>(setup.model, layers, {.recompute = setup.recompute, .seed = 11}, alloc);
    };
  }
  const TextData text = Take(TextData::Load(kDefaultTextPath));
  TrainOptions options;
  options.seed = 3;
  auto trainer = Take(Trainer<double>::Make(setup, options, text, factory,
                                            Take(MakeSingleProcessTransport<double>(c.stages))));
  TrainRun run = Train(*trainer, c.steps, nullptr);
  EXPECT_TRUE(run.status.ok()) << run.status.message();
  Outcome o;
  for (const StepResult& s : run.steps) o.losses.push_back(s.loss);
  o.params = CollectAll(*trainer, /*grads=*/false);
  return o;
}

class MpiEqualsOneProcess : public ::testing::TestWithParam<Config> {};

TEST_P(MpiEqualsOneProcess, LossesAndFinalParameters) {
  const Config& c = GetParam();
  const std::string prefix = TempPrefix(std::string(c.module) + "-" + std::to_string(c.stages) +
                                        "-" + std::to_string(c.chunks));
  const Finished f = RunFor(
      Mpirun(c.stages, {SF_MPI_WORKER, std::string("module=") + c.module,
                        "stages=" + std::to_string(c.stages),
                        "microbatches=" + std::to_string(c.microbatches),
                        "chunks=" + std::to_string(c.chunks),
                        "seq_len=" + std::to_string(c.seq_len), std::string("policy=") + c.policy,
                        "steps=" + std::to_string(c.steps), "out=" + prefix}),
      prefix);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const Outcome mpi = ReadWorkerFiles(prefix, c.stages);
  const Outcome one = RunOneProcess(c);
  ASSERT_EQ(mpi.losses.size(), static_cast<std::size_t>(c.steps));
  EXPECT_LT(RelError(mpi.losses, one.losses), 1e-10);
  EXPECT_TRUE(SameNamed(mpi.params, one.params, 1e-10));
  EXPECT_NE(one.losses.front(), one.losses.back());  // the parameters moved
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, MpiEqualsOneProcess,
    ::testing::Values(Config{"toy", 2, 3, 4, 24, "stateflow", 3},
                      Config{"toy", 4, 2, 3, 25, "stateflow", 3},
                      Config{"toy", 4, 3, 1, 24, "1f1b", 2},
                      Config{"gdn", 2, 2, 3, 40, "stateflow", 2},
                      Config{"gdn", 4, 2, 2, 40, "stateflow", 2}));

// A P x D grid under mpirun (world rank r D + d is stage r of replica d)
// equals the D replicas in one process: the same losses and the same
// parameters on every replica, plain and with the distributed optimizer;
// for D = 2 the sums are the same two-term sums, so within 1e-14.
Outcome RunReplicasInOneProcess(const Config& c, int replicas, bool distributed) {
  pb::Scenario scenario = ToyScenario({c.stages, c.microbatches, c.chunks, c.seq_len, c.policy});
  scenario.mutable_parallel()->set_data_size(replicas);
  scenario.mutable_parallel()->set_distributed_optimizer(distributed);
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(scenario), nullptr));
  StageModuleFactory<double> factory = [&setup](int, const models::StageLayers& layers,
                                                TrackingAllocator* alloc) {
    return MakeStageModule<double>(setup.model, layers, {.recompute = setup.recompute, .seed = 11},
                                   alloc);
  };
  const TextData text = Take(TextData::Load(kDefaultTextPath));
  TrainOptions options;
  options.seed = 3;
  auto trainer = Take(Trainer<double>::Make(
      setup, options, text, factory,
      Take(MakeSingleProcessTransport<double>(c.stages, replicas))));
  TrainRun run = Train(*trainer, c.steps, nullptr);
  EXPECT_TRUE(run.status.ok()) << run.status.message();
  Outcome o;
  for (const StepResult& s : run.steps) o.losses.push_back(s.loss);
  o.params = CollectAll(*trainer, /*grads=*/false);
  return o;
}

TEST(MpiDataParallel, GridEqualsReplicasInOneProcess) {
  const Config c{"gdn", 2, 2, 2, 40, "stateflow", 2};
  const int D = 2;
  for (bool distributed : {false, true}) {
    const std::string prefix = TempPrefix(std::string("dp") + (distributed ? "-dist" : ""));
    const Finished f = RunFor(
        Mpirun(c.stages * D, {SF_MPI_WORKER, "module=gdn", "stages=2", "microbatches=2",
                              "chunks=2", "seq_len=40", "steps=2", "replicas=2",
                              std::string("distributed=") + (distributed ? "1" : "0"),
                              "out=" + prefix}),
        prefix);
    ASSERT_EQ(f.exit_code, 0) << f.err;
    const Outcome one = RunReplicasInOneProcess(c, D, distributed);
    ASSERT_EQ(one.losses.size(), 2u);
    for (int d = 0; d < D; ++d) {
      // Replica d's ranks: d, D + d (rank 0 also holds the losses).
      Outcome replica;
      for (int r = 0; r < c.stages; ++r) {
        const Outcome rank = ReadWorkerFiles(prefix + ".rank" + std::to_string(r * D + d), 1,
                                             /*exact_path=*/true);
        replica.params.insert(rank.params.begin(), rank.params.end());
        if (r * D + d == 0) replica.losses = rank.losses;
      }
      if (d == 0) {
        EXPECT_LT(RelError(replica.losses, one.losses), 1e-14);
      }
      EXPECT_TRUE(SameNamed(replica.params, one.params, 1e-14))
          << "replica " << d << (distributed ? " (distributed optimizer)" : "");
    }
  }
}

TEST(MpiDataParallel, RankCountDifferentFromTheGridFailsNamingBothSizes) {
  const std::string prefix = TempPrefix("dp-ranks");
  const Finished f = RunFor(
      Mpirun(3, {SF_MPI_WORKER, "stages=2", "replicas=2", "out=" + prefix}), prefix, 60);
  EXPECT_FALSE(f.timed_out);
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.err.find("mpirun started 3 ranks but the scenario has parallel.pipeline_size 2 x "
                       "data_size 2 (one rank per stage and replica: mpirun -n 4)"),
            std::string::npos)
      << f.err;
}

TEST(MpiTransport, RankCountDifferentFromStagesFailsOnEveryRank) {
  const std::string prefix = TempPrefix("ranks");
  const Finished f = RunFor(Mpirun(3, {SF_MPI_WORKER, "stages=2", "out=" + prefix}), prefix, 60);
  EXPECT_FALSE(f.timed_out);
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.err.find("mpirun started 3 ranks but the scenario has parallel.pipeline_size 2"),
            std::string::npos)
      << f.err;
}

}  // namespace
}  // namespace stateflow::backend::testing

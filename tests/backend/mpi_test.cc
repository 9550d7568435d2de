// P ranks under mpirun give what one process gives: the same per-step losses
// and the same final parameters (float64, relative error < 1e-10), with the
// toy module and with the Gated DeltaNet module. The test starts mpirun on
// sf_backend_mpi_worker (mpi_worker.cc) itself and computes the one-process
// reference in-process with the same trainer.
#include <gtest/gtest.h>

#include <sstream>

#include "backend/model/model_stage_module.h"
#include "sim/simulation.h"
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
  int virtual_stages = 0;  // 0: the policy's default
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << c.module << " " << c.policy << " P=" << c.stages << " M=" << c.microbatches
      << " N=" << c.chunks << " T=" << c.seq_len;
}

// The one-process run an MPI run is compared with: `setup`'s model (seed
// 11; or `factory`'s), the default text, seed 3, P stages x `replicas` in
// one process (the trainer reads the text it holds beside it).
struct OneProcess {
  explicit OneProcess(TextData t) : text(std::move(t)) {}
  TextData text;
  std::unique_ptr<Trainer<double>> trainer;
};

std::unique_ptr<OneProcess> MakeOneProcess(const TrainSetup& setup, int stages, int replicas = 1,
                                           StageModuleFactory<double> factory = nullptr) {
  if (!factory) {
    factory = [&setup](int, const models::StageLayers& layers, TrackingAllocator* alloc) {
      return MakeStageModule<double>(setup.model, layers,
                                     {.recompute = setup.recompute,
                                      .seed = 11,
                                      .split_backward = schedule::SplitsBackward(setup.plan)},
                                     alloc);
    };
  }
  auto one = std::make_unique<OneProcess>(Take(TextData::Load(kDefaultTextPath)));
  TrainOptions options;
  options.seed = 3;
  one->trainer = Take(Trainer<double>::Make(
      setup, options, one->text, factory,
      Take(MakeSingleProcessTransport<double>(stages, replicas))));
  return one;
}

Outcome RunOneProcess(const Config& c) {
  const TrainSetup setup =
      ToySetup({c.stages, c.microbatches, c.chunks, c.seq_len, c.policy, c.virtual_stages});
  const bool gdn = std::string(c.module) == "gdn";
  auto reference = MakeOneProcess(setup, c.stages, 1, gdn ? nullptr : ToyFactory<double>(setup, 11));
  Trainer<double>* trainer = reference->trainer.get();
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
                                        "-" + std::to_string(c.chunks) + "-" + c.policy);
  const Finished f = RunFor(
      Mpirun(c.stages, {SF_MPI_WORKER, std::string("module=") + c.module,
                        "stages=" + std::to_string(c.stages),
                        "microbatches=" + std::to_string(c.microbatches),
                        "chunks=" + std::to_string(c.chunks),
                        "seq_len=" + std::to_string(c.seq_len), std::string("policy=") + c.policy,
                        "steps=" + std::to_string(c.steps),
                        "virtual_stages=" + std::to_string(c.virtual_stages), "out=" + prefix}),
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
                      Config{"gdn", 4, 2, 2, 40, "stateflow", 2},
                      // Zero-bubble plans: a split backward, B and W.
                      Config{"gdn", 2, 3, 2, 40, "zb-h1", 2},
                      Config{"gdn", 3, 2, 2, 40, "zb-h2", 2},
                      // Virtual stages: two model stages per rank, in a loop
                      // (rank 1 sends to rank 0 and back) and in a V (rank 1
                      // sends to itself), the backward split in a loop.
                      Config{"gdn", 2, 2, 2, 40, "interleaved", 2, 2},
                      Config{"gdn", 2, 2, 3, 40, "zbv", 2},
                      Config{"gdn", 2, 2, 1, 40, "zb-interleaved", 2}));

// A P x D grid under mpirun (world rank r D + d is stage r of replica d)
// equals the D replicas in one process: the same losses and the same
// parameters on every replica, plain and with the distributed optimizer;
// for D = 2 the sums are the same two-term sums, so within 1e-14.
Outcome RunReplicasInOneProcess(const Config& c, int replicas, bool distributed) {
  pb::Scenario scenario = ToyScenario({c.stages, c.microbatches, c.chunks, c.seq_len, c.policy});
  scenario.mutable_parallel()->set_data_size(replicas);
  scenario.mutable_parallel()->set_distributed_optimizer(distributed);
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(scenario), nullptr));
  auto reference = MakeOneProcess(setup, c.stages, replicas);
  Trainer<double>* trainer = reference->trainer.get();
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

// Tensor parallelism (backend/layers/tensor_parallel.h): P stages x TP
// tensor ranks under mpirun equal one process of the whole model, float64,
// every family: the losses, and every parameter and last gradient assembled
// from the ranks' parts within 1e-12 relative; the parameters every rank
// holds whole are the same bits on every rank.
struct TpConfig {
  const char* model;
  int tensors, stages, chunks;
  int heads = 0, attn_heads = 0, gqa = 0;  // overrides (0: the preset's)
  // KDA's per-channel decay sums long products whose gradients cancel: its
  // dt_bias and f_proj gradients differ from the whole model's by up to
  // 8e-12 relative in the Release build and 4.4e-11 in the sanitizer build
  // (its code compiled otherwise: the sums' order and rounding alone; every
  // other family within 1e-12 in both).
  double tolerance = 1e-12;
  const char* policy = "stateflow";
  int virtual_stages = 0;  // 0: the policy's default
};

void PrintTo(const TpConfig& c, std::ostream* os) {
  *os << c.model << " TP=" << c.tensors << " P=" << c.stages << " N=" << c.chunks << " "
      << c.policy;
}

pb::Scenario TpScenario(const TpConfig& c) {
  pb::Scenario s = ToyScenario({c.stages, 2, c.chunks, 24, c.policy, c.virtual_stages});
  *s.mutable_model() = *models::ModelPreset(c.model);
  if (c.heads > 0) s.mutable_model()->set_num_heads(c.heads);
  if (c.attn_heads > 0) s.mutable_model()->set_attn_heads(c.attn_heads);
  if (c.gqa > 0) s.mutable_model()->set_gqa_group_size(c.gqa);
  return s;
}

struct Part {
  int split_dim = -1;
  std::vector<std::int64_t> shape;
  std::vector<double> values;
};

// "param NAME" / "grad NAME" -> the parts by tensor rank.
using Parts = std::map<std::string, std::map<int, Part>>;

// Each rank's memory in the last step, by (stage, tensor rank).
struct RankMemory {
  std::int64_t peak = 0;
  std::vector<std::int64_t> at_peak, class_peak;
};
using Memories = std::map<std::pair<int, int>, RankMemory>;

// Reads "<prefix>.rank<r>" for r in `ranks` (every rank 0..n-1 by default).
std::vector<double> ReadTpFiles(const std::string& prefix, std::vector<int> ranks, Parts* parts,
                                Memories* memories = nullptr) {
  std::vector<double> losses;
  for (int r : ranks) {
    std::istringstream in(Slurp(prefix + ".rank" + std::to_string(r)));
    std::string kind;
    int tensor = 0, stage = 0;
    while (in >> kind) {
      if (kind == "loss") {
        int step = 0;
        double v = 0;
        in >> step >> v;
        losses.push_back(v);
      } else if (kind == "where") {
        in >> stage >> tensor;
      } else if (kind == "memory") {
        RankMemory m;
        in >> m.peak;
        m.at_peak.resize(kNumBufferClasses);
        m.class_peak.resize(kNumBufferClasses);
        for (std::int64_t& b : m.at_peak) in >> b;
        for (std::int64_t& b : m.class_peak) in >> b;
        if (memories != nullptr) (*memories)[{stage, tensor}] = m;
      } else {
        std::string what, name;
        Part p;
        int rank = 0;
        std::size_t n = 0;
        in >> what >> name >> p.split_dim >> rank;
        p.shape.resize(static_cast<std::size_t>(rank));
        for (std::int64_t& d : p.shape) in >> d;
        in >> n;
        p.values.resize(n);
        for (double& v : p.values) in >> v;
        (*parts)[what + " " + name][tensor] = std::move(p);
      }
    }
  }
  return losses;
}

std::vector<int> AllRanks(int n) {
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

// The whole tensor from the TP ranks' parts (blocks along split_dim in rank
// order; whole parts must be the same bits on every rank).
::testing::AssertionResult Assemble(const std::string& key, const std::map<int, Part>& by_rank,
                                    int tensors, std::vector<double>* whole) {
  if (static_cast<int>(by_rank.size()) != tensors) {
    return ::testing::AssertionFailure() << key << ": " << by_rank.size() << " parts";
  }
  const Part& first = by_rank.at(0);
  if (first.split_dim < 0) {
    for (const auto& [t, p] : by_rank) {
      if (p.values != first.values) {
        return ::testing::AssertionFailure() << key << " differs on tensor rank " << t;
      }
    }
    *whole = first.values;
    return ::testing::AssertionSuccess();
  }
  std::int64_t outer = 1, along = first.shape[static_cast<std::size_t>(first.split_dim)], inner = 1;
  for (int k = 0; k < first.split_dim; ++k) outer *= first.shape[static_cast<std::size_t>(k)];
  for (std::size_t k = static_cast<std::size_t>(first.split_dim) + 1; k < first.shape.size(); ++k) {
    inner *= first.shape[k];
  }
  whole->clear();
  for (std::int64_t o = 0; o < outer; ++o) {
    for (int t = 0; t < tensors; ++t) {
      const std::vector<double>& v = by_rank.at(t).values;
      whole->insert(whole->end(), v.begin() + o * along * inner,
                    v.begin() + (o + 1) * along * inner);
    }
  }
  return ::testing::AssertionSuccess();
}

class MpiTensorParallel : public ::testing::TestWithParam<TpConfig> {};

TEST_P(MpiTensorParallel, EqualsTheWholeModelInOneProcess) {
  const TpConfig& c = GetParam();
  // One step: the gradients are taken at the same parameters on both sides
  // (after two, AdamW's normalisation carries the first step's rounding into
  // parameters near zero: KDA's dt_bias, 5e-12 relative at TP 4).
  const int steps = 1;
  const std::string prefix = TempPrefix(std::string("tp-") + c.model + "-" +
                                        std::to_string(c.tensors) + "-" + std::to_string(c.chunks) +
                                        "-" + c.policy);
  std::vector<std::string> argv = {SF_MPI_WORKER, std::string("model=") + c.model,
                                   "tensors=" + std::to_string(c.tensors),
                                   "stages=" + std::to_string(c.stages), "microbatches=2",
                                   "chunks=" + std::to_string(c.chunks), "seq_len=24",
                                   std::string("policy=") + c.policy,
                                   "virtual_stages=" + std::to_string(c.virtual_stages),
                                   "steps=" + std::to_string(steps), "out=" + prefix};
  if (c.heads > 0) argv.push_back("heads=" + std::to_string(c.heads));
  if (c.attn_heads > 0) argv.push_back("attn_heads=" + std::to_string(c.attn_heads));
  if (c.gqa > 0) argv.push_back("gqa=" + std::to_string(c.gqa));
  const Finished f = RunFor(Mpirun(c.stages * c.tensors, argv), prefix);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  Parts parts;
  const std::vector<double> losses = ReadTpFiles(prefix, AllRanks(c.stages * c.tensors), &parts);

  // The whole model in one process.
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(TpScenario(c)), nullptr));
  auto reference = MakeOneProcess(setup, c.stages);
  Trainer<double>* trainer = reference->trainer.get();
  TrainRun run = Train(*trainer, steps, nullptr);
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  std::vector<double> one_losses;
  for (const StepResult& s : run.steps) one_losses.push_back(s.loss);
  ASSERT_EQ(losses.size(), one_losses.size());
  EXPECT_LT(RelError(losses, one_losses), 1e-12);

  int split = 0;
  for (const char* what : {"param", "grad"}) {
    const Named one = CollectAll(*trainer, std::string(what) == "grad");
    Named assembled;
    for (const auto& [key, by_rank] : parts) {
      if (key.rfind(std::string(what) + " ", 0) != 0) continue;
      std::vector<double> whole;
      ASSERT_TRUE(Assemble(key, by_rank, c.tensors, &whole));
      if (by_rank.at(0).split_dim >= 0) ++split;
      assembled[key.substr(std::string(what).size() + 1)] = std::move(whole);
    }
    EXPECT_TRUE(SameNamed(assembled, one, c.tolerance)) << what;
  }
  EXPECT_GT(split, 0);  // the ranks held parts, not copies
  double grad_norm = 0;
  for (const auto& [name, g] : CollectAll(*trainer, /*grads=*/true)) {
    for (double v : g) grad_norm += v * v;
  }
  EXPECT_GT(grad_norm, 0);  // a backward ran
}

INSTANTIATE_TEST_SUITE_P(
    Families, MpiTensorParallel,
    ::testing::Values(TpConfig{"gdn-tiny", 2, 2, 3}, TpConfig{"gdn-hybrid-tiny", 2, 1, 1},
                      TpConfig{"mamba3-tiny", 2, 1, 3}, TpConfig{"mamba3-hybrid-tiny", 2, 2, 1},
                      TpConfig{"kda-tiny", 2, 1, 1, 0, 0, 0, 1e-10},
                      TpConfig{"kda-hybrid-tiny", 2, 2, 3, 0, 0, 0, 1e-10},
                      TpConfig{"deltanet-tiny", 2, 2, 3},
                      TpConfig{"mamba3-tiny", 4, 1, 3},
                      TpConfig{"gdn-hybrid-tiny", 4, 1, 3, 4, 4, 1},
                      TpConfig{"kda-tiny", 4, 1, 1, 4, 0, 0, 1e-10},
                      // Virtual stages under TP: each model stage's heads
                      // split, its TP sums in the model stages' order.
                      TpConfig{"gdn-tiny", 2, 2, 2, 0, 0, 0, 1e-12, "interleaved", 2},
                      TpConfig{"mamba3-hybrid-tiny", 2, 2, 1, 0, 0, 0, 1e-12, "zbv"},
                      // A split backward under TP: each rank's W store holds
                      // its share of the split columns and the replicated
                      // ones whole (Gemm::replicated).
                      TpConfig{"kda-hybrid-tiny", 2, 2, 2, 0, 0, 0, 1e-10, "zb-h1"}));

// Every tensor rank's memory in a step equals the simulator's prediction for
// the stage at tensor_size TP, byte for byte: the peak and every class at it.
struct TpMemoryCase {
  const char* model;
  int tensors, stages, chunks;
  const char* recompute;
  const char* device;
  int replicas = 1;          // DP: replica 0's ranks are compared (its shard the largest)
  bool distributed = false;  // the distributed optimizer
  const char* policy = "stateflow";
};

void PrintTo(const TpMemoryCase& c, std::ostream* os) {
  *os << c.model << " TP=" << c.tensors << " P=" << c.stages << " N=" << c.chunks << " "
      << c.recompute << " " << c.device << " DP=" << c.replicas
      << (c.distributed ? " distributed" : "");
}

class MpiTensorParallelMemory : public ::testing::TestWithParam<TpMemoryCase> {};

TEST_P(MpiTensorParallelMemory, EveryRankEqualsTheSimulator) {
  const TpMemoryCase& c = GetParam();
  const std::string prefix =
      TempPrefix(std::string("tpmem-") + c.model + "-" + c.recompute + "-" + c.device + "-" +
                 std::to_string(c.chunks) + "-" + std::to_string(c.replicas) + "-" + c.policy);
  const Finished f = RunFor(
      Mpirun(c.stages * c.tensors * c.replicas,
             {SF_MPI_WORKER, std::string("model=") + c.model,
              "tensors=" + std::to_string(c.tensors), "stages=" + std::to_string(c.stages),
              "replicas=" + std::to_string(c.replicas),
              std::string("distributed=") + (c.distributed ? "1" : "0"), "microbatches=2",
              "chunks=" + std::to_string(c.chunks), "seq_len=24", "steps=1",
              std::string("recompute=") + c.recompute, std::string("device=") + c.device,
              std::string("policy=") + c.policy, "out=" + prefix}),
      prefix);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  Parts parts;
  Memories memories;
  std::vector<int> replica0;  // world rank (r D + 0) TP + t
  for (int r = 0; r < c.stages; ++r) {
    for (int t = 0; t < c.tensors; ++t) replica0.push_back(r * c.replicas * c.tensors + t);
  }
  ReadTpFiles(prefix, replica0, &parts, &memories);
  ASSERT_EQ(memories.size(), static_cast<std::size_t>(c.stages * c.tensors));

  TpConfig config{c.model, c.tensors, c.stages, c.chunks};
  config.policy = c.policy;
  pb::Scenario s = TpScenario(config);
  s.mutable_parallel()->set_tensor_size(c.tensors);
  s.mutable_parallel()->set_data_size(c.replicas);
  s.mutable_parallel()->set_distributed_optimizer(c.distributed);
  s.mutable_schedule()->set_recompute(c.recompute);
  *s.mutable_precision() = *models::PrecisionForDtype("float64");
  if (std::string(c.device) != "cpu") s.mutable_train()->set_device(c.device);
  Result<sim::Simulation> sim = sim::Simulate(MustResolve(s), s.schedule());
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  for (const auto& [where, m] : memories) {
    const pb::StageReport& report = sim->report.stages(where.first);
    EXPECT_EQ(m.peak, static_cast<std::int64_t>(report.peak_memory_bytes()))
        << "stage " << where.first << " tensor rank " << where.second;
    for (int k = 0; k < kNumBufferClasses; ++k) {
      EXPECT_EQ(m.at_peak[static_cast<std::size_t>(k)],
                static_cast<std::int64_t>(report.peak_by_class(k).bytes()))
          << "stage " << where.first << " tensor rank " << where.second << " "
          << kBufferClassNames[k];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, MpiTensorParallelMemory,
    ::testing::Values(TpMemoryCase{"gdn-tiny", 2, 2, 3, "none", "cpu"},
                      TpMemoryCase{"gdn-hybrid-tiny", 2, 2, 2, "full", "cpu"},
                      TpMemoryCase{"mamba3-hybrid-tiny", 2, 2, 3, "none", "host-grid"},
                      TpMemoryCase{"kda-hybrid-tiny", 2, 1, 2, "full", "host-grid"},
                      TpMemoryCase{"deltanet-tiny", 2, 2, 1, "none", "host-grid"},
                      TpMemoryCase{"mamba3-tiny", 4, 1, 2, "none", "cpu"},
                      TpMemoryCase{"gdn-hybrid-tiny", 2, 1, 2, "none", "host-grid", 2, true},
                      TpMemoryCase{"kda-tiny", 2, 1, 1, "full", "cpu", 2, false},
                      // The split backward's W stores under TP (Gemm::replicated),
                      // and virtual stages.
                      TpMemoryCase{"mamba3-hybrid-tiny", 2, 2, 2, "none", "cpu", 1, false, "zb-h1"},
                      TpMemoryCase{"kda-tiny", 2, 2, 1, "none", "host-grid", 1, false, "zbv"}));

// A TP x DP grid (P 1 x TP 2 x DP 2 = 4 ranks, world rank d TP + t) equals
// the whole model's two replicas in one process; each replica's ranks hold
// the same bits.
TEST(MpiTensorParallel, WithDataParallelEqualsTheReplicasInOneProcess) {
  const int TP = 2, D = 2;
  const TpConfig c{"gdn-hybrid-tiny", TP, 1, 3};
  const std::string prefix = TempPrefix("tp-dp");
  const Finished f = RunFor(
      Mpirun(TP * D, {SF_MPI_WORKER, "model=gdn-hybrid-tiny", "tensors=2", "replicas=2",
                      "stages=1", "microbatches=2", "chunks=3", "seq_len=24", "steps=1",
                      "out=" + prefix}),
      prefix);
  ASSERT_EQ(f.exit_code, 0) << f.err;
  Parts replica0, replica1;
  const std::vector<double> losses = ReadTpFiles(prefix, {0, 1}, &replica0);
  ReadTpFiles(prefix, {2, 3}, &replica1);
  ASSERT_EQ(replica0.size(), replica1.size());
  for (const auto& [key, by_rank] : replica0) {
    for (const auto& [t, part] : by_rank) {
      EXPECT_EQ(part.values, replica1.at(key).at(t).values) << key << " tensor rank " << t;
    }
  }

  pb::Scenario s = TpScenario(c);
  s.mutable_parallel()->set_data_size(D);
  const TrainSetup setup = Take(MakeTrainSetup(MustResolve(s), nullptr));
  auto reference = MakeOneProcess(setup, 1, D);
  Trainer<double>* trainer = reference->trainer.get();
  TrainRun run = Train(*trainer, 1, nullptr);
  ASSERT_TRUE(run.status.ok()) << run.status.message();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_LT(RelError(losses, {run.steps[0].loss}), 1e-12);
  // Replica 0's module in one process (local endpoint 0).
  for (const char* what : {"param", "grad"}) {
    Named one;
    Collect(trainer->module(0), std::string(what) == "grad", &one);
    Named assembled;
    for (const auto& [key, by_rank] : replica0) {
      if (key.rfind(std::string(what) + " ", 0) != 0) continue;
      std::vector<double> whole;
      ASSERT_TRUE(Assemble(key, by_rank, TP, &whole));
      assembled[key.substr(std::string(what).size() + 1)] = std::move(whole);
    }
    EXPECT_TRUE(SameNamed(assembled, one, 1e-12)) << what;
  }
}

TEST(MpiTensorParallel, RankCountDifferentFromTheGridFailsNamingIt) {
  const std::string prefix = TempPrefix("tp-ranks");
  const Finished f = RunFor(Mpirun(3, {SF_MPI_WORKER, "model=gdn-tiny", "stages=1",
                                      "tensors=2", "out=" + prefix}),
                            prefix, 60);
  EXPECT_FALSE(f.timed_out);
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.err.find("mpirun started 3 ranks but the scenario has parallel.pipeline_size 1 x "
                       "tensor_size 2 (one rank per stage, replica and tensor rank: mpirun -n 2)"),
            std::string::npos)
      << f.err;
}

}  // namespace
}  // namespace stateflow::backend::testing

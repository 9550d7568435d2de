// `stateflow profile` and `stateflow validate` end to end (each run with a
// deadline; validate starts `mpirun -n 2 stateflow train` itself):
//   - validate on a small configuration (gdn-tiny, P = 2, M = 2, N = 2,
//     T = 64, 2 steps, 3 repetitions) predicts each stage's peak memory
//     within 2 % and produces the timing comparison; its prediction is the
//     one `simulate --costs` makes from the same table, its measurement the
//     one `train` makes (peak bytes are deterministic);
//   - profile writes a table with every (kind, pass, mode, length) the
//     scenario's N range produces, that `simulate --costs` replays;
//   - a corrupt or mismatched table (syntax, wrong model, missing layer kind,
//     negative time, other dtype, lengths outside the measured range) and bad
//     flags get one line naming the problem and exit code 2.
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <cstdlib>
#include <csignal>
#include <thread>
#include <sstream>
#include <filesystem>
#include <regex>
#include <set>
#include <tuple>

#include "models/family.h"
#include "models/layer_formulas.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"
#include "tests/backend/subprocess_util.h"
#include "tests/family_presets.h"
#include "tests/sanitized.h"

namespace stateflow::backend::testing {
namespace {

const std::string kStateflow = std::string(SF_BINARY_DIR) + "/stateflow";

std::string Temp(const std::string& name) {
  return std::string(SF_BINARY_DIR) + "/test-tmp-validate-" + name;
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = Temp(name);
  std::ofstream(path) << text;
  return path;
}

std::vector<std::string> Cmd(std::vector<std::string> args) {
  args.insert(args.begin(), kStateflow);
  return args;
}

Finished RunCli(const std::vector<std::string>& args, const std::string& tag) {
  return RunFor(Cmd(args), Temp(tag), 120);
}

// The tiny model at P = 2, M = 2, T = 64, StateFlow N = 2, with the byte
// sizes of float32 (what the backend computes in).
constexpr char kScenario[] = R"(name: "validate-test"
model_preset: "gdn-tiny"
cluster_preset: "cpu"
parallel { pipeline_size: 2 tensor_size: 1 data_size: 1 microbatch_size: 1 microbatches: 2 }
seq_len: 64
schedule { policy: "stateflow" chunks: 2 alpha: 0 granularity: 16 recompute: "none" }
precision { weight_bytes: 4 gradient_bytes: 4 optimizer_bytes: 8 activation_bytes: 4 }
train { steps: 2 seed: 1 dtype: "float32" threads: 1 }
)";
constexpr std::int64_t kSeqLen = 64;

template <typename M>
M FromJson(const Finished& f) {
  M message;
  const auto status = google::protobuf::util::JsonStringToMessage(f.out, &message);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << f.out << f.err;
  return message;
}

pb::CostTable ReadTable(const std::string& path) {
  pb::CostTable table;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(Slurp(path), &table)) << path;
  return table;
}

double Rel(double predicted, double measured) { return (predicted - measured) / measured; }

// ---- validate -------------------------------------------------------------------

TEST(ValidateCli, PeakMemoryPerStageWithinTwoPercentAndTimingCompared) {
  const std::string scenario = WriteFile("scenario.textproto", kScenario);
  const std::string costs = Temp("costs.textproto");
  // --concurrent 1: one table for every stage, the one --costs-out writes
  // (by default each stage replays the costs of the profile process on its
  // core, which one table cannot hold).
  const Finished v = RunCli({"validate", "--scenario", scenario, "--steps", "2", "--repetitions",
                             "3", "--warmup", "1", "--concurrent", "1", "--json", "--costs-out",
                             costs},
                            "small");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const pb::ValidationReport report = FromJson<pb::ValidationReport>(v);
  ASSERT_EQ(report.runs_size(), 1);
  const pb::ValidationRun& run = report.runs(0);
  EXPECT_EQ(run.policy(), "stateflow");
  EXPECT_EQ(std::make_tuple(run.pipeline_size(), run.microbatches(), run.chunks()),
            std::make_tuple(2u, 2u, 2u));
  EXPECT_EQ(run.measured_steps(), 1u);  // 2 steps, the first is warm-up
  ASSERT_EQ(run.stages_size(), 2);
  double worst = 0;
  for (const pb::ValidationStage& s : run.stages()) {
    ASSERT_GT(s.measured_peak_memory_bytes(), 0);
    const double e = Rel(s.predicted_peak_memory_bytes(), s.measured_peak_memory_bytes());
    EXPECT_LE(std::abs(e), 0.02) << "stage " << s.stage() << ": predicted "
                                 << s.predicted_peak_memory_bytes() << " B, measured "
                                 << s.measured_peak_memory_bytes() << " B";
    EXPECT_NEAR(s.peak_memory_rel_error(), e, 1e-12);
    if (std::abs(e) > std::abs(worst)) worst = e;
    EXPECT_EQ(s.predicted_peak_by_class_size(), 8);
    EXPECT_EQ(s.measured_peak_by_class_size(), 8);
    // The timing comparison is there (its accuracy is a benchmark, not a test).
    EXPECT_GT(s.predicted_busy_s(), 0);
    EXPECT_GT(s.measured_busy_s(), 0);
    EXPECT_NEAR(s.busy_rel_error(), Rel(s.predicted_busy_s(), s.measured_busy_s()), 1e-12);
  }
  EXPECT_NEAR(run.peak_memory_rel_error(), worst, 1e-12);
  EXPECT_GT(run.predicted_step_time_s(), 0);
  EXPECT_GT(run.measured_step_time_s(), 0);
  EXPECT_NEAR(run.step_time_rel_error(),
              Rel(run.predicted_step_time_s(), run.measured_step_time_s()), 1e-12);
  EXPECT_NEAR(report.max_abs_step_time_rel_error(), std::abs(run.step_time_rel_error()), 1e-12);
  // The link was timed between two MPI ranks (mpirun -n 2), not in-process:
  // the link worker's samples read back (before, its table of samples alone
  // failed the write's read-back, "link.bandwidth_bytes_per_s must be > 0",
  // and every validate fell back to the in-process copy).
  bool mpi_link = false;
  for (const std::string& note : report.notes()) {
    if (note.rfind("link: ping-pong between two MPI ranks", 0) == 0) mpi_link = true;
  }
  EXPECT_TRUE(mpi_link) << v.out;

  // The prediction is the simulator's replay of the same table...
  const Finished sim =
      RunCli({"simulate", "--scenario", scenario, "--costs", costs, "--json"}, "small-sim");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const pb::Report predicted = FromJson<pb::Report>(sim);
  EXPECT_EQ(predicted.cost_model(), "replay");
  EXPECT_NEAR(Rel(run.predicted_step_time_s(), predicted.step_time_s()), 0, 1e-12);
  // ...and the measurement is train's (peak bytes do not depend on timing).
  const Finished train =
      RunFor(Mpirun(2, Cmd({"train", "--scenario", scenario, "--steps", "1", "--json"})),
             Temp("small-train"), 120);
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const pb::Report measured = FromJson<pb::Report>(train);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.stages(r).predicted_peak_memory_bytes(), predicted.stages(r).peak_memory_bytes());
    EXPECT_EQ(run.stages(r).measured_peak_memory_bytes(), measured.stages(r).peak_memory_bytes());
  }
}

// PP 2 x DP 2 (mpirun -n 4, issue 26), plain and with the distributed
// optimizer: every stage's predicted peak equals the measured one (replica
// 0's, holding the larger optimizer shard), and the timing is compared.
TEST(ValidateCli, DataParallelPeakMemoryIsExact) {
  const std::string scenario = WriteFile("scenario-dp.textproto", kScenario);
  for (const char* distributed : {"off", "on"}) {
    const Finished v = RunCli({"validate", "--scenario", scenario, "--steps", "2", "--repetitions",
                               "1", "--warmup", "0", "--data-parallel", "2",
                               "--distributed-optimizer", distributed, "--json"},
                              std::string("dp-") + distributed);
    ASSERT_EQ(v.exit_code, 0) << v.err;
    const pb::ValidationReport report = FromJson<pb::ValidationReport>(v);
    ASSERT_EQ(report.runs_size(), 1);
    ASSERT_EQ(report.runs(0).stages_size(), 2);
    for (const pb::ValidationStage& s : report.runs(0).stages()) {
      EXPECT_GT(s.measured_peak_memory_bytes(), 0);
      EXPECT_EQ(s.predicted_peak_memory_bytes(), s.measured_peak_memory_bytes())
          << distributed << " stage " << s.stage();
    }
    EXPECT_GT(report.runs(0).measured_step_time_s(), 0);
  }
}

// On --device host-grid the prediction counts that device's GDN core
// scratch (larger than the CPU kernels': models/cost_model.h,
// CoreWorkspace), so the peaks are exact there too: every stage's predicted
// peak equals the measured one, and exceeds the CPU run's prediction.
TEST(ValidateCli, HostGridPeakMemoryIsExact) {
  const std::string scenario = WriteFile("scenario-grid.textproto", kScenario);
  std::vector<double> peaks[2];  // cpu, host-grid: predicted per stage
  int d = 0;
  for (const char* device : {"cpu", "host-grid"}) {
    const Finished v = RunCli({"validate", "--scenario", scenario, "--steps", "2", "--repetitions",
                               "1", "--warmup", "0", "--concurrent", "1", "--device", device,
                               "--json"},
                              std::string("grid-") + device);
    ASSERT_EQ(v.exit_code, 0) << v.err;
    const pb::ValidationReport report = FromJson<pb::ValidationReport>(v);
    ASSERT_EQ(report.runs_size(), 1);
    for (const pb::ValidationStage& s : report.runs(0).stages()) {
      EXPECT_EQ(s.predicted_peak_memory_bytes(), s.measured_peak_memory_bytes())
          << device << " stage " << s.stage();
      peaks[d].push_back(s.predicted_peak_memory_bytes());
    }
    ++d;
  }
  ASSERT_EQ(peaks[0].size(), peaks[1].size());
  for (size_t r = 0; r < peaks[0].size(); ++r) EXPECT_GT(peaks[1][r], peaks[0][r]) << r;
}

// Every registered family and its attention hybrid (tests/family_presets.h)
// through profile, replay and a P = 2 run on both devices: each stage's
// predicted peak equals the measured one to the byte. Under a sanitizer
// (tests/sanitized.h), each family on one device, the devices taken in turn.
TEST(ValidateCli, EveryFamilyPeakMemoryIsExactAtTwoStages) {
  const std::string scenario = WriteFile("scenario-families.textproto", kScenario);
  const std::vector<std::string> models = stateflow::testing::TinyFamilyPresets();
  for (size_t m = 0; m < models.size(); ++m) {
    const std::string& model = models[m];
    const std::vector<const char*> devices = {"cpu", "host-grid"};
    for (const char* device :
         stateflow::testing::SanitizedOr(devices, {devices[m % devices.size()]})) {
      SCOPED_TRACE(model + " on " + device);
      const Finished v = RunCli({"validate", "--scenario", scenario, "--model", model, "--steps",
                                 "2", "--repetitions", "1", "--warmup", "0", "--concurrent", "1",
                                 "--device", device, "--json"},
                                "family-" + model + "-" + device);
      ASSERT_EQ(v.exit_code, 0) << v.err;
      const pb::ValidationReport report = FromJson<pb::ValidationReport>(v);
      ASSERT_EQ(report.runs_size(), 1);
      ASSERT_EQ(report.runs(0).stages_size(), 2);
      for (const pb::ValidationStage& s : report.runs(0).stages()) {
        EXPECT_GT(s.measured_peak_memory_bytes(), 0);
        EXPECT_EQ(s.predicted_peak_memory_bytes(), s.measured_peak_memory_bytes())
            << "stage " << s.stage();
      }
    }
  }
}

// bf16 (issue 12) on host-grid: profiled in bf16 (the table says so), the
// run's peaks predicted at the mixed precision's bytes and measured equal,
// below the float32 run's; bf16 on the cpu device is refused in one line.
TEST(ValidateCli, Bf16OnHostGridPeakMemoryIsExact) {
  const std::string scenario = WriteFile("scenario-bf16.textproto", kScenario);
  std::vector<double> peaks[2];  // float32, bf16
  int k = 0;
  for (const char* dtype : {"float32", "bf16"}) {
    const std::string out = Temp(std::string("bf16-costs-") + dtype + ".textproto");
    const Finished v = RunCli({"validate", "--scenario", scenario, "--steps", "2", "--repetitions",
                               "1", "--warmup", "0", "--concurrent", "1", "--device",
                               "host-grid", "--dtype", dtype, "--costs-out", out, "--json"},
                              std::string("bf16-") + dtype);
    ASSERT_EQ(v.exit_code, 0) << v.err;
    const pb::ValidationReport report = FromJson<pb::ValidationReport>(v);
    EXPECT_EQ(report.dtype(), dtype);
    ASSERT_EQ(report.runs_size(), 1);
    for (const pb::ValidationStage& s : report.runs(0).stages()) {
      EXPECT_EQ(s.predicted_peak_memory_bytes(), s.measured_peak_memory_bytes())
          << dtype << " stage " << s.stage();
      peaks[k].push_back(s.predicted_peak_memory_bytes());
    }
    std::ifstream table(out);
    const std::string text((std::istreambuf_iterator<char>(table)), {});
    EXPECT_NE(text.find(std::string("dtype: \"") + dtype + "\""), std::string::npos) << out;
    ++k;
  }
  ASSERT_EQ(peaks[0].size(), peaks[1].size());
  for (size_t r = 0; r < peaks[0].size(); ++r) EXPECT_LT(peaks[1][r], peaks[0][r]) << r;
  const Finished cpu = RunCli(
      {"profile", "--scenario", scenario, "--dtype", "bf16", "--out", Temp("bf16-cpu.textproto")},
      "bf16-cpu");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.err.find("--dtype: bf16 runs on the grid devices"), std::string::npos) << cpu.err;
}

// P = 1: the real run is one process (no mpirun); the link timed in process.
TEST(ValidateCli, TextTableNamesEveryQuantity) {
  const std::string scenario = WriteFile("text.textproto", kScenario);
  const Finished v = RunCli({"validate", "--scenario", scenario, "-P", "1", "--steps", "2",
                             "--repetitions", "2", "--warmup", "0", "--link", "in-process"},
                            "text");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  for (const char* word :
       {"step time", "bubble", "stage 0 busy", "stage 0 peak", "activations", "predicted",
        "measured", "error", "1 configuration:", "(P=1", "NOT between MPI ranks"}) {
    EXPECT_NE(v.out.find(word), std::string::npos) << word << "\n" << v.out;
  }
}

// Rounds: each profiles (the layers in P = 2 processes at once) and runs the
// configuration once; the measured step time is the median run's, between
// the fastest and the slowest; the costs are the rounds' merged table.
TEST(ValidateCli, RoundsTakeTheMedianRunAndPoolTheProfiles) {
  const std::string scenario = WriteFile("rounds.textproto", kScenario);
  const std::string costs = Temp("rounds-costs.textproto");
  const Finished v = RunCli({"validate", "--scenario", scenario, "--steps", "2", "--repetitions",
                             "2", "--warmup", "0", "--rounds", "3", "--json", "--costs-out", costs},
                            "rounds");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const pb::ValidationReport report = FromJson<pb::ValidationReport>(v);
  ASSERT_EQ(report.runs_size(), 1);
  const pb::ValidationRun& run = report.runs(0);
  EXPECT_EQ(run.rounds(), 3u);
  EXPECT_GT(run.measured_step_time_min_s(), 0);
  EXPECT_LE(run.measured_step_time_min_s(), run.measured_step_time_s());
  EXPECT_LE(run.measured_step_time_s(), run.measured_step_time_max_s());
  EXPECT_NEAR(run.step_time_rel_error(),
              Rel(run.predicted_step_time_s(), run.measured_step_time_s()), 1e-12);
  EXPECT_LE(std::abs(run.peak_memory_rel_error()), 0.02);
  // The median run replayed with its own action times, beside its own step.
  EXPECT_GT(run.replayed_step_time_s(), 0);
  EXPECT_GE(run.replayed_run_step_time_s(), run.measured_step_time_min_s());
  EXPECT_LE(run.replayed_run_step_time_s(), run.measured_step_time_max_s());
  EXPECT_NEAR(run.replay_step_time_rel_error(),
              Rel(run.replayed_step_time_s(), run.replayed_run_step_time_s()), 1e-12);
  EXPECT_NEAR(report.max_abs_replay_step_time_rel_error(),
              std::abs(run.replay_step_time_rel_error()), 1e-12);
  // 3 rounds x 2 processes x 2 repetitions behind every sample.
  const pb::CostTable table = ReadTable(costs);
  ASSERT_GT(table.samples_size(), 0);
  for (const pb::CostSample& s : table.samples()) {
    EXPECT_EQ(s.repetitions(), 12u) << s.layer_kind() << " " << s.pass();
    EXPECT_LE(s.p10_s(), s.median_s());
    EXPECT_LE(s.median_s(), s.p90_s());
  }
  std::string notes;
  for (const std::string& n : table.notes()) notes += n + "\n";
  EXPECT_NE(notes.find("merged: 3 profiles"), std::string::npos) << notes;
  EXPECT_NE(notes.find("2 processes at once"), std::string::npos) << notes;
}

// ---- profile ----------------------------------------------------------------------

// --concurrent 2: two processes time the same samples at once; each sample
// pools their repetitions and its median lies between their spreads.
TEST(ProfileCli, ConcurrentProcessesPoolTheirRepetitions) {
  const std::string scenario = WriteFile("concurrent.textproto", kScenario);
  const std::string costs = Temp("concurrent-costs.textproto");
  const Finished p =
      RunCli({"profile", "--scenario", scenario, "--concurrent", "2", "--repetitions", "3",
              "--warmup", "0", "--link", "in-process", "--out", costs},
             "concurrent");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const pb::CostTable table = ReadTable(costs);
  ASSERT_GT(table.samples_size(), 0);
  for (const pb::CostSample& s : table.samples()) {
    EXPECT_EQ(s.repetitions(), 6u) << s.layer_kind() << " " << s.pass();
    EXPECT_GT(s.median_s(), 0);
    EXPECT_LE(s.p10_s(), s.median_s());
    EXPECT_LE(s.median_s(), s.p90_s());
  }
  EXPECT_GT(table.optimizer_s_per_param(), 0);
  EXPECT_NE(p.out.find("2 processes at once"), std::string::npos) << p.out;
  const Finished sim =
      RunCli({"simulate", "--scenario", scenario, "--costs", costs, "--json"}, "concurrent-sim");
  EXPECT_EQ(sim.exit_code, 0) << sim.err;
}

// --verbose: one stderr line per timing step with its wall seconds, in the
// order they ran: every layer built, then each repetition's steps (the
// warm-up marked), the optimizer last; the table is the same kind of table.
TEST(ProfileCli, VerboseNamesEveryTimingStepAndItsSeconds) {
  const std::string scenario = WriteFile("verbose.textproto", kScenario);
  const std::string costs = Temp("verbose-costs.textproto");
  const Finished p =
      RunCli({"profile", "--scenario", scenario, "-N", "2", "--repetitions", "1", "--warmup",
              "1", "--link", "in-process", "--verbose", "--out", costs},
             "verbose");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::vector<std::string> lines;
  std::istringstream err(p.err);
  for (std::string line; std::getline(err, line);) {
    if (line.rfind("stateflow profile: ", 0) == 0) lines.push_back(line);
  }
  const std::regex seconds(R"(: [0-9]+\.[0-9]{3} s$)");
  for (const std::string& line : lines) EXPECT_TRUE(std::regex_search(line, seconds)) << line;
  auto first = [&](const std::string& what) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find(what) != std::string::npos) return static_cast<int>(i);
    }
    return -1;
  };
  const int built = first("head layer built");
  const int warm = first("recurrence s 32 repetition 0 (warm-up, forward ");
  const int timed = first("recurrence s 32 repetition 1 (forward ");
  const int phases = first("recurrence s 32 repetition 1, core phases");
  const int split = first("head s 32 repetition 1, split backward");
  const int optimizer = first("optimizer timed");
  ASSERT_GE(first("embedding layer built"), 0) << p.err;
  EXPECT_GT(built, first("recurrence layer built")) << p.err;
  EXPECT_GT(warm, built) << p.err;
  EXPECT_GT(timed, warm) << p.err;
  EXPECT_GT(phases, timed) << p.err;
  EXPECT_GT(split, phases) << p.err;
  EXPECT_EQ(optimizer, static_cast<int>(lines.size()) - 1) << p.err;
  EXPECT_EQ(first("repetition 0, split"), -1) << "the warm-up times no split\n" << p.err;
  EXPECT_GT(ReadTable(costs).samples_size(), 0);
}

TEST(ProfileCli, WritesEveryLengthOfTheRangeAndSimulateReplaysIt) {
  const std::string scenario = WriteFile("profile.textproto", kScenario);
  const std::string costs = Temp("profile-costs.textproto");
  const std::vector<int> chunk_counts = {1, 2};
  const Finished p =
      RunCli({"profile", "--scenario", scenario, "--chunks-list", "1,2", "--recompute-list",
              "none,full", "--repetitions", "2", "--warmup", "0", "--out", costs},
             "profile");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("wrote " + costs), std::string::npos) << p.out;
  const pb::CostTable table = ReadTable(costs);
  EXPECT_EQ(table.model().hidden_size(), models::ModelPreset("gdn-tiny")->hidden_size());
  EXPECT_EQ(table.dtype(), "float32");
  EXPECT_FALSE(table.provenance().host().empty());
  EXPECT_FALSE(table.provenance().timestamp().empty());
  EXPECT_EQ(table.provenance().threads(), 1u);
  // Every (kind, pass, mode) at every chunk length T / N of the range.
  std::set<double> lengths;
  for (int n : chunk_counts) lengths.insert(static_cast<double>(kSeqLen / n));
  std::set<std::tuple<std::string, std::string, std::string, double>> want, have;
  for (const char* kind : {"embedding", "recurrence", "head"}) {
    for (const char* pass : {"forward", "backward", "input", "weight"}) {
      for (const char* mode : {"none", "full"}) {
        for (double s : lengths) want.insert({kind, pass, mode, s});
      }
    }
  }
  for (const pb::CostSample& s : table.samples()) {
    have.insert({s.layer_kind(), s.pass(), s.recompute(), s.tokens()});
    EXPECT_EQ(s.repetitions(), 2u);
    EXPECT_GE(s.median_s(), 0);
  }
  EXPECT_EQ(have, want);
  EXPECT_EQ(table.samples_size(), static_cast<int>(want.size()));
  EXPECT_GT(table.optimizer_s_per_param(), 0);
  EXPECT_GT(table.link().bandwidth_bytes_per_s(), 0);
  EXPECT_GE(table.link_samples_size(), 3);
  EXPECT_GE(table.notes_size(), 4);

  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"-N", "1"}, {"--recompute", "full"}}) {
    std::vector<std::string> args = {"simulate", "--scenario", scenario,
                                     "--costs",  costs,        "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Finished sim = RunCli(args, "profile-sim");
    ASSERT_EQ(sim.exit_code, 0) << sim.err;
    const pb::Report r = FromJson<pb::Report>(sim);
    EXPECT_EQ(r.cost_model(), "replay");
    EXPECT_GT(r.step_time_s(), 0);
  }
}

// --kernel-costs alone: no layers, a cluster file (the scenario's cluster with
// a kernel-cost table) holding one GEMM point per (pass, shape) the cost
// model looks up for every model at both chunk lengths, in its (m, n, k)
// convention, and one recurrence point per (kernel, head dim, chunk length,
// pass); and simulate reads it with --cluster.
TEST(ProfileCli, KernelCostsWriteTheScenariosClusterWithEveryShapesRate) {
  const std::string scenario = WriteFile("gemm.textproto", kScenario);
  const std::string cluster_path = Temp("gemm-cluster.textproto");
  const Finished p =
      RunCli({"profile", "--scenario", scenario, "--chunks-list", "1,2", "--kernel-models",
              "gdn-small,mamba3-tiny", "--repetitions", "2", "--warmup", "0", "--kernel-costs",
              cluster_path},
             "gemm");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("wrote " + cluster_path), std::string::npos) << p.out;
  pb::ClusterSpec cluster;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(Slurp(cluster_path), &cluster));
  EXPECT_TRUE(models::ValidateCluster(cluster).ok()) << models::ValidateCluster(cluster).message();
  pb::ClusterSpec without = cluster;
  without.clear_kernel_costs();
  pb::ClusterSpec preset = *models::ClusterPreset("cpu");
  preset.clear_kernel_costs();
  EXPECT_EQ(without.SerializeAsString(), preset.SerializeAsString());
  const pb::KernelCosts& costs = cluster.kernel_costs();
  ASSERT_EQ(costs.sources_size(), 1);
  EXPECT_NE(costs.sources(0).find("gdn-tiny, gdn-small, mamba3-tiny"), std::string::npos)
      << costs.sources(0);
  EXPECT_EQ(costs.attention_size() + costs.all_reduce_size(), 0);
  std::set<std::tuple<double, double, double>> want, have;
  std::set<std::tuple<std::string, std::uint32_t, double, std::string>> want_core, have_core;
  for (const char* name : {"gdn-tiny", "gdn-small", "mamba3-tiny"}) {
    const pb::ModelSpec model = *models::ModelPreset(name);
    const models::Family& family = models::FamilyOfValid(model);
    for (double s : {double(kSeqLen), double(kSeqLen / 2)}) {
      for (const char* pass : {"forward", "backward"}) {
        want_core.insert({std::string(family.kernel_name()),
                          static_cast<std::uint32_t>(family.KernelHeadDim(model)), s, pass});
      }
    }
    for (models::LayerKind kind : {models::LayerKind::kRecurrence, models::LayerKind::kHead}) {
      for (const models::Gemm& g : models::LayerGemms(model, kind)) {
        for (double t : {double(kSeqLen), double(kSeqLen / 2)}) {
          want.insert({t, g.n, g.k});  // forward
          want.insert({t, g.k, g.n});  // input gradient
          want.insert({g.k, g.n, t});  // weight gradient
        }
      }
    }
  }
  for (const pb::GemmPoint& g : costs.gemm()) {
    have.insert({g.m(), g.n(), g.k()});
    EXPECT_EQ(g.dtype(), "fp32");
    EXPECT_GT(g.flops_per_s(), 0);
  }
  EXPECT_EQ(have, want);
  for (const pb::RecurrencePoint& r : costs.recurrence()) {
    have_core.insert({r.kernel(), r.head_dim(), r.seq_len(), r.pass()});
    EXPECT_EQ(r.dtype(), "fp32");
    EXPECT_GT(r.flops_per_s(), 0);
  }
  EXPECT_EQ(have_core, want_core);
  EXPECT_EQ(costs.recurrence_size(), static_cast<int>(want_core.size()));
  // --kernel-components: one component, the other left to the curve.
  for (const char* only : {"gemm", "recurrence"}) {
    const std::string path = Temp(std::string("only-") + only + ".textproto");
    const Finished one =
        RunCli({"profile", "--scenario", scenario, "--chunks-list", "1,2", "--repetitions", "1",
                "--warmup", "0", "--kernel-costs", path, "--kernel-components", only},
               std::string("only-") + only);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    pb::ClusterSpec part;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(Slurp(path), &part));
    EXPECT_EQ(part.kernel_costs().gemm_size() > 0, std::string(only) == "gemm");
    EXPECT_EQ(part.kernel_costs().recurrence_size() > 0, std::string(only) == "recurrence");
  }

  double step[2] = {0, 0};
  for (int with = 0; with < 2; ++with) {
    std::vector<std::string> args = {"simulate", "--scenario", scenario, "--json"};
    if (with) args.insert(args.end(), {"--cluster", cluster_path});
    const Finished sim = RunCli(args, "gemm-sim");
    ASSERT_EQ(sim.exit_code, 0) << sim.err;
    step[with] = FromJson<pb::Report>(sim).step_time_s();
  }
  EXPECT_GT(step[0], 0);
  EXPECT_GT(step[1], 0);
  EXPECT_NE(step[0], step[1]);
}

// ---- bad input ----------------------------------------------------------------------

// Exit code 2, one line on stderr containing `text`, nothing on stdout.
void ExpectBadInput(const Finished& f, const std::string& text) {
  EXPECT_EQ(f.exit_code, 2) << f.err;
  EXPECT_NE(f.err.find(text), std::string::npos) << f.err;
  EXPECT_EQ(std::count(f.err.begin(), f.err.end(), '\n'), 1) << f.err;
  EXPECT_TRUE(f.out.empty()) << f.out;
}

// gdn-tiny measured at `tokens` tokens; `extra` is appended.
std::string Table(const std::string& model, int tokens, const std::string& extra = "") {
  std::string t = "model { " + model +
                  " }\ndtype: \"float32\"\n"
                  "link { latency_s: 1e-6 bandwidth_bytes_per_s: 1e9 }\n";
  for (const char* kind : {"embedding", "recurrence", "head"}) {
    for (const char* pass : {"forward", "backward"}) {
      t += std::string("samples { layer_kind: \"") + kind + "\" pass: \"" + pass +
           "\" recompute: \"none\" tokens: " + std::to_string(tokens) + " median_s: 0.001 }\n";
    }
  }
  return t + extra;
}

const char kTinyModel[] =
    "name: \"gdn-tiny\" architecture: \"gdn\" layer_pattern: \"recurrent\" num_layers: 4 "
    "hidden_size: 64 num_heads: 2 head_dim_k: 32 head_dim_v: 32 conv_width: 4 mlp_size: 128 "
    "vocab_size: 256 untied_embeddings: true";

Finished ValidateWith(const std::string& name, const std::string& table_text) {
  const std::string scenario = WriteFile("bad-scenario.textproto", kScenario);
  return RunCli({"validate", "--scenario", scenario, "--costs", WriteFile(name, table_text)}, name);
}

TEST(ValidateCli, BadCostTablesGetOneLineAndExitTwo) {
  const int s = kSeqLen / 2;  // the scenario's chunk length
  ExpectBadInput(ValidateWith("corrupt.textproto", "model { hidden_size: 64 \nsamples {"),
                 "corrupt.textproto:2:");
  std::string wider = kTinyModel;
  wider.replace(wider.find("hidden_size: 64"), 15, "hidden_size: 96");
  ExpectBadInput(ValidateWith("model.textproto", Table(wider, s)), "model.hidden_size");
  std::string no_head = Table(kTinyModel, s);
  no_head = no_head.substr(0, no_head.find("samples { layer_kind: \"head\""));
  ExpectBadInput(ValidateWith("nohead.textproto", no_head), "no head");
  ExpectBadInput(ValidateWith("negative.textproto",
                              Table(kTinyModel, s,
                                    "samples { layer_kind: \"head\" pass: \"forward\" recompute: "
                                    "\"none\" tokens: 64 median_s: -2 }\n")),
                 "median_s");
  std::string other_dtype = Table(kTinyModel, s);
  other_dtype.replace(other_dtype.find("float32"), 7, "float64");
  ExpectBadInput(ValidateWith("dtype.textproto", other_dtype), "measured in float64");
  ExpectBadInput(ValidateWith("range.textproto", Table(kTinyModel, 4 * s)),
                 "outside the measured range");
}

TEST(ValidateCli, BadFlagsGetOneLineAndExitTwo) {
  const std::string scenario = WriteFile("flags.textproto", kScenario);
  ExpectBadInput(RunCli({"profile", "--scenario", scenario}, "no-out"), "--out");
  ExpectBadInput(RunCli({"profile", "--scenario", scenario, "--out", Temp("x"), "--kernel-models",
                         "gdn-small"},
                        "kernel-models-alone"),
                 "--kernel-models needs --kernel-costs");
  ExpectBadInput(RunCli({"profile", "--scenario", scenario, "--kernel-costs", Temp("x"),
                         "--kernel-models", "gdn-nothing"},
                        "kernel-models-unknown"),
                 "--kernel-models");
  ExpectBadInput(RunCli({"profile", "--scenario", scenario, "--kernel-costs", Temp("x"),
                         "--kernel-components", "gemm,attention"},
                        "kernel-components-unknown"),
                 "--kernel-components: unknown 'attention'");
  ExpectBadInput(
      RunCli({"profile", "--scenario", scenario, "--out", Temp("x"), "--dtype", "float16"},
             "dtype"),
      "--dtype");
  ExpectBadInput(
      RunCli({"profile", "--scenario", scenario, "--out", Temp("x"), "--link", "carrier"}, "link"),
      "--link");
  ExpectBadInput(RunCli({"validate", "--scenario", scenario, "--recompute-list", "some"}, "modes"),
                 "--recompute-list");
  ExpectBadInput(RunCli({"validate", "--scenario", scenario, "--steps", "0"}, "steps"), "--steps");
  ExpectBadInput(RunCli({"validate", "--scenario", scenario, "--rounds", "0"}, "rounds"),
                 "--rounds");
  ExpectBadInput(
      RunCli({"profile", "--scenario", scenario, "--out", Temp("x"), "--concurrent", "0"},
             "concurrent"),
      "--concurrent");
  // A model the backend cannot run (tied embeddings), found by the
  // profile's worker processes.
  std::string tied_text = kScenario;  // the preset's fields, embeddings tied (the default)
  tied_text.replace(tied_text.find("model_preset: \"gdn-tiny\""), 24,
                    "model { name: \"gdn-tiny\" architecture: \"gdn\" layer_pattern: \"recurrent\" "
                    "num_layers: 4 hidden_size: 64 num_heads: 2 head_dim_k: 32 head_dim_v: 32 "
                    "conv_width: 4 mlp_size: 128 vocab_size: 256 }");
  const std::string tied = WriteFile("tied.textproto", tied_text);
  ExpectBadInput(RunCli({"validate", "--scenario", tied}, "tied-workers"),
                 "model.untied_embeddings");
  ExpectBadInput(RunCli({"profile", "--scenario", tied, "--out", Temp("x")}, "tied"),
                 "model.untied_embeddings");
  // Under mpirun: exit 2 and the message once (rank 0 prints it; Open MPI
  // may add its own banner).
  const Finished mpi =
      RunFor(Mpirun(2, Cmd({"validate", "--scenario", scenario})), Temp("mpirun"), 60);
  EXPECT_EQ(mpi.exit_code, 2) << mpi.err;
  const std::size_t at = mpi.err.find("without mpirun");
  ASSERT_NE(at, std::string::npos) << mpi.err;
  EXPECT_EQ(mpi.err.find("without mpirun", at + 1), std::string::npos) << mpi.err;
}

// ---- interrupts -------------------------------------------------------------------

// Every process (other than zombies) whose command line mentions `text`.
std::vector<pid_t> ProcessesMentioning(const std::string& text) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    if (cmdline.find(text) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// The child of `parent` (the command under `timeout`), or -1.
pid_t ChildOf(pid_t parent) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    std::getline(in, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) return std::stoi(name);
  }
  return -1;
}

// Starts `args` with its own TMPDIR, waits until one of its child jobs runs
// (a process whose arguments name a file in that TMPDIR), sends `signal` to
// the command, and checks: exit 128 + signal, one line on stderr naming the
// signal, no child process and no temporary file of ours left.
void ExpectInterruptStopsChildren(std::vector<std::string> args, int signal,
                                  const std::string& tag) {
  namespace fs = std::filesystem;
  // Per test process: a run that failed and left processes behind cannot
  // make the next run's checks fail.
  const std::string tmp = Temp(tag + "-tmpdir-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  Process p = Process::Start(Cmd(args), Temp(tag), 300);
  old ? setenv("TMPDIR", saved.c_str(), 1) : unsetenv("TMPDIR");
  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // A child seen twice 300 ms apart: the command's first jobs (a short
  // profile) may end between two looks, and a signal sent in the gap before
  // the next would not test what this is for.
  const auto child_running = [&] { return !ProcessesMentioning(tmp + "/stateflow-").empty(); };
  bool seen = false;
  while (!seen && waited() < 120) {
    if (child_running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      seen = child_running();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  const pid_t command = ChildOf(p.pid());
  if (!seen || command <= 0) {
    // Stop the command (it stops its children) before failing, so that
    // nothing of this run keeps running.
    if (command > 0) kill(command, SIGTERM);
    p.Wait(60);
    FAIL() << (command <= 0 ? "the command is not running" : "no child job seen running");
  }
  ASSERT_EQ(kill(command, signal), 0);
  const Finished f = p.Wait(60);
  EXPECT_FALSE(f.timed_out);
  EXPECT_EQ(f.exit_code, 128 + signal) << f.err;
  EXPECT_EQ(std::count(f.err.begin(), f.err.end(), '\n'), 1) << f.err;
  const std::string name = signal == SIGINT    ? "SIGINT"
                           : signal == SIGTERM ? "SIGTERM"
                           : signal == SIGHUP  ? "SIGHUP"
                                               : "SIGQUIT";
  EXPECT_NE(f.err.find("interrupted by " + name), std::string::npos) << f.err;
  for (pid_t left : ProcessesMentioning(tmp + "/stateflow-")) {
    std::ifstream stat("/proc/" + std::to_string(left) + "/stat");
    std::string line;
    std::getline(stat, line);
    ADD_FAILURE() << "a child outlived it: " << line;
  }
  for (const auto& e : fs::directory_iterator(tmp)) {
    EXPECT_EQ(e.path().filename().string().rfind("stateflow-", 0), std::string::npos)
        << "left behind: " << e.path();
  }
  fs::remove_all(tmp);
}

TEST(ValidateCli, SigtermStopsItsChildrenRemovesItsFilesAndExits143) {
  const std::string scenario = WriteFile("sigterm.textproto", kScenario);
  ExpectInterruptStopsChildren({"validate", "--scenario", scenario, "--steps", "100000"}, SIGTERM,
                               "sigterm");
}

TEST(ProfileCli, SigintStopsItsChildrenRemovesItsFilesAndExits130) {
  const std::string scenario = WriteFile("sigint.textproto", kScenario);
  ExpectInterruptStopsChildren({"profile", "--scenario", scenario, "--out", Temp("sigint.costs"),
                                "--repetitions", "100000", "--concurrent", "2"},
                               SIGINT, "sigint");
}

// A hangup (a closed terminal, a dropped ssh session) and SIGQUIT stop the
// children as SIGTERM does: before, SIGHUP ended validate at once and left
// its mpirun and ranks training, and its temporary files.
TEST(ValidateCli, SighupStopsItsChildrenRemovesItsFilesAndExits129) {
  const std::string scenario = WriteFile("sighup.textproto", kScenario);
  ExpectInterruptStopsChildren({"validate", "--scenario", scenario, "--steps", "100000"}, SIGHUP,
                               "sighup");
}

TEST(ProfileCli, SigquitStopsItsChildrenRemovesItsFilesAndExits131) {
  const std::string scenario = WriteFile("sigquit.textproto", kScenario);
  ExpectInterruptStopsChildren({"profile", "--scenario", scenario, "--out", Temp("sigquit.costs"),
                                "--repetitions", "100000", "--concurrent", "2"},
                               SIGQUIT, "sigquit");
}

// A child mpirun stopped by SIGSTOP (a stalled launcher) makes no progress:
// its ranks pause with it (backend/comm/mpi_wait.h), and the run's deadline
// (--timeout) ends the child with its process group; the ranks follow, and
// validate says what happened in one line (exit 1), a stopped child told
// from a slow one. Before, the line ended in "stateflow train timed out: "
// with nothing after it.
TEST(ValidateCli, StoppedChildMpirunEndsAtTheRunsDeadline) {
  namespace fs = std::filesystem;
  const std::string scenario = WriteFile("stopped.textproto", kScenario);
  const std::string costs = Temp("stopped-costs.textproto");
  const Finished profiled = RunCli({"profile", "--scenario", scenario, "--out", costs,
                                    "--repetitions", "1", "--warmup", "0", "--link", "in-process"},
                                   "stopped-profile");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  const std::string tmp = Temp("stopped-tmpdir");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  Process p = Process::Start(Cmd({"validate", "--scenario", scenario, "--costs", costs, "--steps",
                                  "100000", "--timeout", "8"}),
                             Temp("stopped"), 120);
  old ? setenv("TMPDIR", saved.c_str(), 1) : unsetenv("TMPDIR");
  while (ProcessesMentioning(tmp + "/stateflow-").size() < 3 && p.Elapsed() < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // mpirun and 2 ranks
  }
  const pid_t validate = ChildOf(p.pid());
  const pid_t mpirun = ChildOf(validate);
  ASSERT_GT(mpirun, 0);
  ASSERT_EQ(kill(mpirun, SIGSTOP), 0);
  const Finished f = p.Wait(60);
  EXPECT_FALSE(f.timed_out);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_EQ(std::count(f.err.begin(), f.err.end(), '\n'), 1) << f.err;
  // Issue 31: a stopped child is told from a slow one.
  EXPECT_NE(f.err.find("stateflow train timed out after 8 s (--timeout 8): it was stopped "
                       "(process state T: SIGSTOP, Ctrl-Z or a debugger), not slow; ended with "
                       "its process group"),
            std::string::npos)
      << f.err;
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the ranks follow mpirun
  EXPECT_TRUE(ProcessesMentioning(tmp + "/stateflow-").empty()) << "a rank outlived the run";
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace stateflow::backend::testing

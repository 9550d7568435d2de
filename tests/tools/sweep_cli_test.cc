// `stateflow sweep` and `stateflow capacity` end to end: the table, CSV and JSON
// agree with each other, the capacity plan explains its rejections and finds the one
// split that is legal, and bad input gets one line naming the field and exit
// code 2.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "proto/stateflow.pb.h"
#include "tests/tools/cli_testing.h"

namespace stateflow::testing {
namespace {

CliRun Cli(const std::string& args) { return Stateflow(args, "sweep"); }

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

constexpr char kCsvHeader[] =
    "scenario,model,policy,seq_len,global_batch,microbatches,pipeline_size,tensor_size,"
    "data_size,chunks,alpha,recompute,step_time_s,tokens_per_s,bubble_fraction,"
    "peak_memory_bytes,capacity_bytes,oom,peak_stage,peak_class,best,system,usable_bytes,"
    "st_overlap,st_tile,virtual_stages";

TEST(SweepCli, DefaultSweepTableCsvAndJsonAgree) {
  const std::string csv = TempPath("sweep.csv");
  CliRun table = Cli("sweep --csv " + csv);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(table.err.empty()) << table.err;  // no progress bar off a terminal
  EXPECT_NE(table.out.find("1f1b"), std::string::npos);
  EXPECT_NE(table.out.find("best N, alpha"), std::string::npos);
  EXPECT_NE(table.out.find("T=64K GBS=8"), std::string::npos);

  CliRun json = Cli("sweep --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  pb::SweepReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &report).ok()) << json.out;
  // The default's sweep block: 1f1b, and stateflow over N in {2, 4, 8, 16, 32}.
  ASSERT_EQ(report.runs_size(), 1 + 5);
  ASSERT_EQ(report.cells_size(), 2);

  const std::vector<std::string> lines = Split(Slurp(csv), '\n');
  ASSERT_EQ(lines.size(), 1u + report.runs_size());
  EXPECT_EQ(lines[0], kCsvHeader);
  const std::vector<std::string> columns = Split(kCsvHeader, ',');
  for (int i = 0; i < report.runs_size(); ++i) {
    const std::vector<std::string> row = Split(lines[i + 1], ',');
    ASSERT_EQ(row.size(), columns.size()) << lines[i + 1];
    std::map<std::string, std::string> field;
    for (std::size_t k = 0; k < columns.size(); ++k) field[columns[k]] = row[k];
    const pb::SweepRun& run = report.runs(i);
    EXPECT_EQ(field["policy"], run.policy());
    EXPECT_EQ(std::stoi(field["chunks"]), static_cast<int>(run.chunks()));
    EXPECT_DOUBLE_EQ(std::stod(field["step_time_s"]), run.step_time_s());
    EXPECT_DOUBLE_EQ(std::stod(field["peak_memory_bytes"]), run.peak_memory_bytes());
    EXPECT_EQ(field["oom"], run.oom() ? "1" : "0");
    EXPECT_EQ(field["best"], run.best() ? "1" : "0");
    EXPECT_EQ(field["seq_len"], "65536");
    EXPECT_EQ(field["recompute"], "full");
  }
  // The table names the best stateflow N of the JSON.
  const pb::SweepRun& best = report.runs(report.cells(1).best_run());
  EXPECT_NE(table.out.find("N=" + std::to_string(best.chunks()) + " alpha=0"),
            std::string::npos);
}

// Every sweep flag on a paper scenario, cut down to one cell per policy.
TEST(SweepCli, PaperScenarioWithListFlags) {
  CliRun run = Cli("sweep --scenario " + std::string(SF_SOURCE_DIR) +
                   "/scenarios/paper/gdn-hybrid-3b.textproto --seq-len-list 65536 "
                   "--global-batch-list 4 --chunks-list 4,8 --alpha-list 0,1 "
                   "--policies 1f1b,stateflow --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  pb::SweepReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
  EXPECT_EQ(report.runs_size(), 1 + 2 * 2);
  EXPECT_EQ(report.runs(0).microbatches(), 4u);
  EXPECT_EQ(report.pipeline_size(), 8u);
}

// The ST dimensions: each (overlap, tile) is a run, in the CSV and the JSON;
// the table names the best one's; the scalar flag fixes the field.
TEST(SweepCli, StOverlapAndTileAreSweptDimensions) {
  const std::string csv = TempPath("st.csv");
  const std::string flags =
      "sweep --compute-units 108 --tensor-parallel 4 --policies stateflow --chunks-list 4 "
      "--st-overlap-list off,on --st-tile-list 16,64";
  CliRun json = Cli(flags + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  pb::SweepReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &report).ok()) << json.out;
  ASSERT_EQ(report.runs_size(), 4);
  const std::vector<std::pair<bool, int>> order = {{false, 16}, {false, 64}, {true, 16}, {true, 64}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(report.runs(i).st_overlap(), order[i].first) << i;
    EXPECT_EQ(static_cast<int>(report.runs(i).st_tile()), order[i].second) << i;
  }
  CliRun table = Cli(flags + " --csv " + csv);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const pb::SweepRun& best = report.runs(report.cells(0).best_run());
  EXPECT_NE(table.out.find("best N, alpha; ST"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find(std::string("ST overlap ") + (best.st_overlap() ? "on" : "off") +
                           " B_V=" + std::to_string(best.st_tile())),
            std::string::npos)
      << table.out;
  const std::vector<std::string> lines = Split(Slurp(csv), '\n');
  ASSERT_EQ(lines.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    const std::vector<std::string> row = Split(lines[i + 1], ',');
    ASSERT_GE(row.size(), 3u);  // ..., st_overlap, st_tile, virtual_stages
    EXPECT_EQ(row[row.size() - 3], order[i].first ? "1" : "0");
    EXPECT_EQ(row[row.size() - 2], std::to_string(order[i].second));
    EXPECT_EQ(row.back(), "1");
  }
  // A scenario whose sweep block lists both overlaps: --st-overlap on fixes it.
  std::string text = Slurp(std::string(SF_SOURCE_DIR) + "/scenarios/default.textproto");
  const auto at = text.find("\nsweep {");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 8, "\n  st_overlap: false\n  st_overlap: true");
  const std::string both = WriteTemp("st-sweep.textproto", text);
  const std::string scenario_flags =
      "sweep --scenario " + both +
      " --compute-units 108 --tensor-parallel 4 --policies stateflow --chunks-list 4 --json";
  CliRun swept = Cli(scenario_flags);
  ASSERT_EQ(swept.exit_code, 0) << swept.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(swept.out, &report).ok());
  EXPECT_EQ(report.runs_size(), 2);
  CliRun fixed = Cli(scenario_flags + " --st-overlap on");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(fixed.out, &report).ok());
  ASSERT_EQ(report.runs_size(), 1);
  EXPECT_TRUE(report.runs(0).st_overlap());
}

TEST(SweepCli, ScalarFlagFixesTheField) {
  CliRun run = Cli("sweep -N 4 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  pb::SweepReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
  ASSERT_EQ(report.runs_size(), 2);
  EXPECT_EQ(report.runs(1).chunks(), 4u);
}

TEST(SweepCli, SimulateIgnoresTheSweepBlock) {
  const std::string with = Slurp(std::string(SF_SOURCE_DIR) + "/scenarios/default.textproto");
  const auto at = with.find("\nsweep {");
  ASSERT_NE(at, std::string::npos);
  const std::string without = WriteTemp("no-sweep.textproto", with.substr(0, at + 1));
  CliRun a = Cli("simulate --json");
  CliRun b = Cli("simulate --json --scenario " + without);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  pb::Report ra, rb;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(a.out, &ra).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(b.out, &rb).ok());
  EXPECT_EQ(ra.step_time_s(), rb.step_time_s());
  EXPECT_EQ(ra.peak_memory_bytes(), rb.peak_memory_bytes());
}

TEST(CapacityCli, ExplainsIllegalSplits) {
  CliRun run = Cli("capacity --model gdn-3b --devices 8 --global-batch 1 --chunks-list 8");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("model.num_heads (20) must be divisible by parallel.tensor_size (8)"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("global batch 1 is not divisible by DP 2"), std::string::npos);
  EXPECT_NE(run.out.find("feasible, fastest first"), std::string::npos);
}

// gdn-tiny (4 layers, 2 heads) on 8 CPU devices (2 per node), global batch 1:
// DP = 1, TP <= 2 and P <= 4 leave 4 x 2 x 1 as the only legal split.
// --system: the plan's runs carry it, and a framework's full-sequence logits
// raise the best split's peak over StateFlow's sliced loss.
TEST(CapacityCli, SystemChoosesTheHeadOfEveryRun) {
  const std::string scenario = WriteTemp(
      "plan-system.textproto",
      "name: \"tiny\"\nmodel_preset: \"gdn-tiny\"\ncluster_preset: \"cpu\"\n"
      "parallel { pipeline_size: 1 microbatches: 1 }\nseq_len: 4096\n"
      "schedule { policy: \"stateflow\" chunks: 1 recompute: \"full\" }\n");
  std::map<std::string, double> peak;
  for (const char* system : {"stateflow", "megatron-core"}) {
    CliRun run = Cli("capacity --scenario " + scenario + " --devices 8 --global-batch 1 --system " +
                     system + " --json");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    pb::CapacityPlanReport report;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok()) << run.out;
    for (const pb::PlanCandidate& c : report.candidates()) {
      if (c.verdict() != "feasible") continue;
      EXPECT_EQ(c.best().system(), system);
      peak[system] = c.best().peak_memory_bytes();
    }
  }
  ASSERT_EQ(peak.size(), 2u);
  EXPECT_GT(peak["megatron-core"], peak["stateflow"]);
  ExpectBadInput(Cli("capacity --scenario " + scenario + " --devices 8 --global-batch 1 --system x"),
                 "system");
}

TEST(CapacityCli, FindsTheOnlyLegalSplit) {
  const std::string scenario = WriteTemp(
      "plan-tiny.textproto",
      "name: \"tiny\"\nmodel_preset: \"gdn-tiny\"\ncluster_preset: \"cpu\"\n"
      "parallel { pipeline_size: 1 microbatches: 1 }\nseq_len: 4096\n"
      "schedule { policy: \"stateflow\" chunks: 1 recompute: \"full\" }\n");
  CliRun run = Cli("capacity --scenario " + scenario + " --devices 8 --global-batch 1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  pb::CapacityPlanReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok()) << run.out;
  int feasible = 0;
  for (const pb::PlanCandidate& c : report.candidates()) {
    if (c.verdict() == "feasible") {
      ++feasible;
      EXPECT_EQ(c.pipeline_size(), 4u);
      EXPECT_EQ(c.tensor_size(), 2u);
      EXPECT_EQ(c.data_size(), 1u);
      EXPECT_EQ(c.rank(), 1u);
    } else {
      EXPECT_EQ(c.verdict(), "illegal");
      EXPECT_FALSE(c.reason().empty());
    }
  }
  EXPECT_EQ(feasible, 1);
  EXPECT_EQ(report.devices(), 8u);
}

// A measured CostTable for gdn-tiny: every kind at 32 to 256 tokens, each
// block's forward 1 ms per 64 tokens, backward twice that.
std::string TinyCosts() {
  std::string t = "model { name: \"gdn-tiny\" architecture: \"gdn\" layer_pattern: \"recurrent\" "
                  "num_layers: 4 hidden_size: 64 num_heads: 2 head_dim_k: 32 head_dim_v: 32 "
                  "conv_width: 4 mlp_size: 128 vocab_size: 256 untied_embeddings: true }\n"
                  "dtype: \"float32\"\nlink { latency_s: 1e-6 bandwidth_bytes_per_s: 1e9 }\n";
  for (const char* kind : {"embedding", "recurrence", "head"}) {
    for (int tokens : {32, 256}) {
      const double f = std::string(kind) == "recurrence" ? 1e-3 * tokens / 64 : 0;
      t += std::string("samples { layer_kind: \"") + kind + "\" pass: \"forward\" recompute: \"full\" tokens: " +
           std::to_string(tokens) + " median_s: " + std::to_string(f) + " }\n";
      t += std::string("samples { layer_kind: \"") + kind + "\" pass: \"backward\" recompute: \"full\" tokens: " +
           std::to_string(tokens) + " median_s: " + std::to_string(2 * f) + " }\n";
    }
  }
  return t;
}

// sweep and capacity replay measured costs: the report says so, and a
// configuration whose chunks the table lacks is a one-line error naming it.
TEST(SweepCli, SweepAndCapacityReplayACostTable) {
  const std::string costs = WriteTemp("sweep-costs.textproto", TinyCosts());
  const std::string tiny = WriteTemp(
      "sweep-tiny.textproto",
      "model_preset: \"gdn-tiny\"\ncluster_preset: \"cpu\"\n"
      "parallel { pipeline_size: 2 microbatches: 4 }\nseq_len: 256\n"
      "schedule { policy: \"stateflow\" chunks: 4 granularity: 16 recompute: \"full\" }\n");
  CliRun sweep = Cli("sweep --scenario " + tiny + " --chunks-list 1,2,4,8 --costs " + costs +
                     " --json");
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  pb::SweepReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sweep.out, &report).ok());
  EXPECT_EQ(report.cost_model(), "replay");
  ASSERT_GT(report.runs_size(), 0);
  for (const pb::SweepRun& run : report.runs()) EXPECT_GT(run.step_time_s(), 0);
  // N = 16 cuts 256 tokens into chunks of 16, below the measured 32.
  ExpectBadInput(Cli("sweep --scenario " + tiny + " --chunks-list 16 --costs " + costs),
                 "outside the measured range [32, 256]");
  CliRun plan = Cli("capacity --scenario " + tiny + " --global-batch 4 --devices 2 "
                    "--chunks-list 2,4 --costs " + costs + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  pb::CapacityPlanReport capacity;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(plan.out, &capacity).ok());
  bool noted = false;
  for (const std::string& note : capacity.notes()) noted |= note.find("replayed from") != std::string::npos;
  EXPECT_TRUE(noted);
  // Another microbatch size than the table's is refused.
  ExpectBadInput(Cli("sweep --scenario " + tiny + " -B 2 --chunks-list 2 --costs " + costs),
                 "measured at microbatch_size 1");
}

TEST(SweepCli, BadInputNamesTheFieldWithExitCode2) {
  ExpectBadInput(Cli("sweep --alpha-list \"\""), "--alpha-list is empty");
  ExpectBadInput(Cli("sweep --chunks-list ,"), "--chunks-list");
  ExpectBadInput(Cli("sweep --alpha-list 0,0.5,1,-0.5"), "sweep.alpha[3] must be in [0, 100] (got -0.5)");
  ExpectBadInput(Cli("sweep --chunks-list 0,2"), "sweep.chunks[0] must be in [1, 1048576] (got 0)");
  ExpectBadInput(Cli("sweep --chunks-list 2,x"), "--chunks-list: 'x'");
  ExpectBadInput(Cli("sweep --policies 1f1b,zigzag"), "sweep.policies[1]");
  ExpectBadInput(Cli("sweep --global-batch-list 4 --microbatches-list 2"), "not both");
  ExpectBadInput(Cli("sweep --seq-len-list 300"), "seq_len 300 cannot be cut");
  ExpectBadInput(Cli("sweep --csv /nonexistent/dir/x.csv"), "/nonexistent/dir/x.csv");
  ExpectBadInput(Cli("sweep --model gpt-5"), "model_preset");
  ExpectBadInput(Cli("sweep --st-overlap-list off,yes"), "--st-overlap-list: 'yes' is not on or off");
  ExpectBadInput(Cli("sweep --st-tile-list 16,0"), "sweep.st_tile[1] must be in [1, 4096] (got 0)");
}

TEST(CapacityCli, BadInputNamesTheFieldWithExitCode2) {
  ExpectBadInput(Cli("capacity --devices 12"),
                 "devices (12) must be a multiple of cluster.devices_per_node (8)");
  ExpectBadInput(Cli("capacity --devices 0"), "--devices");
  ExpectBadInput(Cli("capacity --global-batch 0"), "--global-batch");
  ExpectBadInput(Cli("capacity --cluster h100"), "cluster_preset: unknown 'h100'");
  ExpectBadInput(Cli("capacity --model gpt-5"), "model_preset: unknown 'gpt-5'");
  ExpectBadInput(Cli("capacity --alpha-list 0,-1"), "sweep.alpha[1] must be in [0, ");
  ExpectBadInput(Cli("capacity --top -1"), "--top");
  // Its old name points to both commands it could mean.
  ExpectBadInput(Cli("plan --devices 8"), "'plan' is now 'capacity'");
}

TEST(SweepCli, HelpHasExamples) {
  for (const char* command : {"sweep", "capacity"}) {
    CliRun run = Cli(std::string(command) + " --help");
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_NE(run.out.find("examples:"), std::string::npos) << command;
  }
}

}  // namespace
}  // namespace stateflow::testing

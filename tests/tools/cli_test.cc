// The `stateflow` command line end to end: good runs produce readable
// outputs, bad input gets one line naming the field (or file:line:column) and
// exit code 2, never a crash or a hang.
#include <gtest/gtest.h>

#include <string>

#include <google/protobuf/util/json_util.h>

#include "proto/stateflow.pb.h"
#include "tests/tools/cli_testing.h"

namespace {

using stateflow::testing::CliRun;
using stateflow::testing::ExpectBadInput;
using stateflow::testing::Slurp;
using stateflow::testing::TempPath;

CliRun Stateflow(const std::string& args) { return stateflow::testing::Stateflow(args, "cli"); }

std::string WriteFile(const std::string& name, const std::string& text) {
  return stateflow::testing::WriteTemp(name, text);
}

// A valid small scenario to break one field at a time.
std::string SmallScenario(const std::string& extra = "") {
  return "name: \"small\"\nmodel_preset: \"gdn-3b\"\ncluster_preset: \"a100-80gb-nvlink\"\n"
         "parallel { pipeline_size: 4 microbatches: 4 }\nseq_len: 8192\n"
         "schedule { policy: \"stateflow\" chunks: 4 recompute: \"full\" }\n" + extra;
}


TEST(Cli, DefaultScenarioPrintsTheComparison) {
  CliRun run = Stateflow("simulate");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("1f1b"), std::string::npos);
  EXPECT_NE(run.out.find("stateflow N=8"), std::string::npos);
  EXPECT_NE(run.out.find("step time"), std::string::npos);
  EXPECT_NE(run.out.find("peak memory"), std::string::npos);
}

// --system sets every schedule's system; reports say it, in text and JSON.
TEST(Cli, SystemFlagReachesEveryScheduleAndTheReport) {
  CliRun text = Stateflow("simulate --system megatron-core");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("system "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("megatron-core"), std::string::npos) << text.out;
  CliRun json = Stateflow("simulate --system ms-swift --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  stateflow::pb::Report report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &report).ok()) << json.out;
  EXPECT_EQ(report.system(), "ms-swift");
  ASSERT_EQ(report.comparisons_size(), 1);
  EXPECT_EQ(report.comparisons(0).system(), "ms-swift");
  CliRun plain = Stateflow("simulate --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(plain.out, &report).ok());
  EXPECT_EQ(report.system(), "stateflow");
}

TEST(Cli, JsonIsTheReportSchema) {
  CliRun run = Stateflow("simulate --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  stateflow::pb::Report report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok()) << run.out;
  for (const char* key : {"\"step_time_s\"", "\"tokens_per_s\"", "\"bubble_fraction\"",
                          "\"oom\"", "\"stages\"", "\"peak_memory_bytes\"", "\"busy_s\""}) {
    EXPECT_NE(run.out.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(report.stages_size(), 8);
  EXPECT_EQ(report.policy(), "stateflow");
  ASSERT_EQ(report.comparisons_size(), 1);
  EXPECT_EQ(report.comparisons(0).policy(), "1f1b");
  EXPECT_GT(report.step_time_s(), 0);
  EXPECT_NEAR(report.tokens_per_s(), 8 * 65536 / report.step_time_s(),
              1e-9 * report.tokens_per_s());
}

// The state-transition model from the flags (docs/cost-model.md, section 2):
// off without compute units (the default's step time), slower with the ST
// exposed, in between with split-and-overlap; the report and its header name
// the settings; bad values are refused naming the flag.
TEST(Cli, StateTransitionFlags) {
  const std::string base = "simulate --model gdn-15b --tensor-parallel 4 -P 4 -M 8 -N 4 "
                           "-T 65536 --policy stateflow";
  double step[3] = {0, 0, 0};
  const char* extra[3] = {"", " --compute-units 108 --st-overlap off",
                          " --compute-units 108 --st-overlap on --st-tile 64"};
  for (int i = 0; i < 3; ++i) {
    CliRun run = Stateflow(base + extra[i] + " --json");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    stateflow::pb::Report report;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
    step[i] = report.step_time_s();
    EXPECT_EQ(report.compute_units(), i == 0 ? 0u : 108u);
    EXPECT_EQ(report.st_overlap(), i == 2);
    EXPECT_EQ(report.st_tile(), 64u);
  }
  EXPECT_GT(step[1], step[0]);
  EXPECT_GT(step[1], step[2]);
  EXPECT_GE(step[2], step[0]);
  CliRun text = Stateflow(base + extra[2]);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("ST overlap on (B_V 64, 108 compute units)"), std::string::npos)
      << text.out;
  EXPECT_EQ(Stateflow(base).out.find("ST overlap"), std::string::npos);
  CliRun bad = Stateflow(base + " --st-overlap maybe");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--st-overlap"), std::string::npos) << bad.err;
  CliRun zero = Stateflow(base + " --st-tile 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.err.find("--st-tile"), std::string::npos) << zero.err;
}

// --explain: the three parts of the text, for the baseline and the schedule;
// the JSON's explanation per report, whose stage totals are the busy times
// the report prints; refused in one line where the times have no terms.
TEST(Cli, ExplainPrintsTheTermsAndRefusesWholes) {
  const std::string base = "simulate --model gdn-15b --tensor-parallel 4 -P 4 -M 8 -N 4 "
                           "-T 65536 --compute-units 108 --st-overlap on --explain";
  CliRun text = Stateflow(base);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* part : {"where the time goes, 1f1b", "where the time goes, stateflow N=4",
                           "one layer of each kind, one microbatch (T = 65536 in 4 chunks)",
                           "state transition, one recurrence layer, one microbatch (",
                           "on 108 compute units: u = ", "split-and-overlap on",
                           "per stage, the whole step"}) {
    EXPECT_NE(text.out.find(part), std::string::npos) << part << "\n" << text.out;
  }
  CliRun json = Stateflow(base + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  stateflow::pb::Report report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &report).ok());
  ASSERT_EQ(report.comparisons_size(), 1);
  const stateflow::pb::Report* reports[] = {&report, &report.comparisons(0)};
  for (const stateflow::pb::Report* r : reports) {
    ASSERT_EQ(r->explanation().stages_size(), 4);
    for (int s = 0; s < 4; ++s) {
      EXPECT_NEAR(r->explanation().stages(s).busy().total_s(), r->stages(s).busy_s(),
                  1e-9 * r->stages(s).busy_s());
    }
    EXPECT_GT(r->explanation().stages(0).busy().st_hidden_s(), 0.0);
    // The A100 preset's kernel tables time the GEMMs and attention: part of
    // compute, never more.
    for (const stateflow::pb::StageTerms& s : r->explanation().stages()) {
      EXPECT_GT(s.busy().table_s(), 0.0);
      EXPECT_LE(s.busy().table_s(), s.busy().compute_s() * (1 + 1e-12));
    }
  }
  EXPECT_NE(text.out.find("of it tables"), std::string::npos) << text.out;
  // A cluster without tables: no such column.
  CliRun curve = Stateflow("simulate --cluster cpu --explain");
  ASSERT_EQ(curve.exit_code, 0) << curve.err;
  EXPECT_NE(curve.out.find("where the time goes"), std::string::npos) << curve.out;
  EXPECT_EQ(curve.out.find("of it tables"), std::string::npos) << curve.out;
  // Without the flag the JSON has no explanation.
  CliRun plain = Stateflow("simulate --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("\"explanation\""), std::string::npos);
  ExpectBadInput(Stateflow("simulate --explain --cost-model uniform"), "'uniform'");
}

TEST(Cli, UniformCostModelFromTheFlag) {
  CliRun run = Stateflow("simulate --policy stateflow -P 4 -M 8 -N 4 --cost-model uniform --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  stateflow::pb::Report report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
  EXPECT_EQ(report.time_unit(), "units");
  EXPECT_NEAR(report.step_time_s(), (8 * 4 + 4 - 1) * 3.0 / 4, 1e-9);
  EXPECT_EQ(report.comparisons_size(), 0);
}

TEST(Cli, TraceHasOneTrackPerStageAndMemoryCounters) {
  const std::string path = TempPath("trace.json");
  CliRun run = Stateflow("simulate -P 4 -M 2 -N 3 --trace " + path);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  stateflow::pb::Trace trace;
  const std::string text = Slurp(path);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text, &trace).ok());
  EXPECT_NE(text.find("\"traceEvents\""), std::string::npos);
  int slices = 0, counters = 0, tracks = 0;
  for (const auto& e : trace.trace_events()) {
    slices += e.ph() == "X" && e.pid() == 0;
    counters += e.ph() == "C";
    tracks += e.ph() == "M" && e.name() == "thread_name" && e.pid() == 0;
  }
  EXPECT_EQ(slices, 4 * 2 * 2 * 3);  // P * (F, B) * M * N for the schedule under study
  EXPECT_EQ(tracks, 4);
  EXPECT_GT(counters, 0);
  EXPECT_NE(text.find("\"0F1.2\""), std::string::npos);
}

TEST(Cli, PlanDumpRoundTripsThroughSimulate) {
  const std::string path = TempPath("plan.txt");
  ASSERT_EQ(Stateflow("plan-dump -P 4 -M 2 -N 3 --out " + path).exit_code, 0);
  CliRun direct = Stateflow("simulate -P 4 -M 2 -N 3 --policy stateflow --json");
  CliRun replay = Stateflow("simulate -P 4 -M 2 --plan " + path + " --json");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  stateflow::pb::Report a, b;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(direct.out, &a).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(replay.out, &b).ok());
  EXPECT_EQ(a.step_time_s(), b.step_time_s());
  EXPECT_EQ(a.peak_memory_bytes(), b.peak_memory_bytes());
}

TEST(Cli, TorchCsvPlansGoOutAndComeBack) {
  // Ours to torch.distributed.pipelining's CSV and back: the same simulation.
  const std::string path = TempPath("plan.csv");
  ASSERT_EQ(Stateflow("plan-dump -P 4 -M 2 -N 3 --format torch-csv --out " + path).exit_code, 0);
  EXPECT_EQ(Slurp(path).substr(0, 12), "0F0,0F1,0F2,");  // torch microbatch m = a N + i
  CliRun direct = Stateflow("simulate -P 4 -M 2 -N 3 --policy stateflow --json");
  CliRun replay = Stateflow("simulate -P 4 -M 2 -N 3 --plan " + path + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  stateflow::pb::Report a, b;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(direct.out, &a).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(replay.out, &b).ok());
  EXPECT_EQ(a.step_time_s(), b.step_time_s());
  EXPECT_EQ(b.policy(), "torch");  // an imported plan keeps its own name
  // A zero-bubble CSV (I and W) simulates as the policy's own plan: B and W
  // each charged their part of the backward. So do torch's multi-stage
  // layouts: a loop (interleaved) and a V (zbv), v from the CSV.
  for (const char* flags : {"--policy zb-h1", "--policy interleaved --virtual-stages 2",
                            "--policy zbv", "--policy zb-interleaved --virtual-stages 3"}) {
    SCOPED_TRACE(flags);
    const std::string csv = TempPath("multi.csv");
    const std::string shape = std::string("--model gdn-small -P 2 -M 4 -N 2 ") + flags;
    ASSERT_EQ(Stateflow("plan-dump " + shape + " --format torch-csv --out " + csv).exit_code, 0);
    CliRun policy = Stateflow("simulate " + shape + " --json");
    CliRun file = Stateflow("simulate --model gdn-small -P 2 -M 4 -N 2 --plan " + csv + " --json");
    ASSERT_EQ(file.exit_code, 0) << file.err;
    EXPECT_EQ(file.err, "");
    stateflow::pb::Report p, f;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(policy.out, &p).ok());
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(file.out, &f).ok());
    EXPECT_EQ(f.step_time_s(), p.step_time_s());
    EXPECT_EQ(f.peak_memory_bytes(), p.peak_memory_bytes());
  }
  // Bad cells name file, row and cell; a bad order names the rule.
  const std::string bad = WriteFile("bad.csv", "0F0,0B0\n1F0,1Q0\n");
  ExpectBadInput(Stateflow("simulate -P 2 -M 1 --plan " + bad), bad + ":2:2: '1Q0' is not a torch action");
  const std::string order = WriteFile("order.csv", "0B0,0F0\n1F0,1B0\n");
  CliRun swapped = Stateflow("simulate -P 2 -M 1 --plan " + order);
  EXPECT_EQ(swapped.exit_code, 2);
  EXPECT_NE(swapped.err.find("rule 3"), std::string::npos) << swapped.err;  // then the grid
  ExpectBadInput(Stateflow("plan-dump --format yaml"), "--format: 'yaml' is not text or torch-csv");
}

TEST(Cli, AnInterleavedPlanFileSimulatesAsThePolicy) {
  // A plan with virtual stages carries them: simulate --plan takes them (and
  // policy interleaved) from it; train refuses them in one line.
  const std::string path = TempPath("interleaved.plan");
  ASSERT_EQ(Stateflow("plan-dump --model gdn-small -P 2 -M 4 -N 1 --policy interleaved "
                      "--virtual-stages 2 --out " + path).exit_code, 0);
  EXPECT_NE(Slurp(path).find("virtual_stages 2 placement loop"), std::string::npos);
  CliRun direct = Stateflow("simulate --model gdn-small -P 2 -M 4 -N 1 --policy interleaved "
                            "--virtual-stages 2 --json");
  CliRun replay = Stateflow("simulate --model gdn-small -P 2 -M 4 -N 1 --plan " + path + " --json");
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  stateflow::pb::Report a, b;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(direct.out, &a).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(replay.out, &b).ok());
  EXPECT_EQ(a.step_time_s(), b.step_time_s());
  ASSERT_EQ(b.stages_size(), 2);
  EXPECT_EQ(b.stages(1).model_stages_size(), 2);
  // The stage table lists each stage's model stages' layers.
  CliRun table = Stateflow("simulate --model gdn-3b -P 4 -M 8 -N 4 --cost-model uniform "
                           "--policy interleaved --virtual-stages 2");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("  0      0-4,17-20 "), std::string::npos) << table.out;
  ExpectBadInput(Stateflow("simulate --model gdn-small -P 2 -M 4 -N 1 --virtual-stages 3 --plan " +
                           path),
                 "plan has virtual_stages 2 but the scenario has schedule.virtual_stages 3");
  ExpectBadInput(Stateflow("simulate --model gdn-small -P 2 -M 4 --policy stateflow "
                           "--virtual-stages 2"),
                 "schedule.virtual_stages must be 1 for policy stateflow");
  // zbv: its V, written and read back (the plan's placement names the
  // policy), refused at another v and by train.
  const std::string v_path = TempPath("zbv.plan");
  ASSERT_EQ(Stateflow("plan-dump --model gdn-small -P 2 -M 4 -N 2 --policy zbv --out " + v_path)
                .exit_code,
            0);
  EXPECT_NE(Slurp(v_path).find("virtual_stages 2 placement v"), std::string::npos);
  CliRun zbv = Stateflow("simulate --model gdn-small -P 2 -M 4 -N 2 --cost-model uniform "
                         "--policy zbv --json");
  CliRun zbv_plan = Stateflow("simulate --model gdn-small -P 2 -M 4 --cost-model uniform "
                              "--json --plan " + v_path);
  ASSERT_EQ(zbv.exit_code, 0) << zbv.err;
  ASSERT_EQ(zbv_plan.exit_code, 0) << zbv_plan.err;
  stateflow::pb::Report from_policy, from_plan;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(zbv.out, &from_policy).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(zbv_plan.out, &from_plan).ok());
  EXPECT_EQ(from_policy.step_time_s(), from_plan.step_time_s());
  EXPECT_EQ(from_policy.step_time_s(), 3.0 * 4 + 1.0 / 4);  // 3 M + (P - 1) / (2 N)
  ExpectBadInput(Stateflow("simulate --model gdn-small -P 2 -M 4 --policy zbv --virtual-stages 3"),
                 "schedule.virtual_stages must be 2 for policy zbv");
  // The backend trains them (P = 1: every message from the stage to itself);
  // its report lists the stage's model stages as simulate's does.
  for (const char* policy : {"zbv", "zb-interleaved"}) {
    CliRun train = Stateflow(std::string("train --model gdn-tiny -P 1 -M 2 -T 64 --policy ") +
                             policy + " --steps 1 --json");
    ASSERT_EQ(train.exit_code, 0) << train.err;
    stateflow::pb::Report report;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(train.out, &report).ok());
    ASSERT_EQ(report.stages_size(), 1);
    EXPECT_EQ(report.stages(0).model_stages_size(), 2) << policy;
  }
  ExpectBadInput(Stateflow("simulate --model gdn-small -P 2 -M 4 --policy zb-h1 --virtual-stages 2"),
                 "(policies interleaved, zb-interleaved and zbv place virtual stages)");
}

TEST(Cli, HandBrokenPlanIsRejectedWithTheRule) {
  const std::string path = TempPath("broken-plan.txt");
  ASSERT_EQ(Stateflow("plan-dump -P 2 -M 1 -N 2 --out " + path).exit_code, 0);
  std::string text = Slurp(path);
  // Swap the first two forwards of stage 0: chunk 1 before chunk 0 breaks rule 2.
  const auto a = text.find("0F0.0"), b = text.find("0F0.1");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  text.replace(b, 5, "0F0.0");
  text.replace(a, 5, "0F0.1");
  WriteFile("broken-plan.txt", text);
  CliRun run = Stateflow("simulate -P 2 -M 1 --plan " + path);
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("rule 2"), std::string::npos) << run.err;
}

TEST(Cli, MalformedScenarioNamesFileLineColumn) {
  const std::string path = WriteFile("malformed.textproto",
                                     "name: \"x\"\nparallel { pipeline_size: 4 \n seq_len: }\n");
  CliRun run = Stateflow("simulate --scenario " + path);
  ExpectBadInput(run, path + ":3:");
}

TEST(Cli, UnknownFieldInScenarioNamesIt) {
  ExpectBadInput(Stateflow("simulate --scenario " +
                           WriteFile("unknown.textproto", SmallScenario("chunkz: 3\n"))),
                 "chunkz");
}

TEST(Cli, MissingScenarioFileNamesThePath) {
  ExpectBadInput(Stateflow("simulate --scenario /nonexistent/x.textproto"),
                 "/nonexistent/x.textproto");
}

TEST(Cli, InvalidValuesNameTheField) {
  ExpectBadInput(Stateflow("simulate --scenario " +
                           WriteFile("n0.textproto",
                                     "name: \"x\"\nmodel_preset: \"gdn-3b\"\ncluster_preset: "
                                     "\"a100-80gb-nvlink\"\nparallel { pipeline_size: 4 "
                                     "microbatches: 4 }\nseq_len: 8192\nschedule { policy: "
                                     "\"stateflow\" chunks: 0 }\n")),
                 "schedule.chunks");
  ExpectBadInput(Stateflow("simulate --chunks 0"), "--chunks");
  ExpectBadInput(Stateflow("simulate --alpha -0.5"), "alpha");
  ExpectBadInput(Stateflow("simulate --scenario " +
                           WriteFile("alpha.textproto",
                                     SmallScenario("baselines { policy: \"stateflow\" chunks: 2 "
                                                   "alpha: -1 }\n"))),
                 "baselines[0].alpha");
  ExpectBadInput(Stateflow("simulate -P 40"), "parallel.pipeline_size");
  ExpectBadInput(Stateflow("simulate --seq-len 300 -N 4"), "300");
  ExpectBadInput(Stateflow("simulate --policy zigzag"), "schedule.policy");
  ExpectBadInput(Stateflow("simulate --policy 1f1b -N 4"), "schedule.chunks");
  ExpectBadInput(Stateflow("simulate --recompute some"), "recompute");
  ExpectBadInput(Stateflow("simulate --system nemo"), "schedule.system: unknown 'nemo'");
  ExpectBadInput(Stateflow("simulate --cost-model magic"), "cost_model");
  ExpectBadInput(Stateflow("simulate --model gpt-5"), "model_preset");
  ExpectBadInput(Stateflow("simulate --scenario " +
                           WriteFile("arch.textproto",
                                     SmallScenario("model { architecture: \"rwkv\" }\n"))),
                 "model.architecture");
  ExpectBadInput(Stateflow("simulate --scenario " +
                           WriteFile("cap.textproto",
                                     SmallScenario("cluster { device { memory_capacity_bytes: -1 "
                                                   "} }\n"))),
                 "memory_capacity_bytes");
  ExpectBadInput(Stateflow("simulate --stages abc"), "stages");
  ExpectBadInput(Stateflow("simulate --no-such-flag"), "no-such-flag");
  ExpectBadInput(Stateflow("frobnicate"), "frobnicate");
}

TEST(Cli, HelpHasExamples) {
  CliRun run = Stateflow("simulate --help");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("examples:"), std::string::npos);
  EXPECT_NE(run.out.find("--chunks"), std::string::npos);
}

}  // namespace

namespace {

// A cost table for gdn-tiny measured at 128 tokens; `extra` is appended.
std::string TinyCostTable(const std::string& model_fields, const std::string& extra = "") {
  std::string t = "model { " + model_fields + " }\nlink { latency_s: 1e-6 bandwidth_bytes_per_s: 1e9 }\n";
  for (const char* kind : {"embedding", "recurrence", "head"}) {
    for (const char* pass : {"forward", "backward"}) {
      t += std::string("samples { layer_kind: \"") + kind + "\" pass: \"" + pass +
           "\" recompute: \"none\" tokens: 128 median_s: 0.001 }\n";
    }
  }
  return t + extra;
}

// The tiny model's fields as the scenario resolves them.
const char kTinyModel[] =
    "name: \"gdn-tiny\" architecture: \"gdn\" layer_pattern: \"recurrent\" num_layers: 4 "
    "hidden_size: 64 num_heads: 2 head_dim_k: 32 head_dim_v: 32 conv_width: 4 mlp_size: 128 "
    "vocab_size: 256 untied_embeddings: true";

std::string TinyReplayArgs(const std::string& table_path, int seq_len = 256) {
  return "simulate --model gdn-tiny --cluster cpu --policy stateflow -P 2 -M 2 -N 2 --seq-len " +
         std::to_string(seq_len) + " --recompute none --costs " + table_path;
}

TEST(CliReplay, ReplaysAMeasuredTable) {
  const std::string path = WriteFile("costs-ok.textproto", TinyCostTable(kTinyModel));
  CliRun run = Stateflow(TinyReplayArgs(path) + " --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  stateflow::pb::Report report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
  EXPECT_EQ(report.cost_model(), "replay");
  EXPECT_GT(report.step_time_s(), 0);
}

// A replayed table's times are measured wholes: --explain has no terms.
TEST(CliReplay, ExplainIsRefused) {
  const std::string table = WriteFile("costs-explain.textproto", TinyCostTable(kTinyModel));
  ExpectBadInput(Stateflow(TinyReplayArgs(table) + " --explain"), "'replay'");
}

TEST(CliReplay, BadTablesGetOneLineAndExitTwo) {
  ExpectBadInput(Stateflow(TinyReplayArgs(WriteFile("costs-corrupt.textproto",
                                                    "model { hidden_size: 64 \nsamples {"))),
                 "costs-corrupt.textproto:2:");
  std::string other = kTinyModel;
  other.replace(other.find("hidden_size: 64"), 15, "hidden_size: 96");
  ExpectBadInput(Stateflow(TinyReplayArgs(WriteFile("costs-model.textproto",
                                                    TinyCostTable(other)))),
                 "model.hidden_size");
  std::string no_head = TinyCostTable(kTinyModel);
  no_head = no_head.substr(0, no_head.find("samples { layer_kind: \"head\""));
  ExpectBadInput(Stateflow(TinyReplayArgs(WriteFile("costs-nohead.textproto", no_head))),
                 "no head");
  ExpectBadInput(Stateflow(TinyReplayArgs(WriteFile(
                     "costs-neg.textproto",
                     TinyCostTable(kTinyModel, "samples { layer_kind: \"head\" pass: \"forward\" "
                                               "recompute: \"none\" tokens: 64 median_s: -2 }\n")))),
                 "median_s");
  ExpectBadInput(Stateflow(TinyReplayArgs(WriteFile("costs-range.textproto",
                                                    TinyCostTable(kTinyModel)), 512)),
                 "outside the measured range");
}

}  // namespace

namespace {

// `stateflow calibrate`: the runs CSV's errors on one line with exit 2, and
// the preset it writes loaded by `--cluster FILE` in simulate and sweep.
TEST(CliCalibrate, FitsWritesAPresetThatTheOtherCommandsLoad) {
  // Runs of the default scenario's model simulated on the A100 preset, their
  // step times doubled: calibrate, started from the preset, must find about
  // half the kernel-cost rates and of the efficiency curve (which covers the
  // rest; it has the two-parameter form after the fit, the preset's assumed
  // table has not, so not exactly), and the preset it writes must then
  // predict what the fit reported.
  const std::string scenario = SmallScenario();
  const std::string path = WriteFile("calibrate-scenario.textproto", scenario);
  std::string csv = "name,N,T,step_time_s\n";
  const char* configs[][2] = {{"2", "8192"}, {"4", "16384"}, {"8", "16384"}, {"4", "32768"}};
  for (auto& c : configs) {
    CliRun run = Stateflow("simulate --json --policy stateflow --scenario " + path + " -N " + c[0] +
                           " -T " + c[1]);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    stateflow::pb::Report report;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
    csv += std::string("r") + c[0] + "," + c[0] + "," + c[1] + "," +
           std::to_string(2 * report.step_time_s()) + "\n";
  }
  const std::string runs = WriteFile("calibrate-runs.csv", csv);
  const std::string preset = TempPath("calibrate-preset.textproto");
  CliRun fit = Stateflow("calibrate --scenario " + path + " --runs " + runs +
                         " --fit efficiency.peak,efficiency.knee_tokens,kernel_costs.compute_scale --out " +
                         preset + " --json");
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  stateflow::pb::CalibrationReport report;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(fit.out, &report).ok()) << fit.out;
  ASSERT_EQ(report.runs_size(), 4);
  EXPECT_GT(report.initial_rms_log_error(), 0.6);  // log 2 = 0.69
  EXPECT_LT(report.rms_log_error(), 0.02);
  EXPECT_EQ(report.parameters(9).name(), "kernel_costs.compute_scale");
  EXPECT_NEAR(report.parameters(9).fitted(), 0.5, 0.05);
  EXPECT_EQ(report.preset_path(), preset);
  // The preset loads; its step time for the first run is the measured one.
  CliRun sim = Stateflow("simulate --json --policy stateflow --scenario " + path +
                         " -N 2 -T 8192 --cluster " + preset);
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  stateflow::pb::Report simulated;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sim.out, &simulated).ok());
  EXPECT_NEAR(simulated.step_time_s(), report.runs(0).predicted_step_time_s(),
              1e-9 * simulated.step_time_s());
  CliRun sweep = Stateflow("sweep --scenario " + path + " --cluster " + preset);
  EXPECT_EQ(sweep.exit_code, 0) << sweep.err;
  // The table names the fitted parameter and the runs.
  CliRun table = Stateflow("calibrate --scenario " + path + " --runs " + runs);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("efficiency.peak"), std::string::npos);
  EXPECT_NE(table.out.find("rms log error"), std::string::npos);
  // --fit none judges the written preset on the runs without fitting: it
  // predicts what the fit reported, and every parameter is held.
  CliRun judged = Stateflow("calibrate --scenario " + path + " --runs " + runs + " --cluster " +
                            preset + " --fit none --json");
  ASSERT_EQ(judged.exit_code, 0) << judged.err;
  stateflow::pb::CalibrationReport evaluated;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(judged.out, &evaluated).ok());
  ASSERT_EQ(evaluated.runs_size(), 4);
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(evaluated.runs(k).predicted_step_time_s(), report.runs(k).predicted_step_time_s(),
                1e-9 * report.runs(k).predicted_step_time_s());
  }
  for (const auto& p : evaluated.parameters()) EXPECT_EQ(p.status(), "held: --fit none");
}

TEST(CliCalibrate, BadInputGetsOneLineAndExitTwo) {
  ExpectBadInput(Stateflow("calibrate"), "--runs: required");
  ExpectBadInput(Stateflow("calibrate --runs " + TempPath("no-such-runs.csv")), "no-such-runs.csv");
  const std::string bad = WriteFile("calibrate-bad.csv", "T,N,step_time_s\n8192,4,1\n8192,x,1\n");
  ExpectBadInput(Stateflow("calibrate --runs " + bad), "calibrate-bad.csv:3:2: N: 'x' is not an integer");
  const std::string tp = WriteFile("calibrate-tp.csv", "tp,step_time_s\n7,1\n");
  ExpectBadInput(Stateflow("calibrate --runs " + tp),
                 "calibrate-tp.csv:2: the model cannot express this run");
  const std::string ok = WriteFile("calibrate-ok.csv", "N,step_time_s\n4,1\n");
  ExpectBadInput(Stateflow("calibrate --runs " + ok + " --fit speed"), "--fit: unknown parameter 'speed'");
  ExpectBadInput(Stateflow("calibrate --runs " + ok + " --dtype float16"), "--dtype: unknown 'float16'");
  ExpectBadInput(Stateflow("simulate --cluster " + WriteFile("bad-cluster.textproto", "device {\n peak: 1 }\n")),
                 "bad-cluster.textproto:2:");
}

}  // namespace

namespace {

// --vary NAME=FACTOR scales one cluster parameter (sim::VaryParameter).
TEST(CliVary, ScalesOneParameterAndRejectsBadInput) {
  auto step = [](const std::string& extra) {
    CliRun run = Stateflow("simulate --json --policy stateflow -N 4 " + extra);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    stateflow::pb::Report report;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &report).ok());
    return report;
  };
  const stateflow::pb::Report base = step("");
  // Slower GEMMs: a longer step; a larger reserve: a lower OOM threshold.
  EXPECT_GT(step("--vary kernel_costs.compute_scale=0.8").step_time_s(), base.step_time_s());
  EXPECT_LT(step("--vary memory_reserve=2").usable_bytes(), base.usable_bytes());
  EXPECT_EQ(step("--vary pipeline_link.latency_s=1").step_time_s(), base.step_time_s());
  ExpectBadInput(Stateflow("simulate --vary speed=2"), "--vary: unknown parameter 'speed'");
  ExpectBadInput(Stateflow("simulate --vary efficiency.peak"), "is not NAME=FACTOR");
  ExpectBadInput(Stateflow("simulate --vary efficiency.peak=-1"), "factor must be > 0");
}

}  // namespace

namespace {

// `presets --model` / `--cluster` print a preset's every field, text format
// that a scenario's model (cluster) block reads back; an unknown name is one
// line naming the flag and the known names.
TEST(Cli, PresetsPrintOneModelOrCluster) {
  CliRun model = Stateflow("presets --model gdn-hybrid-15b");
  ASSERT_EQ(model.exit_code, 0) << model.err;
  EXPECT_NE(model.out.find("name: \"gdn-hybrid-15b\""), std::string::npos) << model.out;
  EXPECT_NE(model.out.find("hidden_size: 5120"), std::string::npos) << model.out;
  EXPECT_NE(model.out.find("attn_heads: "), std::string::npos) << model.out;
  const std::string path =
      WriteFile("preset-model.textproto", "name: \"x\"\nmodel {\n" + model.out +
                                              "}\ncluster_preset: \"a100-80gb-nvlink\"\n"
                                              "parallel { pipeline_size: 4 microbatches: 4 }\n"
                                              "seq_len: 8192\n");
  CliRun back = Stateflow("simulate --scenario " + path);
  EXPECT_EQ(back.exit_code, 0) << back.err;
  CliRun cluster = Stateflow("presets --cluster h100-80gb-nvlink");
  ASSERT_EQ(cluster.exit_code, 0) << cluster.err;
  EXPECT_NE(cluster.out.find("name: \"h100-80gb-nvlink\""), std::string::npos) << cluster.out;
  ExpectBadInput(Stateflow("presets --model gdn-16b"), "--model: ");
  ExpectBadInput(Stateflow("presets --cluster tpu"), "--cluster: ");
}

}  // namespace

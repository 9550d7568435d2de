// A structure-aware fuzzer of the library entry points the commands call:
// scenarios (parse, resolve, bound, configure, simulate), plans (parse,
// validate, simulate the plan) and cost tables (parse, check against the
// model, index, simulate a replay). Each input is a seed text mutated by a
// seeded, deterministic mutator (numbers replaced by edge values, lines
// deleted, duplicated or swapped, strings replaced, bytes flipped or
// inserted, truncation). Every input must end in a result or an error
// status with a message -- never a crash, an exception (which the binary
// would turn into an abort) or a report with a non-finite number. The
// command line then prints such an error as one line with exit code 2
// (tools/cli.cc Fail).
//
// CI runs kDefaultInputs inputs per kind; SF_FUZZ_INPUTS=N runs N per kind
// (the long run in docs/reliability.md), SF_FUZZ_SEED another seed. Flags
// go through the binary: 300 inputs, SF_FUZZ_FLAG_INPUTS=N for more. Under a
// sanitizer the slowest kinds (flags through the binary, calibration) run a
// third and a tenth of that by default (tests/sanitized.h).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "proto/stateflow.pb.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "schedule/plan_text.h"
#include "schedule/validator.h"
#include "sim/calibrate.h"
#include "models/model.h"
#include "sim/cost_table.h"
#include "sim/simulation.h"
#include "tools/work_bounds.h"
#include "tests/backend/subprocess_util.h"
#include "tests/family_presets.h"
#include "tests/sanitized.h"

namespace stateflow::tools {
namespace {

constexpr long kDefaultInputs = 10000;
// Simulated plans are kept small so that the run stays quick.
constexpr long long kFuzzMaxActions = 4000;

long EnvOr(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : fallback;
}

const std::vector<std::string> kNumbers = {
    "0",          "1",          "2",          "3",           "7",
    "64",         "255",        "256",        "1024",        "65535",
    "65536",      "65537",      "1048576",    "1048577",     "2147483647",
    "2147483648", "4294967295", "4294967296", "9223372036854775807",
    "18446744073709551615",     "-1",         "-2147483648", "1e-300",
    "1e308",      "1e309",      "nan",        "inf",         "-inf",
    "0.5",        "1.5",        "100",        "-0",          "1e-9"};

const std::vector<std::string> kStrings = {
    "\"\"",         "\"x\"",         "\"gdn-32b\"",    "\"gdn-tiny\"", "\"mamba3-tiny\"",
    "\"stateflow\"", "\"1f1b\"",     "\"gpipe\"",      "\"hybrid\"",   "\"recurrent\"",
    "\"full\"",     "\"none\"",      "\"a\\nb\\033[31m\"", "\"cpu\"",  "\"analytic\"",
    "\"uniform\""};

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::string Mutate(std::string text) {
    const int count = 1 + Pick(3);
    for (int k = 0; k < count && !text.empty(); ++k) text = MutateOnce(std::move(text));
    return text;
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }

  std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t nl = text.find('\n', start);
      lines.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    return lines;
  }

  static std::string Join(const std::vector<std::string>& lines) {
    std::string out;
    for (std::size_t k = 0; k < lines.size(); ++k) out += (k ? "\n" : "") + lines[k];
    return out;
  }

  // Spans [begin, end) of numbers (digits, signs, dots, exponents) or of
  // quoted strings in `text`.
  std::vector<std::pair<std::size_t, std::size_t>> Tokens(const std::string& text, bool numbers) {
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (std::size_t k = 0; k < text.size();) {
      if (numbers && (std::isdigit(static_cast<unsigned char>(text[k])) ||
                      (text[k] == '-' && k + 1 < text.size() &&
                       std::isdigit(static_cast<unsigned char>(text[k + 1]))))) {
        std::size_t e = k + 1;
        while (e < text.size() && (std::isalnum(static_cast<unsigned char>(text[e])) ||
                                   text[e] == '.' || text[e] == '-' || text[e] == '+')) {
          ++e;
        }
        if (k == 0 || !std::isalpha(static_cast<unsigned char>(text[k - 1]))) spans.push_back({k, e});
        k = e;
      } else if (!numbers && text[k] == '"') {
        const std::size_t e = text.find('"', k + 1);
        if (e == std::string::npos) break;
        spans.push_back({k, e + 1});
        k = e + 1;
      } else {
        ++k;
      }
    }
    return spans;
  }

  std::string Replace(std::string text, bool numbers) {
    const auto spans = Tokens(text, numbers);
    if (spans.empty()) return text;
    const auto [b, e] = spans[Pick(static_cast<int>(spans.size()))];
    const std::vector<std::string>& pool = numbers ? kNumbers : kStrings;
    return text.replace(b, e - b, pool[Pick(static_cast<int>(pool.size()))]);
  }

  std::string MutateOnce(std::string text) {
    std::vector<std::string> lines = Lines(text);
    const int n = static_cast<int>(lines.size());
    switch (Pick(10)) {
      case 0:
      case 1:
      case 2:
        return Replace(std::move(text), /*numbers=*/true);
      case 3:
        return Replace(std::move(text), /*numbers=*/false);
      case 4:
        lines.erase(lines.begin() + Pick(n));
        return Join(lines);
      case 5: {
        const int k = Pick(n);
        lines.insert(lines.begin() + Pick(n), lines[k]);
        return Join(lines);
      }
      case 6:
        std::swap(lines[Pick(n)], lines[Pick(n)]);
        return Join(lines);
      case 7:
        return text.substr(0, Pick(static_cast<int>(text.size()) + 1));
      case 8:
        text[Pick(static_cast<int>(text.size()))] ^= static_cast<char>(1 << Pick(8));
        return text;
      default:
        text.insert(text.begin() + Pick(static_cast<int>(text.size()) + 1),
                    static_cast<char>(Pick(256)));
        return text;
    }
  }

  std::mt19937_64 rng_;
};

struct Outcomes {
  long ok = 0, error = 0, bad = 0;
  std::vector<std::string> examples;  // of bad outcomes, at most a few

  void Bad(const std::string& why, const std::string& input) {
    ++bad;
    if (examples.size() < 5) examples.push_back(why + "\n--- input ---\n" + input);
  }
};

bool FiniteReport(const pb::Report& r) {
  if (!std::isfinite(r.step_time_s()) || !std::isfinite(r.tokens_per_s()) ||
      !std::isfinite(r.bubble_fraction())) {
    return false;
  }
  for (const pb::StageReport& s : r.stages()) {
    if (!std::isfinite(s.busy_s()) || !std::isfinite(s.peak_memory_bytes())) return false;
  }
  return true;
}

// One status outcome: ok, or an error with a message.
void Count(const Status& s, const std::string& input, Outcomes* out) {
  if (s.ok()) {
    ++out->ok;
  } else if (s.message().empty()) {
    out->Bad("an error without a message", input);
  } else {
    ++out->error;
  }
}

Status RunScenario(const std::string& text, std::string* plan_text) {
  SF_ASSIGN_OR_RETURN(pb::Scenario raw, scenario::ParseScenarioText(text, "<fuzz>"));
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario resolved, scenario::Resolve(std::move(raw)));
  SF_RETURN_IF_ERROR(CheckPlanBounds(resolved.proto(), nullptr, kFuzzMaxActions));
  SF_ASSIGN_OR_RETURN(sim::Simulation sim,
                      sim::Simulate(resolved, resolved.proto().schedule()));
  if (!FiniteReport(sim.report)) return Status::Internal("NON-FINITE REPORT");
  if (plan_text != nullptr) *plan_text = schedule::PlanToText(sim.config.plan);
  return Status::Ok();
}

Status RunPlan(const scenario::ResolvedScenario& resolved, const std::string& text) {
  SF_ASSIGN_OR_RETURN(schedule::Plan plan, schedule::ParsePlanText(text, "<fuzz plan>"));
  SF_RETURN_IF_ERROR(schedule::ValidatePlan(plan));
  SF_ASSIGN_OR_RETURN(sim::Simulation sim,
                      sim::Simulate(resolved, resolved.proto().schedule(), {.plan = &plan}));
  if (!FiniteReport(sim.report)) return Status::Internal("NON-FINITE REPORT");
  return Status::Ok();
}

// Seeds: the embedded scenarios, and small variants that reach more code
// (a hybrid with attention, Mamba-3, 1F1B, GPipe, recompute).
std::vector<std::string> ScenarioSeeds() {
  const std::string small =
      "cluster_preset: \"cpu\"\n"
      "parallel { pipeline_size: 2 tensor_size: 1 data_size: 1 microbatch_size: 1 "
      "microbatches: 3 }\nseq_len: 256\n";
  return {std::string(scenario::DefaultScenarioText()),
          std::string(scenario::TinyTrainScenarioText()),
          "model_preset: \"gdn-hybrid-tiny\"\n" + small +
              "schedule { policy: \"stateflow\" chunks: 4 alpha: 1 granularity: 16 "
              "recompute: \"full\" }\n",
          "model_preset: \"mamba3-tiny\"\n" + small +
              "schedule { policy: \"1f1b\" chunks: 1 }\n",
          "model_preset: \"mamba3-hybrid-tiny\"\n" + small +
              "schedule { policy: \"gpipe\" chunks: 2 }\nprecision { activation_bytes: 4 }\n",
          "model_preset: \"kda-hybrid-tiny\"\n" + small +
              "schedule { policy: \"stateflow\" chunks: 2 recompute: \"full\" st_overlap: true }\n",
          // Every model, cluster and precision number in sight of the mutator.
          "model_preset: \"gdn-hybrid-tiny\"\n"
          "model { hybrid_period: 3 num_layers: 4 hidden_size: 64 num_heads: 2 head_dim_k: 16 "
          "head_dim_v: 16 conv_width: 4 mlp_size: 128 vocab_size: 256 attn_heads: 2 "
          "attn_head_dim: 16 gqa_group_size: 1 }\n"
          "cluster_preset: \"cpu\"\n"
          "cluster { devices_per_node: 2 device { peak_flops: 1e12 memory_capacity_bytes: 1e10 "
          "memory_bandwidth_bytes_per_s: 1e11 } pipeline_link { bandwidth_bytes_per_s: 1e9 "
          "latency_s: 1e-6 } }\n"
          "parallel { pipeline_size: 2 tensor_size: 1 data_size: 1 microbatch_size: 2 "
          "microbatches: 2 }\nseq_len: 512\n"
          "schedule { policy: \"stateflow\" chunks: 4 alpha: 1.5 granularity: 8 "
          "recompute: \"none\" }\n"
          "baselines { policy: \"1f1b\" chunks: 1 }\n"
          "precision { weight_bytes: 2 gradient_bytes: 4 optimizer_bytes: 8 activation_bytes: 2 }\n"};
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Report(const char* kind, long inputs, const Outcomes& o, double seconds) {
  std::printf("fuzz %-9s %8ld inputs: %8ld ok, %8ld error with a message, %ld other; %.1f s\n",
              kind, inputs, o.ok, o.error, o.bad, seconds);
  for (const std::string& e : o.examples) ADD_FAILURE() << kind << ": " << e;
}

// Unmutated, every seed runs: the mutants start from valid inputs.
TEST(Fuzz, EverySeedIsAValidScenario) {
  for (const std::string& seed : ScenarioSeeds()) {
    const Status s = RunScenario(seed, nullptr);
    EXPECT_TRUE(s.ok()) << s.message() << "\n" << seed;
  }
}

// A cost table of the tiny-train scenario's model (gdn-tiny): each layer
// kind's forward and backward at the scenario's chunk lengths, and a link.
std::string CostTableSeed(const pb::Scenario& scenario) {
  pb::CostTable t;
  *t.mutable_model() = scenario.model();
  t.set_microbatch_size(1);
  t.set_dtype("float32");
  for (const char* kind : {"embedding", "head", "recurrence"}) {
    for (const char* pass : {"forward", "backward"}) {
      for (double tokens : {32.0, 64.0, 128.0, 256.0}) {
        pb::CostSample* c = t.add_samples();
        c->set_layer_kind(kind);
        c->set_pass(pass);
        c->set_recompute("none");
        c->set_tokens(tokens);
        c->set_median_s(1e-6 * tokens * (pass[0] == 'f' ? 1 : 2));
      }
    }
  }
  t.mutable_link()->set_latency_s(1e-6);
  t.mutable_link()->set_bandwidth_bytes_per_s(1e9);
  return sim::CostTableText(t);
}

Status RunCosts(const scenario::ResolvedScenario& resolved, const std::string& text) {
  pb::CostTable table;
  SF_RETURN_IF_ERROR(scenario::ParseTextProto(text, "<fuzz costs>", &table));
  SF_RETURN_IF_ERROR(sim::CheckCostTableModel(table, resolved.proto().model(), "<fuzz costs>", 1));
  SF_ASSIGN_OR_RETURN(sim::CostTableIndex index, sim::CostTableIndex::Make(table, "<fuzz costs>"));
  SF_ASSIGN_OR_RETURN(sim::Simulation sim,
                      sim::Simulate(resolved, resolved.proto().schedule(), {.costs = &index}));
  if (!FiniteReport(sim.report)) return Status::Internal("NON-FINITE REPORT");
  return Status::Ok();
}

TEST(Fuzz, CostTablesEndInAResultOrAnError) {
  const long inputs = EnvOr("SF_FUZZ_INPUTS", kDefaultInputs);
  Mutator mutator(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)) + 2000003);
  Result<pb::Scenario> raw = scenario::ParseScenarioText(scenario::TinyTrainScenarioText(), "<s>");
  ASSERT_TRUE(raw.ok());
  raw->mutable_schedule()->set_recompute("none");
  Result<scenario::ResolvedScenario> resolved = scenario::Resolve(*raw);
  ASSERT_TRUE(resolved.ok()) << resolved.status().message();
  const std::string seed = CostTableSeed(resolved->proto());
  const Status valid = RunCosts(*resolved, seed);
  ASSERT_TRUE(valid.ok()) << valid.message() << "\n" << seed;
  Outcomes out;
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < inputs; ++k) {
    const std::string input = mutator.Mutate(seed);
    try {
      const Status s = RunCosts(*resolved, input);
      if (!s.ok() && s.message() == "NON-FINITE REPORT") {
        out.Bad("a report with a non-finite number", input);
      } else {
        Count(s, input, &out);
      }
    } catch (const std::exception& e) {
      out.Bad(std::string("exception: ") + e.what(), input);
    }
  }
  Report("costs", inputs, out, Seconds(start));
  EXPECT_GT(out.ok, 0);
  EXPECT_GT(out.error, inputs / 20);
}

TEST(Fuzz, ScenariosEndInAResultOrAnError) {
  const long inputs = EnvOr("SF_FUZZ_INPUTS", kDefaultInputs);
  Mutator mutator(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)));
  const std::vector<std::string> seeds = ScenarioSeeds();
  Outcomes out;
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < inputs; ++k) {
    const std::string input = mutator.Mutate(seeds[k % seeds.size()]);
    try {
      const Status s = RunScenario(input, nullptr);
      if (!s.ok() && s.message() == "NON-FINITE REPORT") {
        out.Bad("a report with a non-finite number", input);
      } else {
        Count(s, input, &out);
      }
    } catch (const std::exception& e) {
      out.Bad(std::string("exception: ") + e.what(), input);
    }
  }
  Report("scenarios", inputs, out, Seconds(start));
  EXPECT_GT(out.ok, inputs / 50);  // the mutator keeps some inputs valid
  EXPECT_GT(out.error, inputs / 10);
}

TEST(Fuzz, PlansEndInAResultOrAnError) {
  const long inputs = EnvOr("SF_FUZZ_INPUTS", kDefaultInputs);
  Mutator mutator(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)) + 1000003);
  // Seed plans: each seed scenario's own plan, beside that scenario.
  std::vector<std::pair<scenario::ResolvedScenario, std::string>> seeds;
  for (const std::string& text : ScenarioSeeds()) {
    std::string plan;
    if (!RunScenario(text, &plan).ok()) continue;
    seeds.emplace_back(*scenario::Resolve(*scenario::ParseScenarioText(text, "<seed>")), plan);
  }
  ASSERT_EQ(seeds.size(), ScenarioSeeds().size());
  Outcomes out;
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < inputs; ++k) {
    const auto& [resolved, plan] = seeds[k % seeds.size()];
    const std::string input = mutator.Mutate(plan);
    try {
      const Status s = RunPlan(resolved, input);
      if (!s.ok() && s.message() == "NON-FINITE REPORT") {
        out.Bad("a report with a non-finite number", input);
      } else {
        Count(s, input, &out);
      }
    } catch (const std::exception& e) {
      out.Bad(std::string("exception: ") + e.what(), input);
    }
  }
  Report("plans", inputs, out, Seconds(start));
  EXPECT_GT(out.ok, 0);
  EXPECT_GT(out.error, inputs / 10);
}

// ---- calibration CSVs and cluster files (issue 31) ---------------------------

// The tiny-train scenario, resolved: the base of the calibration and
// cluster kinds.
scenario::ResolvedScenario TinyTrain() {
  return *scenario::Resolve(*scenario::ParseScenarioText(scenario::TinyTrainScenarioText(), "<s>"));
}

// A runs CSV over the tiny-train scenario: every column, fitted and held-out
// rows, two policies, a comment and a blank line.
const char kRunsSeed[] =
    "# measured runs\n"
    "name,policy,P,M,N,T,alpha,B,tp,dp,recompute,system,step_time_s,peak_bytes,used_bytes,set\n"
    "a,stateflow,2,2,2,256,0,1,1,1,none,,0.01,4000000,5000000,\n"
    "b,stateflow,2,4,4,256,1,1,1,1,full,,0.02,4500000,5500000,fit\n"
    "\n"
    "c,1f1b,2,2,1,256,,1,1,1,none,,0.015,6000000,7000000,holdout\n";

// What `stateflow calibrate` does with a CSV: parse, bound each run's plan,
// apply the rows, fit, and read the fitted preset back as --cluster would.
Status RunCalibration(const scenario::ResolvedScenario& base, const std::string& text) {
  SF_ASSIGN_OR_RETURN(std::vector<sim::CalibrationRow> rows,
                      sim::ParseCalibrationCsv(text, "<fuzz runs>"));
  if (rows.size() > kMaxCalibrationRuns) return Status::Invalid("too many runs");
  std::int64_t total = 0;
  const auto bounded = [&](const pb::Scenario& s) -> Status {
    SF_RETURN_IF_ERROR(CheckPlanBounds(s, nullptr, kFuzzMaxActions));
    total += EstimateLargestPlan(s, nullptr).actions;
    return total > kFuzzMaxActions ? Status::Invalid("the runs' actions in all") : Status::Ok();
  };
  SF_ASSIGN_OR_RETURN(std::vector<sim::CalibrationRun> runs,
                      sim::ApplyRows(base, rows, "<fuzz runs>", bounded));
  sim::CalibrationOptions options;
  options.max_iterations = 20;
  SF_ASSIGN_OR_RETURN(sim::Calibration c, sim::Calibrate(runs, options));
  const pb::CalibrationReport& r = c.report;
  if (!std::isfinite(r.rms_log_error()) || !std::isfinite(r.initial_rms_log_error()) ||
      !std::isfinite(r.memory_reserve_bytes())) {
    return Status::Internal("NON-FINITE REPORT");
  }
  pb::ClusterSpec back;
  const Status parsed =
      scenario::ParseTextProto(sim::ClusterPresetText(c.cluster, {"fuzz"}), "<preset>", &back);
  if (!parsed.ok() || !models::ValidateCluster(back).ok()) {
    return Status::Internal("NON-FINITE REPORT: the fitted preset does not read back: " +
                            (parsed.ok() ? models::ValidateCluster(back).message() : parsed.message()));
  }
  return Status::Ok();
}

// Mutated runs CSVs through calibrate's path. CI runs a fifth of the other
// kinds' count (a fit simulates every run for each of up to 20 iterations),
// a fiftieth under a sanitizer.
TEST(Fuzz, CalibrationCsvsEndInAResultOrAnError) {
  const long inputs =
      EnvOr("SF_FUZZ_INPUTS", kDefaultInputs) / (::stateflow::testing::kSanitized ? 50 : 5);
  Mutator mutator(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)) + 3000017);
  const scenario::ResolvedScenario base = TinyTrain();
  const Status valid = RunCalibration(base, kRunsSeed);
  ASSERT_TRUE(valid.ok()) << valid.message();
  Outcomes out;
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < inputs; ++k) {
    const std::string input = mutator.Mutate(kRunsSeed);
    try {
      const Status s = RunCalibration(base, input);
      if (!s.ok() && s.message().rfind("NON-FINITE REPORT", 0) == 0) {
        out.Bad(s.message(), input);
      } else {
        Count(s, input, &out);
      }
    } catch (const std::exception& e) {
      out.Bad(std::string("exception: ") + e.what(), input);
    }
  }
  Report("runs csv", inputs, out, Seconds(start));
  EXPECT_GT(out.ok, 0);
  EXPECT_GT(out.error, inputs / 20);
}

// A cluster preset file (--cluster FILE) into the tiny-train scenario:
// parse, resolve, bound, simulate.
Status RunCluster(const std::string& text) {
  pb::ClusterSpec cluster;
  SF_RETURN_IF_ERROR(scenario::ParseTextProto(text, "<fuzz cluster>", &cluster));
  SF_ASSIGN_OR_RETURN(pb::Scenario s,
                      scenario::ParseScenarioText(scenario::TinyTrainScenarioText(), "<s>"));
  s.clear_cluster_preset();
  *s.mutable_cluster() = std::move(cluster);
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario resolved, scenario::Resolve(std::move(s)));
  SF_RETURN_IF_ERROR(CheckPlanBounds(resolved.proto(), nullptr, kFuzzMaxActions));
  SF_ASSIGN_OR_RETURN(sim::Simulation sim, sim::Simulate(resolved, resolved.proto().schedule()));
  if (!FiniteReport(sim.report)) return Status::Internal("NON-FINITE REPORT");
  return Status::Ok();
}

TEST(Fuzz, ClusterFilesEndInAResultOrAnError) {
  const long inputs = EnvOr("SF_FUZZ_INPUTS", kDefaultInputs);
  Mutator mutator(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)) + 4000037);
  // Seeds: the tiny scenario's cluster and a GPU preset's, written as
  // calibrate writes presets (every field spelled out).
  std::vector<std::string> seeds;
  for (const char* preset : {"cpu", "a100-80gb-nvlink"}) {
    pb::Scenario s = *scenario::ParseScenarioText(scenario::TinyTrainScenarioText(), "<s>");
    s.set_cluster_preset(preset);
    Result<scenario::ResolvedScenario> resolved = scenario::Resolve(std::move(s));
    ASSERT_TRUE(resolved.ok()) << preset << ": " << resolved.status().message();
    seeds.push_back(sim::ClusterPresetText(resolved->proto().cluster(), {preset}));
    const Status valid = RunCluster(seeds.back());
    ASSERT_TRUE(valid.ok()) << valid.message() << "\n" << seeds.back();
  }
  Outcomes out;
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < inputs; ++k) {
    const std::string input = mutator.Mutate(seeds[k % seeds.size()]);
    try {
      const Status s = RunCluster(input);
      if (!s.ok() && s.message() == "NON-FINITE REPORT") {
        out.Bad("a report with a non-finite number", input);
      } else {
        Count(s, input, &out);
      }
    } catch (const std::exception& e) {
      out.Bad(std::string("exception: ") + e.what(), input);
    }
  }
  Report("clusters", inputs, out, Seconds(start));
  EXPECT_GT(out.ok, 0);
  EXPECT_GT(out.error, inputs / 20);
}

// Whether a one-line error says something after its last colon: "stateflow
// validate: --plot: " (a child that printed nothing) does not.
bool HasMessage(const std::string& line) {
  std::string text = line;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return !text.empty() && text.back() != ':';
}

// One error: a line that says something after its last colon, then at most
// the error's detail (a plan's grid: lines indented by two spaces, cli.h's
// Fail), nothing else.
bool OneError(const std::string& err) {
  const std::size_t nl = err.find('\n');
  if (nl == std::string::npos || !HasMessage(err.substr(0, nl))) return false;
  for (std::size_t at = nl + 1; at < err.size();) {
    const std::size_t end = err.find('\n', at);
    if (end == std::string::npos || err.compare(at, 2, "  ") != 0) return false;
    at = end + 1;
  }
  return true;
}

// Flags: the binary itself (a process per input, so far fewer inputs), each
// run with a random command of the quick ones and one to four flags with
// edge values. It must exit 0, or 2 with exactly one line on stderr, within
// its deadline. `--max-actions` comes first and is not in the pool, so no
// input simulates more than 100,000 actions.
TEST(Fuzz, FlagsEndInExitZeroOrOneLineAndExitTwo) {
  const long inputs = EnvOr("SF_FUZZ_FLAG_INPUTS", ::stateflow::testing::kSanitized ? 100 : 300);
  std::mt19937_64 rng(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)) + 3000017);
  auto pick = [&rng](const auto& pool) { return pool[rng() % pool.size()]; };
  const std::vector<std::string> commands = {"simulate", "plan-dump", "sweep", "capacity"};
  const std::vector<std::string> flags = {
      "-P", "-M", "-N", "-T", "--alpha", "--policy", "--model", "--cluster", "--recompute",
      "--tensor-parallel", "--microbatch-size", "--chunks-list", "--microbatches-list",
      "--devices", "--global-batch", "--json", "--top", "--nonsense", "-"};
  std::vector<std::string> values = kNumbers;
  for (const char* v : {"", "x", "gdn-32b", "gdn-tiny", "mamba3-tiny", "stateflow", "1f1b",
                        "gpipe", "full", "none", "cpu", "1,2,3", "2,2", "1,,2", "-1,4",
                        "a\nb\033[31m", "--json"}) {
    values.push_back(v);
  }
  Outcomes out;
  const auto start = std::chrono::steady_clock::now();
  const std::string prefix = std::string(SF_BINARY_DIR) + "/test-tmp-fuzz-flags";
  for (long k = 0; k < inputs; ++k) {
    std::vector<std::string> argv = {std::string(SF_BINARY_DIR) + "/stateflow", pick(commands),
                                     "--max-actions", "100000"};
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < count; ++f) {
      argv.push_back(pick(flags));
      if (rng() % 5 != 0) argv.push_back(pick(values));
    }
    std::string input;
    for (std::size_t a = 1; a < argv.size(); ++a) input += (a > 1 ? " " : "") + argv[a];
    const backend::testing::Finished f = backend::testing::RunFor(argv, prefix, 60);
    const long lines = std::count(f.err.begin(), f.err.end(), '\n');
    if (f.timed_out) {
      out.Bad("timed out", input);
    } else if (f.exit_code == 0) {
      ++out.ok;
    } else if (f.exit_code == 2 && OneError(f.err)) {
      ++out.error;
    } else {
      out.Bad("exit " + std::to_string(f.exit_code) + " with " + std::to_string(lines) +
                  " lines on stderr: " + f.err,
              input);
    }
  }
  Report("flags", inputs, out, Seconds(start));
  EXPECT_GT(out.error, inputs / 10);
}

// ---- the commands that start MPI work: train, validate, profile -------------------
//
// The same oracle as above (exit 0, or 2 with exactly one line on stderr,
// within the deadline), for `train`, `validate` and `profile` (and
// `presets`). Each input starts from cheap defaults -- one or two steps, a
// given cost table for validate, one repetition and the in-process link for
// profile, --max-actions 64 -- and one to four flags from that command's own
// pool replace or add to them. Each flag's pool holds the edge values that
// must be refused (0, -1, 2^31, 2^63, 2^64 - 1, nan, inf, 1e309, garbage, an
// escape sequence, another flag) and only small legal values, so that an
// accepted input stays a run of seconds: the fuzzer looks for crashes,
// hangs and wrong exits, not for long legal runs (a legal `--steps 1000000`
// is not a bug). Files: /dev/zero, a directory, a FIFO, a missing path,
// /dev/full for outputs, and real small files. An output on /dev/full may
// also end in exit 1 with its one line ("No space left on device"): output
// that cannot be written is exit code 1 (tools/cli.h).

struct FlagPool {
  std::string name;
  std::vector<std::string> values;  // empty: a switch
};

const std::vector<std::string> kBadValues = {
    "0", "-1", "2147483648", "4294967295", "9223372036854775807", "18446744073709551615",
    "1e309", "nan", "inf", "-inf", "1.5", "-0", "", "x", "a\nb\033[31m", "--json"};

std::vector<std::string> With(std::vector<std::string> good) {
  good.insert(good.end(), kBadValues.begin(), kBadValues.end());
  return good;
}

// Files every command may be given (made by MpiFlagFiles).
struct MpiFlagFiles {
  std::string dir, scenario, plan, costs, text, short_text, fifo, garbage, out, missing;
};

// `big_models`: gdn-3b and gdn-32b in --model's pool; train refuses them up
// front (their tensors exceed the machine), but profiling or validating one
// of their layers is legal and takes minutes and gigabytes.
std::vector<FlagPool> ScenarioFlagPools(const MpiFlagFiles& f, bool big_models) {
  std::vector<std::string> models = stateflow::testing::TinyFamilyPresets();
  if (big_models) models.insert(models.end(), {"gdn-32b", "gdn-3b"});
  const std::vector<std::string> inputs = {"/dev/zero", "/", f.fifo, f.missing, f.garbage};
  std::vector<std::string> scenarios = inputs;
  scenarios.push_back(f.scenario);
  return {
      {"--scenario", With(scenarios)},
      {"--model", With(models)},
      {"--cluster", With({"cpu", "a100"})},
      {"--policy", With({"stateflow", "1f1b", "gpipe"})},
      {"-P", With({"1", "2", "3", "4", "7", "4096", "4097"})},
      {"-M", With({"1", "2", "3", "1048576", "1048577"})},
      {"-N", With({"1", "2", "4", "8", "1048577"})},
      {"-T", With({"64", "100", "256", "512", "35149", "1099511627776", "1099511627777"})},
      {"-B", With({"1", "2", "1048576", "1048577"})},
      {"--alpha", With({"0", "1", "1.5", "100", "101", "1e-300"})},
      {"--tensor-parallel", With({"1", "2", "4097"})},
      {"--recompute", With({"none", "full"})},
      {"--system", With({"stateflow", "megatron-core", "ms-swift"})},
      {"--cost-model", With({"analytic", "uniform"})},
      {"--st-overlap", With({"on", "off"})},
      {"--st-tile", With({"1", "16", "4096", "4097"})},
      {"--compute-units", With({"1", "108", "1000001"})},
      {"--max-actions", With({"1", "64", "1099511627776", "1099511627777"})},
      {"--nonsense", {}},
      {"-", {}},
  };
}

std::vector<FlagPool> TrainFlagPools(const MpiFlagFiles& f) {
  std::vector<FlagPool> pools = ScenarioFlagPools(f, /*big_models=*/true);
  const std::vector<std::string> outputs = {"/dev/full", "/", f.out, f.missing + "/x"};
  std::vector<FlagPool> own = {
      {"--steps", With({"1", "2", "1073741825"})},
      {"--dtype", With({"float32", "float64", "float16"})},
      {"--threads", With({"1", "2", "1024", "1025"})},
      {"--text", With({"/dev/zero", "/", f.fifo, f.missing, f.text, f.short_text})},
      {"--seed", With({"1", "7"})},
      {"--lr", With({"0.001", "1e-300", "1e308", "100"})},
      {"--plan", With({"/dev/zero", "/", f.fifo, f.missing, f.garbage, f.plan})},
      {"--capacity-bytes", With({"1", "1000", "1000000", "100000000"})},
      {"--watchdog", With({"30", "10000000", "10000001", "1e-300"})},
      {"--checkpoint", With({"/dev/full", "/", f.out, f.dir + "/ck", f.missing + "/x/y"})},
      {"--checkpoint-every", With({"1", "2", "1073741825"})},
      {"--resume", With({"/dev/zero", "/", f.missing, f.dir + "/ck", f.dir})},
      {"--resume-change", With({"train.learning_rate", "train.weight_decay", "train.seed",
                                "model.name", "train.learning_rate,train.weight_decay"})},
      {"--json", {}},
      {"--trace", With(outputs)},
      {"--dump-weights", With(outputs)},
      {"--help", {}},
  };
  pools.insert(pools.end(), own.begin(), own.end());
  return pools;
}

// validate's and profile's own flags beside the scenario's.
std::vector<FlagPool> MeasureFlagPools(const MpiFlagFiles& f, bool validate) {
  std::vector<FlagPool> pools = ScenarioFlagPools(f, /*big_models=*/false);
  const std::vector<std::string> outputs = {"/dev/full", "/", f.out, f.missing + "/x"};
  std::vector<FlagPool> own = {
      {"--repetitions", With({"1", "2", "100001"})},
      {"--warmup", With({"1", "100001"})},
      {"--dtype", With({"float32", "float64", "float16"})},
      {"--threads", With({"1", "2", "1025"})},
      {"--link", With({"auto", "mpi", "in-process"})},
      {"--mpirun", With({"mpirun", "/bin/false", f.missing})},
      {"--concurrent", With({"1", "2", "1025"})},
      {"--chunks-list", With({"1,2", "2,2", "1,,2", "-1,4", "1048577"})},
      {"--microbatches-list", With({"2", "1,2", "0,2"})},
      {"--seq-len-list", With({"64,128", "1099511627777"})},
      {"--recompute-list", With({"none,full", "none,none", "x"})},
      {"--policies", With({"1f1b,stateflow", "x"})},
      {"--alpha-list", With({"0,1", "1e309"})},
      {"--global-batch-list", With({"4", "2147483648"})},
      {"--help", {}},
  };
  if (validate) {
    std::vector<FlagPool> v = {
        {"--costs", With({"/dev/zero", "/", f.fifo, f.missing, f.garbage, f.costs})},
        {"--costs-out", With(outputs)},
        {"--steps", With({"1", "2", "100001"})},
        {"--json", {}},
        {"--timeout", With({"60", "100000", "1e309"})},  // no legal short one: a slow run may time out (exit 1)
        {"--rounds", With({"1", "2", "1001"})},
        {"--plot", With({"/dev/full", "/", f.out, f.missing + "/x", f.dir + "/fig.txt",
                         f.dir + "/fig.svg"})},
        {"--python", With({"/bin/false", f.missing})},
    };
    own.insert(own.end(), v.begin(), v.end());
  } else {
    own.push_back({"--out", With(outputs)});
  }
  pools.insert(pools.end(), own.begin(), own.end());
  return pools;
}

// The cheap defaults of each command (a fuzzed flag of the same name
// replaces its default).
std::vector<std::pair<std::string, std::string>> CheapDefaults(const std::string& command,
                                                               const MpiFlagFiles& f) {
  if (command == "train") return {{"--steps", "1"}, {"--max-actions", "64"}, {"--watchdog", "30"}};
  if (command == "validate") {
    return {{"--costs", f.costs}, {"--steps", "2"}, {"--max-actions", "64"}, {"--timeout", "60"},
            {"--repetitions", "1"}, {"--warmup", "0"}, {"--link", "in-process"}};
  }
  if (command == "profile") {
    return {{"--out", f.out}, {"--repetitions", "1"}, {"--warmup", "0"},
            {"--link", "in-process"}, {"--max-actions", "64"}};
  }
  return {};
}

MpiFlagFiles MakeMpiFlagFiles() {
  MpiFlagFiles f;
  f.dir = std::string(SF_BINARY_DIR) + "/test-tmp-fuzz-mpi";
  std::filesystem::remove_all(f.dir);
  std::filesystem::create_directories(f.dir);
  f.scenario = std::string(SF_SOURCE_DIR) + "/scenarios/tiny-train.textproto";
  f.missing = f.dir + "/missing";
  f.out = f.dir + "/out";
  f.fifo = f.dir + "/fifo";
  mkfifo(f.fifo.c_str(), 0600);
  f.garbage = f.dir + "/garbage";
  std::ofstream(f.garbage) << "stage { \x01\xff }}} model_preset: \"\n";
  f.short_text = f.dir + "/short.txt";
  std::ofstream(f.short_text) << "ten bytes.";
  f.text = f.dir + "/text.txt";
  {
    std::ofstream text(f.text);
    for (int k = 0; k < 200; ++k) text << "A line of training text, number " << k << ".\n";
  }
  const std::string bin = std::string(SF_BINARY_DIR) + "/stateflow";
  f.plan = f.dir + "/plan.txt";
  const backend::testing::Finished plan = backend::testing::RunFor(
      {bin, "plan-dump", "--scenario", f.scenario, "--out", f.plan}, f.dir + "/plan-dump", 60);
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  f.costs = f.dir + "/costs.textproto";
  const backend::testing::Finished costs = backend::testing::RunFor(
      {bin, "profile", "--out", f.costs, "--repetitions", "1", "--warmup", "0", "--link",
       "in-process", "--chunks-list", "1,2,4,8"},
      f.dir + "/profile", 120);
  EXPECT_EQ(costs.exit_code, 0) << costs.err;
  return f;
}

TEST(Fuzz, MpiCommandFlagsEndInExitZeroOrOneLineAndExitTwo) {
  const long inputs =
      EnvOr("SF_FUZZ_MPI_FLAG_INPUTS", ::stateflow::testing::kSanitized ? 100 : 300);
  std::mt19937_64 rng(static_cast<std::uint64_t>(EnvOr("SF_FUZZ_SEED", 1)) + 4000037);
  auto pick = [&rng](const auto& pool) { return pool[rng() % pool.size()]; };
  const MpiFlagFiles files = MakeMpiFlagFiles();
  // Fuzzed values become output names (`--trace 1.5`, `--checkpoint nan`):
  // relative ones land in a scratch directory, not wherever the test runs.
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::create_directories(files.dir + "/cwd");
  std::filesystem::current_path(files.dir + "/cwd");
  // train is the cheapest of the three (one process, no mpirun): most inputs.
  const std::vector<std::string> commands = {"train", "train", "train", "train", "validate",
                                             "profile", "profile", "presets"};
  const std::map<std::string, std::vector<FlagPool>> pools = {
      {"train", TrainFlagPools(files)},
      {"validate", MeasureFlagPools(files, true)},
      {"profile", MeasureFlagPools(files, false)},
      {"presets", {{"--help", {}}, {"-h", {}}, {"--nonsense", {}}, {"-", {}}, {"x", {}}}}};
  Outcomes out;
  std::map<std::string, long> per_command;
  const auto start = std::chrono::steady_clock::now();
  for (long k = 0; k < inputs; ++k) {
    const std::string command = pick(commands);
    ++per_command[command];
    std::vector<std::pair<std::string, std::string>> flags = CheapDefaults(command, files);
    std::vector<std::string> fuzzed;
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int n = 0; n < count; ++n) {
      const FlagPool& pool = pick(pools.at(command));
      std::erase_if(flags, [&](const auto& f) { return f.first == pool.name; });
      fuzzed.push_back(pool.name);
      if (!pool.values.empty() && rng() % 8 != 0) fuzzed.push_back(pick(pool.values));
    }
    std::vector<std::string> argv = {std::string(SF_BINARY_DIR) + "/stateflow", command};
    for (const auto& [name, value] : flags) argv.insert(argv.end(), {name, value});
    argv.insert(argv.end(), fuzzed.begin(), fuzzed.end());
    std::string input;
    for (std::size_t a = 1; a < argv.size(); ++a) input += (a > 1 ? " " : "") + argv[a];
    std::filesystem::remove_all(files.dir + "/ck");
    std::filesystem::remove_all(files.out);  // a file, or a checkpoint directory an input made
    const backend::testing::Finished f =
        backend::testing::RunFor(argv, files.dir + "/run", 120);
    const long lines = std::count(f.err.begin(), f.err.end(), '\n');
    if (f.timed_out) {
      out.Bad("timed out", input);
    } else if (f.exit_code == 0) {
      ++out.ok;
    } else if (f.exit_code == 2 && OneError(f.err)) {
      ++out.error;
    } else if (f.exit_code == 1 && lines == 1 && input.find("/dev/full") != std::string::npos &&
               f.err.find("No space left on device") != std::string::npos) {
      ++out.error;  // an output that cannot be written: exit 1 (cli.h), after the work
    } else {
      out.Bad("exit " + std::to_string(f.exit_code) + " with " + std::to_string(lines) +
                  " lines on stderr: " + f.err,
              input);
    }
  }
  std::filesystem::current_path(cwd);
  Report("mpi flags", inputs, out, Seconds(start));
  for (const auto& [command, n] : per_command) std::printf("  %s: %ld inputs\n", command.c_str(), n);
  EXPECT_GT(out.ok, 0);
  EXPECT_GT(out.error, inputs / 10);
}

}  // namespace
}  // namespace stateflow::tools

// `stateflow plan-dump` and `stateflow presets`.
#include <google/protobuf/text_format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "common/files.h"
#include "common/text.h"
#include "models/model.h"
#include "scenario/configure.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "schedule/plan.h"
#include "schedule/plan_text.h"
#include "schedule/torch_csv.h"
#include "schedule/validator.h"
#include "sim/simulation.h"
#include "tools/cli.h"

namespace stateflow::tools {
namespace {

// "2.97B", "13.6M", "234K": a parameter count with three significant digits.
std::string FormatParamCount(double n) {
  const char* unit = "";
  double v = n;
  if (n >= 1e9) {
    v = n / 1e9, unit = "B";
  } else if (n >= 1e6) {
    v = n / 1e6, unit = "M";
  } else if (n >= 1e3) {
    v = n / 1e3, unit = "K";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f%s" : v >= 10 ? "%.1f%s" : "%.2f%s", v, unit);
  return buf;
}


using sim::MemorySample;
using sim::SimulationOptions;
using sim::Simulation;
using sim::Simulate;
using sim::Slice;
using sim::StageResult;

constexpr char kPlanDumpExamples[] = R"(examples:
  stateflow plan-dump -P 4 -M 2 -N 3
      print the StateFlow plan of the default scenario with 4 stages
  stateflow plan-dump --policy 1f1b --out plan.txt
  stateflow simulate --plan plan.txt
      edit plan.txt by hand, then have it validated and simulated

  stateflow plan-dump -P 4 -M 8 --policy 1f1b --format torch-csv --out 1f1b.csv
      torch.distributed.pipelining's schedule CSV (its _load_csv reads it);
      `stateflow simulate --plan 1f1b.csv` reads one back (--chunks N: each
      torch microbatch is N chunks of ours)

The text form: one line per stage listing its actions in order; an action
"2F0.3" is stage 2, forward, microbatch 0, chunk 3 (B = backward).
)";

}  // namespace

int PlanDumpCommand(int argc, char** argv) {
  const char* name = "plan-dump";
  ScenarioFlags flags;
  std::string out_path, format = "text";
  po::options_description desc("stateflow plan-dump [options]");
  desc.add_options()("help,h", "show this help")
      ("out,o", po::value(&out_path), "write to this file instead of stdout")
      ("format", po::value(&format),
       "text (default: ours, editable by hand) or torch-csv (torch.distributed.pipelining's "
       "schedule CSV, compute only: one row per rank, torch microbatch m = a N + i)");
  AddScenarioOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail(name, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kPlanDumpExamples;
    return kExitOk;
  }
  if (format != "text" && format != "torch-csv") {
    return Fail(name, Status::Invalid("--format: '" + Printable(format) +
                                      "' is not text or torch-csv"));
  }
  // Before the plan is built (issue 31): an --out that cannot be written.
  if (Status s = CheckOutputPath("--out", out_path); !s.ok()) return Fail(name, s);
  Result<scenario::ResolvedScenario> resolved = LoadResolvedScenario(flags);
  if (!resolved.ok()) return Fail(name, resolved.status());
  Result<scenario::Configuration> config =
      scenario::Configure(*resolved, resolved->proto().schedule());
  if (!config.ok()) return Fail(name, config.status());
  const schedule::Plan* plan = &config->plan;
  // The chunk boundaries, for the reader (the plan itself is order only).
  // The name passes through Printable: a newline in it cannot end the
  // comment and become plan text (issue 31).
  std::string header = "# scenario " + Printable(resolved->proto().name()) + ", seq_len " +
                       std::to_string(resolved->seq_len()) + "\n# chunk boundaries:";
  for (auto b : config->partition.boundaries()) header.append(" ").append(std::to_string(b));
  header += "\n";
  const bool csv = format == "torch-csv";
  const std::string text = csv ? schedule::PlanToTorchCsv(*plan) : header + schedule::PlanToText(*plan);
  // Read back as --plan reads it before it leaves (issue 31: written files
  // mean what they say): parsed, valid, and the same plan.
  Result<schedule::Plan> back =
      csv ? schedule::ParseTorchCsv(text, "<the plan written>", plan->chunks(), plan->policy())
          : schedule::ParsePlanText(text, "<the plan written>");
  if (!back.ok() || !schedule::ValidatePlan(*back).ok() || !(*back == *plan)) {
    return Fail(name, Status::Internal("the plan's text does not read back as the plan" +
                                       (back.ok() ? std::string() : ": " + back.status().message())));
  }
  if (out_path.empty()) {
    std::cout << text;
    return kExitOk;
  }
  if (Status written = WriteFile(out_path, text); !written.ok()) return Fail(name, written);
  std::cerr << "plan written to " << out_path << " (" << plan->num_actions() << " actions)\n";
  return kExitOk;
}

int PresetsCommand(int argc, char** argv) {
  po::options_description desc("stateflow presets");
  std::string model, cluster;
  desc.add_options()("help,h", "show this help")
      ("model", po::value(&model), "print this model preset's every field (a ModelSpec, text format)")
      ("cluster", po::value(&cluster), "print this cluster preset's every field (a ClusterSpec)");
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return Fail("presets", s);
  if (vm.count("help")) {
    std::cout << desc
              << "\nexamples:\n  stateflow presets\n      the names, with each model's shape\n"
                 "  stateflow presets --model gdn-15b\n      its heads, head dims, MLP and "
                 "vocabulary sizes (what a scenario's model block may override)\n"
                 "  stateflow presets --cluster h100-80gb-nvlink\n";
    return kExitOk;
  }
  if (!model.empty() || !cluster.empty()) {
    std::string text;
    if (!model.empty()) {
      Result<pb::ModelSpec> m = models::ModelPreset(model);
      if (!m.ok()) return Fail("presets", Status::Invalid("--model: " + m.status().message()));
      google::protobuf::TextFormat::PrintToString(*m, &text);
      std::cout << text;
    }
    if (!cluster.empty()) {
      Result<pb::ClusterSpec> c = models::ClusterPreset(cluster);
      if (!c.ok()) return Fail("presets", Status::Invalid("--cluster: " + c.status().message()));
      google::protobuf::TextFormat::PrintToString(*c, &text);
      std::cout << text;
    }
    return kExitOk;
  }
  std::cout << "models:\n";
  for (const auto& n : models::ModelPresetNames()) {
    const pb::ModelSpec m = *models::ModelPreset(n);
    // What sets the model apart beyond its family: DeltaNet's fields.
    std::string shape;
    if (m.decay() == "none") shape += ", no decay";
    if (m.norm() == "layernorm") shape += ", layernorm";
    if (m.mlp() == "gelu") shape += ", gelu mlp";
    if (m.mlp_bias() || m.out_proj_bias()) shape += ", biases";
    std::cout << "  " << n << "  (" << m.architecture() << shape << ", "
              << (m.layer_pattern().empty() ? "recurrent" : m.layer_pattern()) << ", "
              << m.num_layers() << " layers, hidden " << m.hidden_size() << ", "
              << FormatParamCount(models::ModelParamCount(m)) << " parameters)\n";
  }
  std::cout << "clusters:\n";
  for (const auto& n : models::ClusterPresetNames()) std::cout << "  " << n << "\n";
  return kExitOk;
}

}  // namespace stateflow::tools

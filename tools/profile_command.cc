// `stateflow profile`: measures on this machine what the simulator needs to
// replay a scenario (every layer kind's chunk forward and backward at every
// chunk length the scenario's schedules and sweep produce, the optimizer,
// the link between two MPI ranks) and writes it as a CostTable for
// `stateflow simulate --costs`. Flags and orchestration only: the
// configurations are tools/run_configs.h, the profiling tools/profiling.h,
// its mpirun jobs and their hidden worker modes tools/profile_jobs.h.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>

#include "backend/comm/mpi.h"
#include "common/files.h"
#include "models/limits.h"
#include "models/model.h"
#include "scenario/load.h"
#include "sim/calibrate.h"
#include "scenario/load.h"
#include "sim/cost_table.h"
#include "tools/cli.h"
#include "tools/profile_jobs.h"
#include "tools/profiling.h"
#include "tools/report_format.h"
#include "tools/run_configs.h"
#include "tools/sweep_options.h"

namespace stateflow::tools {
namespace {

constexpr char kProfileName[] = "profile";

constexpr char kProfileExamples[] = R"(examples:
  stateflow profile --out costs.textproto
      the tiny-train scenario (scenarios/tiny-train.textproto): gdn-tiny,
      its schedule's chunk lengths, recompute none
  stateflow profile --scenario scenarios/tiny-train.textproto \
      --chunks-list 1,2,4,8 --recompute-list none,full --out costs.textproto
      every chunk length of N in {1, 2, 4, 8}, both recompute modes
  stateflow simulate --scenario scenarios/tiny-train.textproto --costs costs.textproto
      replay the measured costs
  stateflow profile --chunks-list 1,4,16 --seq-len-list 512,1024,2048 \
      --kernel-models gdn-small --kernel-costs cpu-kernels.textproto
      no layers: this device's GEMM rates at every projection shape, and its recurrence
      core's rates, of gdn-tiny and gdn-small at those chunk lengths, as a cluster
      file for --cluster
)";

struct CommandFlags {
  ScenarioFlags scenario;
  ConfigFlags configs;
  ProfileFlags profile;
  std::string out_path;
  std::string kernel_costs_path;
  std::string kernel_models;
  std::string kernel_components = "gemm,recurrence";
  std::string link_worker;    // hidden
  std::string link_elements;  // hidden
  bool tensor_sums = false;   // hidden: the link worker times the TP sum
  std::string layers_worker;  // hidden
  std::string worker_tokens;  // hidden
  std::string worker_modes;   // hidden
};

std::string Summary(const pb::CostTable& table, const std::string& path, double elapsed_s) {
  std::set<std::string> kinds;
  std::set<double> tokens;
  for (const pb::CostSample& s : table.samples()) {
    kinds.insert(s.layer_kind());
    tokens.insert(s.tokens());
  }
  char line[512];
  std::snprintf(line, sizeof(line),
                "wrote %s: %d samples (%zu layer kinds x 4 passes, %zu chunk lengths %.0f..%.0f "
                "tokens), optimizer %.3g ns/param, link %.3g us + %s/s, %.1f s\n",
                path.c_str(), table.samples_size(), kinds.size(), tokens.size(), *tokens.begin(),
                *tokens.rbegin(), table.optimizer_s_per_param() * 1e9,
                table.link().latency_s() * 1e6,
                FormatBytes(table.link().bandwidth_bytes_per_s()).c_str(), elapsed_s);
  return line;
}

// --kernel-costs: the kernel-cost table, written as a cluster file (the scenario's
// cluster with these kernel costs), read back and validated.
Status WriteKernelCosts(const CommandFlags& flags, const scenario::ResolvedScenario& scenario,
                      const std::vector<RunConfig>& configs) {
  std::vector<pb::ModelSpec> extra;
  if (!flags.kernel_models.empty()) {
    SF_ASSIGN_OR_RETURN(std::vector<std::string> names, ListItems("kernel-models", flags.kernel_models));
    for (const std::string& name : names) {
      Result<pb::ModelSpec> model = models::ModelPreset(name);
      if (!model.ok()) return model.status().WithPrefix("--kernel-models");
      extra.push_back(*model);
    }
  }
  KernelComponents components{false, false};
  SF_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                      ListItems("kernel-components", flags.kernel_components));
  for (const std::string& part : parts) {
    if (part == "gemm") {
      components.gemm = true;
    } else if (part == "recurrence") {
      components.recurrence = true;
    } else {
      return Status::Invalid("--kernel-components: unknown '" + part +
                             "' (known: gemm, recurrence)");
    }
  }
  SF_ASSIGN_OR_RETURN(pb::ClusterSpec cluster,
                      MeasureKernelCosts(scenario, configs, flags.profile, extra, components,
                                       isatty(STDERR_FILENO) ? &std::cerr : nullptr));
  const std::string text = sim::ClusterPresetText(
      cluster, {"The cluster of the scenario with this device's GEMM rates by shape and its",
                "recurrence core's rates by chunk length, measured by stateflow profile",
                "--kernel-costs (docs/cost-model.md, \"Kernel costs\"); use it with --cluster FILE.",
                "Every other component (norms, gates, convolutions, attention) runs on the",
                "efficiency curve."});
  pb::ClusterSpec reread;
  Status back = scenario::ParseTextProto(text, "<measured cluster>", &reread);
  if (back.ok()) back = models::ValidateCluster(reread);
  if (!back.ok()) {
    return Status::Internal("the measured cluster does not read back as a valid cluster (" +
                            back.message() + ")");
  }
  SF_RETURN_IF_ERROR(WriteFile(flags.kernel_costs_path, text));
  std::cout << "wrote " << flags.kernel_costs_path << ": " << cluster.kernel_costs().gemm_size()
            << " GEMM points, " << cluster.kernel_costs().recurrence_size()
            << " recurrence points (" << cluster.kernel_costs().name() << ")\n";
  return Status::Ok();
}

int Profile(const CommandFlags& flags) {
  const auto start = std::chrono::steady_clock::now();
  Result<scenario::ResolvedScenario> scenario = LoadResolvedScenario(
      flags.scenario, scenario::TinyTrainScenarioText(), "<tiny-train scenario>");
  if (!scenario.ok()) return Fail(kProfileName, scenario.status());
  Result<std::vector<RunConfig>> configs = ConfigsFor(*scenario, flags.configs, true);
  if (!configs.ok()) return Fail(kProfileName, configs.status());
  if (!flags.kernel_costs_path.empty()) {
    if (Status s = WriteKernelCosts(flags, *scenario, *configs); !s.ok()) {
      return Fail(kProfileName, s);
    }
    if (flags.out_path.empty()) return kExitOk;
  }
  Result<pb::CostTable> table = ProfileForConfigs(*scenario, *configs, flags.profile,
                                                  isatty(STDERR_FILENO) ? &std::cerr : nullptr);
  if (!table.ok()) return Fail(kProfileName, table.status());
  if (Status written = WriteCostTableFile(flags.out_path, *table); !written.ok()) {
    return Fail(kProfileName, written);
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << Summary(*table, flags.out_path, elapsed);
  for (const std::string& note : table->notes()) std::cout << "  " << note << "\n";
  return kExitOk;
}

}  // namespace

int ProfileCommand(int argc, char** argv) {
  CommandFlags flags;
  po::options_description desc(
      "stateflow profile --out FILE [options] (without --scenario: "
      "scenarios/tiny-train.textproto)");
  desc.add_options()("help,h", "show this help")("out", po::value(&flags.out_path),
                                                 "the cost table to write (text format)")(
      "kernel-costs", po::value(&flags.kernel_costs_path),
      "also (or, without --out, only) time this device's linear kernel at every GEMM shape the "
      "cost model looks up (each projection's forward, input and weight gradient at B s tokens "
      "for every chunk length) and the recurrence core (every family's) at every chunk length, and "
      "write the scenario's cluster with these rates as its kernel_costs: a cluster file for "
      "--cluster")(
      "kernel-models", po::value(&flags.kernel_models),
      "with --kernel-costs: further model presets whose GEMMs and recurrence core are timed too "
      "(comma-separated, e.g. gdn-small), so that the table covers models the scenario does not "
      "run")(
      "kernel-components", po::value(&flags.kernel_components),
      "with --kernel-costs: what to time, gemm, recurrence or both (default gemm,recurrence); "
      "what is left out runs on the efficiency curve");
  AddProfileOptions(&desc, &flags.profile);
  AddConfigOptions(&desc, &flags.configs);
  AddScenarioOptions(&desc, &flags.scenario);
  po::options_description hidden;
  hidden.add_options()("link-worker", po::value(&flags.link_worker), "")(
      "link-elements", po::value(&flags.link_elements), "")(
      "tensor-sums", po::bool_switch(&flags.tensor_sums), "")(
      "layers-worker", po::value(&flags.layers_worker), "")(
      "worker-tokens", po::value(&flags.worker_tokens), "")(
      "worker-modes", po::value(&flags.worker_modes), "");
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, all, &vm); !s.ok()) return Fail(kProfileName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kProfileExamples;
    return kExitOk;
  }
  if (!flags.link_worker.empty()) {
    return RunLinkWorker(flags.link_worker, flags.link_elements, flags.profile, flags.tensor_sums);
  }
  if (!flags.layers_worker.empty()) {
    return RunLayersWorker(flags.layers_worker, flags.worker_tokens, flags.worker_modes,
                           flags.profile);
  }
  if (backend::LaunchedByMpirun()) {
    return FailOnRankZero(kProfileName, Status::Invalid("run profile without mpirun: it starts "
                                                 "`mpirun -n 2` itself to time the link"));
  }
  if (flags.out_path.empty() && flags.kernel_costs_path.empty()) {
    return Fail(kProfileName, Status::Invalid("--out is required (or --kernel-costs alone)"));
  }
  if (vm.count("kernel-components") && flags.kernel_costs_path.empty()) {
    return Fail(kProfileName, Status::Invalid("--kernel-components needs --kernel-costs"));
  }
  if (!flags.kernel_models.empty() && flags.kernel_costs_path.empty()) {
    return Fail(kProfileName, Status::Invalid("--kernel-models needs --kernel-costs"));
  }
  if (!flags.out_path.empty()) {
    if (Status s = CheckOutputPath("--out", flags.out_path); !s.ok()) return Fail(kProfileName, s);
  }
  if (!flags.kernel_costs_path.empty()) {
    if (Status s = CheckOutputPath("--kernel-costs", flags.kernel_costs_path); !s.ok()) {
      return Fail(kProfileName, s);
    }
  }
  if (vm.count("mpirun")) {
    if (Status s = CheckProgram("--mpirun", flags.profile.mpirun); !s.ok()) return Fail(kProfileName, s);
  }
  return WithInterruptForwarding(kProfileName, [&] { return Profile(flags); });
}

}  // namespace stateflow::tools

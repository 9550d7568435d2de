// `stateflow`: the command line of StateFlow. One executable, subcommands:
//   stateflow simulate   predict step time, bubbles and peak memory
//   stateflow plan-dump  write a schedule's plan as editable text
//   stateflow sweep      sweep N, alpha, lengths, batches and policies
//   stateflow capacity   capacity plan: P x TP x DP splits of a device count
//   stateflow train      train on real text with the backend (mpirun -n P)
//   stateflow profile    measure layer, optimizer and link costs (CostTable)
//   stateflow validate   predicted beside measured on real runs
//   stateflow calibrate  fit the cost model to measured runs, write a cluster preset
//   stateflow presets    list model and cluster presets
// `stateflow <command> --help` explains each with examples.
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>

#include <google/protobuf/stubs/common.h>

#include "backend/allocator.h"
#include "backend/comm/mpi.h"
#include "common/text.h"
#include "sf_git_commit.h"  // SF_GIT_COMMIT, stamped at build time
#include "tools/cli.h"

namespace stateflow::tools {
namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"simulate", "predict step time, bubbles and peak memory of a schedule", SimulateCommand},
    {"plan-dump", "write the plan (per-stage action order) of a schedule as text", PlanDumpCommand},
    {"sweep", "simulate ranges of N, alpha, lengths, batches; best per cell", SweepCommand},
    {"capacity", "rank the P x TP x DP splits of a device count that fit in memory", CapacityPlanCommand},
    {"train", "train the model on real text with the MPI backend (one rank per stage)", TrainCommand},
    {"profile", "measure per-chunk layer, optimizer and link costs here (a CostTable)", ProfileCommand},
    {"validate", "compare the simulator's predictions with real runs of the backend", ValidateCommand},
    {"calibrate", "fit the cost model's free parameters to measured runs; write a cluster preset",
     CalibrateCommand},
    {"presets", "list the model and cluster presets", PresetsCommand},
};

void PrintUsage(std::ostream& out) {
  out << "usage: stateflow <command> [options]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    out << "  " << c.name << std::string(12 - std::strlen(c.name), ' ') << c.summary << "\n";
  }
  out << "\n`stateflow <command> --help` shows a command's options and examples.\n"
         "With no --scenario, commands use the embedded default scenario:\n"
         "the paper's 3B Gated DeltaNet at 64K tokens on 8 A100s.\n";
}

}  // namespace

}  // namespace stateflow::tools

int main(int argc, char** argv) {
  using namespace stateflow::tools;
  // A closed pipe on stdout is reported (CheckedExit: "Broken pipe", exit 1)
  // rather than a silent death by SIGPIPE. Children get the default back
  // (backend/profile/launch.cc). An MPI rank keeps the default: its stdout
  // is mpirun's forwarding, and its transports stay as they were.
  if (!stateflow::backend::LaunchedByMpirun()) std::signal(SIGPIPE, SIG_IGN);
  stateflow::backend::KeepFreedHostMemory();
  if (argc < 2) {
    PrintUsage(std::cerr);
    return kExitBadInput;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(std::cout);
    return CheckedExit("--help", kExitOk);
  }
  if (name == "--version") {
    std::cout << "stateflow " << SF_VERSION << " (" << SF_GIT_COMMIT << ")\n";
    return CheckedExit("--version", kExitOk);
  }
  for (const Command& c : kCommands) {
    if (name == c.name) {
      const int code = CheckedExit(c.name, c.run(argc - 1, argv + 1));
      google::protobuf::ShutdownProtobufLibrary();
      return code;
    }
  }
  if (name == "plan") {  // its name until the capacity planner became `capacity`
    std::cerr << "stateflow: 'plan' is now 'capacity' (capacity planning); 'plan-dump' writes "
                 "a schedule's plan\n";
    return kExitBadInput;
  }
  std::string known;
  for (const Command& c : kCommands) known += (known.empty() ? "" : ", ") + std::string(c.name);
  std::cerr << "stateflow: unknown command '" << stateflow::Printable(name) << "' (commands: " << known
            << "; see stateflow --help)\n";
  return kExitBadInput;
}

#include "tools/profile_jobs.h"

#include <algorithm>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "backend/comm/mpi.h"
#include "backend/profile/launch.h"
#include "backend/profile/link_timer.h"
#include "backend/threading.h"
#include "common/files.h"
#include "models/cost_model.h"
#include "scenario/load.h"
#include "sim/cost_table.h"
#include "tools/cli.h"

namespace stateflow::tools {

int WithInterruptForwarding(const std::string& command, const std::function<int()>& body) {
  backend::InstallInterruptForwarding();
  const int code = body();
  const int signal = backend::PendingInterrupt();
  if (signal == 0) return code;
  if (code == kExitOk) {
    Fail(command, Status::Resource("interrupted by " + backend::InterruptName(signal)));
  }
  return 128 + signal;
}
namespace {

constexpr char kProfileJobsName[] = "profile";

std::string JoinNumbers(const std::vector<std::int64_t>& values) {
  std::string out;
  for (std::int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

// "32,64" -> {32, 64}; errors name `flag`.
Result<std::vector<std::int64_t>> ParseCounts(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1) {
      return Status::Invalid(flag + ": '" + item + "' is not a whole number >= 1");
    }
    out.push_back(v);
  }
  if (out.empty()) return Status::Invalid(flag + " is empty");
  return out;
}

// This process's rank in the job mpirun started (from the environment; MPI
// is not initialised), or -1.
int EnvironmentRank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* rank = std::getenv(name)) return std::atoi(rank);
  }
  return -1;
}

std::string RankTablePath(const std::string& prefix, int rank) {
  return prefix + "." + std::to_string(rank);
}

std::string JoinModes(const std::vector<models::Recompute>& modes) {
  std::string out;
  for (models::Recompute m : modes) {
    if (!out.empty()) out += ',';
    out += std::string(models::RecomputeName(m));
  }
  return out;
}

// The workers' tables merged: each sample the mean of the processes' medians.
// Every worker times the same samples; a table that differs is an internal
// error.
Result<pb::CostTable> MergeWorkerTables(const std::vector<pb::CostTable>& tables, double* spread) {
  pb::CostTable merged =
      sim::MergeCostTables(tables, sim::MergeStatistic::kMeanOverConcurrentProcesses, spread);
  for (std::size_t k = 0; k < tables.size(); ++k) {
    if (tables[k].samples_size() != merged.samples_size()) {
      return Status::Internal("profile worker " + std::to_string(k) +
                              " timed other samples than worker 0");
    }
  }
  return merged;
}

}  // namespace

namespace {

// `mpirun -n ranks` of the link worker (ping-pong, or the tensor sums).
Result<std::vector<pb::LinkSample>> LinkWorkerByMpirun(const std::vector<std::int64_t>& elements,
                                                       const ProfileFlags& flags,
                                                       const Precision& precision, int ranks,
                                                       bool tensor_sums) {
  const std::string self = backend::SelfExecutable();
  if (self.empty()) return Status::Resource("cannot find this program's path (/proc/self/exe)");
  SF_ASSIGN_OR_RETURN(TempFile out, TempFile::Create("link-samples"));
  const std::string& out_path = out.path();
  const backend::TimingOptions timing = Timing(flags);
  std::vector<std::string> program = {
      self, "profile", "--link-worker", out_path, "--link-elements", JoinNumbers(elements),
      "--dtype", precision.dtype, "--repetitions", std::to_string(timing.repetitions),
      "--warmup", std::to_string(timing.warmup)};
  if (tensor_sums) program.push_back("--tensor-sums");
  const std::vector<std::string> argv = backend::MpirunArgv(flags.mpirun, ranks, program);
  Result<backend::ChildResult> run = backend::RunChild(argv, 120);
  Result<pb::CostTable> table = Status::Internal("no link samples");
  if (run.ok() && run->exit_code == 0) table = scenario::LoadCostTableFile(out_path);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return Status::Resource(
        "mpirun -n " + std::to_string(ranks) + " failed (" +
        (run->timed_out ? std::string(run->stopped ? "timed out while stopped (process state T), not slow"
                                                   : "timed out")
                       : "exit " + std::to_string(run->exit_code)) +
        "): " + backend::LastLine(run->err));
  }
  if (!table.ok()) return table.status();
  return std::vector<pb::LinkSample>(table->link_samples().begin(), table->link_samples().end());
}

}  // namespace

// `mpirun -n 2` of this program in its hidden link-worker mode.
Result<std::vector<pb::LinkSample>> LinkByMpirun(const std::vector<std::int64_t>& elements,
                                                 const ProfileFlags& flags,
                                                 const Precision& precision) {
  return LinkWorkerByMpirun(elements, flags, precision, 2, /*tensor_sums=*/false);
}

Result<std::vector<pb::LinkSample>> TensorSumsByMpirun(const std::vector<std::int64_t>& elements,
                                                       const ProfileFlags& flags,
                                                       const Precision& precision, int ranks) {
  return LinkWorkerByMpirun(elements, flags, precision, ranks, /*tensor_sums=*/true);
}

// Under mpirun -n 2: ranks 0 and 1 ping-pong; rank 0 writes the samples.
int RunLinkWorker(const std::string& out_path, const std::string& elements_text,
                  const ProfileFlags& flags, bool tensor_sums) {
  Result<std::vector<std::int64_t>> elements = ParseCounts(elements_text, "--link-elements");
  if (!elements.ok()) return Fail(kProfileJobsName, elements.status());
  backend::MpiSession session(nullptr, nullptr);
  if (!session.status().ok()) return Fail(kProfileJobsName, session.status());
  const backend::TimingOptions timing = Timing(flags);
  Result<std::vector<pb::LinkSample>> samples =
      tensor_sums
          ? (flags.dtype == "float64" ? backend::TimeTensorSumsMpi<double>(*elements, timing)
             : flags.dtype == "bf16"  ? backend::TimeTensorSumsMpi<backend::bf16>(*elements, timing)
                                      : backend::TimeTensorSumsMpi<float>(*elements, timing))
      : flags.dtype == "float64" ? backend::PingPongMpi<double>(*elements, timing)
      : flags.dtype == "bf16"    ? backend::PingPongMpi<backend::bf16>(*elements, timing)
                                 : backend::PingPongMpi<float>(*elements, timing);
  if (!samples.ok()) return Fail(kProfileJobsName, samples.status());
  if (session.rank() != 0) return kExitOk;
  pb::CostTable table;
  for (const pb::LinkSample& s : *samples) *table.add_link_samples() = s;
  if (Status written = WriteCostTableFile(out_path, table, /*samples_only=*/true);
      !written.ok()) {
    return Fail(kProfileJobsName, written);
  }
  return kExitOk;
}

// Under mpirun -n K: every rank times the same layers at the same time and
// writes its table to <job>.<rank>; the model, the microbatch size and the
// attention chunks (samples of kind "attention" whose tokens and prefix say
// what to time) come from the CostTable at <job> (written by LayersByMpirun).
int RunLayersWorker(const std::string& job, const std::string& tokens_text,
                    const std::string& modes_text, const ProfileFlags& flags) {
  const int rank = EnvironmentRank();
  if (rank < 0) return Fail(kProfileJobsName, Status::Invalid("--layers-worker runs under mpirun only"));
  Result<std::vector<std::int64_t>> tokens = ParseCounts(tokens_text, "--worker-tokens");
  if (!tokens.ok()) return FailOnRankZero(kProfileJobsName, tokens.status());
  Result<std::vector<std::string>> modes = RecomputeModes(modes_text);
  if (!modes.ok()) return FailOnRankZero(kProfileJobsName, modes.status());
  Result<pb::CostTable> spec = scenario::LoadCostTableFile(job);
  if (!spec.ok()) return FailOnRankZero(kProfileJobsName, spec.status());
  backend::SetKernelThreads(static_cast<int>(flags.threads.value_or(1)));
  Result<backend::Device*> device =
      backend::GetDevice(flags.device.empty() ? "cpu" : flags.device, rank);
  if (!device.ok()) return Fail(kProfileJobsName, device.status());
  backend::ProfileRequest request{.model = spec->model(),
                                  .tokens = *tokens,
                                  .attention_chunks = {},
                                  .recompute = {},
                                  .microbatch_size = static_cast<int>(std::max(1u, spec->microbatch_size())),
                                  .dtype = flags.dtype.empty() ? "float32" : flags.dtype,
                                  .timing = Timing(flags),
                                  .device = *device,
                                  .st_overlap = spec->st_overlap(),
                                  .st_tile = static_cast<int>(spec->st_tile()),
                                  .tensor_size = static_cast<int>(std::max(1u, spec->tensor_size()))};
  for (const pb::CostSample& c : spec->samples()) {
    request.attention_chunks.emplace_back(static_cast<std::int64_t>(c.tokens()),
                                          static_cast<std::int64_t>(c.prefix()));
  }
  for (const std::string& mode : *modes) request.recompute.push_back(*models::ParseRecompute(mode));
  Result<pb::CostTable> table = backend::ProfileLayers(request, nullptr);
  // Every rank says why: mpirun ends the job when the first rank exits, so
  // rank 0 may be killed before it prints; the parent keeps the first line.
  if (!table.ok()) return Fail(kProfileJobsName, table.status());
  if (Status written = WriteFile(RankTablePath(job, rank), sim::CostTableText(*table));
      !written.ok()) {
    return Fail(kProfileJobsName, written.WithPrefix("rank " + std::to_string(rank)));
  }
  return kExitOk;
}

// `mpirun -n K` of this program in its hidden layers-worker mode.
Result<LayerMeasurement> LayersByMpirun(const backend::ProfileRequest& request,
                                        const ProfileFlags& flags, int ranks) {
  const std::string self = backend::SelfExecutable();
  if (self.empty()) return Status::Resource("cannot find this program's path (/proc/self/exe)");
  SF_ASSIGN_OR_RETURN(TempFile job_file, TempFile::Create("profile-layers"));
  const std::string& job = job_file.path();
  pb::CostTable spec;
  *spec.mutable_model() = request.model;
  spec.set_dtype(request.dtype);
  spec.set_microbatch_size(static_cast<std::uint32_t>(request.microbatch_size));
  spec.set_st_overlap(request.st_overlap);  // how to run the layers
  spec.set_st_tile(static_cast<std::uint32_t>(std::max(0, request.st_tile)));
  spec.set_tensor_size(static_cast<std::uint32_t>(std::max(1, request.tensor_size)));
  for (const auto& [s, c] : request.attention_chunks) {  // what to time, not timings
    pb::CostSample* chunk = spec.add_samples();
    chunk->set_layer_kind("attention");
    chunk->set_tokens(static_cast<double>(s));
    chunk->set_prefix(static_cast<double>(c));
  }
  SF_RETURN_IF_ERROR(WriteFile(job, sim::CostTableText(spec)));
  const std::vector<std::string> argv = backend::MpirunArgv(
      flags.mpirun, ranks,
      {self, "profile", "--layers-worker", job, "--worker-tokens", JoinNumbers(request.tokens),
       "--worker-modes", JoinModes(request.recompute), "--dtype", request.dtype, "--device",
       request.device != nullptr ? backend::DeviceKindName(request.device->kind()) : "cpu",
       "--threads",
       std::to_string(backend::KernelThreads()), "--repetitions",
       std::to_string(request.timing.repetitions), "--warmup",
       std::to_string(request.timing.warmup)});
  Result<backend::ChildResult> run = backend::RunChild(argv, 3600);
  std::vector<pb::CostTable> tables;
  Status read = Status::Ok();
  for (int r = 0; r < ranks; ++r) {
    if (read.ok() && run.ok() && run->exit_code == 0) {
      Result<pb::CostTable> t = scenario::LoadCostTableFile(RankTablePath(job, r));
      if (t.ok()) tables.push_back(std::move(t).value());
      else read = t.status();
    }
    std::remove(RankTablePath(job, r).c_str());
  }
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    // The workers' own message (a model the backend cannot run) when they
    // printed one.
    const std::size_t at = run->err.find("stateflow profile:");
    const std::string why = at == std::string::npos
                                ? backend::LastLine(run->err)
                                : run->err.substr(at, run->err.find('\n', at) - at);
    const std::string what =
        "--concurrent " + std::to_string(ranks) + ": mpirun -n " + std::to_string(ranks) +
        " failed (" +
        (run->timed_out ? std::string(run->stopped ? "timed out while stopped (process state T), not slow"
                                                   : "timed out")
                       : "exit " + std::to_string(run->exit_code)) +
        "): " + why;
    return run->exit_code == kExitBadInput ? Status::Invalid(what) : Status::Resource(what);
  }
  SF_RETURN_IF_ERROR(read);
  double spread = 0;
  SF_ASSIGN_OR_RETURN(pb::CostTable merged, MergeWorkerTables(tables, &spread));
  const unsigned threads = std::thread::hardware_concurrency();
  char note[512];
  std::snprintf(note, sizeof(note),
                "concurrency: the layers and the optimizer timed in %d processes at once "
                "(%s -n %d, %s), every core computing as in a %d-stage run; a sample's median "
                "is the mean of the %d processes' medians (which differed by up to %.0f %%), "
                "p10 and p90 the lowest and highest",
                ranks, flags.mpirun.c_str(), ranks,
                threads > 0 && static_cast<unsigned>(ranks) <= threads
                    ? "each bound to its own hardware thread"
                    : "more processes than hardware threads, unbound",
                ranks, ranks, 100 * spread);
  return LayerMeasurement{std::move(merged), note, std::move(tables)};
}

}  // namespace stateflow::tools

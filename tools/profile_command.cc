// `stateflow profile`: measures on this machine what the simulator needs to
// replay a scenario (every layer kind's chunk forward and backward at every
// chunk length the scenario's schedules and sweep produce, the optimizer,
// the link between two MPI ranks) and writes it as a CostTable for
// `stateflow simulate --costs`. Also the configuration list and profiling
// shared with `stateflow validate` (profile_command.h).
#include "tools/profile_command.h"

#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "backend/comm/mpi.h"
#include "backend/profile/launch.h"
#include "backend/profile/link_timer.h"
#include "backend/profile/profiler.h"
#include "backend/threading.h"
#include "backend/train/train_setup.h"
#include "models/placement.h"
#include "sim/search.h"
#include "sim/simulation.h"
#include "tools/cli.h"
#include "tools/report_format.h"
#include "tools/scenario.h"

namespace stateflow::tools {
namespace {

constexpr char kName[] = "profile";

// Embedded from scenarios/tiny-train.textproto by CMake (the default
// scenario of train, profile and validate: a model the backend runs).
constexpr char kTinyTrainScenario[] =
#include "tiny_train_scenario.inc"
    ;

constexpr char kExamples[] = R"(examples:
  stateflow profile --out costs.textproto
      the tiny-train scenario (scenarios/tiny-train.textproto): gdn-tiny,
      its schedule's chunk lengths, recompute none
  stateflow profile --scenario scenarios/tiny-train.textproto \
      --chunks-list 1,2,4,8 --recompute-list none,full --out costs.textproto
      every chunk length of N in {1, 2, 4, 8}, both recompute modes
  stateflow simulate --scenario scenarios/tiny-train.textproto --costs costs.textproto
      replay the measured costs
)";

// "none,full" -> {"none", "full"}; errors name --recompute-list.
Result<std::vector<std::string>> RecomputeModes(const std::string& text) {
  std::vector<std::string> modes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item = Trim(item);
    if (!models::ParseRecompute(item).ok() || item.empty()) {
      return Status::Invalid("--recompute-list: '" + item + "' is not none or full");
    }
    if (std::find(modes.begin(), modes.end(), item) == modes.end()) modes.push_back(item);
  }
  if (modes.empty()) return Status::Invalid("--recompute-list is empty (give none, full or both)");
  return modes;
}

std::vector<RunConfig> ScheduleAndBaselines(const pb::Scenario& s) {
  std::vector<RunConfig> configs;
  const auto add = [&](const pb::ScheduleSpec& schedule) {
    configs.push_back(RunConfig{schedule, static_cast<int>(s.parallel().microbatches()),
                                static_cast<std::int64_t>(s.seq_len())});
  };
  add(s.schedule());
  for (const pb::ScheduleSpec& b : s.baselines()) add(b);
  return configs;
}

Result<std::vector<RunConfig>> SweepGrid(const pb::Scenario& scenario, const ConfigFlags& flags) {
  pb::SweepSpec sweep = scenario.sweep();
  SF_RETURN_IF_ERROR(ApplySweepFlags(flags.sweep, &sweep));
  SF_ASSIGN_OR_RETURN(sim::SweepGrid grid, sim::ExpandSweep(scenario, sweep));
  std::vector<RunConfig> configs;
  for (const sim::SweepConfig& c : grid.configs) {
    configs.push_back(RunConfig{sim::ScheduleFor(scenario, c), c.microbatches, c.seq_len});
  }
  return configs;
}

// Each configuration once per mode of --recompute-list.
Result<std::vector<RunConfig>> WithModes(std::vector<RunConfig> configs, const ConfigFlags& flags) {
  if (!flags.recompute) return configs;
  SF_ASSIGN_OR_RETURN(std::vector<std::string> modes, RecomputeModes(*flags.recompute));
  std::vector<RunConfig> out;
  for (const RunConfig& c : configs) {
    for (const std::string& mode : modes) {
      RunConfig copy = c;
      copy.schedule.set_recompute(mode);
      out.push_back(std::move(copy));
    }
  }
  return out;
}

// ---- profiling --------------------------------------------------------------

// Chunk lengths and recompute modes the configurations need.
struct Needs {
  std::set<std::int64_t> tokens;
  std::set<std::string> modes;
};

Result<Needs> NeedsOf(const pb::Scenario& scenario, const std::vector<RunConfig>& configs) {
  Needs needs;
  for (const RunConfig& c : configs) {
    const pb::Scenario narrowed = ScenarioFor(scenario, c);
    Result<sim::PreparedScenario> prepared = sim::PrepareScenario(narrowed, c.schedule);
    if (!prepared.ok()) return prepared.status().WithPrefix(ConfigName(c));
    Result<schedule::Partition> partition =
        models::PartitionFor(prepared->cost_model, c.seq_len, c.schedule);
    if (!partition.ok()) return partition.status().WithPrefix(ConfigName(c));
    for (int i = 0; i < partition->num_chunks(); ++i) needs.tokens.insert(partition->length(i));
    needs.modes.insert(
        std::string(models::RecomputeName(prepared->cost_model.options().recompute)));
  }
  return needs;
}

// Message sizes of the link ping-pong, in elements: one token's activation,
// each chunk length's, and four times the largest.
std::vector<std::int64_t> LinkElements(const Needs& needs, std::int64_t hidden) {
  std::set<std::int64_t> elements = {hidden};
  for (std::int64_t s : needs.tokens) elements.insert(s * hidden);
  elements.insert(4 * *needs.tokens.rbegin() * hidden);
  return {elements.begin(), elements.end()};
}

std::string JoinNumbers(const std::vector<std::int64_t>& values) {
  std::string out;
  for (std::int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

backend::TimingOptions Timing(const ProfileFlags& flags) {
  return backend::TimingOptions{static_cast<int>(flags.repetitions.value_or(10)),
                                static_cast<int>(flags.warmup.value_or(2))};
}

struct LinkMeasurement {
  std::vector<pb::LinkSample> samples;
  std::string note;
};

std::string SizeList(const std::vector<pb::LinkSample>& samples) {
  std::string out;
  for (const pb::LinkSample& s : samples) {
    if (!out.empty()) out += ", ";
    out += FormatBytes(s.bytes());
  }
  return out;
}

// `mpirun -n 2` of this program in its hidden link-worker mode.
Result<std::vector<pb::LinkSample>> LinkByMpirun(const std::vector<std::int64_t>& elements,
                                                 const ProfileFlags& flags,
                                                 const Precision& precision) {
  const std::string self = backend::SelfExecutable();
  if (self.empty()) return Status::Resource("cannot find this program's path (/proc/self/exe)");
  char out_path[] = "/tmp/stateflow-link-XXXXXX";
  const int fd = mkstemp(out_path);
  if (fd < 0) return Status::Resource("cannot make a temporary file for the link samples");
  close(fd);
  const backend::TimingOptions timing = Timing(flags);
  const std::vector<std::string> argv = backend::MpirunArgv(
      flags.mpirun, 2,
      {self, "profile", "--link-worker", out_path, "--link-elements", JoinNumbers(elements),
       "--dtype", precision.dtype, "--repetitions", std::to_string(timing.repetitions), "--warmup",
       std::to_string(timing.warmup)});
  Result<backend::ChildResult> run = backend::RunChild(argv, 120);
  Result<pb::CostTable> table = Status::Internal("no link samples");
  if (run.ok() && run->exit_code == 0) table = LoadCostTableFile(out_path);
  std::remove(out_path);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return Status::Resource(
        "mpirun -n 2 failed (" +
        (run->timed_out ? std::string("timed out") : "exit " + std::to_string(run->exit_code)) +
        "): " + backend::LastLine(run->err));
  }
  if (!table.ok()) return table.status();
  return std::vector<pb::LinkSample>(table->link_samples().begin(), table->link_samples().end());
}

Result<LinkMeasurement> MeasureLink(const std::vector<std::int64_t>& elements,
                                    const ProfileFlags& flags, const Precision& precision) {
  std::string why_in_process = "--link in-process";
  if (flags.link != "in-process") {
    Result<std::vector<pb::LinkSample>> mpi = LinkByMpirun(elements, flags, precision);
    if (mpi.ok()) {
      return LinkMeasurement{*mpi, "link: ping-pong between two MPI ranks started by " +
                                       flags.mpirun + " -n 2 on this host, messages of " +
                                       SizeList(*mpi) + " (the backend's MPI comm)"};
    }
    if (flags.link == "mpi") return mpi.status().WithPrefix("link");
    why_in_process = mpi.status().message();
  }
  const backend::TimingOptions timing = Timing(flags);
  Result<std::vector<pb::LinkSample>> local =
      precision.dtype == "float64" ? backend::PingPongInProcess<double>(elements, timing)
                                   : backend::PingPongInProcess<float>(elements, timing);
  if (!local.ok()) return local.status();
  return LinkMeasurement{*local,
                         "link: NOT between MPI ranks: timed between two in-process "
                         "endpoints (a copy), messages of " +
                             SizeList(*local) + ", because " + why_in_process};
}

pb::Provenance MakeProvenance(int threads) {
  pb::Report holder;
  FillProvenance(threads, &holder);
  return holder.provenance();
}

void AddNotes(const Needs& needs, const ProfileFlags& flags, const Precision& precision,
              const pb::ModelSpec& model, pb::CostTable* table) {
  const backend::TimingOptions timing = Timing(flags);
  table->add_notes(
      "layers: wall time of one StageModule Forward or Backward call of a "
      "one-layer module on the middle of three chunks of s tokens, median of " +
      std::to_string(timing.repetitions) + " after " + std::to_string(timing.warmup) +
      " warm-up repetitions (each repetition times every kind and length once), " + std::to_string(precision.threads) + " kernel thread(s), " +
      precision.dtype);
  table->add_notes("optimizer_s_per_param: one AdamW step plus zeroing the gradients, over all " +
                   std::to_string(static_cast<long long>(models::ModelParamCount(model))) +
                   " parameters of the model in one process");
  table->add_notes("chunk lengths: " + std::to_string(needs.tokens.size()) + " from " +
                   std::to_string(*needs.tokens.begin()) + " to " +
                   std::to_string(*needs.tokens.rbegin()) + " tokens");
}

// ---- the hidden link-worker mode ---------------------------------------------

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

// Under mpirun -n 2: ranks 0 and 1 ping-pong; rank 0 writes the samples.
int RunLinkWorker(const std::string& out_path, const std::string& elements_text,
                  const ProfileFlags& flags) {
  Result<std::vector<std::int64_t>> elements = ParseCounts(elements_text, "--link-elements");
  if (!elements.ok()) return Fail(kName, elements.status());
  backend::MpiSession session(nullptr, nullptr);
  if (!session.status().ok()) return Fail(kName, session.status());
  const backend::TimingOptions timing = Timing(flags);
  Result<std::vector<pb::LinkSample>> samples =
      flags.dtype == "float64" ? backend::PingPongMpi<double>(*elements, timing)
                               : backend::PingPongMpi<float>(*elements, timing);
  if (!samples.ok()) return Fail(kName, samples.status());
  if (session.rank() != 0) return kExitOk;
  pb::CostTable table;
  for (const pb::LinkSample& s : *samples) *table.add_link_samples() = s;
  std::ofstream(out_path) << CostTableText(table);
  return kExitOk;
}

// ---- layers timed in several processes at once ------------------------------

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

// Under mpirun -n K: every rank times the same layers at the same time and
// writes its table to <job>.<rank>; the model comes from the CostTable at
// <job> (written by LayersByMpirun).
int RunLayersWorker(const std::string& job, const std::string& tokens_text,
                    const std::string& modes_text, const ProfileFlags& flags) {
  const int rank = EnvironmentRank();
  if (rank < 0) return Fail(kName, Status::Invalid("--layers-worker runs under mpirun only"));
  Result<std::vector<std::int64_t>> tokens = ParseCounts(tokens_text, "--worker-tokens");
  if (!tokens.ok()) return FailOnRankZero(kName, tokens.status());
  Result<std::vector<std::string>> modes = RecomputeModes(modes_text);
  if (!modes.ok()) return FailOnRankZero(kName, modes.status());
  Result<pb::CostTable> spec = LoadCostTableFile(job);
  if (!spec.ok()) return FailOnRankZero(kName, spec.status());
  backend::SetKernelThreads(static_cast<int>(flags.threads.value_or(1)));
  backend::ProfileRequest request{spec->model(), *tokens, {},
                                  flags.dtype.empty() ? "float32" : flags.dtype, Timing(flags)};
  for (const std::string& mode : *modes) request.recompute.push_back(*models::ParseRecompute(mode));
  Result<pb::CostTable> table = backend::ProfileLayers(request, nullptr);
  if (!table.ok()) return FailOnRankZero(kName, table.status());
  std::ofstream out(RankTablePath(job, rank));
  out << CostTableText(*table);
  out.close();
  if (!out) {
    return Fail(kName, Status::Resource(RankTablePath(job, rank) + ": cannot write (rank " +
                                        std::to_string(rank) + ")"));
  }
  return kExitOk;
}

// One table from the workers' tables (same samples in the same order): each
// median the mean of theirs, p10 the lowest, p90 the highest, repetitions
// summed, the optimizer the mean. `spread` gets the largest ratio - 1 of the
// highest to the lowest process median of any sample.
Result<pb::CostTable> MergeRankTables(const std::vector<pb::CostTable>& tables, double* spread) {
  pb::CostTable merged = tables.front();
  *spread = 0;
  double optimizer = 0;
  for (const pb::CostTable& t : tables) optimizer += t.optimizer_s_per_param();
  merged.set_optimizer_s_per_param(optimizer / static_cast<double>(tables.size()));
  for (int i = 0; i < merged.samples_size(); ++i) {
    pb::CostSample* m = merged.mutable_samples(i);
    double sum = 0, lo = m->median_s(), hi = m->median_s();
    std::uint32_t reps = 0;
    for (std::size_t k = 0; k < tables.size(); ++k) {
      if (tables[k].samples_size() != merged.samples_size() ||
          CostSampleKey(tables[k].samples(i)) != CostSampleKey(*m)) {
        return Status::Internal("profile worker " + std::to_string(k) +
                                " timed other samples than worker 0");
      }
      const pb::CostSample& s = tables[k].samples(i);
      sum += s.median_s();
      lo = std::min(lo, s.median_s());
      hi = std::max(hi, s.median_s());
      m->set_p10_s(std::min(m->p10_s(), s.p10_s()));
      m->set_p90_s(std::max(m->p90_s(), s.p90_s()));
      reps += s.repetitions();
    }
    m->set_median_s(sum / static_cast<double>(tables.size()));
    m->set_repetitions(reps);
    if (lo > 0) *spread = std::max(*spread, hi / lo - 1);
  }
  return merged;
}

struct LayerMeasurement {
  pb::CostTable table;
  std::string note;
  std::vector<pb::CostTable> per_process;  // each worker's own table
};

// `mpirun -n K` of this program in its hidden layers-worker mode.
Result<LayerMeasurement> LayersByMpirun(const backend::ProfileRequest& request,
                                        const ProfileFlags& flags, int ranks) {
  const std::string self = backend::SelfExecutable();
  if (self.empty()) return Status::Resource("cannot find this program's path (/proc/self/exe)");
  char job[] = "/tmp/stateflow-layers-XXXXXX";
  const int fd = mkstemp(job);
  if (fd < 0) return Status::Resource("cannot make a temporary file for the profile workers");
  close(fd);
  pb::CostTable spec;
  *spec.mutable_model() = request.model;
  spec.set_dtype(request.dtype);
  std::ofstream(job) << CostTableText(spec);
  const std::vector<std::string> argv = backend::MpirunArgv(
      flags.mpirun, ranks,
      {self, "profile", "--layers-worker", job, "--worker-tokens", JoinNumbers(request.tokens),
       "--worker-modes", JoinModes(request.recompute), "--dtype", request.dtype, "--threads",
       std::to_string(backend::KernelThreads()), "--repetitions",
       std::to_string(request.timing.repetitions), "--warmup",
       std::to_string(request.timing.warmup)});
  Result<backend::ChildResult> run = backend::RunChild(argv, 3600);
  std::vector<pb::CostTable> tables;
  Status read = Status::Ok();
  for (int r = 0; r < ranks; ++r) {
    if (read.ok() && run.ok() && run->exit_code == 0) {
      Result<pb::CostTable> t = LoadCostTableFile(RankTablePath(job, r));
      if (t.ok()) tables.push_back(std::move(t).value());
      else read = t.status();
    }
    std::remove(RankTablePath(job, r).c_str());
  }
  std::remove(job);
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
        (run->timed_out ? std::string("timed out") : "exit " + std::to_string(run->exit_code)) +
        "): " + why;
    return run->exit_code == kExitBadInput ? Status::Invalid(what) : Status::Resource(what);
  }
  SF_RETURN_IF_ERROR(read);
  double spread = 0;
  SF_ASSIGN_OR_RETURN(pb::CostTable merged, MergeRankTables(tables, &spread));
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

// ---- the command --------------------------------------------------------------

struct CommandFlags {
  ScenarioFlags scenario;
  ConfigFlags configs;
  ProfileFlags profile;
  std::string out_path;
  std::string link_worker;    // hidden
  std::string link_elements;  // hidden
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
                "wrote %s: %d samples (%zu layer kinds x 2 passes, %zu chunk lengths %.0f..%.0f "
                "tokens), optimizer %.3g ns/param, link %.3g us + %s/s, %.1f s\n",
                path.c_str(), table.samples_size(), kinds.size(), tokens.size(), *tokens.begin(),
                *tokens.rbegin(), table.optimizer_s_per_param() * 1e9,
                table.link().latency_s() * 1e6,
                FormatBytes(table.link().bandwidth_bytes_per_s()).c_str(), elapsed_s);
  return line;
}

int Profile(const CommandFlags& flags) {
  const auto start = std::chrono::steady_clock::now();
  Result<pb::Scenario> scenario =
      LoadResolvedScenario(flags.scenario, kTinyTrainScenario, "<tiny-train scenario>");
  if (!scenario.ok()) return Fail(kName, scenario.status());
  Result<std::vector<RunConfig>> configs = ConfigsFor(*scenario, flags.configs, true);
  if (!configs.ok()) return Fail(kName, configs.status());
  Result<pb::CostTable> table = ProfileForConfigs(*scenario, *configs, flags.profile,
                                                  isatty(STDERR_FILENO) ? &std::cerr : nullptr);
  if (!table.ok()) return Fail(kName, table.status());
  std::ofstream out(flags.out_path);
  out << CostTableText(*table);
  out.close();
  if (!out) return Fail(kName, Status::Invalid(flags.out_path + ": cannot write the cost table"));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << Summary(*table, flags.out_path, elapsed);
  for (const std::string& note : table->notes()) std::cout << "  " << note << "\n";
  return kExitOk;
}

}  // namespace

// ---- shared with validate -------------------------------------------------------

std::string_view TinyTrainScenarioText() { return kTinyTrainScenario; }

std::string CostSampleKey(const pb::CostSample& s) {
  return s.layer_kind() + "/" + s.pass() + "/" + s.recompute() + "/" +
         std::to_string(static_cast<long long>(s.tokens())) + "/" +
         std::to_string(static_cast<long long>(s.prefix()));
}

std::string ConfigName(const RunConfig& c) {
  std::string name = c.schedule.policy() + " N=" + std::to_string(c.schedule.chunks()) +
                     " M=" + std::to_string(c.microbatches) + " T=" + std::to_string(c.seq_len);
  if (c.schedule.alpha() != 0) {
    char alpha[32];
    std::snprintf(alpha, sizeof(alpha), " alpha=%g", c.schedule.alpha());
    name += alpha;
  }
  const std::string mode = c.schedule.recompute().empty() ? "none" : c.schedule.recompute();
  return name + " recompute " + mode;
}

pb::Scenario ScenarioFor(const pb::Scenario& scenario, const RunConfig& config) {
  pb::Scenario s = scenario;
  *s.mutable_schedule() = config.schedule;
  s.clear_baselines();
  s.clear_sweep();
  s.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(config.microbatches));
  s.set_seq_len(static_cast<std::uint64_t>(config.seq_len));
  return s;
}

bool ConfigFlags::any() const {
  return sweep.chunks || sweep.alpha || sweep.seq_len || sweep.global_batch || sweep.microbatches ||
         sweep.policies || recompute;
}

void AddConfigOptions(po::options_description* desc, ConfigFlags* flags) {
  AddSweepOptions(desc, &flags->sweep);
  desc->add_options()("recompute-list", Optional(&flags->recompute),
                      "recompute modes, e.g. none,full (each configuration in each)");
}

Result<std::vector<RunConfig>> ConfigsFor(const pb::Scenario& scenario, const ConfigFlags& flags,
                                          bool with_sweep) {
  std::vector<RunConfig> configs;
  if (!flags.any() || with_sweep) configs = ScheduleAndBaselines(scenario);
  if (flags.any() || with_sweep) {
    SF_ASSIGN_OR_RETURN(std::vector<RunConfig> grid, SweepGrid(scenario, flags));
    configs.insert(configs.end(), grid.begin(), grid.end());
  }
  return WithModes(std::move(configs), flags);
}

void AddProfileOptions(po::options_description* desc, ProfileFlags* flags) {
  desc->add_options()("repetitions", Optional(&flags->repetitions),
                      "timed repetitions per sample (default 10)")(
      "warmup", Optional(&flags->warmup), "repetitions thrown away first (default 2)")(
      "dtype", po::value(&flags->dtype), "float32 or float64 (default: train.dtype)")(
      "threads", Optional(&flags->threads), "kernel threads (default: train.threads, else as `stateflow train --help` says for the ranks of --concurrent or P)")(
      "link", po::value(&flags->link),
      "how to time the link: auto (mpirun -n 2, else in-process), mpi, in-process")(
      "mpirun", po::value(&flags->mpirun), "the mpirun program (default: mpirun in PATH)")(
      "concurrent", Optional(&flags->concurrent),
      "time the layers in K processes at once (mpirun -n K, one per core), so that every core "
      "is as busy as in a K-stage run; each sample the mean of their medians (default 1: this "
      "process; validate: the runs' P)");
}

Result<Precision> PrecisionFor(const pb::Scenario& scenario, const ProfileFlags& flags) {
  SF_ASSIGN_OR_RETURN(backend::TrainOptions train, backend::TrainOptionsFromSpec(scenario.train()));
  Precision p{flags.dtype.empty() ? train.dtype : flags.dtype, train.threads};
  if (p.dtype != "float32" && p.dtype != "float64") {
    return Status::Invalid("--dtype: unknown '" + p.dtype + "' (known: float32, float64)");
  }
  if (flags.threads) {
    if (*flags.threads < 1 || *flags.threads > 1024) {
      return Status::Invalid("--threads must be in [1, 1024]");
    }
    p.threads = static_cast<int>(*flags.threads);
  }
  if (p.threads == 0) {  // as a run of P ranks on this node would take by default
    const long long ranks = flags.concurrent.value_or(scenario.parallel().pipeline_size());
    p.threads = backend::DefaultKernelThreads(static_cast<int>(std::max(1LL, ranks)));
  }
  if (flags.repetitions && (*flags.repetitions < 1 || *flags.repetitions > 100000)) {
    return Status::Invalid("--repetitions must be in [1, 100000]");
  }
  if (flags.warmup && (*flags.warmup < 0 || *flags.warmup > 100000)) {
    return Status::Invalid("--warmup must be in [0, 100000]");
  }
  if (flags.link != "auto" && flags.link != "mpi" && flags.link != "in-process") {
    return Status::Invalid("--link: unknown '" + flags.link + "' (known: auto, mpi, in-process)");
  }
  if (flags.concurrent && (*flags.concurrent < 1 || *flags.concurrent > 1024)) {
    return Status::Invalid("--concurrent must be in [1, 1024]");
  }
  return p;
}

Result<pb::CostTable> ProfileForConfigs(const pb::Scenario& scenario,
                                        const std::vector<RunConfig>& configs,
                                        const ProfileFlags& flags, std::ostream* log,
                                        std::vector<pb::CostTable>* per_process) {
  if (per_process != nullptr) per_process->clear();
  SF_ASSIGN_OR_RETURN(Precision precision, PrecisionFor(scenario, flags));
  SF_ASSIGN_OR_RETURN(Needs needs, NeedsOf(scenario, configs));
  if (needs.tokens.empty()) return Status::Invalid("profile: no configurations to profile");
  backend::SetKernelThreads(precision.threads);
  backend::ProfileRequest request{scenario.model(),
                                  {needs.tokens.begin(), needs.tokens.end()},
                                  {},
                                  precision.dtype,
                                  Timing(flags)};
  for (const std::string& mode : needs.modes)
    request.recompute.push_back(*models::ParseRecompute(mode));
  ProgressBar bar("repetitions");
  if (log) {
    *log << "stateflow profile: timing " << needs.tokens.size() << " chunk lengths x "
         << needs.modes.size() << " recompute mode(s) of " << scenario.model().name() << "\n";
  }
  const int concurrent = static_cast<int>(flags.concurrent.value_or(1));
  pb::CostTable table;
  std::vector<pb::CostTable> workers;
  std::string concurrency_note =
      "concurrency: the layers and the optimizer timed in this one process (the other cores "
      "idle unless something else runs)";
  if (concurrent > 1) {
    if (log) *log << "  in " << concurrent << " processes at once (--concurrent)\n";
    SF_ASSIGN_OR_RETURN(LayerMeasurement layers, LayersByMpirun(request, flags, concurrent));
    table = std::move(layers.table);
    concurrency_note = std::move(layers.note);
    workers = std::move(layers.per_process);
  } else {
    SF_ASSIGN_OR_RETURN(table, backend::ProfileLayers(request, [&bar](int done, int total) {
                          bar.Update(static_cast<std::size_t>(done),
                                     static_cast<std::size_t>(total));
                        }));
  }
  // After the layers, so that a model the backend cannot run fails first.
  SF_ASSIGN_OR_RETURN(
      LinkMeasurement link,
      MeasureLink(LinkElements(needs, scenario.model().hidden_size()), flags, precision));
  for (const pb::LinkSample& s : link.samples) *table.add_link_samples() = s;
  SF_ASSIGN_OR_RETURN(pb::LinkSpec fitted, backend::FitLink(link.samples));
  *table.mutable_link() = fitted;
  *table.mutable_provenance() = MakeProvenance(backend::KernelThreads());
  AddNotes(needs, flags, precision, scenario.model(), &table);
  table.add_notes(concurrency_note);
  table.add_notes(link.note);
  if (per_process != nullptr) {
    // Each worker's samples and optimizer time in the merged table's frame.
    for (std::size_t k = 0; k < workers.size(); ++k) {
      pb::CostTable own = table;
      *own.mutable_samples() = workers[k].samples();
      own.set_optimizer_s_per_param(workers[k].optimizer_s_per_param());
      own.add_notes("this table: process " + std::to_string(k) + " of " +
                    std::to_string(workers.size()) + " alone (bound to hardware thread " +
                    std::to_string(k) + " when bound)");
      per_process->push_back(std::move(own));
    }
  }
  return table;
}

std::string CostTableText(const pb::CostTable& table) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(table, &text);
  return "# A CostTable (proto/stateflow.proto) measured by `stateflow profile`;\n"
         "# replay it with `stateflow simulate --costs <this file>`.\n" +
         text;
}

int FailOnRankZero(const std::string& command, const Status& status) {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    const char* rank = std::getenv(name);
    if (rank != nullptr && std::string(rank) != "0") {
      return status.code() == Status::Code::kInvalidInput ? kExitBadInput : kExitFailure;
    }
  }
  return Fail(command, status);
}

int RunProfile(int argc, char** argv) {
  CommandFlags flags;
  po::options_description desc(
      "stateflow profile --out FILE [options] (without --scenario: "
      "scenarios/tiny-train.textproto)");
  desc.add_options()("help,h", "show this help")("out", po::value(&flags.out_path),
                                                 "the cost table to write (text format)");
  AddProfileOptions(&desc, &flags.profile);
  AddConfigOptions(&desc, &flags.configs);
  AddScenarioOptions(&desc, &flags.scenario);
  po::options_description hidden;
  hidden.add_options()("link-worker", po::value(&flags.link_worker), "")(
      "link-elements", po::value(&flags.link_elements), "")(
      "layers-worker", po::value(&flags.layers_worker), "")(
      "worker-tokens", po::value(&flags.worker_tokens), "")(
      "worker-modes", po::value(&flags.worker_modes), "");
  po::options_description all;
  all.add(desc).add(hidden);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, all, &vm); !s.ok()) return Fail(kName, s);
  if (vm.count("help")) {
    std::cout << desc << "\n" << kExamples;
    return kExitOk;
  }
  if (!flags.link_worker.empty()) {
    return RunLinkWorker(flags.link_worker, flags.link_elements, flags.profile);
  }
  if (!flags.layers_worker.empty()) {
    return RunLayersWorker(flags.layers_worker, flags.worker_tokens, flags.worker_modes,
                           flags.profile);
  }
  if (backend::LaunchedByMpirun()) {
    return FailOnRankZero(kName, Status::Invalid("run profile without mpirun: it starts "
                                                 "`mpirun -n 2` itself to time the link"));
  }
  if (flags.out_path.empty()) return Fail(kName, Status::Invalid("--out is required"));
  return Profile(flags);
}

}  // namespace stateflow::tools

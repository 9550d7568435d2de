#include "tools/profiling.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unistd.h>
#include <set>

#include "backend/profile/gemm_timer.h"
#include "backend/profile/link_timer.h"
#include "backend/profile/profiler.h"
#include "backend/threading.h"
#include "common/quantile.h"
#include "backend/train/train_setup.h"
#include "models/family.h"
#include "models/layer_formulas.h"
#include "models/placement.h"
#include "scenario/configure.h"
#include "tools/cli.h"
#include "tools/profile_jobs.h"
#include "tools/report_format.h"

namespace stateflow::tools {
namespace {


// Chunk lengths, attention's (length, prefix) chunks and recompute modes the
// configurations need.
struct Needs {
  std::set<std::int64_t> tokens;
  std::set<std::pair<std::int64_t, std::int64_t>> attention;
  std::set<std::string> modes;
};

Result<Needs> NeedsOf(const scenario::ResolvedScenario& scenario,
                      const std::vector<RunConfig>& configs) {
  Needs needs;
  for (const RunConfig& c : configs) {
    Result<scenario::ResolvedScenario> narrowed = ScenarioFor(scenario, c);
    Result<scenario::Configuration> config =
        narrowed.ok() ? scenario::Configure(*narrowed, narrowed->proto().schedule())
                      : Result<scenario::Configuration>(narrowed.status());
    if (!config.ok()) return config.status().WithPrefix(ConfigName(c));
    const schedule::Partition& partition = config->partition;
    const std::vector<models::LayerKind> kinds = models::LayerList(narrowed->proto().model());
    const bool attention =
        std::find(kinds.begin(), kinds.end(), models::LayerKind::kAttention) != kinds.end();
    for (int i = 0; i < partition.num_chunks(); ++i) {
      needs.tokens.insert(partition.length(i));
      if (attention) needs.attention.insert({partition.length(i), partition.start(i)});
    }
    needs.modes.insert(
        std::string(models::RecomputeName(config->placement->cost_model.options().recompute)));
  }
  return needs;
}

// Message sizes of the link ping-pong, in elements: one token's activation,
// each chunk's (B sequences), and four times the largest.
std::vector<std::int64_t> LinkElements(const Needs& needs, std::int64_t hidden, int B) {
  std::set<std::int64_t> elements = {hidden};
  for (std::int64_t s : needs.tokens) elements.insert(B * s * hidden);
  elements.insert(4 * B * *needs.tokens.rbegin() * hidden);
  return {elements.begin(), elements.end()};
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
      : precision.dtype == "bf16"  ? backend::PingPongInProcess<backend::bf16>(elements, timing)
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
  const auto [begin, end] = backend::OptimizerTimingLayers(model);
  const int layers = static_cast<int>(models::LayerList(model).size());
  table->add_notes(
      "optimizer_s_per_param: one AdamW step plus zeroing the gradients, over " +
      (begin == 0 && end == layers
           ? "all " + std::to_string(static_cast<long long>(models::ModelParamCount(model))) +
                 " parameters of the model"
           : "the parameters of layer " + std::to_string(begin) +
                 " (the model's " +
                 std::to_string(static_cast<long long>(models::ModelParamCount(model))) +
                 " exceed " +
                 std::to_string(static_cast<long long>(backend::kOptimizerTimingMaxParams)) + ")") +
      " in one process");
  table->add_notes("chunk lengths: " + std::to_string(needs.tokens.size()) + " from " +
                   std::to_string(*needs.tokens.begin()) + " to " +
                   std::to_string(*needs.tokens.rbegin()) + " tokens");
}

}  // namespace

backend::TimingOptions Timing(const ProfileFlags& flags) {
  return backend::TimingOptions{static_cast<int>(flags.repetitions.value_or(10)),
                                static_cast<int>(flags.warmup.value_or(2))};
}

void AddProfileOptions(po::options_description* desc, ProfileFlags* flags) {
  desc->add_options()("repetitions", Optional(&flags->repetitions),
                      "timed repetitions per sample (default 10)")(
      "warmup", Optional(&flags->warmup), "repetitions thrown away first (default 2)")(
      "dtype", po::value(&flags->dtype),
      "float32, float64 or bf16 (bf16 on --device host-grid or cuda; default: train.dtype)")(
      "device", po::value(&flags->device),
      "cpu, host-grid or cuda: where the layers are timed and validate's runs train "
      "(default: train.device, else cpu); on a GPU each pass is timed until the device has "
      "finished it")(
      "threads", Optional(&flags->threads), "kernel threads (default: train.threads, else as `stateflow train --help` says for the ranks of --concurrent or P x DP x TP)")(
      "link", po::value(&flags->link),
      "how to time the link: auto (mpirun -n 2, else in-process), mpi, in-process")(
      "mpirun", po::value(&flags->mpirun), "the mpirun program (default: mpirun in PATH)")(
      "concurrent", Optional(&flags->concurrent),
      "time the layers in K processes at once (mpirun -n K, one per core), so that every core "
      "is as busy as in a K-stage run; each sample the mean of their medians (default 1: this "
      "process; validate: the runs' P)")(
      "verbose", po::bool_switch(&flags->verbose),
      "print each timing step (a layer module built, one repetition's forward and backward, its "
      "split backward, the core's phases, the optimizer) and its wall seconds to stderr (the "
      "layers timed in this process: not with --concurrent)");
}

Result<Precision> PrecisionFor(const pb::Scenario& scenario, const ProfileFlags& flags) {
  SF_ASSIGN_OR_RETURN(backend::TrainOptions train, backend::TrainOptionsFromSpec(scenario.train()));
  Precision p{flags.dtype.empty() ? train.dtype : flags.dtype, train.threads,
              flags.device.empty() ? train.device : flags.device};
  if (p.dtype != "float32" && p.dtype != "float64" && p.dtype != "bf16") {
    return Status::Invalid("--dtype: unknown '" + p.dtype + "' (known: float32, float64, bf16)");
  }
  if (p.dtype == "bf16" && (p.device.empty() || p.device == "cpu")) {
    return Status::Invalid("--dtype: bf16 runs on the grid devices (--device host-grid or cuda); "
                           "the cpu device's kernels are float32 and float64");
  }
  if (flags.threads) {
    if (*flags.threads < 1 || *flags.threads > 1024) {
      return Status::Invalid("--threads must be in [1, 1024]");
    }
    p.threads = static_cast<int>(*flags.threads);
  }
  if (p.threads == 0) {  // as a run of P x DP x TP ranks on this node would take by default
    // (before issue 26's DP, P: a P 1 x DP 2 run gave each of its 2 ranks
    // every core's threads, and OpenMP's waiting threads took 6.7 s a step
    // of 40 ms on 2 cores)
    const long long ranks = flags.concurrent.value_or(
        static_cast<long long>(std::max(1u, scenario.parallel().pipeline_size())) *
        std::max(1u, scenario.parallel().data_size()) *
        std::max(1u, scenario.parallel().tensor_size()));
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

Result<pb::CostTable> ProfileForConfigs(const scenario::ResolvedScenario& resolved,
                                        const std::vector<RunConfig>& configs,
                                        const ProfileFlags& flags, std::ostream* log,
                                        std::vector<pb::CostTable>* per_process) {
  const pb::Scenario& scenario = resolved.proto();
  if (per_process != nullptr) per_process->clear();
  SF_ASSIGN_OR_RETURN(Precision precision, PrecisionFor(scenario, flags));
  SF_ASSIGN_OR_RETURN(Needs needs, NeedsOf(resolved, configs));
  if (needs.tokens.empty()) return Status::Invalid("profile: no configurations to profile");
  backend::SetKernelThreads(precision.threads);
  SF_ASSIGN_OR_RETURN(backend::Device * device,
                      backend::GetDevice(precision.device, /*local_rank=*/0));
  // schedule.st_overlap and st_tile: one mode per table (its whole-layer
  // times are measured in it; the phases are sequential either way).
  const pb::ScheduleSpec& first = configs.front().schedule;
  for (const RunConfig& c : configs) {
    if (c.schedule.st_overlap() != first.st_overlap()) {
      return Status::Invalid(
          "profile: the configurations mix schedule.st_overlap on and off; a cost table is "
          "measured in one mode (profile each with --st-overlap on|off)");
    }
  }
  backend::ProfileRequest request{
      .model = scenario.model(),
      .tokens = {needs.tokens.begin(), needs.tokens.end()},
      .attention_chunks = {needs.attention.begin(), needs.attention.end()},
      .recompute = {},
      .microbatch_size = static_cast<int>(scenario.parallel().microbatch_size()),
      .dtype = precision.dtype,
      .timing = Timing(flags),
      .device = device,
      .st_overlap = first.st_overlap(),
      .st_tile = static_cast<int>(first.st_tile()),
      .tensor_size = static_cast<int>(std::max(1u, scenario.parallel().tensor_size()))};
  SF_RETURN_IF_ERROR(models::CheckTensorParallelModel(scenario.model(), request.tensor_size));
  for (const std::string& mode : needs.modes)
    request.recompute.push_back(*models::ParseRecompute(mode));
  ProgressBar bar("repetitions");
  if (log) {
    *log << "stateflow profile: timing " << needs.tokens.size() << " chunk lengths";
    if (!needs.attention.empty()) *log << " (attention: " << needs.attention.size() << " length and prefix pairs)";
    *log << " x " << needs.modes.size() << " recompute mode(s) of " << scenario.model().name()
         << " at microbatch_size " << request.microbatch_size
         << (request.st_overlap ? ", the recurrence core split and overlapped" : "") << "\n";
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
    backend::ProfileTrace trace;
    if (flags.verbose) {
      trace = [](const std::string& line) {
        std::cerr << "stateflow profile: " << line << std::endl;
      };
    }
    SF_ASSIGN_OR_RETURN(table, backend::ProfileLayers(
                                   request,
                                   [&bar](int done, int total) {
                                     bar.Update(static_cast<std::size_t>(done),
                                                static_cast<std::size_t>(total));
                                   },
                                   trace));
  }
  // After the layers, so that a model the backend cannot run fails first.
  SF_ASSIGN_OR_RETURN(
      LinkMeasurement link,
      MeasureLink(LinkElements(needs, scenario.model().hidden_size(), request.microbatch_size),
                  flags, precision));
  for (const pb::LinkSample& s : link.samples) *table.add_link_samples() = s;
  SF_ASSIGN_OR_RETURN(pb::LinkSpec fitted, backend::FitLink(link.samples));
  *table.mutable_link() = fitted;
  if (request.tensor_size > 1) {
    // The TP sums themselves, among tensor_size processes (the replay's
    // charge for them); without mpirun, the ping-pong link stands in.
    const std::vector<std::int64_t> elements =
        LinkElements(needs, scenario.model().hidden_size(), request.microbatch_size);
    Result<std::vector<pb::LinkSample>> sums =
        TensorSumsByMpirun(elements, flags, precision, request.tensor_size);
    if (sums.ok()) {
      for (const pb::LinkSample& s : *sums) *table.add_tensor_link_samples() = s;
      SF_ASSIGN_OR_RETURN(pb::LinkSpec sum_link,
                          backend::FitAllReduceLink(*sums, request.tensor_size));
      *table.mutable_tensor_link() = sum_link;
      table.add_notes("tensor sums: the backend's tensor-parallel sum (an MPI all-gather and "
                      "the additions in rank order) timed among " +
                      std::to_string(request.tensor_size) + " processes started by " +
                      flags.mpirun + " -n " + std::to_string(request.tensor_size) +
                      ", messages of " + SizeList(*sums) +
                      ", each call after a barrier; tensor_link is the link on which a ring "
                      "all-reduce takes that long");
    } else {
      table.add_notes("tensor sums: NOT timed (" + sums.status().message() +
                      "); a replay charges them on the ping-pong link");
    }
  }
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

// The recurrence core of `model` (Pre + ST + Out, forward and backward with
// its replay: LayerTimer::TimePhasesOnce) at B s tokens: the median seconds
// of each pass.
template <typename T>
Result<std::pair<double, double>> TimeCore(const pb::ModelSpec& model, int B, std::int64_t s,
                                           backend::Device* device, int tensor_size,
                                           const backend::TimingOptions& timing) {
  SF_ASSIGN_OR_RETURN(std::unique_ptr<backend::LayerTimer<T>> timer,
                      backend::LayerTimer<T>::Make(model, models::LayerKind::kRecurrence,
                                                   models::Recompute::kNone, B, device, false, 0,
                                                   tensor_size));
  std::vector<double> forward, backward;
  for (int rep = 0; rep < timing.warmup + timing.repetitions; ++rep) {
    SF_ASSIGN_OR_RETURN(backend::CorePhaseSeconds p, timer->TimePhasesOnce(s));
    if (rep < timing.warmup) continue;
    forward.push_back(p.forward[0] + p.forward[1] + p.forward[2]);
    backward.push_back(p.backward[0] + p.backward[1] + p.backward[2]);
  }
  return std::pair{Quantile(forward, 0.5), Quantile(backward, 0.5)};
}

Result<pb::ClusterSpec> MeasureKernelCosts(const scenario::ResolvedScenario& resolved,
                                         const std::vector<RunConfig>& configs,
                                         const ProfileFlags& flags,
                                         const std::vector<pb::ModelSpec>& extra_models,
                                         KernelComponents components,
                                         std::ostream* log) {
  const pb::Scenario& scenario = resolved.proto();
  SF_ASSIGN_OR_RETURN(Precision precision, PrecisionFor(scenario, flags));
  SF_ASSIGN_OR_RETURN(Needs needs, NeedsOf(resolved, configs));
  if (needs.tokens.empty()) return Status::Invalid("profile: no configurations to profile");
  const int tensor_size = static_cast<int>(std::max(1u, scenario.parallel().tensor_size()));
  const std::int64_t B = std::max<std::int64_t>(1, scenario.parallel().microbatch_size());
  std::vector<pb::ModelSpec> models = {scenario.model()};
  models.insert(models.end(), extra_models.begin(), extra_models.end());
  std::set<backend::LinearShape> shapes;
  std::string model_names;
  for (const pb::ModelSpec& model : models) {
    SF_RETURN_IF_ERROR(models::CheckTensorParallelModel(model, tensor_size)
                           .WithPrefix("--kernel-models " + model.name()));
    model_names += (model_names.empty() ? "" : ", ") + model.name();
    const std::vector<models::LayerKind> kinds = models::LayerList(model);
    const std::set<models::LayerKind> distinct(kinds.begin(), kinds.end());
    for (models::LayerKind kind : distinct) {
      if (!components.gemm) break;
      for (const models::Gemm& whole : models::LayerGemms(model, kind)) {
        const models::Gemm g = models::TensorShard(whole, tensor_size);
        const auto in = static_cast<std::int64_t>(std::llround(g.k));
        const auto out = static_cast<std::int64_t>(std::llround(g.n));
        for (std::int64_t s : needs.tokens) {
          for (backend::LinearPass pass : {backend::LinearPass::kForward,
                                           backend::LinearPass::kInputGrad,
                                           backend::LinearPass::kWeightGrad}) {
            shapes.insert({pass, B * s, in, out});
          }
        }
      }
    }
  }
  backend::SetKernelThreads(precision.threads);
  SF_ASSIGN_OR_RETURN(backend::Device * device,
                      backend::GetDevice(precision.device, /*local_rank=*/0));
  const std::string dtype = precision.dtype == "float64" ? "fp64"
                            : precision.dtype == "bf16"  ? "bf16"
                                                         : "fp32";
  const backend::TimingOptions timing = Timing(flags);
  // The recurrence cores: one (kernel, head dim) per model, at every chunk
  // length.
  struct CoreJob {
    const pb::ModelSpec* model;
    std::string kernel;
    std::uint32_t head_dim;
  };
  std::vector<CoreJob> cores;
  std::set<std::pair<std::string, std::uint32_t>> core_keys;
  for (const pb::ModelSpec& model : models) {
    if (!components.recurrence || !backend::HasCorePhases(model)) continue;
    const models::Family& family = models::FamilyOfValid(model);
    const auto head_dim = static_cast<std::uint32_t>(std::llround(family.KernelHeadDim(model)));
    if (core_keys.insert({std::string(family.kernel_name()), head_dim}).second) {
      cores.push_back({&model, std::string(family.kernel_name()), head_dim});
    }
  }
  // (Every family's core is timed phase by phase today; a family without
  // would leave a recurrence-only table empty.)
  if (shapes.empty() && cores.empty()) {
    return Status::Invalid("--kernel-components: nothing to time for " + model_names +
                           " (no GEMMs asked for, and no recurrence core the backend times "
                           "phase by phase)");
  }
  if (log) {
    *log << "stateflow profile: timing the linear kernel at " << shapes.size()
         << " GEMM shapes and " << cores.size() << " recurrence core(s) of " << model_names
         << " (" << needs.tokens.size() << " chunk lengths, microbatch_size " << B << ")\n";
  }
  pb::ClusterSpec cluster = scenario.cluster();
  pb::KernelCosts* costs = cluster.mutable_kernel_costs();
  costs->Clear();
  const pb::Provenance provenance = MakeProvenance(precision.threads);
  costs->set_name("measured: " + device->name() + " linear kernel and recurrence core, " +
                  precision.dtype);
  costs->add_sources("stateflow profile --kernel-costs on " + device->name() + " (host " +
                     provenance.host() + ", " + std::to_string(precision.threads) +
                     " kernel thread(s), " + precision.dtype + "), stateflow " +
                     provenance.tool_version() + " " + provenance.git_commit() + ", " +
                     provenance.timestamp() + ": the median of " +
                     std::to_string(timing.repetitions) + " timings after " +
                     std::to_string(timing.warmup) +
                     " warm-up: the linear kernel at the GEMM shapes, and the recurrence core "
                     "(Pre + ST + Out, the backward with its replay) at the chunk lengths, of " +
                     model_names);
  ProgressBar bar("kernels");
  const std::size_t total = shapes.size() + cores.size() * needs.tokens.size();
  std::size_t done = 0;
  for (const backend::LinearShape& shape : shapes) {
    Result<std::vector<double>> seconds =
        precision.dtype == "float64" ? backend::TimeLinear<double>(device, shape, timing)
        : precision.dtype == "bf16"  ? backend::TimeLinear<backend::bf16>(device, shape, timing)
                                     : backend::TimeLinear<float>(device, shape, timing);
    if (!seconds.ok()) return seconds.status();
    pb::GemmPoint* point = costs->add_gemm();
    *point = backend::GemmPointOf(shape, Quantile(*seconds, 0.5), dtype);
    point->set_source(0);
    if (log && isatty(STDERR_FILENO)) bar.Update(++done, total);
  }
  for (const CoreJob& core : cores) {
    const models::CoreFlops flops = models::RecurrenceCoreFlops(*core.model,
                                                                models::LayerKind::kRecurrence);
    for (std::int64_t s : needs.tokens) {
      const double tokens = static_cast<double>(B * s);
      Result<std::pair<double, double>> seconds =
          precision.dtype == "float64"
              ? TimeCore<double>(*core.model, static_cast<int>(B), s, device, tensor_size, timing)
          : precision.dtype == "bf16"
              ? TimeCore<backend::bf16>(*core.model, static_cast<int>(B), s, device, tensor_size,
                                        timing)
              : TimeCore<float>(*core.model, static_cast<int>(B), s, device, tensor_size, timing);
      if (!seconds.ok()) return seconds.status().WithPrefix(core.model->name() + " core");
      for (int backward = 0; backward < 2; ++backward) {
        pb::RecurrencePoint* point = costs->add_recurrence();
        point->set_kernel(core.kernel);
        point->set_seq_len(static_cast<double>(s));
        point->set_head_dim(core.head_dim);
        point->set_pass(backward ? "backward" : "forward");
        point->set_dtype(dtype);
        const double f = (backward ? flops.bwd : flops.fwd) / tensor_size * tokens;
        point->set_flops_per_s(f / std::max(backward ? seconds->second : seconds->first, 1e-9));
        point->set_source(0);
      }
      if (log && isatty(STDERR_FILENO)) bar.Update(++done, total);
    }
  }
  return cluster;
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


}  // namespace stateflow::tools

// `stateflow train`: trains the scenario's model on real text with the real
// backend, one MPI rank per pipeline stage (under `mpirun -n P`) or one
// process running every stage (without mpirun). Rank 0 prints; every rank
// exits with the same code, except after a failure inside a step on one rank,
// which prints its message and ends the job (MPI_Abort).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "common/files.h"
#include "backend/allocator.h"
#include "backend/comm/mpi.h"
#include "backend/train/checkpoint.h"
#include "backend/model/layer_family.h"
#include "backend/model/model_stage_module.h"
#include "backend/threading.h"
#include "backend/train/run_dump.h"
#include "backend/train/text_data.h"
#include "backend/train/train_report.h"
#include "backend/train/train_setup.h"
#include "backend/train/trainer.h"
#include "common/trace.h"
#include "models/cost_model.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "schedule/plan.h"
#include "schedule/plan_text.h"
#include "sim/simulation.h"
#include "tools/cli.h"
#include "tools/report_format.h"
#include "tools/work_bounds.h"

namespace stateflow::tools {
namespace {

using backend::StepResult;
using backend::TrainOptions;
using backend::TrainSetup;

constexpr char kTrainName[] = "train";

// When set, each rank writes its pid to <dir>/rank<r>.pid before the first
// step (for tests that kill one rank in the middle of a run).
constexpr char kPidDirEnv[] = "SF_TRAIN_PID_DIR";

constexpr char kTrainExamples[] = R"(examples:
  stateflow train --steps 20
      the default scenario (scenarios/tiny-train.textproto) in one process:
      tiny GDN, P = 2 stages, M = 4, T = 256, StateFlow N = 4, on GPL-3
  mpirun -n 2 --oversubscribe stateflow train --steps 20
      the same with one MPI rank per stage (as root add --allow-run-as-root)
  mpirun -n 2 stateflow train --policy 1f1b -M 8 --json
      conventional 1F1B; one JSON Report (source "train") on stdout
  mpirun -n 4 --oversubscribe stateflow train --data-parallel 2 --distributed-optimizer on
      P = 2 stages x DP = 2 replicas (rank r DP + d is stage r of replica d),
      each on M = 4 microbatches of the step's 8; AdamW's state sharded over DP
  mpirun -n 4 --oversubscribe stateflow train --tensor-parallel 2
      P = 2 stages x TP = 2 (rank r TP + t is tensor rank t of stage r): each
      rank half of every layer's heads, MLP columns and vocabulary
  stateflow train --dtype float64 --trace train.json
      open train.json in ui.perfetto.dev beside a `stateflow simulate --trace`
  stateflow train --dtype bf16 --device host-grid --steps 5
      mixed precision as a GPU trains (bf16 weights and activations, fp32
      gradients and master weights), its arithmetic run on the host
  mpirun -n 2 stateflow-cuda train --device cuda --device-link host
      P = 2 ranks on one GPU, their messages through host memory over MPI
)";

struct TrainFlags {
  ScenarioFlags scenario;
  std::optional<long long> steps, seed, threads, capacity_bytes;
  std::optional<double> learning_rate, watchdog;
  std::optional<long long> checkpoint_every;
  std::string dtype, device, device_link, text_path, plan_path, trace_path, dump_path, checkpoint_dir, resume_dir;
  std::vector<std::string> resume_changes;
  bool json = false;
};

void AddTrainOptions(po::options_description* desc, TrainFlags* f) {
  desc->add_options()("help,h", "show this help")
      ("steps", Optional(&f->steps), "training steps (train.steps; default 10)")
      ("dtype", po::value(&f->dtype), "float32, float64, or bf16 (train.dtype; bf16 on --device host-grid or cuda: "
       "bf16 weights and activations, fp32 gradients, statistics and master weights)")
      ("device", po::value(&f->device),
       "cpu (default), host-grid (the GPU kernels' arithmetic run by host loops) or cuda "
       "(one GPU per rank, chosen by local rank; needs a CUDA build) (train.device)")
      ("device-link", po::value(&f->device_link),
       "how pipeline messages between ranks move device memory: auto (default: NCCL when "
       "every rank on the node has a GPU of its own, else host), nccl, or host (copied to "
       "host memory and sent by MPI, e.g. two ranks on one GPU)")
      ("threads", Optional(&f->threads),
       "kernel threads per rank: Eigen products and GDN heads (train.threads; default "
       "OMP_NUM_THREADS if set, else max(1, hardware threads / ranks on this node))")
      ("text", po::value(&f->text_path),
       ("training text, bytes are tokens (default /usr/share/common-licenses/GPL-3; "
        "a regular file of at most " + LimitText(backend::TextData::kMaxTextBytes) + ")")
           .c_str())
      ("seed", Optional(&f->seed), "seed of the parameters and the batches (train.seed)")
      ("lr", Optional(&f->learning_rate), "AdamW learning rate (train.learning_rate)")
      ("plan", po::value(&f->plan_path),
       ("run this plan file (plan-dump's text form, or torch's schedule CSV; at most " + LimitText(kMaxTextFileBytes) + ")")
           .c_str())
      ("capacity-bytes", Optional(&f->capacity_bytes), "memory capacity of each stage")
      ("watchdog", Optional(&f->watchdog),
       "seconds a rank may wait on another (a message, a step collective) before the job "
       "ends on every rank with a line naming the wait and the peer (default 600; 0: no limit)")
      ("checkpoint", po::value(&f->checkpoint_dir),
       "write checkpoints (every stage's parameters, AdamW state and the step) into DIR, "
       "atomically: a run killed at any moment resumes from the last complete one")
      ("checkpoint-every", Optional(&f->checkpoint_every),
       "checkpoint after every K-th step and after the last (default 1; needs --checkpoint)")
      ("resume", po::value(&f->resume_dir),
       "continue from the checkpoint in DIR up to --steps steps in all; the run must match "
       "it in every input that determines it (model, plan and partition, ST split, the "
       "text's content, seed, optimizer settings, dtype, device), else one line names the field")
      ("resume-change", po::value(&f->resume_changes)->multitoken(),
       "with --resume: let these key fields differ from the checkpoint's, and report the "
       "change (train.learning_rate, train.weight_decay)")
      ("json", po::bool_switch(&f->json), "print one Report as JSON (rank 0) instead of text")
      ("trace", po::value(&f->trace_path), "write the measured timeline as a Perfetto trace")
      ("dump-weights", po::value(&f->dump_path),
       "write the starting weights and every step's tokens to FILE and FILE.json "
       "(backend/train/run_dump.h; one process, no mpirun)");
  AddScenarioOptions(desc, &f->scenario);
}

Result<TrainOptions> ResolveOptions(const pb::Scenario& scenario, const TrainFlags& f) {
  SF_ASSIGN_OR_RETURN(TrainOptions o, backend::TrainOptionsFromSpec(scenario.train()));
  if (f.steps) {
    if (*f.steps < 1 || *f.steps > (1 << 30)) {
      return Status::Invalid("--steps must be in [1, " + std::to_string(1 << 30) + "] (got " +
                             std::to_string(*f.steps) + ")");
    }
    o.steps = static_cast<int>(*f.steps);
  }
  if (f.seed) o.seed = static_cast<std::uint64_t>(*f.seed);
  if (f.threads) {
    if (*f.threads < 1 || *f.threads > 1024) {
      return Status::Invalid("--threads must be in [1, 1024] (got " + std::to_string(*f.threads) +
                             ")");
    }
    o.threads = static_cast<int>(*f.threads);
  }
  if (f.capacity_bytes) {
    if (*f.capacity_bytes < 0) return Status::Invalid("--capacity-bytes must be >= 0");
    o.capacity_bytes = *f.capacity_bytes;
  }
  if (!f.text_path.empty()) o.text_path = f.text_path;
  if (!f.device_link.empty()) {
    if (f.device_link != "auto" && f.device_link != "nccl" && f.device_link != "host") {
      return Status::Invalid("--device-link: '" + f.device_link +
                             "' is not auto, nccl or host");
    }
    o.device_link = f.device_link;
  }
  if (!f.resume_changes.empty() && f.resume_dir.empty()) {
    return Status::Invalid("--resume-change needs --resume DIR");
  }
  for (const std::string& field : f.resume_changes) {
    const bool known = std::any_of(std::begin(backend::kResumeChangeable),
                                   std::end(backend::kResumeChangeable),
                                   [&](const char* c) { return field == c; });
    if (!known) {
      return Status::Invalid("--resume-change: '" + field +
                             "' is not a field a resume may change (train.learning_rate, "
                             "train.weight_decay)");
    }
  }
  o.resume_changes = f.resume_changes;
  pb::TrainSpec checked;  // the flags go through the spec's checks
  checked.set_learning_rate(f.learning_rate ? *f.learning_rate : o.adamw.learning_rate);
  checked.set_weight_decay(o.adamw.weight_decay);
  checked.set_dtype(f.dtype.empty() ? o.dtype : f.dtype);
  checked.set_device(f.device.empty() ? o.device : f.device);
  SF_ASSIGN_OR_RETURN(TrainOptions c, backend::TrainOptionsFromSpec(checked));
  o.adamw.learning_rate = c.adamw.learning_rate;
  o.dtype = c.dtype;
  o.device = c.device;
  return o;
}

// The host's memory beside the tensors, in bytes, or an error if it alone
// exceeds this machine's memory.
Result<double> CheckHostMemory(const scenario::ResolvedScenario& resolved, int ranks_on_node,
                               bool mpi) {
  // The host's bookkeeping beside the tensors grows with the plan (issue 31:
  // before, -M inside its range grew it until std::bad_alloc): per process,
  // kTrainHostBytesPerAction for each of the plan's 2 P M N actions, and the
  // step's token batch (M B (T + 1) ids, held twice). Checked before the
  // plan is built and simulated: they are that plan's work.
  const PlanEstimate e = EstimateLargestPlan(resolved.proto(), nullptr);
  const double physical = static_cast<double>(backend::PhysicalMemoryBytes());
  // D replicas: the step's batch is M D microbatches (and each replica's
  // slice a copy); under mpirun P D ranks.
  const double replicas = std::max(1u, resolved.proto().parallel().data_size());
  const double batch_bytes = 2.0 * 4.0 * replicas * static_cast<double>(e.microbatches) *
                             static_cast<double>(resolved.proto().parallel().microbatch_size()) *
                             (static_cast<double>(resolved.proto().seq_len()) + 1);
  const double processes =
      mpi ? std::min(static_cast<double>(e.stages) * replicas, std::max(1.0, double(ranks_on_node)))
          : replicas;  // in one process each replica's runtimes keep their records
  const double host =
      processes * (static_cast<double>(e.actions) * kTrainHostBytesPerAction + batch_bytes);
  if (host > physical) {
    return Status::Invalid("the run's plan of 2 P M N = " + Count(e.actions) +
                           " actions (1 KiB of the host's memory each, in each process) and its "
                           "token batch need about " + FormatBytes(host) +
                           ", more than this machine's " + FormatBytes(physical) +
                           " of memory (lower -M, -N, -B or -T)");
  }
  return host;
}

// The memory the run's tensors need, checked before the first one exists:
// the memory model's peak of every stage in the run's dtype (the backend's
// tracking allocator holds exactly those bytes, ARCHITECTURE.md invariant 3)
// against --capacity-bytes, stage by stage, and against this machine's
// memory, with `host` (CheckHostMemory) beside them: in one process the sum over every stage; under mpirun the sum of
// the `ranks_on_node` largest stages (whichever ranks share this node).
// Before it, `train --model gdn-3b` (47 GiB) grew for as long as it was
// let run, and `-B 65536` passed 14 GB within a minute.
Status CheckRunMemory(const scenario::ResolvedScenario& resolved, const schedule::Plan* plan,
                      const TrainOptions& options, int ranks_on_node, bool mpi, double host) {
  const double physical = static_cast<double>(backend::PhysicalMemoryBytes());
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario run,
                      scenario::ForBackendRun(resolved, options.dtype, options.device));
  SF_ASSIGN_OR_RETURN(sim::Simulation sim,
                      sim::Simulate(run, run.proto().schedule(), {.plan = plan}));
  std::vector<double> peaks;  // (P D) bytes: replica 0's peaks, the largest, for every replica
  const int replicas = static_cast<int>(std::max(1u, resolved.proto().parallel().data_size()));
  for (const pb::StageReport& stage : sim.report.stages()) {
    peaks.insert(peaks.end(), static_cast<std::size_t>(replicas), stage.peak_memory_bytes());
    if (options.capacity_bytes &&
        stage.peak_memory_bytes() > static_cast<double>(*options.capacity_bytes)) {
      return Status::Invalid(
          "stage " + std::to_string(stage.stage()) + " needs " +
          FormatBytes(stage.peak_memory_bytes()) + " at its peak (" + options.dtype +
          "), more than --capacity-bytes " + std::to_string(*options.capacity_bytes));
    }
  }
  std::sort(peaks.rbegin(), peaks.rend());
  const std::size_t here = mpi ? std::min<std::size_t>(peaks.size(), std::max(1, ranks_on_node))
                               : peaks.size();
  double needed = 0;
  for (std::size_t k = 0; k < here; ++k) needed += peaks[k];
  if (needed + host > physical) {
    return Status::Invalid(
        std::string("the run's tensors need about ") + FormatBytes(needed) + " (" +
        options.dtype + ", " +
        (mpi ? std::to_string(here) + " of the stages on this node"
             : "every stage of every replica in this process") +
        ": the memory model's peaks) and the host's bookkeeping " + FormatBytes(host) +
        ", more than this machine's " + FormatBytes(physical) +
        " of memory (lower -B, -M, -T or the model)");
  }
  return Status::Ok();
}

// --checkpoint DIR, checked before the first step rather than at the first
// checkpoint (which found `--checkpoint /dev/full` only after a step, exit
// 1): DIR is a writable directory, or a path whose parent is one (the
// first checkpoint creates DIR).
Status CheckCheckpointDir(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return Status::Invalid("--checkpoint " + dir + ": not a directory");
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
      return Status::Invalid("--checkpoint " + dir + ": not writable");
    }
    return Status::Ok();
  }
  std::string parent = std::filesystem::path(dir).parent_path().string();
  if (parent.empty()) parent = ".";
  if (stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      access(parent.c_str(), W_OK | X_OK) != 0) {
    return Status::Invalid("--checkpoint " + dir + ": cannot be created (" + parent +
                           " is not a writable directory)");
  }
  return Status::Ok();
}

// Everything decided before the first tensor exists: the same on every rank.
struct Prepared {
  TrainSetup setup;
  TrainOptions options;
  std::optional<backend::TextData> text;
};

Result<Prepared> Prepare(TrainFlags flags, int ranks_on_node, bool mpi) {
  std::optional<schedule::Plan> plan;
  if (!flags.plan_path.empty()) {
    SF_ASSIGN_OR_RETURN(plan, LoadPlanFile(flags.plan_path, flags.scenario.chunks));
    if (!flags.scenario.chunks) flags.scenario.chunks = plan->chunks();
    if (!flags.scenario.virtual_stages) flags.scenario.virtual_stages = plan->virtual_stages();
    if (flags.scenario.policy.empty()) flags.scenario.policy = SchedulePolicyFor(*plan);
  }
  Prepared p;
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario resolved,
                      LoadResolvedScenario(flags.scenario, scenario::TinyTrainScenarioText(),
                                           "<tiny-train scenario>"));
  SF_ASSIGN_OR_RETURN(p.options, ResolveOptions(resolved.proto(), flags));
  SF_ASSIGN_OR_RETURN(const double host, CheckHostMemory(resolved, ranks_on_node, mpi));
  Result<TrainSetup> setup = backend::MakeTrainSetup(resolved, plan ? &*plan : nullptr);
  if (!setup.ok()) {
    return plan ? setup.status().WithPrefix(flags.plan_path) : setup.status();
  }
  p.setup = std::move(setup).value();
  SF_RETURN_IF_ERROR(
      CheckRunMemory(resolved, plan ? &*plan : nullptr, p.options, ranks_on_node, mpi, host));
  SF_ASSIGN_OR_RETURN(p.text, backend::TextData::Load(p.options.text_path));
  return p;
}

// "weights 104.0 KiB, gradients 104.0 KiB, ..." for the non-zero classes.
std::string ClassList(const backend::ClassBytes& bytes) {
  std::string out;
  for (int c = 0; c < kNumBufferClasses; ++c) {
    if (bytes[c] == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(kBufferClassNames[c]) + " " +
           FormatBytes(static_cast<double>(bytes[c]));
  }
  return out;
}

void PrintStep(const StepResult& s) {
  char line[128];
  std::snprintf(line, sizeof(line), "step %4d  loss %.4f  %9.1f tok/s  %7.1f ms\n", s.step,
                s.loss, s.tokens_per_s, s.time_s * 1e3);
  std::cout << line;
  for (const backend::StageStepStats& st : s.stages) {
    std::cout << "    stage " << st.stage << " peak "
              << FormatBytes(static_cast<double>(st.memory.peak_total_bytes)) << ": "
              << ClassList(st.memory.at_total_peak_bytes) << "\n";
  }
  std::cout.flush();
}

void PrintSummary(const pb::Report& r) {
  char line[256];
  const std::string dp =
      (r.tensor_size() > 1 ? ", TP=" + std::to_string(r.tensor_size()) : std::string()) +
      (r.data_size() > 1 ? ", DP=" + std::to_string(r.data_size()) : std::string());
  std::snprintf(line, sizeof(line),
                "\n%s N=%u, P=%u%s, M=%u, T=%.0f: step %.2f ms, %.1f tok/s, bubble %.1f %% "
                "(mean of steps after the first%s)\n",
                r.policy().c_str(), r.chunks(), r.pipeline_size(), dp.c_str(), r.microbatches(),
                r.seq_len(), r.step_time_s() * 1e3, r.tokens_per_s(),
                100.0 * r.bubble_fraction(),
                r.data_size() > 1 || r.tensor_size() > 1
                    ? (r.tensor_size() > 1 ? "; stages of replica 0, tensor rank 0"
                                           : "; stages of replica 0")
                    : "");
  std::cout << line;
  for (const pb::StageReport& s : r.stages()) {
    std::snprintf(line, sizeof(line), "  stage %u (layers %s): busy %.2f ms, peak %s (%s)\n",
                  s.stage(), StageLayersText(s).c_str(), s.busy_s() * 1e3,
                  FormatBytes(s.peak_memory_bytes()).c_str(), s.peak_dominant_class().c_str());
    std::cout << line;
  }
}

// Prints on rank 0 only and returns the exit code of `status`.
int FailOnce(int rank, const Status& status) {
  if (rank == 0) return Fail(kTrainName, status);
  return status.code() == Status::Code::kInvalidInput ? kExitBadInput : kExitFailure;
}

void WritePidFile(int rank) {
  const char* dir = std::getenv(kPidDirEnv);
  if (dir == nullptr) return;
  const std::string path = std::string(dir) + "/rank" + std::to_string(rank) + ".pid";
  std::ofstream(path + ".tmp") << getpid() << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());  // appears whole
}

template <typename T>
Result<backend::Transport<T>> MakeTransport(const TrainSetup& setup, bool mpi) {
  if (!mpi) return backend::MakeSingleProcessTransport<T>(setup.stages, setup.data_size);
  return backend::MakeMpiTransport<T>(setup.stages, setup.microbatches,
                                      setup.partition.num_chunks(), setup.data_size,
                                      setup.tensor_size, setup.plan.virtual_stages());
}

// `tp`: this rank's tensor-parallel place (Transport::shard()).
template <typename T>
backend::StageModuleFactory<T> ModuleFactory(const Prepared& p, backend::TpShard tp) {
  return [&p, tp](int, const models::StageLayers& layers, backend::TrackingAllocator* alloc) {
    return backend::MakeStageModule<T>(p.setup.model, layers,
                                       {.recompute = p.setup.recompute,
                                        .seed = p.options.seed,
                                        .microbatch_size = p.setup.microbatch_size,
                                        .st_overlap = p.setup.st_overlap,
                                        .st_tile = p.setup.st_tile,
                                        .tp = tp,
                                        .split_backward = schedule::SplitsBackward(p.setup.plan)},
                                       alloc);
  };
}

// Report, trace and output after the last step (rank 0 prints; the timeline
// gather is collective).
template <typename T>
int Finish(backend::Trainer<T>& trainer, const Prepared& p, const TrainFlags& flags,
           const std::vector<StepResult>& steps, int resumed_from_step,
           const std::vector<std::string>& resume_changes) {
  Result<std::vector<backend::StageTimeline>> timelines = trainer.GatherTimelines();
  if (!timelines.ok()) return FailOnce(trainer.rank(), timelines.status());
  if (trainer.rank() != 0) return kExitOk;
  pb::Report report = backend::MakeTrainReport(p.setup, p.options, steps);
  FillProvenance(backend::KernelThreads(), &report);
  report.set_resumed_from_step(static_cast<std::uint32_t>(resumed_from_step));
  for (const std::string& c : resume_changes) report.add_resume_changes(c);
  if (!flags.trace_path.empty()) {
    TraceWriter trace("train");
    backend::AddTrainTrace(*timelines,
                           "train " + report.policy() + " N=" + std::to_string(report.chunks()),
                           0, &trace);
    if (Status s = trace.WriteFile(flags.trace_path); !s.ok()) return Fail(kTrainName, s);
  }
  if (flags.json) {
    std::cout << MessageToJson(report);
  } else {
    PrintSummary(report);
    if (!flags.trace_path.empty()) std::cout << "trace written to " << flags.trace_path << "\n";
  }
  return kExitOk;
}

template <typename T>
int TrainTyped(const Prepared& p, const TrainFlags& flags, int rank, bool mpi) {
  Result<backend::Transport<T>> transport = MakeTransport<T>(p.setup, mpi);
  if (!transport.ok()) return FailOnce(rank, transport.status());
  const backend::TpShard tp = transport->shard();
  auto trainer = backend::Trainer<T>::Make(p.setup, p.options, *p.text, ModuleFactory<T>(p, tp),
                                           std::move(transport).value());
  if (!trainer.ok()) return FailOnce(rank, trainer.status());
  if (!flags.dump_path.empty()) {
    if (mpi) {
      return FailOnce(rank, Status::Invalid("--dump-weights needs one process (run without mpirun)"));
    }
    const backend::LayerFamily* family = backend::FindLayerFamily(p.setup.model.architecture());
    Status dumped = backend::WriteRunDump<T>(
        flags.dump_path, **trainer, p.options, *p.text,
        family != nullptr ? family->constants(p.setup.model) : backend::LayerFamily::Constants{});
    if (!dumped.ok()) return FailOnce(rank, dumped);
  }
  backend::TrainLoop loop;
  loop.checkpoint_dir = flags.checkpoint_dir;
  loop.checkpoint_every = flags.checkpoint_every ? static_cast<int>(*flags.checkpoint_every) : 1;
  std::vector<std::string> changed;
  if (!flags.resume_dir.empty()) {
    Result<int> step = (*trainer)->LoadCheckpoint(flags.resume_dir, &changed);
    if (!step.ok()) return FailOnce(rank, step.status().WithPrefix("--resume"));
    if (*step >= p.options.steps) {
      return FailOnce(rank, Status::Invalid("--resume " + flags.resume_dir +
                                            ": the checkpoint is after step " +
                                            std::to_string(*step) + ", --steps " +
                                            std::to_string(p.options.steps) +
                                            " leaves nothing to run (--steps counts all steps)"));
    }
    loop.first_step = *step;
    if (rank == 0 && !flags.json) {
      std::string line = "resumed from step " + std::to_string(*step) + " of " + flags.resume_dir;
      for (std::size_t i = 0; i < changed.size(); ++i) {
        line += (i == 0 ? "; changed: " : ", ") + changed[i];
      }
      std::cout << line << "\n";
    }
  }
  WritePidFile(rank);
  const bool print = rank == 0 && !flags.json;
  backend::TrainRun run = backend::Train(
      **trainer, p.options.steps,
      [&](const StepResult& s) {
        if (print) PrintStep(s);
      },
      loop);
  if (!run.status.ok()) {
    if (!run.on_every_rank && mpi) {
      Fail(kTrainName, run.status);  // the failing rank knows; the others are blocked
      backend::AbortMpiJob(kExitFailure);
    }
    return FailOnce(rank, run.status);
  }
  return Finish(**trainer, p, flags, run.steps, loop.first_step, changed);
}

int RunTrainRanked(int argc, char** argv, int rank, int ranks_on_node, bool mpi) {
  TrainFlags flags;
  po::options_description desc(
      "stateflow train [options] (without --scenario: scenarios/tiny-train.textproto)");
  AddTrainOptions(&desc, &flags);
  po::variables_map vm;
  if (Status s = ParseOptions(argc, argv, desc, &vm); !s.ok()) return FailOnce(rank, s);
  if (vm.count("help")) {
    if (rank == 0) std::cout << desc << "\n" << kTrainExamples;
    return kExitOk;
  }
  if (flags.watchdog) {
    if (!(*flags.watchdog >= 0 && *flags.watchdog <= 1e7)) {
      return FailOnce(rank, Status::Invalid("--watchdog must be in [0, 1e7] seconds"));
    }
    backend::SetMpiWatchdogSeconds(*flags.watchdog);
  }
  if (flags.checkpoint_every &&
      (flags.checkpoint_dir.empty() || *flags.checkpoint_every < 1 ||
       *flags.checkpoint_every > (1 << 30))) {
    return FailOnce(rank, Status::Invalid(flags.checkpoint_dir.empty()
                                              ? "--checkpoint-every needs --checkpoint DIR"
                                              : "--checkpoint-every must be in [1, " +
                                                    std::to_string(1 << 30) + "] (got " +
                                                    std::to_string(*flags.checkpoint_every) +
                                                    ")"));
  }
  if (!flags.checkpoint_dir.empty()) {
    if (Status s = CheckCheckpointDir(flags.checkpoint_dir); !s.ok()) return FailOnce(rank, s);
  }
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--trace", flags.trace_path},
                                   {"--dump-weights", flags.dump_path}}) {
    if (Status s = CheckOutputPath(flag, path); !s.ok()) return FailOnce(rank, s);
  }
  Result<Prepared> prepared = Prepare(flags, ranks_on_node, mpi);
  if (!prepared.ok()) return FailOnce(rank, prepared.status());
  if (prepared->setup.tensor_size > 1) {
    const int tp = prepared->setup.tensor_size;
    Status refused = Status::Ok();
    if (!mpi) {
      refused = Status::Invalid(
          "parallel.tensor_size " + std::to_string(tp) + " runs under mpirun, one rank per "
          "stage, replica and tensor rank: mpirun -n " +
          std::to_string(prepared->setup.stages * prepared->setup.data_size * tp) +
          " stateflow train ... (one process runs tensor size 1)");
    } else if (prepared->options.device == "cuda") {
      refused = Status::Invalid("parallel.tensor_size " + std::to_string(tp) +
                                ": tensor parallelism runs on the cpu and host-grid devices "
                                "(its sums are in host memory); not yet on cuda");
    }
    if (!refused.ok()) return FailOnce(rank, refused);
  }
  if (schedule::SplitsBackward(prepared->setup.plan) && prepared->options.device == "cuda") {
    return FailOnce(rank, Status::Invalid(
                              "the plan splits the backward (W actions, e.g. policy " +
                              prepared->setup.plan.policy() +
                              "): runs on the cpu and host-grid devices; not yet on cuda"));
  }
  backend::SetKernelThreads(prepared->options.threads > 0
                                ? prepared->options.threads
                                : backend::DefaultKernelThreads(ranks_on_node));
  if (prepared->options.dtype == "float64") return TrainTyped<double>(*prepared, flags, rank, mpi);
  if (prepared->options.dtype == "bf16") return TrainTyped<backend::bf16>(*prepared, flags, rank, mpi);
  return TrainTyped<float>(*prepared, flags, rank, mpi);
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  if (!backend::LaunchedByMpirun()) return RunTrainRanked(argc, argv, 0, 1, false);
  backend::MpiSession session(nullptr, nullptr);
  if (!session.status().ok()) return Fail(kTrainName, session.status());
  return RunTrainRanked(argc, argv, session.rank(), session.ranks_on_node(), true);
}

}  // namespace stateflow::tools

#include "tools/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <google/protobuf/util/message_differencer.h>

#include "common/files.h"
#include "common/text.h"
#include "models/limits.h"
#include "scenario/load.h"
#include "scenario/resolve.h"
#include "schedule/plan_text.h"
#include "schedule/policies.h"
#include "schedule/torch_csv.h"
#include "sim/calibrate.h"
#include "tools/work_bounds.h"

namespace stateflow::tools {
namespace {

// The flags take the scenario fields' limits (models/limits.h).
Status CheckFlag(const char* flag, const std::optional<long long>& v,
                 const models::IntRange& range) {
  if (!v) return Status::Ok();
  return models::CheckRange(std::string("--") + flag, static_cast<std::int64_t>(*v), range);
}

std::string Help(const std::string& what, const models::IntRange& range) {
  return what + ", in " + models::RangeText(range);
}

// --cluster names a file rather than a preset.
bool IsClusterFile(const std::string& value) {
  const std::string suffix = ".textproto";
  return value.find('/') != std::string::npos ||
         (value.size() > suffix.size() &&
          value.compare(value.size() - suffix.size(), suffix.size(), suffix) == 0);
}

}  // namespace

std::string Trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

int Fail(const std::string& command, const Status& status) {
  // Echoed input (a name, a value, a path) may hold newlines or escape
  // sequences: the line stays one printable line.
  std::cerr << "stateflow " << command << ": " << Printable(status.message()) << "\n";
  // The detail's lines (a plan's grid) are the program's own: printed as
  // lines indented by two spaces, each escaped like the message.
  std::size_t begin = 0;
  while (!status.detail().empty() && begin <= status.detail().size()) {
    const std::size_t end = std::min(status.detail().find('\n', begin), status.detail().size());
    std::cerr << "  " << Printable(status.detail().substr(begin, end - begin)) << "\n";
    begin = end + 1;
  }
  return status.code() == Status::Code::kInvalidInput ? kExitBadInput : kExitFailure;
}

Status FlushStandardOutput() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int flush_errno = errno;
  if (std::cout.good() && flushed && !std::ferror(stdout)) return Status::Ok();
  // The write that failed set errno long ago; one more byte on the already
  // failing descriptor tells why (ENOSPC, EPIPE, ...).
  int e = flush_errno;
  if (e == 0 && write(STDOUT_FILENO, "\n", 1) < 0) e = errno;
  if (e == 0) e = EIO;
  return Status::Resource(std::string("cannot write standard output: ") + std::strerror(e));
}

int CheckedExit(const std::string& command, int code) {
  const Status written = FlushStandardOutput();
  if (written.ok() || code != kExitOk) return code;
  return Fail(command, written);
}

Status CheckOutputPath(const std::string& flag, const std::string& path) {
  if (path.empty()) return Status::Ok();
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Invalid(flag + " " + path + ": a directory, not a file");
    if (access(path.c_str(), W_OK) != 0) return Status::Invalid(flag + " " + path + ": not writable");
    return Status::Ok();
  }
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::Invalid(flag + " " + path + ": cannot be created (" + dir +
                           " is not a writable directory)");
  }
  return Status::Ok();
}

Status CheckPictureFormat(const std::string& flag, const std::string& path) {
  if (path.empty()) return Status::Ok();
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.rfind('.');
  std::string ext = dot == std::string::npos || (slash != std::string::npos && dot < slash)
                        ? ""
                        : path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string list;
  for (const char* format : kPictureFormats) {
    if (ext == format) return Status::Ok();
    list += (list.empty() ? "." : ", .") + std::string(format);
  }
  return Status::Invalid(flag + " " + path + ": unknown picture format '." + ext + "' (use " +
                         list + ")");
}

Status CheckProgram(const std::string& flag, const std::string& program) {
  auto executable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return Status::Ok();
    return Status::Invalid(flag + " " + program + ": not an executable file");
  }
  const char* env = std::getenv("PATH");
  const std::string path = env != nullptr ? env : "";
  for (std::size_t start = 0; start <= path.size();) {
    const std::size_t colon = std::min(path.find(':', start), path.size());
    const std::string dir = colon > start ? path.substr(start, colon - start) : ".";
    if (!program.empty() && executable(dir + "/" + program)) return Status::Ok();
    start = colon + 1;
  }
  return Status::Invalid(flag + " '" + program + "': no such program in PATH");
}

void AddScenarioOptions(po::options_description* desc, ScenarioFlags* f) {
  desc->add_options()
      ("scenario", po::value(&f->scenario_path),
       ("scenario file (protobuf text format, at most " + LimitText(kMaxTextFileBytes) + "); default: the embedded "
        "default scenario").c_str())
      ("model", po::value(&f->model_preset), "model preset (see `stateflow presets`)")
      ("max-actions", Optional(&f->max_actions),
       "refuse a plan (each configuration of a sweep) of more than this many actions, "
       "2 P M N (default 50000000, at most 2^40); a plan whose simulation would need more "
       "than this machine's memory is refused whatever the limit")
      ("cluster", po::value(&f->cluster_preset),
       "cluster preset (see `stateflow presets`), or a ClusterSpec file in text format "
       "(a name ending in .textproto or holding a '/', e.g. written by `stateflow calibrate`)")
      ("policy", po::value(&f->policy),
       "schedule under study (drops the baselines): gpipe, 1f1b, stateflow, interleaved "
       "(with --virtual-stages), zb-h1, zb-h2, zbv or zb-interleaved (zero-bubble: the backward "
       "split into B and W; zbv places two model stages per stage in a V, zb-interleaved v in a "
       "loop; train runs every one on the cpu and host-grid devices); docs/schedules.md")
      ("chunks,N", Optional(&f->chunks), Help("N, sequence chunks per microbatch", models::kChunks).c_str())
      ("virtual-stages", Optional(&f->virtual_stages),
       Help("v, model stages per pipeline stage (schedule.virtual_stages; policies interleaved "
            "and zb-interleaved (default 2), and zbv's 2; train runs them on the cpu and host-grid "
            "devices, each model stage its own module and optimizer on its stage)",
            models::kVirtualStages).c_str())
      ("alpha", Optional(&f->alpha), ("partition: 0 equal, 1 FLOP-balanced, >1 more, in " +
                                      models::RangeText(models::kAlpha)).c_str())
      ("microbatches,M", Optional(&f->microbatches), Help("M, microbatches per step", models::kMicrobatches).c_str())
      ("microbatch-size,B", Optional(&f->microbatch_size),
       Help("B, sequences per microbatch (parallel.microbatch_size)", models::kMicrobatchSize).c_str())
      ("stages,P", Optional(&f->stages), Help("P, pipeline stages", models::kPipelineSize).c_str())
      ("tensor-parallel", Optional(&f->tensor_size), Help("TP degree", models::kTensorSize).c_str())
      ("data-parallel", Optional(&f->data_size),
       Help("DP degree (parallel.data_size): replicas of the pipeline, each on M microbatches "
            "(train: mpirun -n P DP)", models::kDataSize).c_str())
      ("context-parallel", Optional(&f->context_size),
       Help("CP degree (parallel.context_size): each chunk's tokens split over CP devices "
            "(simulated only)", models::kContextSize).c_str())
      ("distributed-optimizer", po::value(&f->distributed_optimizer),
       "on or off: shard the optimizer state over the DP replicas "
       "(parallel.distributed_optimizer, ZeRO-1)")
      ("overlap-grad-reduce", po::value(&f->overlap_grad_reduce),
       "on or off: the first stage's DP gradient sync in buckets overlapped with its last "
       "backward, as Megatron-Core's --overlap-grad-reduce (parallel.overlap_grad_reduce; "
       "simulated only)")
      ("seq-len,T", Optional(&f->seq_len), Help("T, tokens per sequence", models::kSeqLen).c_str())
      ("recompute", po::value(&f->recompute), "none or full (every schedule)")
      ("system", po::value(&f->system),
       "stateflow, megatron-core or ms-swift: the training system whose head and loss every "
       "schedule runs with (docs/cost-model.md, Systems)")
      ("cost-model", po::value(&f->cost_model), "analytic or uniform")
      ("st-overlap", po::value(&f->st_overlap),
       "on or off: split-and-overlap of the recurrence's state transition (every schedule)")
      ("st-tile", Optional(&f->st_tile), "B_V, the state transition's tile of d_v (every schedule)")
      ("vary", po::value(&f->vary),
       "NAME=FACTOR: multiply one cluster parameter (a `stateflow calibrate` parameter name, "
       "or memory_reserve) by FACTOR; repeatable (sensitivity studies)")
      ("compute-units", Optional(&f->compute_units),
       "the device's parallel units (SMs) the state transition spreads over; 0: off");
}

Status ParseOptions(int argc, char** argv, const po::options_description& desc,
                    po::variables_map* vm) {
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    return Status::Invalid(e.what());
  }
  return Status::Ok();
}

Result<sim::CostTableIndex> LoadCostsFor(const std::string& path, const pb::Scenario& scenario) {
  SF_ASSIGN_OR_RETURN(pb::CostTable table, scenario::LoadCostTableFile(path));
  SF_RETURN_IF_ERROR(sim::CheckCostTableModel(
      table, scenario.model(), path, static_cast<int>(std::max(1u, scenario.parallel().microbatch_size()))));
  return sim::CostTableIndex::Make(table, path);
}

Status WriteCostTableFile(const std::string& path, const pb::CostTable& table,
                          bool samples_only) {
  const std::string text = sim::CostTableText(table);
  pb::CostTable back;
  const Status parsed = scenario::ParseTextProto(text, path, &back);
  if (!parsed.ok() || !google::protobuf::util::MessageDifferencer::Equals(back, table)) {
    return Status::Internal(path + ": the cost table's text does not read back as the table" +
                            (parsed.ok() ? std::string() : ": " + parsed.message()));
  }
  if (!samples_only) {
    Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(back, path);
    if (!index.ok()) {
      return Status::Internal("the cost table would not load: " + index.status().message());
    }
  }
  return WriteFile(path, text);
}

Result<schedule::Plan> LoadPlanFile(const std::string& path, std::optional<long long> chunks) {
  SF_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  if (!schedule::LooksLikeTorchCsv(text)) return schedule::ParsePlanText(text, path);
  const long long n = chunks.value_or(1);
  if (n < 1 || n > schedule::kMaxUnitsPerStage) {
    return Status::Invalid(path + ": --chunks " + std::to_string(n) + " is out of range");
  }
  return schedule::ParseTorchCsv(text, path, static_cast<int>(n));
}

std::string SchedulePolicyFor(const schedule::Plan& plan) {
  for (const std::string& name : schedule::PolicyNames()) {
    if (name == plan.policy()) return name;
  }
  if (plan.placement() == schedule::StagePlacement::kVShape) return "zbv";
  if (plan.virtual_stages() == 1) return "stateflow";
  for (const auto& list : plan.per_stage()) {
    for (const schedule::Action& a : list) {
      if (a.pass == schedule::Pass::kWeight) return "zb-interleaved";
    }
  }
  return "interleaved";
}

Result<scenario::ResolvedScenario> LoadResolvedScenario(const ScenarioFlags& f) {
  return LoadResolvedScenario(f, scenario::DefaultScenarioText(), "<default scenario>");
}

Result<scenario::ResolvedScenario> LoadResolvedScenario(const ScenarioFlags& f, std::string_view default_text,
                                          std::string_view default_name) {
  SF_RETURN_IF_ERROR(CheckFlag("chunks", f.chunks, models::kChunks));
  SF_RETURN_IF_ERROR(CheckFlag("virtual-stages", f.virtual_stages, models::kVirtualStages));
  SF_RETURN_IF_ERROR(CheckFlag("microbatches", f.microbatches, models::kMicrobatches));
  SF_RETURN_IF_ERROR(CheckFlag("microbatch-size", f.microbatch_size, models::kMicrobatchSize));
  SF_RETURN_IF_ERROR(CheckFlag("stages", f.stages, models::kPipelineSize));
  SF_RETURN_IF_ERROR(CheckFlag("tensor-parallel", f.tensor_size, models::kTensorSize));
  SF_RETURN_IF_ERROR(CheckFlag("data-parallel", f.data_size, models::kDataSize));
  SF_RETURN_IF_ERROR(CheckFlag("context-parallel", f.context_size, models::kContextSize));
  if (!f.distributed_optimizer.empty() && f.distributed_optimizer != "on" &&
      f.distributed_optimizer != "off") {
    return Status::Invalid("--distributed-optimizer: '" + f.distributed_optimizer +
                           "' is not on or off");
  }
  if (!f.overlap_grad_reduce.empty() && f.overlap_grad_reduce != "on" &&
      f.overlap_grad_reduce != "off") {
    return Status::Invalid("--overlap-grad-reduce: '" + f.overlap_grad_reduce +
                           "' is not on or off");
  }
  SF_RETURN_IF_ERROR(CheckFlag("seq-len", f.seq_len, models::kSeqLen));
  if (f.alpha) SF_RETURN_IF_ERROR(models::CheckRange("--alpha", *f.alpha, models::kAlpha));
  pb::Scenario s;
  if (f.scenario_path.empty()) {
    SF_ASSIGN_OR_RETURN(s, scenario::ParseScenarioText(default_text, default_name));
  } else {
    SF_ASSIGN_OR_RETURN(s, scenario::LoadScenarioFile(f.scenario_path));
  }
  if (!f.model_preset.empty()) {
    s.set_model_preset(f.model_preset);
    s.clear_model();
  }
  if (IsClusterFile(f.cluster_preset)) {
    // A preset file (e.g. written by `stateflow calibrate`): the whole cluster.
    SF_ASSIGN_OR_RETURN(std::string text, ReadTextFile(f.cluster_preset));
    pb::ClusterSpec cluster;
    SF_RETURN_IF_ERROR(scenario::ParseTextProto(text, f.cluster_preset, &cluster));
    s.clear_cluster_preset();
    *s.mutable_cluster() = std::move(cluster);
  } else if (!f.cluster_preset.empty()) {
    s.set_cluster_preset(f.cluster_preset);
    s.clear_cluster();
  }
  pb::ScheduleSpec* primary = s.mutable_schedule();
  if (!f.policy.empty()) {
    primary->set_policy(f.policy);
    s.clear_baselines();
  }
  const std::optional<long long> chunks = schedule::ChunksFor(f.policy, f.chunks);
  if (chunks) primary->set_chunks(static_cast<std::uint32_t>(*chunks));
  if (f.alpha) primary->set_alpha(*f.alpha);
  if (f.virtual_stages) primary->set_virtual_stages(static_cast<std::uint32_t>(*f.virtual_stages));
  if (!f.recompute.empty()) {
    primary->set_recompute(f.recompute);
    for (auto& b : *s.mutable_baselines()) b.set_recompute(f.recompute);
  }
  if (!f.system.empty()) {
    primary->set_system(f.system);
    for (auto& b : *s.mutable_baselines()) b.set_system(f.system);
  }
  if (!f.st_overlap.empty()) {
    if (f.st_overlap != "on" && f.st_overlap != "off") {
      return Status::Invalid("--st-overlap: '" + f.st_overlap + "' is not on or off");
    }
    primary->set_st_overlap(f.st_overlap == "on");
    for (auto& b : *s.mutable_baselines()) b.set_st_overlap(f.st_overlap == "on");
  }
  if (f.st_tile) {
    SF_RETURN_IF_ERROR(models::CheckRange("--st-tile", *f.st_tile, models::kStTile));
    primary->set_st_tile(static_cast<std::uint32_t>(*f.st_tile));
    for (auto& b : *s.mutable_baselines()) b.set_st_tile(static_cast<std::uint32_t>(*f.st_tile));
  }
  if (f.compute_units) {
    if (*f.compute_units < 0 || *f.compute_units > 1000000) {
      return Status::Invalid("--compute-units: " + std::to_string(*f.compute_units) +
                             " is out of range [0, 1000000]");
    }
    s.mutable_cluster()->mutable_device()->set_compute_units(
        static_cast<std::uint32_t>(*f.compute_units));
  }
  if (f.microbatches) s.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(*f.microbatches));
  if (f.microbatch_size) {
    s.mutable_parallel()->set_microbatch_size(static_cast<std::uint32_t>(*f.microbatch_size));
  }
  if (f.stages) s.mutable_parallel()->set_pipeline_size(static_cast<std::uint32_t>(*f.stages));
  if (f.tensor_size) s.mutable_parallel()->set_tensor_size(static_cast<std::uint32_t>(*f.tensor_size));
  if (f.data_size) s.mutable_parallel()->set_data_size(static_cast<std::uint32_t>(*f.data_size));
  if (f.context_size) {
    s.mutable_parallel()->set_context_size(static_cast<std::uint32_t>(*f.context_size));
  }
  if (!f.distributed_optimizer.empty()) {
    s.mutable_parallel()->set_distributed_optimizer(f.distributed_optimizer == "on");
  }
  if (!f.overlap_grad_reduce.empty()) {
    s.mutable_parallel()->set_overlap_grad_reduce(f.overlap_grad_reduce == "on");
  }
  if (f.seq_len) s.set_seq_len(static_cast<std::uint64_t>(*f.seq_len));
  if (!f.cost_model.empty()) s.set_cost_model(f.cost_model);
  SF_ASSIGN_OR_RETURN(scenario::ResolvedScenario resolved, scenario::Resolve(std::move(s)));
  if (!f.vary.empty()) {
    pb::Scenario varied = resolved.proto();
    for (const std::string& v : f.vary) {
      const std::size_t eq = v.find('=');
      char* end = nullptr;
      const double factor = eq == std::string::npos ? 0 : std::strtod(v.c_str() + eq + 1, &end);
      if (eq == std::string::npos || end == v.c_str() + eq + 1 || *end != '\0') {
        return Status::Invalid("--vary: '" + Printable(v) + "' is not NAME=FACTOR");
      }
      SF_ASSIGN_OR_RETURN(*varied.mutable_cluster(),
                          sim::VaryParameter(varied.cluster(), v.substr(0, eq), factor));
    }
    varied.clear_cluster_preset();
    SF_ASSIGN_OR_RETURN(resolved, scenario::Resolve(std::move(varied)));
  }
  SF_RETURN_IF_ERROR(CheckPlanBounds(resolved.proto(), nullptr, f.max_actions));
  return resolved;
}

}  // namespace stateflow::tools

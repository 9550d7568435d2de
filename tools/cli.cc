#include "tools/cli.h"

#include "scenario/load.h"
#include "scenario/resolve.h"

namespace stateflow::tools {
namespace {

Status CheckRange(const char* flag, const std::optional<long long>& v, long long lo,
                  long long hi) {
  if (v && (*v < lo || *v > hi)) {
    return Status::Invalid(std::string("--") + flag + " must be in [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "] (got " + std::to_string(*v) + ")");
  }
  return Status::Ok();
}

}  // namespace

std::string Trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

int Fail(const std::string& command, const Status& status) {
  std::cerr << "stateflow " << command << ": " << status.message() << "\n";
  return status.code() == Status::Code::kInvalidInput ? kExitBadInput : kExitFailure;
}

void AddScenarioOptions(po::options_description* desc, ScenarioFlags* f) {
  desc->add_options()
      ("scenario", po::value(&f->scenario_path),
       "scenario file (protobuf text format); default: the embedded default scenario")
      ("model", po::value(&f->model_preset), "model preset (see `stateflow presets`)")
      ("cluster", po::value(&f->cluster_preset), "cluster preset")
      ("policy", po::value(&f->policy),
       "schedule under study: gpipe, 1f1b or stateflow (drops the baselines)")
      ("chunks,N", Optional(&f->chunks), "N, sequence chunks per microbatch")
      ("alpha", Optional(&f->alpha), "partition: 0 equal, 1 FLOP-balanced, >1 more")
      ("microbatches,M", Optional(&f->microbatches), "M, microbatches per step")
      ("stages,P", Optional(&f->stages), "P, pipeline stages")
      ("tensor-parallel", Optional(&f->tensor_size), "TP degree")
      ("seq-len,T", Optional(&f->seq_len), "T, tokens per sequence")
      ("recompute", po::value(&f->recompute), "none or full (every schedule)")
      ("cost-model", po::value(&f->cost_model), "analytic or uniform");
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

Result<scenario::ResolvedScenario> LoadResolvedScenario(const ScenarioFlags& f) {
  return LoadResolvedScenario(f, scenario::DefaultScenarioText(), "<default scenario>");
}

Result<scenario::ResolvedScenario> LoadResolvedScenario(const ScenarioFlags& f, std::string_view default_text,
                                          std::string_view default_name) {
  SF_RETURN_IF_ERROR(CheckRange("chunks", f.chunks, 1, 1 << 20));
  SF_RETURN_IF_ERROR(CheckRange("microbatches", f.microbatches, 1, 1 << 20));
  SF_RETURN_IF_ERROR(CheckRange("stages", f.stages, 1, 4096));
  SF_RETURN_IF_ERROR(CheckRange("tensor-parallel", f.tensor_size, 1, 4096));
  SF_RETURN_IF_ERROR(CheckRange("seq-len", f.seq_len, 1, 1LL << 40));
  if (f.alpha && !(*f.alpha >= 0)) {
    return Status::Invalid("--alpha must be >= 0 (got " + std::to_string(*f.alpha) + ")");
  }
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
  if (!f.cluster_preset.empty()) {
    s.set_cluster_preset(f.cluster_preset);
    s.clear_cluster();
  }
  pb::ScheduleSpec* primary = s.mutable_schedule();
  if (!f.policy.empty()) {
    primary->set_policy(f.policy);
    s.clear_baselines();
    if (f.policy == "1f1b" && !f.chunks) primary->set_chunks(1);
  }
  if (f.chunks) primary->set_chunks(static_cast<std::uint32_t>(*f.chunks));
  if (f.alpha) primary->set_alpha(*f.alpha);
  if (!f.recompute.empty()) {
    primary->set_recompute(f.recompute);
    for (auto& b : *s.mutable_baselines()) b.set_recompute(f.recompute);
  }
  if (f.microbatches) s.mutable_parallel()->set_microbatches(static_cast<std::uint32_t>(*f.microbatches));
  if (f.stages) s.mutable_parallel()->set_pipeline_size(static_cast<std::uint32_t>(*f.stages));
  if (f.tensor_size) s.mutable_parallel()->set_tensor_size(static_cast<std::uint32_t>(*f.tensor_size));
  if (f.seq_len) s.set_seq_len(static_cast<std::uint64_t>(*f.seq_len));
  if (!f.cost_model.empty()) s.set_cost_model(f.cost_model);
  return scenario::Resolve(std::move(s));
}

}  // namespace stateflow::tools

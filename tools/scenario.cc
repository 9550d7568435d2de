#include "tools/scenario.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "models/model.h"
#include "schedule/plan.h"

namespace stateflow::tools {
namespace {

// Embedded from scenarios/default.textproto by CMake.
constexpr char kDefaultScenario[] =
#include "default_scenario.inc"
    ;

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(std::string_view source) : source_(source) {}
  void AddError(int line, int column, const std::string& message) override {
    if (!error_.empty()) return;
    // The parser counts lines and columns from 0.
    error_ = source_ + ":" + std::to_string(line + 1) + ":" +
             std::to_string(column + 1) + ": " + message;
  }
  const std::string& error() const { return error_; }

 private:
  std::string source_;
  std::string error_;
};

std::string Known(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Status ResolveModel(pb::Scenario* s) {
  if (!s->model_preset().empty()) {
    Result<pb::ModelSpec> preset = models::ModelPreset(s->model_preset());
    if (!preset.ok()) return preset.status();
    pb::ModelSpec merged = *preset;
    merged.MergeFrom(s->model());
    *s->mutable_model() = merged;
  }
  if (s->model().architecture().empty() && s->model().num_layers() == 0) {
    return Status::Invalid("model: neither model_preset nor model fields given (presets: " +
                           Known(models::ModelPresetNames()) + ")");
  }
  const int tp = static_cast<int>(s->parallel().tensor_size());
  return models::ValidateModel(s->model(), tp);
}

Status ResolveCluster(pb::Scenario* s) {
  if (!s->cluster_preset().empty()) {
    Result<pb::ClusterSpec> preset = models::ClusterPreset(s->cluster_preset());
    if (!preset.ok()) return preset.status();
    pb::ClusterSpec merged = *preset;
    // Efficiency points given in the scenario replace the preset's curve.
    if (s->cluster().device().efficiency_size() > 0) {
      merged.mutable_device()->clear_efficiency();
    }
    merged.MergeFrom(s->cluster());
    *s->mutable_cluster() = merged;
  }
  if (!s->cluster().has_device()) {
    return Status::Invalid("cluster: neither cluster_preset nor cluster.device given (presets: " +
                           Known(models::ClusterPresetNames()) + ")");
  }
  return models::ValidateCluster(s->cluster());
}

void FillScheduleDefaults(pb::ScheduleSpec* schedule) {
  if (schedule->policy().empty()) schedule->set_policy("stateflow");
  if (!schedule->has_chunks()) schedule->set_chunks(1);
  if (!schedule->has_granularity()) schedule->set_granularity(128);
  if (schedule->recompute().empty()) schedule->set_recompute("none");
}

}  // namespace

std::string_view DefaultScenarioText() { return kDefaultScenario; }

Status ParseTextProto(std::string_view text, std::string_view source_name,
                      google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors(source_name);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), message)) {
    return Status::Invalid(errors.error().empty() ? std::string(source_name) + ": parse error"
                                                  : errors.error());
  }
  return Status::Ok();
}

Result<pb::Scenario> ParseScenarioText(std::string_view text, std::string_view source_name) {
  pb::Scenario scenario;
  SF_RETURN_IF_ERROR(ParseTextProto(text, source_name, &scenario));
  return scenario;
}

Result<pb::CostTable> LoadCostTableFile(const std::string& path) {
  std::string text;
  SF_RETURN_IF_ERROR(ReadFile(path, &text));
  pb::CostTable table;
  SF_RETURN_IF_ERROR(ParseTextProto(text, path, &table));
  return table;
}

Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Status::Invalid(path + ": cannot open file");
  std::ostringstream buffer;
  buffer << file.rdbuf();
  if (file.bad()) return Status::Invalid(path + ": read failed");
  *out = buffer.str();
  return Status::Ok();
}

Result<pb::Scenario> LoadScenarioFile(const std::string& path) {
  std::string text;
  SF_RETURN_IF_ERROR(ReadFile(path, &text));
  return ParseScenarioText(text, path);
}

Status ValidateSchedule(const pb::ScheduleSpec& schedule, std::string_view field) {
  const std::string f(field);
  bool known = false;
  for (const auto& name : schedule::PolicyNames()) known |= (name == schedule.policy());
  if (!known) {
    return Status::Invalid(f + ".policy: unknown '" + schedule.policy() + "' (known: " +
                           Known(schedule::PolicyNames()) + ")");
  }
  if (schedule.chunks() < 1) return Status::Invalid(f + ".chunks must be >= 1");
  if (schedule.policy() == "1f1b" && schedule.chunks() != 1) {
    return Status::Invalid(f + ".chunks must be 1 for policy 1f1b (got " +
                           std::to_string(schedule.chunks()) + ")");
  }
  if (!std::isfinite(schedule.alpha()) || schedule.alpha() < 0) {
    return Status::Invalid(f + ".alpha must be >= 0 (got " + std::to_string(schedule.alpha()) +
                           ")");
  }
  if (schedule.granularity() < 1) return Status::Invalid(f + ".granularity must be >= 1");
  if (schedule.recompute() != "none" && schedule.recompute() != "full") {
    return Status::Invalid(f + ".recompute: unknown '" + schedule.recompute() +
                           "' (known: none, full)");
  }
  return Status::Ok();
}

Result<pb::Scenario> ResolveScenario(pb::Scenario s) {
  pb::ParallelSpec* par = s.mutable_parallel();
  if (par->tensor_size() == 0) par->set_tensor_size(1);
  if (par->data_size() == 0) par->set_data_size(1);
  if (par->microbatch_size() == 0) par->set_microbatch_size(1);
  if (par->pipeline_size() < 1) return Status::Invalid("parallel.pipeline_size must be >= 1");
  if (par->microbatches() < 1) return Status::Invalid("parallel.microbatches must be >= 1");
  if (s.seq_len() < 1) return Status::Invalid("seq_len must be >= 1");
  if (s.cost_model().empty()) s.set_cost_model("analytic");
  if (s.cost_model() != "analytic" && s.cost_model() != "uniform" &&
      s.cost_model() != "replay") {
    return Status::Invalid("cost_model: unknown '" + s.cost_model() +
                           "' (known: analytic, uniform, replay)");
  }
  SF_RETURN_IF_ERROR(ResolveModel(&s));
  SF_RETURN_IF_ERROR(ResolveCluster(&s));
  if (par->pipeline_size() > s.model().num_layers()) {
    return Status::Invalid("parallel.pipeline_size " + std::to_string(par->pipeline_size()) +
                           " exceeds model.num_layers " +
                           std::to_string(s.model().num_layers()));
  }
  FillScheduleDefaults(s.mutable_schedule());
  SF_RETURN_IF_ERROR(ValidateSchedule(s.schedule(), "schedule"));
  for (int b = 0; b < s.baselines_size(); ++b) {
    FillScheduleDefaults(s.mutable_baselines(b));
    SF_RETURN_IF_ERROR(
        ValidateSchedule(s.baselines(b), "baselines[" + std::to_string(b) + "]"));
  }
  return s;
}

}  // namespace stateflow::tools

#include "scenario/load.h"

#include "common/files.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

namespace stateflow::scenario {
namespace {

// Embedded from scenarios/*.textproto by CMake (cmake/EmbedText.cmake).
constexpr char kDefaultScenario[] =
#include "default_scenario.inc"
    ;
constexpr char kTinyTrainScenario[] =
#include "tiny_train_scenario.inc"
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

}  // namespace

std::string_view DefaultScenarioText() { return kDefaultScenario; }
std::string_view TinyTrainScenarioText() { return kTinyTrainScenario; }

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
  SF_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  pb::CostTable table;
  SF_RETURN_IF_ERROR(ParseTextProto(text, path, &table));
  return table;
}

Result<pb::Scenario> LoadScenarioFile(const std::string& path) {
  SF_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseScenarioText(text, path);
}

}  // namespace stateflow::scenario

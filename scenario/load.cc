#include "scenario/load.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <string>
#include <vector>

#include "common/files.h"
#include "common/text.h"

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

namespace {

// The first string field of `message` (recursively; "model.name",
// "samples[3].layer_kind") that is not UTF-8, or "" if none. Protobuf's text
// parser takes any bytes (raw, or as escapes such as "\377") into a string
// field, and its JSON printer then writes them unescaped: a report that is
// not JSON (found for issue 31 with a scenario name holding 0xff).
std::string NonUtf8Field(const google::protobuf::Message& message, const std::string& prefix) {
  namespace gp = google::protobuf;
  const gp::Reflection* reflection = message.GetReflection();
  std::vector<const gp::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const gp::FieldDescriptor* field : fields) {
    const std::string name = prefix + field->name();
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int k = 0; k < count; ++k) {
      const std::string at = field->is_repeated() ? name + "[" + std::to_string(k) + "]" : name;
      if (field->type() == gp::FieldDescriptor::TYPE_STRING) {
        const std::string value = field->is_repeated()
                                      ? reflection->GetRepeatedString(message, field, k)
                                      : reflection->GetString(message, field);
        if (!IsUtf8(value)) return at;
      } else if (field->cpp_type() == gp::FieldDescriptor::CPPTYPE_MESSAGE) {
        const gp::Message& sub = field->is_repeated()
                                     ? reflection->GetRepeatedMessage(message, field, k)
                                     : reflection->GetMessage(message, field);
        if (std::string found = NonUtf8Field(sub, at + "."); !found.empty()) return found;
      }
    }
  }
  return "";
}

}  // namespace

Status ParseTextProto(std::string_view text, std::string_view source_name,
                      google::protobuf::Message* message) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors(source_name);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), message)) {
    return Status::Invalid(errors.error().empty() ? std::string(source_name) + ": parse error"
                                                  : errors.error());
  }
  if (const std::string field = NonUtf8Field(*message, ""); !field.empty()) {
    return Status::Invalid(std::string(source_name) + ": " + field +
                           ": not UTF-8 text (a string field must be)");
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

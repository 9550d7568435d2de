// Reading scenarios and cost tables: the text format parsed with errors as
// file:line:column, files read whole, and the scenarios compiled into the
// binary (the default one of `simulate`, and the tiny one of `train`,
// `profile` and `validate`).
//
// Not resolution (resolve.h): what this returns is the text as written, with
// no preset merged and no field checked.
//
//   Result<pb::Scenario> s = LoadScenarioFile("scenarios/default.textproto");
//   if (s.ok()) Result<ResolvedScenario> r = Resolve(*s);
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::scenario {

// The embedded default (scenarios/default.textproto, compiled in): the
// paper's 3B Gated DeltaNet at 64K tokens on 8 A100s, StateFlow beside 1F1B.
std::string_view DefaultScenarioText();

// The embedded default of the commands that run the backend
// (scenarios/tiny-train.textproto, compiled in).
std::string_view TinyTrainScenarioText();

// Parses any message's text format into `message`; errors as
// "<source_name>:<line>:<column>: <message>".
Status ParseTextProto(std::string_view text, std::string_view source_name,
                      google::protobuf::Message* message);

// Parses text format. Errors: "<source_name>:<line>:<column>: <message>".
Result<pb::Scenario> ParseScenarioText(std::string_view text, std::string_view source_name);

// Reads and parses a file; errors name the path.
Result<pb::Scenario> LoadScenarioFile(const std::string& path);

// Reads a measured cost table (written by `stateflow profile`).
Result<pb::CostTable> LoadCostTableFile(const std::string& path);

}  // namespace stateflow::scenario

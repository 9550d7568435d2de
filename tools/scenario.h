// Reading a scenario: parse the text format (errors as file:line:column),
// fill the model and cluster from their presets, fill defaults, and check
// every field the executors rely on, naming the field at fault.
//
// Not a simulator: a resolved scenario is input to sim/ and backend/.
//
//   Result<pb::Scenario> s = LoadScenarioFile("scenarios/gdn-3b.textproto");
//   if (s.ok()) s = ResolveScenario(*s);
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::tools {

// The embedded default (scenarios/default.textproto, compiled in): the
// paper's 3B Gated DeltaNet at 64K tokens on 8 A100s, StateFlow beside 1F1B.
std::string_view DefaultScenarioText();

// Parses text format. Errors: "<source_name>:<line>:<column>: <message>".
Result<pb::Scenario> ParseScenarioText(std::string_view text,
                                       std::string_view source_name);
// Reads and parses a file; errors name the path.
Result<pb::Scenario> LoadScenarioFile(const std::string& path);

// Parses any message's text format into `message`; errors as
// "<source_name>:<line>:<column>: <message>".
Status ParseTextProto(std::string_view text, std::string_view source_name,
                      google::protobuf::Message* message);

// Reads a measured cost table (written by `stateflow profile`).
Result<pb::CostTable> LoadCostTableFile(const std::string& path);

// Presets merged (fields set in the scenario win), defaults filled (TP, DP,
// microbatch size 1; policy stateflow; chunks 1; granularity 128; recompute
// none; cost model analytic; precision defaults), every field checked.
Result<pb::Scenario> ResolveScenario(pb::Scenario scenario);

// Checks one schedule; `field` prefixes the messages ("schedule",
// "baselines[0]").
Status ValidateSchedule(const pb::ScheduleSpec& schedule, std::string_view field);

// Reads a whole file into `out`; errors name the path.
Status ReadFile(const std::string& path, std::string* out);

}  // namespace stateflow::tools

// Turning Reports into what people and other tools read: JSON with the
// schema's snake_case names, and the human tables of `stateflow simulate`.
//
// Not the computation of any number: everything printed is in the Report.
//
//   std::cout << MessageToJson(report);
//   std::cout << FormatSimulateTable(report);
#pragma once

#include <string>

#include "proto/stateflow.pb.h"

namespace stateflow::tools {

// One JSON object (a Report, SweepReport, ValidationReport, ...), every
// field printed (zeros and false included), with the proto field names.
std::string MessageToJson(const google::protobuf::Message& message);

// Machine, commit, threads and time of this run.
void FillProvenance(int threads, pb::Report* report);

// The side-by-side comparison of the report and its comparisons, then the
// per-stage table of each.
std::string FormatSimulateTable(const pb::Report& report);

// The report's explanation (simulate --explain): one layer of each kind over
// one microbatch term by term, the state transition, and each stage's busy
// time term by term beside its sync, optimizer and idle time.
std::string FormatExplanation(const pb::Report& report);

// A stage's layers, "0-4", or with virtual stages each model stage's, "0-4,17-20".
std::string StageLayersText(const pb::StageReport& stage);

// "61.23 GiB", "512.0 MiB", ...
std::string FormatBytes(double bytes);
// "12.35 s", "812.4 ms", or "7.000 units" for the uniform cost model.
std::string FormatTime(double seconds, const std::string& unit);

}  // namespace stateflow::tools

// What `stateflow sweep` and `stateflow plan` print: the sweep's results
// table in the shape of the paper's (rows: policy; columns: sequence length x
// global batch; cells: throughput / peak memory of the best feasible
// configuration, or OOM), its CSV (one row per simulated configuration), the
// capacity plan's tables, and JSON of either report.
//
// Not the computation of any number: everything printed is in the reports.
//
//   std::cout << FormatSweepTable(*report);
//   SF_RETURN_IF_ERROR(WriteSweepCsv(*report, "sweep.csv"));
#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "common/status.h"
#include "proto/stateflow.pb.h"

namespace stateflow::tools {

// The CSV header, exactly (the plotting scripts read these names):
// scenario,model,policy,seq_len,global_batch,microbatches,pipeline_size,
// tensor_size,data_size,chunks,alpha,recompute,step_time_s,tokens_per_s,
// bubble_fraction,peak_memory_bytes,capacity_bytes,oom,peak_stage,peak_class,best,
// system,usable_bytes,st_overlap,st_tile,virtual_stages (the last five read
// by the plots when present; st_overlap as 0/1, st_tile the B_V simulated,
// virtual_stages v, 1 for none)
extern const char kSweepCsvHeader[];

// Header line plus one line per run (oom and best as 0/1).
std::string SweepCsv(const pb::SweepReport& report);
// Writes SweepCsv to `path`; errors name the path.
Status WriteSweepCsv(const pb::SweepReport& report, const std::string& path);

// The results table, the best configuration of each cell, and the notes.
std::string FormatSweepTable(const pb::SweepReport& report);

// The feasible splits ranked (the first `top`, all if top <= 0) and the
// rejected ones with their reasons.
std::string FormatPlanTable(const pb::CapacityPlanReport& report, int top);

// JSON of either report: MessageToJson (report_format.h).

// "64K" for 65536, "1M" for 1048576, else the number.
std::string TokensLabel(double tokens);

}  // namespace stateflow::tools

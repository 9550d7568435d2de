// The header of a Report: what ran -- the scenario and model, the schedule
// (policy, N, alpha, recompute, the state transition's overlap and tile),
// P, TP, DP, M, T, the chunk boundaries and the plan's action count, and
// whose numbers they are (source, cost model, time unit) -- filled in one
// place for the simulator (sim/simulation.cc) and the trainer
// (backend/train/train_report.cc), so that a simulated and a measured
// Report of one configuration name it alike (validate compares them).
//
// Not the numbers (step time, memory, losses): each executor's own.
//
//   FillReportHeader({.source = "train", ...}, &report);
#pragma once

#include <cstdint>
#include <string>

#include "models/cost_model.h"
#include "proto/stateflow.pb.h"
#include "schedule/partition.h"
#include "schedule/plan.h"

namespace stateflow::scenario {

struct ReportHeader {
  std::string source;      // "simulate" or "train"
  std::string scenario;    // Scenario.name
  std::string model;       // ModelSpec.name
  const schedule::Plan* plan = nullptr;            // policy, action count
  const schedule::Partition* partition = nullptr;  // N, chunk boundaries
  int pipeline_size = 1, tensor_size = 1, data_size = 1, microbatches = 1;  // P, TP, DP, M
  int context_size = 1;                            // CP
  std::int64_t seq_len = 0;                        // T
  double alpha = 0;
  models::Recompute recompute = models::Recompute::kNone;
  bool st_overlap = false;
  std::int64_t st_tile = 0;                        // 0: the device's default
  std::string cost_model;                          // "analytic", ..., "measured"
  std::string time_unit;                           // "s" or the cost source's
};

// REQUIRES: plan and partition not nullptr.
void FillReportHeader(const ReportHeader& header, pb::Report* report);

}  // namespace stateflow::scenario

// The discrete-event engine: executes a Plan's per-stage orders on simulated
// devices whose durations and buffers come from a CostSource.
//
// Each stage has one compute stream that runs its actions in plan order; an
// action starts as soon as the stream is free and its input has arrived (the
// activation from stage r-1 for a forward, the activation gradient from stage
// r+1 for a backward; same-stage dependencies hold by the plan's order, which
// the validator proved). After a forward (backward) ends, its output is sent
// to stage r+1 (r-1) over a point-to-point link: transfers on one directed
// link run one at a time in FIFO order, each occupying it for bytes/bandwidth
// and arriving latency + bytes/bandwidth after it starts.
//
// How it runs: as a dataflow, not with an event queue. Every resource has
// one owner (a stage's stream runs its plan order; a directed link carries
// the sends of one stage, in that stage's order), so an action starts at
// max(its stage's previous end, its input's arrival) and each time is a
// function of times computed before it in some stage's order: the engine
// runs each stage as far as its arrived inputs allow and revisits a stage
// when an input reaches it, handling every action once (no heap; about twice
// the speed of the event queue). This gives the same doubles, in the same
// per-stage order, as a discrete-event simulation of the same rules
// (RunPlanByEvents below, the reference: tests compare the two bit for bit).
// A resource shared by several stages would need the event queue again.
//
// Determinism: the same plan and costs always give the same result, bit for
// bit.
//
// Data parallelism: after a stage's last action it runs its gradient
// all-reduce (CostSource::GradientSyncTime); the step ends when the last
// stage's all-reduce does.
//
// Memory: each stage keeps a ledger per buffer class: static bytes from time
// 0, each action's allocations at its start and frees at its end. An end
// event is processed before the start it enables, so a buffer freed at time t
// does not count together with one allocated at t.
//
// A negative or non-finite duration or transfer time from the cost source
// ends the run with an error naming the action (in every build).
//
// Not the report: sim/simulation.h turns an EngineResult into a pb::Report
// (step time, bubbles, OOM verdicts).
//
//   Result<EngineResult> r = RunPlan(plan, *costs, {.record_timeline = true});
//   double step = r->step_time_s;
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "schedule/plan.h"
#include "sim/cost_source.h"

namespace stateflow::sim {

struct EngineOptions {
  // Keep every action's start/end and the memory after every change (for
  // traces, plots and tests); costs time and memory on large plans.
  bool record_timeline = false;
};

struct Slice {
  schedule::Action action;
  double start_s = 0;
  double end_s = 0;
};

struct MemorySample {
  double time_s = 0;
  ClassBytes bytes{};  // live bytes per class after the change at time_s
};

struct StageResult {
  double busy_s = 0;
  double end_s = 0;            // when its last action ended
  double sync_s = 0;           // DP gradient all-reduce after end_s
  double optimizer_s = 0;      // optimizer step after the sync
  double peak_bytes = 0;       // max over time of the total live bytes
  double peak_time_s = 0;      // first time the peak was reached
  ClassBytes peak_by_class{};  // live bytes per class at that moment
  std::vector<Slice> slices;            // when record_timeline
  std::vector<MemorySample> memory;     // when record_timeline
};

struct EngineResult {
  // max over stages of end_s + sync_s + optimizer_s: each stage all-reduces
  // its gradients across data-parallel replicas after its last action, then
  // steps its optimizer (neither overlapped with compute, neither busy time).
  double step_time_s = 0;
  std::uint64_t num_events = 0;
  std::vector<StageResult> stages;  // (P)
};

// REQUIRES: ValidatePlan(plan).ok(). An Internal error if the plan still
// deadlocks (naming the stage and action it is stuck on).
Result<EngineResult> RunPlan(const schedule::Plan& plan, const CostSource& costs,
                             const EngineOptions& options = {});

// The reference: the same rules as a discrete-event simulation with one event
// queue ordered by (time, order of scheduling). Same results as RunPlan, bit
// for bit (num_events counts action ends and arrivals in both); slower. For
// tests and benchmarks.
Result<EngineResult> RunPlanByEvents(const schedule::Plan& plan, const CostSource& costs,
                                     const EngineOptions& options = {});

}  // namespace stateflow::sim

// What a training run is made of, from a resolved scenario: the plan (from
// the scenario's policy, or a plan file), the chunk partition and the stage
// assignment -- made by scenario::Configure, the same call the simulator
// makes, so the backend runs the configuration the simulator predicts -- and
// the trainer's own options from the scenario's TrainSpec with defaults.
//
// Not the training loop (trainer.h).
//
//   SF_ASSIGN_OR_RETURN(TrainSetup setup, MakeTrainSetup(resolved_scenario, /*plan=*/nullptr));
//   SF_ASSIGN_OR_RETURN(TrainOptions options, TrainOptionsFromSpec(resolved_scenario.train()));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/train/adamw.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"
#include "scenario/resolve.h"
#include "schedule/partition.h"
#include "schedule/plan.h"

namespace stateflow::backend {

struct TrainSetup {
  std::string scenario_name;
  pb::ModelSpec model;
  schedule::Plan plan;                            // validated (W actions: a split backward)
  schedule::Partition partition;                  // N chunks of T tokens
  std::vector<models::StageLayers> stage_layers;  // (P v) layers of each model stage
  models::Recompute recompute = models::Recompute::kNone;
  // schedule.st_overlap: the GDN and Mamba-3 cores' forward and backward split and overlapped
  // (StageModuleOptions::st_overlap).
  bool st_overlap = false;
  // schedule.st_tile: B_V of the GDN core's ST (StageModuleOptions::st_tile);
  // 0 when the schedule leaves it unset (the device's default, untiled).
  int64_t st_tile = 0;
  double alpha = 0;
  int stages = 1;            // P
  int microbatches = 1;      // M, per data-parallel replica
  // parallel.data_size: D replicas of the pipeline, each on its own M
  // microbatches of the step's M D (trainer.h).
  int data_size = 1;
  bool distributed_optimizer = false;  // parallel.distributed_optimizer
  // parallel.tensor_size: TP ranks per stage and replica (under mpirun only;
  // backend/layers/tensor_parallel.h).
  int tensor_size = 1;
  int microbatch_size = 1;   // B sequences per microbatch
  std::int64_t seq_len = 1;  // T
};

// scenario::Configure in the run's dtype (models::PrecisionForDtype; the
// scenario's precision describes a simulated run). `plan`, if given,
// replaces the policy's plan (Configure checks its shape and validity).
// Other errors: a byte-level vocabulary below 256 (model.vocab_size), TP
// above 1, an unknown train.dtype.
Result<TrainSetup> MakeTrainSetup(const scenario::ResolvedScenario& scenario,
                                  const schedule::Plan* plan);

struct TrainOptions {
  int steps = 10;
  std::uint64_t seed = 1;
  AdamWOptions adamw;
  std::string text_path;             // the default text when empty in the spec
  std::string dtype = "float32";     // or "float64"
  std::string device = "cpu";        // or "host-grid", "cuda" (device.h)
  // How pipeline messages between ranks move device memory: "auto" (NCCL
  // when the device is cuda and each rank on the node has a GPU of its own,
  // else the host), "nccl" (cuda only), or "host" (copied to host memory and
  // moved by MPI: two ranks on one GPU; on host devices the staging copies
  // run too, so the path is tested without a GPU). staged_comm.h.
  std::string device_link = "auto";
  int threads = 0;                   // kernel threads; 0: DefaultKernelThreads
  std::optional<std::int64_t> capacity_bytes;  // per stage; none = unlimited
  // Checkpoint key fields a resume may change (kResumeChangeable in
  // checkpoint.h: "train.learning_rate", "train.weight_decay").
  std::vector<std::string> resume_changes;
};

// Defaults for unset (zero) fields: steps 10, seed 1, learning rate 3e-3,
// weight decay 0, text kDefaultTextPath, dtype float32, threads 0 (the
// command line picks backend/threading.h's DefaultKernelThreads). Errors
// name the field (train.learning_rate must be finite and > 0, train.dtype
// unknown, ...).
Result<TrainOptions> TrainOptionsFromSpec(const pb::TrainSpec& spec);

}  // namespace stateflow::backend

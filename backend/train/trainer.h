// The trainer: runs training steps of a byte-level language model with the
// pipeline runtime, on this process's stages -- all P of them in a single
// process, or stage r on MPI rank r -- and gathers what rank 0 reports.
//
// One step k: the batch of step k (text_data.h) on every stage; each stage's
// module starts the step with loss scale 1 / (M T) (the loss is the mean over
// the step's tokens); the stage runtimes run the plan; each stage's AdamW
// updates its own parameters; the last stage's loss is broadcast to every
// rank; per-stage memory (peaks within the step, per buffer class) and busy
// time are gathered to rank 0. A non-finite loss is seen by every rank, so
// Train stops on every rank at the same step with the same error.
//
// Data parallelism (setup.data_size D > 1): D replicas of the pipeline, each
// on its own M microbatches of the step's M D (replica d takes microbatches
// d M .. d M + M - 1 of the batch of M D, so D replicas of M see the tokens
// one replica of M D sees), the loss scale 1 / (M D B T). After the plan
// each stage's gradients are summed over its replicas (ReplicaSync): summed
// whole into every replica (plain), or with the distributed optimizer each
// replica's shard (models::ShardOf of the stage's parameters laid end to
// end) summed into that replica, which updates it, and the updated shards
// broadcast back. The step's loss is the sum of the replicas' shares. In one
// process the replicas run one after another on the same thread, each with
// its own modules and allocators; under MPI each rank is one (stage,
// replica) (replica_sync.h: GridRank). Reports, timelines and memory
// statistics are replica 0's.
//
// Failure in the middle of a step on one rank (a capacity error, a lost
// peer) cannot be agreed on: the other ranks are blocked in receives.
// TrainRun says so (`on_every_rank` false); in an MPI job the caller prints
// the message and ends the job (AbortMpiJob).
//
// Not the command line and not the model: modules come from a factory.
//
//   SF_ASSIGN_OR_RETURN(auto transport, MakeSingleProcessTransport<float>(setup.stages));
//   SF_ASSIGN_OR_RETURN(auto trainer, Trainer<float>::Make(setup, options, text, factory, std::move(transport)));
//   TrainRun run = Train(*trainer, options.steps, [](const StepResult& s) { ... });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/comm/comm.h"
#include "backend/comm/group.h"
#include "backend/comm/replica_sync.h"
#include "backend/comm/tensor_group.h"
#include "backend/layers/tensor_parallel.h"
#include "backend/runtime/stage_runtime.h"
#include "backend/stage_module.h"
#include "backend/train/adamw.h"
#include "backend/train/checkpoint.h"
#include "backend/train/text_data.h"
#include "backend/train/train_setup.h"
#include "common/status.h"

namespace stateflow::backend {

// Makes model stage `stage`'s module (layers setup.stage_layers[stage]) with
// its tensors on `alloc` (without virtual stages the model stage is the
// stage; with them, schedule/plan.h, a stage's v model stages each get one,
// on the stage's allocator).
template <typename T>
using StageModuleFactory = std::function<Result<std::unique_ptr<StageModule<T>>>(
    int stage, const models::StageLayers& layers, TrackingAllocator* alloc)>;

// How the stages talk: the group of the job, this process's endpoints, one
// per local (stage, replica), replica-major (replica replicas->first_local()
// first, its stages in order), and the replicas' sync of the local stages.
template <typename T>
struct Transport {
  std::unique_ptr<Group> group;
  std::vector<std::unique_ptr<Comm<T>>> comms;
  std::unique_ptr<ReplicaSync> replicas;
  // This rank's tensor-parallel group (tensor_group.h); null: TP = 1. The
  // stage modules' TpShard points at it (the factory is given TpShard()).
  std::unique_ptr<TensorGroup> tensor;
  // This rank's place in its TP group, for the module factory: the group
  // pointer stays valid while the Trainer made from this transport lives.
  TpShard shard() const {
    return tensor ? TpShard{tensor->rank(), tensor->size(), tensor.get()} : TpShard{};
  }
};

// All P stages of all `replicas` (D) replicas in this process (solo group,
// in-process comms: one network per replica).
template <typename T>
Result<Transport<T>> MakeSingleProcessTransport(int stages, int replicas = 1);

// Tensor rank t of stage r of replica d on world rank GridRank(r, d, D, t,
// TP) = (r D + d) TP + t (tensor_group.h). Error (the same on every rank):
// the job's rank count differs from P D TP ("mpirun started 3 ranks but the
// scenario has parallel.pipeline_size 2 x data_size 2 ..."), or the tags do
// not fit MPI_TAG_UB. REQUIRES: an MpiSession is alive.
template <typename T>
Result<Transport<T>> MakeMpiTransport(int stages, int microbatches, int chunks,
                                      int replicas = 1, int tensors = 1,
                                      int virtual_stages = 1);

// One stage in one step.
struct StageStepStats {
  int stage = 0;             // (of replica 0)
  MemoryStats memory;       // peaks within the step (reset at its start)
  double busy_s = 0;        // compute time of its actions
  double peak_time_s = -1;  // from the step's start, start of the action that peaked
};

struct StepResult {
  int step = 0;
  double loss = 0;        // mean over the step's M T tokens
  double start_s = 0;     // first rank's start, on the run clock
  double time_s = 0;      // last rank's end - first rank's start (incl. optimizer);
                          // the ranks start each step after a barrier
  double tokens_per_s = 0;
  std::vector<StageStepStats> stages;  // (P), on rank 0 only
};

// One stage's whole run, for traces and comparison with the simulator.
struct StageTimeline {
  int stage = 0;
  std::vector<ActionRecord> actions;     // every step, in order
  std::vector<MemorySample> memory;      // after every action
  std::vector<double> optimizer_start_s, optimizer_end_s;  // one per step
};

template <typename T>
class Trainer {
 public:
  // Makes the allocators (capacity from options), modules, optimizers and
  // runtimes of the local stages, then agrees with every rank on success (so a
  // failure on one rank, e.g. weights over capacity, stops all of them with
  // its message), and starts the run clock after a barrier.
  static Result<std::unique_ptr<Trainer>> Make(const TrainSetup& setup,
                                               const TrainOptions& options,
                                               const TextData& text,
                                               const StageModuleFactory<T>& factory,
                                               Transport<T> transport);
  ~Trainer();

  // Step k (0-based). Collective. Errors: see the header comment.
  Result<StepResult> Step(int step);

  // Writes a checkpoint of every stage after `step` steps into `dir`
  // (checkpoint.h): each rank its stages' files, then, once every rank has,
  // rank 0 the manifest, then each rank removes its older files. Collective;
  // an error on any rank (a full disk) is returned on every rank, and
  // `*on_every_rank` (when given) says so; false when an agreement itself
  // failed on this rank alone (the watchdog: a stopped peer).
  Status SaveCheckpoint(const std::string& dir, int step, bool* on_every_rank = nullptr);
  // Loads the checkpoint in `dir` into every local stage and returns its
  // step (the next step to run). Collective; errors (a missing, corrupt or
  // mismatched checkpoint, naming the file and the field) on every rank.
  // The key fields options.resume_changes let differ are appended to
  // `changed` ("train.learning_rate 0.003 -> 0.001").
  Result<int> LoadCheckpoint(const std::string& dir, std::vector<std::string>* changed = nullptr);

  // Rank 0 gets every stage's timeline (others: empty). Collective.
  Result<std::vector<StageTimeline>> GatherTimelines();

  int rank() const { return group_->rank(); }
  int num_ranks() const { return group_->size(); }
  const TrainSetup& setup() const { return setup_; }
  // The local model stages' modules (tests read parameters): without
  // virtual stages one per local (stage, replica); with v of them, v per
  // local stage, in their rank's order (Plan::ModelStageOf(r, 0 .. v - 1)).
  StageModule<T>& module(int local);
  int num_local_stages() const { return static_cast<int>(stages_.size()); }
  // Which model stage and data-parallel replica local module `local` runs.
  int local_stage(int local) const;
  int local_replica(int local) const;
  // The memory of the stage (rank) that runs local module `local`: peaks
  // within the last step (reset at each step's start). Every rank's own,
  // whatever its replica or tensor rank.
  MemoryStats local_memory(int local) const;

 private:
  struct Endpoint;
  struct LocalStage;

  Trainer(const TrainSetup& setup, const TrainOptions& options, const TextData& text,
          Transport<T> transport);
  CheckpointKey checkpoint_key() const;
  // Which part of its stage local endpoint `local` writes and reads.
  CheckpointPart CheckpointPartOf(const LocalStage& local) const;
  Status MakeStages(const StageModuleFactory<T>& factory);
  Status BeginStep(int step);
  // The local replicas of model stage s (replica order), all D in one process.
  std::vector<LocalStage*> Replicas(int s);
  Status SyncAndUpdate(const std::vector<LocalStage*>& replicas);
  Status RunOptimizers();
  Result<double> ShareLoss();
  Result<StepResult> GatherStepStats(int step, double loss, double start_s, double end_s);

  TrainSetup setup_;
  TrainOptions options_;
  const TextData* text_;
  std::unique_ptr<Group> group_;
  std::unique_ptr<ReplicaSync> replica_sync_;
  std::unique_ptr<TensorGroup> tensor_group_;  // solo at TP = 1
  // Destroyed after stages_ (their modules' tensors are on its allocators).
  std::vector<std::unique_ptr<Endpoint>> endpoints_;  // local (stage, replica)s
  std::vector<std::unique_ptr<LocalStage>> stages_;   // local (model stage, replica)s
  RunClock clock_;
  Batch batch_;                       // the step's M D microbatches
  std::vector<Batch> replica_batches_;  // (D) each replica's M
};

// The outcome of Train: the steps that completed, and why it stopped.
struct TrainRun {
  std::vector<StepResult> steps;
  Status status;               // Ok after all steps
  bool on_every_rank = true;   // whether every rank returned this status
};

// Where a run starts and how it checkpoints.
struct TrainLoop {
  int first_step = 0;            // e.g. LoadCheckpoint's step
  std::string checkpoint_dir;    // empty: no checkpoints
  int checkpoint_every = 1;      // K >= 1: after every K-th step, and the last
};

// Runs steps loop.first_step .. steps - 1, calling `on_step` after each and
// checkpointing as `loop` says; stops at the first error (a failed
// checkpoint too) or at a non-finite loss (kResource, "step 3: loss is nan
// ...", on every rank).
template <typename T>
TrainRun Train(Trainer<T>& trainer, int steps,
               const std::function<void(const StepResult&)>& on_step,
               const TrainLoop& loop = {});

}  // namespace stateflow::backend

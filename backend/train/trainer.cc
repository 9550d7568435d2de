#include "backend/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>

#include "backend/comm/in_process_comm.h"
#include "backend/comm/mpi.h"
#include "backend/comm/staged_comm.h"
#include "backend/device/device.h"
#include "backend/device/cuda_hooks.h"

namespace stateflow::backend {
namespace {

// Per-stage step statistics as a flat record of doubles (byte counts are
// integers below 2^53, exact in a double).
constexpr int kStatsHeader = 4;  // stage, busy_s, peak_time_s, peak_total
constexpr int kStatsRecord = kStatsHeader + 3 * kNumBufferClasses;

void AppendStats(const StageStepStats& s, std::vector<double>* out) {
  out->push_back(s.stage);
  out->push_back(s.busy_s);
  out->push_back(s.peak_time_s);
  out->push_back(static_cast<double>(s.memory.peak_total_bytes));
  for (const ClassBytes* bytes :
       {&s.memory.at_total_peak_bytes, &s.memory.peak_bytes, &s.memory.live_bytes}) {
    for (std::int64_t b : *bytes) out->push_back(static_cast<double>(b));
  }
}

StageStepStats ReadStats(const double* in) {
  StageStepStats s;
  s.stage = static_cast<int>(in[0]);
  s.busy_s = in[1];
  s.peak_time_s = in[2];
  s.memory.peak_total_bytes = static_cast<std::int64_t>(in[3]);
  ClassBytes* targets[] = {&s.memory.at_total_peak_bytes, &s.memory.peak_bytes,
                           &s.memory.live_bytes};
  const double* p = in + kStatsHeader;
  for (ClassBytes* bytes : targets) {
    for (std::int64_t& b : *bytes) b = static_cast<std::int64_t>(*p++);
  }
  for (std::int64_t b : s.memory.live_bytes) s.memory.live_total_bytes += b;
  return s;
}

void AppendTimeline(const StageTimeline& t, std::vector<double>* out) {
  out->push_back(t.stage);
  out->push_back(static_cast<double>(t.actions.size()));
  for (const ActionRecord& r : t.actions) {
    out->insert(out->end(), {double(r.action.stage), static_cast<double>(r.action.pass),
                             double(r.action.microbatch), double(r.action.chunk), r.start_s,
                             r.end_s, r.wait_s});
  }
  out->push_back(static_cast<double>(t.memory.size()));
  for (const MemorySample& m : t.memory) {
    out->push_back(m.time_s);
    for (std::int64_t b : m.bytes) out->push_back(static_cast<double>(b));
  }
  out->push_back(static_cast<double>(t.optimizer_start_s.size()));
  for (std::size_t k = 0; k < t.optimizer_start_s.size(); ++k) {
    out->insert(out->end(), {t.optimizer_start_s[k], t.optimizer_end_s[k]});
  }
}

// Reads one timeline at `*p` and advances it.
StageTimeline ReadTimeline(const double*& p) {
  StageTimeline t;
  t.stage = static_cast<int>(*p++);
  const auto actions = static_cast<std::size_t>(*p++);
  for (std::size_t k = 0; k < actions; ++k, p += 7) {
    schedule::Action a{static_cast<int>(p[0]), static_cast<schedule::Pass>(static_cast<int>(p[1])),
                       static_cast<int>(p[2]), static_cast<int>(p[3])};
    t.actions.push_back(ActionRecord{a, p[4], p[5], p[6]});
  }
  const auto samples = static_cast<std::size_t>(*p++);
  for (std::size_t k = 0; k < samples; ++k) {
    MemorySample m{*p++, {}};
    for (std::int64_t& b : m.bytes) b = static_cast<std::int64_t>(*p++);
    t.memory.push_back(m);
  }
  const auto optimizer = static_cast<std::size_t>(*p++);
  for (std::size_t k = 0; k < optimizer; ++k, p += 2) {
    t.optimizer_start_s.push_back(p[0]);
    t.optimizer_end_s.push_back(p[1]);
  }
  return t;
}

}  // namespace

template <typename T>
Result<Transport<T>> MakeSingleProcessTransport(int stages, int replicas) {
  if (stages < 1) return Status::Invalid("parallel.pipeline_size must be >= 1");
  if (replicas < 1) return Status::Invalid("parallel.data_size must be >= 1");
  Transport<T> t;
  t.group = MakeSoloGroup();
  for (int d = 0; d < replicas; ++d) {
    for (std::unique_ptr<Comm<T>>& comm : MakeInProcessComms<T>(stages)) {
      t.comms.push_back(std::move(comm));
    }
  }
  t.replicas = MakeInProcessReplicaSync(replicas);
  return t;
}

template <typename T>
Result<Transport<T>> MakeMpiTransport(int stages, int microbatches, int chunks, int replicas,
                                      int tensors, int virtual_stages) {
  Transport<T> t;
  t.group = MakeMpiGroup();
  if (t.group->size() != stages * replicas * tensors) {
    std::string grid = "parallel.pipeline_size " + std::to_string(stages);
    if (tensors > 1) grid += " x tensor_size " + std::to_string(tensors);
    if (replicas > 1) grid += " x data_size " + std::to_string(replicas);
    const char* per = tensors > 1   ? "one rank per stage, replica and tensor rank"
                      : replicas > 1 ? "one rank per stage and replica"
                                     : "one rank per stage";
    grid += std::string(" (") + per + ": mpirun -n " +
            std::to_string(stages * replicas * tensors) + ")";
    return Status::Invalid("mpirun started " + std::to_string(t.group->size()) +
                           " ranks but the scenario has " + grid);
  }
  SF_ASSIGN_OR_RETURN(std::unique_ptr<Comm<T>> comm,
                      MakeMpiComm<T>(microbatches, chunks, replicas * tensors, virtual_stages));
  t.comms.push_back(std::move(comm));
  SF_ASSIGN_OR_RETURN(t.replicas, MakeMpiReplicaSync(replicas, tensors));
  if (tensors > 1) {
    SF_ASSIGN_OR_RETURN(t.tensor, MakeMpiTensorGroup(replicas, tensors));
  }
  return t;
}

// One local (stage, replica): its device memory, messages and runtime.
// Declared in this order so that destruction runs runtime and comm before
// the allocators their tensors came from (the trainer's destructor resets
// runtimes and comms first; the model stages' modules and optimizers,
// LocalStage, go before any Endpoint).
template <typename T>
struct Trainer<T>::Endpoint {
  int stage = 0;  // r, the rank in its pipeline
  int replica = 0;
  std::unique_ptr<TrackingAllocator> alloc;
  // Receive buffers posted ahead and sends in flight (stage_runtime.h).
  std::unique_ptr<TrackingAllocator> transport;
  // Host copies of messages when the device's memory goes through the host
  // (staged_comm.h); not the device's memory, so outside its peak.
  std::unique_ptr<TrackingAllocator> staging;
  std::unique_ptr<Comm<T>> comm;
  std::unique_ptr<StageRuntime<T>> runtime;
  StageTimeline timeline;
};

// One local (model stage, replica): its layers' module and their optimizer,
// on its endpoint's allocator. Without virtual stages one per endpoint.
template <typename T>
struct Trainer<T>::LocalStage {
  int stage = 0;  // s, the model stage (the stage itself without virtual stages)
  int replica = 0;
  Endpoint* endpoint = nullptr;
  std::unique_ptr<StageModule<T>> module;
  std::optional<AdamW<T>> optimizer;
};

template <typename T>
Trainer<T>::Trainer(const TrainSetup& setup, const TrainOptions& options, const TextData& text,
                    Transport<T> transport)
    : setup_(setup),
      options_(options),
      text_(&text),
      group_(std::move(transport.group)),
      replica_sync_(transport.replicas ? std::move(transport.replicas)
                                       : MakeInProcessReplicaSync(1)),
      tensor_group_(transport.tensor ? std::move(transport.tensor) : MakeSoloTensorGroup()) {
  const std::size_t per_replica =
      std::max<std::size_t>(1, transport.comms.size() / replica_sync_->local_count());
  for (std::size_t k = 0; k < transport.comms.size(); ++k) {
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->stage = transport.comms[k]->stage();
    endpoint->replica = replica_sync_->first_local() + static_cast<int>(k / per_replica);
    endpoint->comm = std::move(transport.comms[k]);
    endpoints_.push_back(std::move(endpoint));
  }
}

// In one process the comms share one network holding tensors of every
// stage's allocator: all runtimes and comms go before any allocator, and
// the modules and optimizers (stages_) before the endpoints_ that hold them.
template <typename T>
Trainer<T>::~Trainer() {
  for (std::unique_ptr<Endpoint>& e : endpoints_) e->runtime.reset();
  for (std::unique_ptr<Endpoint>& e : endpoints_) e->comm.reset();
  stages_.clear();
}

template <typename T>
Result<std::unique_ptr<Trainer<T>>> Trainer<T>::Make(const TrainSetup& setup,
                                                     const TrainOptions& options,
                                                     const TextData& text,
                                                     const StageModuleFactory<T>& factory,
                                                     Transport<T> transport) {
  std::unique_ptr<Trainer> trainer(new Trainer(setup, options, text, std::move(transport)));
  Status made = trainer->MakeStages(factory);
  if (made.ok()) {
    made = text.MakeBatch(options.seed, 0, setup.microbatches * setup.data_size,
                          setup.seq_len, setup.microbatch_size).status();
  }
  SF_RETURN_IF_ERROR(trainer->group_->Agree(made));
  SF_RETURN_IF_ERROR(trainer->group_->Barrier());
  trainer->clock_.Restart();
  return trainer;
}

template <typename T>
StageModule<T>& Trainer<T>::module(int local) {
  return *stages_[local]->module;
}

template <typename T>
int Trainer<T>::local_stage(int local) const {
  return stages_[local]->stage;
}

template <typename T>
MemoryStats Trainer<T>::local_memory(int local) const {
  return stages_.at(static_cast<std::size_t>(local))->endpoint->alloc->Stats();
}

template <typename T>
int Trainer<T>::local_replica(int local) const {
  return stages_[local]->replica;
}

namespace {

// This rank's index among the ranks on its node (Open MPI and Slurm say it
// in the environment); the stage number when nothing does.
int LocalRank(int stage) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return stage;
}

// The ranks on this node (Open MPI and Slurm say it); 1 when nothing does.
int LocalSize() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE",
                           "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(name)) return std::max(1, std::atoi(v));
  }
  return 1;
}

// Whether pipeline messages go over NCCL (TrainOptions::device_link).
Result<bool> UseNccl(Device& device, int ranks, const std::string& link) {
  const bool cuda = device.kind() == DeviceKind::kCuda;
  if (link == "host") return false;
  if (link == "nccl" && !cuda) {
    return Status::Invalid("--device-link nccl: NCCL moves GPU memory; the " +
                           std::string(DeviceKindName(device.kind())) +
                           " device's ranks use MPI (--device-link auto or host)");
  }
  if (!cuda || ranks <= 1) return false;
  const int gpus = CudaHooks().visible_devices != nullptr ? CudaHooks().visible_devices() : 0;
  const int local = LocalSize();
  if (local > gpus) {
    if (link == "nccl") {
      return Status::Invalid("--device-link nccl: " + std::to_string(local) +
                             " ranks on this node share " + std::to_string(gpus) +
                             " GPUs, and NCCL needs a GPU per rank (--device-link host moves "
                             "the messages through host memory)");
    }
    return false;  // auto: the ranks share GPUs
  }
  return true;
}

}  // namespace

template <typename T>
Status Trainer<T>::MakeStages(const StageModuleFactory<T>& factory) {
  const int P = setup_.stages, D = setup_.data_size;
  const int v = setup_.plan.virtual_stages(), S = setup_.plan.model_stages();
  if (replica_sync_->replicas() != D ||
      static_cast<int>(endpoints_.size()) !=
          replica_sync_->local_count() * (group_->size() == 1 ? P : 1)) {
    return Status::Internal("a transport of " + std::to_string(endpoints_.size()) +
                            " endpoints and " + std::to_string(replica_sync_->replicas()) +
                            " replicas for " + std::to_string(P) + " stages x " +
                            std::to_string(D) + " replicas");
  }
  if (static_cast<int>(setup_.stage_layers.size()) != S) {
    return Status::Internal("the setup has the layers of " +
                            std::to_string(setup_.stage_layers.size()) +
                            " model stages, the plan " + std::to_string(S));
  }
  for (std::unique_ptr<Endpoint>& local : endpoints_) {
    const int r = local->stage;
    if (r < 0 || r >= P || local->comm->stages() != P) {
      return Status::Internal("stage " + std::to_string(r) + " of a transport with " +
                              std::to_string(local->comm->stages()) + " stages, plan has " +
                              std::to_string(P));
    }
    SF_ASSIGN_OR_RETURN(Device * device, GetDevice(options_.device, LocalRank(r)));
    if (device->kind() == DeviceKind::kCuda && D > 1) {
      return Status::Invalid("parallel.data_size " + std::to_string(D) +
                             " on the cuda device: the replicas' gradient sync runs on host "
                             "memory (cpu, host-grid); NCCL's is not built yet");
    }
    if (device->kind() == DeviceKind::kCuda && v > 1) {
      return Status::Invalid("schedule.virtual_stages " + std::to_string(v) +
                             " on the cuda device: virtual stages run on the cpu and host-grid "
                             "devices; not yet on cuda (its NCCL links order messages by "
                             "neighbour)");
    }
    if constexpr (std::is_same_v<T, bf16>) {
      if (!device->has_bf16()) {
        return Status::Invalid("train.dtype: bf16 runs on the grid devices (--device host-grid "
                               "or cuda); the " + options_.device +
                               " device's kernels are float32 and float64");
      }
    }
    local->alloc = std::make_unique<TrackingAllocator>(r, options_.capacity_bytes, device);
    local->transport = std::make_unique<TrackingAllocator>(r, std::nullopt, device);
    SF_ASSIGN_OR_RETURN(const bool nccl, UseNccl(*device, group_->size(), options_.device_link));
    if (!nccl && group_->size() > 1 &&
        (device->kind() == DeviceKind::kCuda || options_.device_link == "host")) {
      local->staging = std::make_unique<TrackingAllocator>(r, std::nullopt, &CpuDevice());
      local->comm = MakeHostStagedComm<T>(std::move(local->comm), device->memory(),
                                          local->staging.get());
    }
    if (nccl) {
      // GPU memory is not MPI's to move here: the MPI comm made with the
      // transport gives way to NCCL on the same ranks.
      NcclCommFactory<T> make_nccl;
      if constexpr (std::is_same_v<T, float>) {
        make_nccl = CudaHooks().make_nccl_comm_f32;
      } else if constexpr (std::is_same_v<T, double>) {
        make_nccl = CudaHooks().make_nccl_comm_f64;
      } else {
        make_nccl = CudaHooks().make_nccl_comm_bf16;
      }
      if (make_nccl == nullptr) return Status::Internal("a CUDA device without the NCCL comm");
      const std::int64_t rows_per_token = setup_.microbatch_size, C = setup_.model.hidden_size();
      const schedule::Partition* partition = &setup_.partition;
      SF_ASSIGN_OR_RETURN(
          local->comm,
          make_nccl(setup_.plan, r, *device, local->transport.get(),
                    [partition, rows_per_token, C](const MessageKey& key) {
                      return rows_per_token * partition->length(key.chunk) * C;
                    }));
    }
    // The stage's model stages (one without virtual stages), each its module
    // and optimizer on the stage's allocator.
    std::vector<StageModule<T>*> modules;
    for (int k = 0; k < v; ++k) {
      const int s = setup_.plan.ModelStageOf(r, k);
      auto part = std::make_unique<LocalStage>();
      part->stage = s;
      part->replica = local->replica;
      part->endpoint = local.get();
      SF_ASSIGN_OR_RETURN(part->module,
                          factory(s, setup_.stage_layers[static_cast<std::size_t>(s)],
                                  local->alloc.get()));
      if (part->module->is_first() != (s == 0) || part->module->is_last() != (s == S - 1)) {
        return Status::Internal((v > 1 ? "model stage " : "stage ") + std::to_string(s) +
                                ": the module's first/last flags do not match its place");
      }
      std::vector<ParamRef<T>> params = part->module->Parameters();
      ParamRange range;  // whole
      if (setup_.distributed_optimizer && D > 1) {
        std::int64_t total = 0;
        for (const ParamRef<T>& p : params) total += p.value->numel();
        const models::Shard shard = models::ShardOf(total, D, local->replica);
        range = ParamRange{shard.begin, shard.count};
      }
      SF_ASSIGN_OR_RETURN(AdamW<T> opt, AdamW<T>::Make(std::move(params), *local->alloc,
                                                       options_.adamw, range));
      part->optimizer.emplace(std::move(opt));
      modules.push_back(part->module.get());
      stages_.push_back(std::move(part));
    }
    local->runtime = std::make_unique<StageRuntime<T>>(
        &setup_.plan, r, &setup_.partition, std::move(modules), local->comm.get(),
        local->alloc.get(), &clock_, local->transport.get());
    local->timeline.stage = r;
  }
  return Status::Ok();
}

template <typename T>
Status Trainer<T>::BeginStep(int step) {
  const int M = setup_.microbatches, D = setup_.data_size;
  SF_ASSIGN_OR_RETURN(batch_, text_->MakeBatch(options_.seed, step, M * D, setup_.seq_len,
                                                setup_.microbatch_size));
  // Replica d's microbatches d M .. d M + M - 1.
  const std::size_t per_replica = batch_.tokens.size() / static_cast<std::size_t>(D);
  replica_batches_.assign(static_cast<std::size_t>(D), Batch{});
  for (int d = 0; d < D; ++d) {
    Batch& b = replica_batches_[static_cast<std::size_t>(d)];
    b.microbatches = M;
    b.microbatch_size = batch_.microbatch_size;
    b.seq_len = batch_.seq_len;
    b.tokens.assign(batch_.tokens.begin() + static_cast<std::ptrdiff_t>(d * per_replica),
                    batch_.tokens.begin() + static_cast<std::ptrdiff_t>((d + 1) * per_replica));
  }
  const double loss_scale = 1.0 / (static_cast<double>(M) * D * setup_.microbatch_size *
                                   setup_.seq_len);
  for (std::unique_ptr<LocalStage>& local : stages_) {
    local->module->ZeroGrads();
    SF_RETURN_IF_ERROR(local->module->BeginStep(
        &replica_batches_[static_cast<std::size_t>(local->replica)], &setup_.partition,
        loss_scale));
  }
  for (std::unique_ptr<Endpoint>& e : endpoints_) {
    e->alloc->ResetPeaks();
    e->runtime->BeginStep();
  }
  return Status::Ok();
}

template <typename T>
std::vector<typename Trainer<T>::LocalStage*> Trainer<T>::Replicas(int s) {
  std::vector<LocalStage*> out;
  for (std::unique_ptr<LocalStage>& local : stages_) {
    if (local->stage == s) out.push_back(local.get());  // replica-major: in replica order
  }
  return out;
}

// Calls fn(k, offset, count, owner) for every piece of parameter k that lies
// in replica `owner`'s shard (models::ShardOf of the parameters laid end to
// end), in parameter then replica order: the same calls on every replica.
template <typename T, typename Fn>
Status ForEachShardPiece(const std::vector<ParamRef<T>>& params, int replicas, Fn fn) {
  std::int64_t total = 0;
  for (const ParamRef<T>& p : params) total += p.value->numel();
  std::int64_t at = 0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const std::int64_t n = params[k].value->numel();
    for (int e = 0; e < replicas; ++e) {
      const models::Shard shard = models::ShardOf(total, replicas, e);
      const std::int64_t lo = std::max(at, shard.begin);
      const std::int64_t hi = std::min(at + n, shard.begin + shard.count);
      if (lo < hi) SF_RETURN_IF_ERROR(fn(k, lo - at, hi - lo, e));
    }
    at += n;
  }
  return Status::Ok();
}

template <typename T>
Status Trainer<T>::SyncAndUpdate(const std::vector<LocalStage*>& replicas) {
  const int D = setup_.data_size;
  const std::vector<ParamRef<T>>& params = replicas.front()->optimizer->params();
  // Tensor parallelism: the whole parameters' partial gradients summed over
  // the TP group first (each rank's heads' share; tensor_parallel.h).
  if (tensor_group_->size() > 1) {
    for (LocalStage* r : replicas) {
      for (ParamRef<T>& p : r->module->Parameters()) {
        if (!p.tp_partial_grad) continue;
        if constexpr (std::is_same_v<GradOf<T>, float> || std::is_same_v<GradOf<T>, double>) {
          SF_RETURN_IF_ERROR(tensor_group_->AllReduceSum(p.grad->data(), p.grad->numel()));
        }
      }
    }
  }
  // The k-th parameter's gradient (value) of each local replica, from `offset`.
  auto grads = [&](std::size_t k, std::int64_t offset) {
    std::vector<GradOf<T>*> out;
    for (LocalStage* r : replicas) out.push_back(r->optimizer->params()[k].grad->data() + offset);
    return out;
  };
  if (D > 1 && !setup_.distributed_optimizer) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      SF_RETURN_IF_ERROR(replica_sync_->AllReduceSum(grads(k, 0), params[k].value->numel()));
    }
  } else if (D > 1) {  // reduce-scatter, piece by piece
    SF_RETURN_IF_ERROR(ForEachShardPiece(
        params, D, [&](std::size_t k, std::int64_t offset, std::int64_t count, int owner) {
          return replica_sync_->ReduceSum(grads(k, offset), count, owner);
        }));
  }
  for (LocalStage* r : replicas) r->optimizer->Step();
  if (D > 1 && setup_.distributed_optimizer) {  // all-gather, piece by piece
    SF_RETURN_IF_ERROR(ForEachShardPiece(
        params, D, [&](std::size_t k, std::int64_t offset, std::int64_t count, int owner) {
          std::vector<void*> values;
          for (LocalStage* r : replicas) {
            values.push_back(r->optimizer->params()[k].value->data() + offset);
          }
          return replica_sync_->Broadcast(values, count * static_cast<std::int64_t>(sizeof(T)),
                                          owner);
        }));
  }
  return Status::Ok();
}

template <typename T>
Status Trainer<T>::RunOptimizers() {
  for (int r = 0; r < setup_.stages; ++r) {
    std::vector<Endpoint*> endpoints;  // stage r's local replicas, in replica order
    for (std::unique_ptr<Endpoint>& e : endpoints_) {
      if (e->stage == r) endpoints.push_back(e.get());
    }
    if (endpoints.empty()) continue;
    std::vector<std::int64_t> peaks_before;
    for (Endpoint* e : endpoints) peaks_before.push_back(e->alloc->PeakTotalBytes());
    const double start = clock_.Now();
    for (int k = 0; k < setup_.plan.virtual_stages(); ++k) {  // each model stage's own
      SF_RETURN_IF_ERROR(SyncAndUpdate(Replicas(setup_.plan.ModelStageOf(r, k))));
    }
    for (Endpoint* e : endpoints) {
      SF_RETURN_IF_ERROR(e->alloc->device().Synchronize());  // a GPU's update, done
    }
    const double end = clock_.Now();
    for (std::size_t k = 0; k < endpoints.size(); ++k) {
      Endpoint* e = endpoints[k];
      e->timeline.optimizer_start_s.push_back(start);
      e->timeline.optimizer_end_s.push_back(end);
      if (e->alloc->PeakTotalBytes() != peaks_before[k]) {
        return Status::Internal("stage " + std::to_string(e->stage) +
                                ": the optimizer step allocated memory");
      }
    }
  }
  return Status::Ok();
}

template <typename T>
Result<double> Trainer<T>::ShareLoss() {
  const int last = setup_.plan.model_stages() - 1;
  // Each replica's last stage holds its share of the mean, summed in
  // replica order in one process; every other stage passes 0.
  // Under TP every tensor rank of the last stage holds the same loss: rank 0's.
  double loss = 0;
  for (const std::unique_ptr<LocalStage>& local : stages_) {
    if (local->stage == last && tensor_group_->rank() == 0) loss += local->module->loss();
  }
  return group_->Sum(loss);
}

template <typename T>
Result<StepResult> Trainer<T>::Step(int step) {
  // Every rank starts the step together, as the simulator's step does: without
  // the barrier a later stage would begin step k + 1 (and its clock) while the
  // first stage still runs step k's last backward, and the time from the
  // first rank's start to the last rank's end would count that overlap twice.
  SF_RETURN_IF_ERROR(group_->Barrier());
  const double start = clock_.Now();
  SF_RETURN_IF_ERROR(BeginStep(step));
  if (group_->size() == 1) {
    for (int d = 0; d < setup_.data_size; ++d) {  // one replica after another
      std::vector<StageRuntime<T>*> runtimes;
      for (std::unique_ptr<Endpoint>& e : endpoints_) {
        if (e->replica == d) runtimes.push_back(e->runtime.get());
      }
      SF_RETURN_IF_ERROR(RunStepInProcess(runtimes));
    }
  } else {
    SF_RETURN_IF_ERROR(RunStepAlone(*endpoints_.front()->runtime));
  }
  SF_RETURN_IF_ERROR(RunOptimizers());
  SF_ASSIGN_OR_RETURN(double loss, ShareLoss());
  const double end = clock_.Now();
  for (std::unique_ptr<Endpoint>& local : endpoints_) {
    StageTimeline& t = local->timeline;
    t.actions.insert(t.actions.end(), local->runtime->records().begin(),
                     local->runtime->records().end());
    t.memory.insert(t.memory.end(), local->runtime->memory().begin(),
                    local->runtime->memory().end());
  }
  return GatherStepStats(step, loss, start, end);
}

template <typename T>
Result<StepResult> Trainer<T>::GatherStepStats(int step, double loss, double start_s,
                                               double end_s) {
  std::vector<double> local = {start_s, end_s};
  for (const std::unique_ptr<Endpoint>& s : endpoints_) {
    if (s->replica != 0 || tensor_group_->rank() != 0) continue;  // replica 0, tensor rank 0 report
    const double peak = s->runtime->peak_time_s();
    AppendStats(StageStepStats{s->stage, s->alloc->Stats(), s->runtime->busy_s(),
                               peak < 0 ? -1.0 : peak - start_s},
                &local);
  }
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<double>> all, group_->GatherToRoot(local));
  StepResult result;
  result.step = step;
  result.loss = loss;
  if (all.empty()) return result;  // not rank 0
  double first = all[0][0], last = all[0][1];
  for (const std::vector<double>& rank : all) {
    first = std::min(first, rank[0]);
    last = std::max(last, rank[1]);
    for (std::size_t k = 2; k + kStatsRecord <= rank.size(); k += kStatsRecord) {
      result.stages.push_back(ReadStats(rank.data() + k));
    }
  }
  std::sort(result.stages.begin(), result.stages.end(),
            [](const StageStepStats& a, const StageStepStats& b) { return a.stage < b.stage; });
  result.start_s = first;
  result.time_s = last - first;
  const double tokens = static_cast<double>(setup_.microbatches) * setup_.data_size *
                        setup_.microbatch_size * setup_.seq_len;
  result.tokens_per_s = result.time_s > 0 ? tokens / result.time_s : 0;
  return result;
}

template <typename T>
CheckpointKey Trainer<T>::checkpoint_key() const {
  CheckpointKey key = MakeCheckpointKey(setup_, options_, *text_, DtypeName<T>());
  key.may_differ = options_.resume_changes;
  return key;
}

template <typename T>
Status Trainer<T>::SaveCheckpoint(const std::string& dir, int step, bool* on_every_rank) {
  const CheckpointKey key = checkpoint_key();
  Status written = Status::Ok();
  for (std::unique_ptr<LocalStage>& local : stages_) {
    if (!written.ok()) break;
    // The replicas are equal but for a distributed optimizer's shards:
    // replica 0 writes, or every replica its shard.
    if (local->replica != 0 && !local->optimizer->sharded()) continue;
    written = WriteStageCheckpoint<T>(dir, key, local->stage, setup_.stage_layers[local->stage],
                                      step, *local->optimizer, CheckpointPartOf(*local));
  }
  if (on_every_rank != nullptr) *on_every_rank = false;  // until agreed
  SF_ASSIGN_OR_RETURN(Group::Agreement stages, group_->AgreeOrFail(written));
  if (on_every_rank != nullptr) *on_every_rank = true;
  SF_RETURN_IF_ERROR(stages.status);
  if (on_every_rank != nullptr) *on_every_rank = false;
  SF_ASSIGN_OR_RETURN(Group::Agreement manifest,
                      group_->AgreeOrFail(rank() == 0 ? WriteCheckpointManifest(dir, key, step)
                                                      : Status::Ok()));
  if (on_every_rank != nullptr) *on_every_rank = true;
  SF_RETURN_IF_ERROR(manifest.status);
  for (std::unique_ptr<LocalStage>& local : stages_) {
    if (local->replica == 0 || local->optimizer->sharded()) {
      RemoveStaleStageCheckpoints(dir, local->stage, step, CheckpointPartOf(*local));
    }
  }
  return Status::Ok();
}

template <typename T>
Result<int> Trainer<T>::LoadCheckpoint(const std::string& dir, std::vector<std::string>* changed) {
  const CheckpointKey key = checkpoint_key();
  Result<int> step = ReadCheckpointManifest(dir, key, changed);
  Status loaded = step.status();
  for (std::unique_ptr<LocalStage>& local : stages_) {
    if (!loaded.ok()) break;
    loaded = ReadStageCheckpoint<T>(dir, key, local->stage, setup_.stage_layers[local->stage],
                                    *step, &*local->optimizer, CheckpointPartOf(*local));
  }
  SF_RETURN_IF_ERROR(group_->Agree(loaded));
  return *step;
}

template <typename T>
CheckpointPart Trainer<T>::CheckpointPartOf(const LocalStage& local) const {
  CheckpointPart part;
  if (tensor_group_->size() > 1) part.tensor_rank = tensor_group_->rank();
  if (local.optimizer->sharded()) part.shard = local.replica;
  return part;
}

template <typename T>
Result<std::vector<StageTimeline>> Trainer<T>::GatherTimelines() {
  std::vector<double> local = {0};
  for (const std::unique_ptr<Endpoint>& s : endpoints_) {
    if (s->replica != 0 || tensor_group_->rank() != 0) continue;  // replica 0, tensor rank 0
    AppendTimeline(s->timeline, &local);
    ++local[0];
  }
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<double>> all, group_->GatherToRoot(local));
  std::vector<StageTimeline> out;
  for (const std::vector<double>& rank : all) {
    const double* p = rank.data();
    const auto count = static_cast<int>(*p++);
    for (int k = 0; k < count; ++k) out.push_back(ReadTimeline(p));
  }
  std::sort(out.begin(), out.end(),
            [](const StageTimeline& a, const StageTimeline& b) { return a.stage < b.stage; });
  return out;
}

template <typename T>
TrainRun Train(Trainer<T>& trainer, int steps,
               const std::function<void(const StepResult&)>& on_step, const TrainLoop& loop) {
  TrainRun run;
  for (int k = loop.first_step; k < steps; ++k) {
    Result<StepResult> step = trainer.Step(k);
    if (!step.ok()) {
      run.status = step.status();
      run.on_every_rank = trainer.num_ranks() == 1;
      return run;
    }
    run.steps.push_back(*step);
    if (on_step) on_step(*step);
    if (!std::isfinite(step->loss)) {
      run.status = Status::Resource("step " + std::to_string(k) + ": the loss is " +
                                    std::to_string(step->loss) +
                                    " (not finite); training stopped on every stage");
      return run;
    }
    const int done = k + 1;
    if (!loop.checkpoint_dir.empty() &&
        (done % std::max(1, loop.checkpoint_every) == 0 || done == steps)) {
      bool agreed = false;
      if (Status saved = trainer.SaveCheckpoint(loop.checkpoint_dir, done, &agreed);
          !saved.ok()) {
        run.status = saved.WithPrefix("step " + std::to_string(k) + ": checkpoint");
        // A write failure (a full disk) is agreed by every rank: each returns
        // it and rank 0 alone prints it (before issue 31 every rank printed
        // it and ended the job through MPI_Abort, with Open MPI's lines
        // after it). The agreement itself can fail on one rank alone (the
        // watchdog, a stopped peer): that rank must end the job, or it
        // waits for the stopped peer in MPI_Finalize forever (found by
        // scripts/fault-drills.sh).
        run.on_every_rank = trainer.num_ranks() == 1 || agreed;
        return run;
      }
    }
  }
  return run;
}

template class Trainer<float>;
template class Trainer<double>;
template Result<Transport<float>> MakeSingleProcessTransport<float>(int, int);
template Result<Transport<double>> MakeSingleProcessTransport<double>(int, int);
template Result<Transport<float>> MakeMpiTransport<float>(int, int, int, int, int, int);
template Result<Transport<double>> MakeMpiTransport<double>(int, int, int, int, int, int);
template TrainRun Train<float>(Trainer<float>&, int,
                               const std::function<void(const StepResult&)>&, const TrainLoop&);
template TrainRun Train<double>(Trainer<double>&, int,
                                const std::function<void(const StepResult&)>&,
                                const TrainLoop&);
template class Trainer<bf16>;
template Result<Transport<bf16>> MakeSingleProcessTransport<bf16>(int, int);
template Result<Transport<bf16>> MakeMpiTransport<bf16>(int, int, int, int, int, int);
template TrainRun Train<bf16>(Trainer<bf16>&, int,
                                const std::function<void(const StepResult&)>&,
                                const TrainLoop&);

}  // namespace stateflow::backend

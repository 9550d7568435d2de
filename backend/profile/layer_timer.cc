#include "backend/profile/layer_timer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/allocator.h"
#include "backend/layers/gdn_layer.h"
#include "backend/layers/mamba3_layer.h"
#include "backend/model/model_stage_module.h"
#include "backend/train/adamw.h"

namespace stateflow::backend {
namespace {

// Parameters are seeded from this; their values do not change the time.
constexpr std::uint64_t kSeed = 1;
constexpr int kChunks = 3;  // the middle one is timed

Status CheckOptions(std::int64_t tokens, const TimingOptions& options) {
  if (tokens < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  if (options.repetitions < 1) return Status::Invalid("--repetitions must be >= 1");
  if (options.warmup < 0) return Status::Invalid("--warmup must be >= 0");
  return Status::Ok();
}

// Deterministic values in [lo, hi], never denormal (a denormal input would
// slow the kernels down and time something no run does).
template <typename T>
void FillRange(Tensor<T>* t, std::uint64_t seed, double lo, double hi) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<T> host(static_cast<std::size_t>(t->numel()));
  for (std::int64_t e = 0; e < t->numel(); ++e) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    const double u = static_cast<double>((x * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
    host[static_cast<std::size_t>(e)] = static_cast<T>(lo + (hi - lo) * u);
  }
  t->FromHost(host);
}
// Values in [-scale, scale].
template <typename T>
void FillPattern(Tensor<T>* t, std::uint64_t seed, double scale) {
  FillRange(t, seed, -scale, scale);
}

// One microbatch of B sequences of seq_len byte tokens (inputs and targets).
Batch MakeBatch(std::int64_t seq_len, std::int64_t vocab, int B) {
  Batch batch;
  batch.microbatches = 1;
  batch.microbatch_size = B;
  batch.seq_len = seq_len;
  batch.tokens.resize(static_cast<std::size_t>(B) * static_cast<std::size_t>(seq_len + 1));
  for (std::size_t k = 0; k < batch.tokens.size(); ++k) {
    batch.tokens[k] = static_cast<std::int32_t>((k * 2654435761u >> 7) % vocab);
  }
  return batch;
}

// The (B s_i, C) inputs of each chunk for a module that takes them (else
// empty).
template <typename T>
Result<std::vector<Tensor<T>>> ChunkInputs(TrackingAllocator& alloc, bool needed,
                                           const schedule::Partition& partition, int B,
                                           std::int64_t hidden, double scale, std::uint64_t seed) {
  std::vector<Tensor<T>> inputs;
  if (!needed) return inputs;
  for (int i = 0; i < partition.num_chunks(); ++i) {
    SF_ASSIGN_OR_RETURN(Tensor<T> t,
                        Tensor<T>::Uninitialized(alloc, BufferClass::kWorkspace,
                                                 {B * partition.length(i), hidden}));
    FillPattern(&t, seed + i, scale);
    inputs.push_back(std::move(t));
  }
  return inputs;
}

// One repetition; chunk `timed`'s forward and backward seconds.
template <typename T>
Status RunRepetition(Device& device, StageModule<T>& module, const Batch& batch,
                     const schedule::Partition& partition, int timed, std::vector<Tensor<T>>& xs,
                     std::vector<Tensor<T>>& dys, double* forward_s, double* backward_s) {
  auto input = [](std::vector<Tensor<T>>& v, int i) { return v.empty() ? nullptr : &v[i]; };
  const int N = partition.num_chunks();
  module.ZeroGrads();
  SF_RETURN_IF_ERROR(module.BeginStep(
      &batch, &partition, 1.0 / (static_cast<double>(batch.seq_len) * batch.microbatch_size)));
  for (int i = 0; i < N; ++i) {
    SF_RETURN_IF_ERROR(device.TimerStart());
    Result<Tensor<T>> y = module.Forward(0, i, input(xs, i));
    if (!y.ok()) return y.status();
    SF_ASSIGN_OR_RETURN(const double seconds, device.TimerStop());
    if (i == timed) *forward_s = seconds;
  }
  for (int i = N - 1; i >= 0; --i) {
    SF_RETURN_IF_ERROR(device.TimerStart());
    Result<Tensor<T>> dx = module.Backward(0, i, input(dys, i));
    if (!dx.ok()) return dx.status();
    SF_ASSIGN_OR_RETURN(const double seconds, device.TimerStop());
    if (i == timed) *backward_s = seconds;
  }
  return Status::Ok();
}

// The shapes of a recurrence layer's core (gdn_core.h, mamba3_core.h):
// Dk = the key (GDN) or state (Mamba-3, d_state) dim, Dv the value or SSM
// head dim.
struct CoreDims {
  bool mamba3 = false;
  std::int64_t H = 0, Dk = 0, Dv = 0, block_size = 0;
  std::int64_t st_tile = 0;  // B_V (schedule.st_tile), the layer's
  std::int64_t HK() const { return H * Dk; }
  std::int64_t HV() const { return H * Dv; }
  std::int64_t state() const { return H * Dv * Dk; }
};

// The core of a recurrence layer of `model` (a GDN or Mamba-3 architecture;
// a hybrid's recurrence layers are its architecture's), or nothing.
std::optional<CoreDims> RecurrenceCore(const pb::ModelSpec& model, models::LayerKind kind) {
  if (kind != models::LayerKind::kRecurrence) return std::nullopt;
  if (model.architecture() == "gdn") {
    const GdnLayerDims d = GdnLayerDims::FromModel(model);
    return CoreDims{false, d.H, d.K, d.Dv, d.block_size};
  }
  if (model.architecture() == "mamba3") {
    const Mamba3LayerDims d = Mamba3LayerDims::FromModel(model);
    return CoreDims{true, d.H, d.Ds, d.Dp, d.block_size};
  }
  return std::nullopt;
}

}  // namespace

Result<models::StageLayers> OneLayerOf(const pb::ModelSpec& model, models::LayerKind kind) {
  const std::vector<models::LayerKind> layers = models::LayerList(model);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (layers[l] == kind) return models::StageLayers{static_cast<int>(l), static_cast<int>(l) + 1};
  }
  return Status::Invalid("model " + model.name() + " has no " +
                         std::string(models::LayerKindName(kind)) + " layer");
}

template <typename T>
struct LayerTimer<T>::State {
  // Declared first: the module's tensors come from it. Capped at the
  // machine's memory, so that a chunk too long to profile here is an error.
  explicit State(Device* device) : alloc(0, PhysicalMemoryBytes(), device) {}
  TrackingAllocator alloc;
  std::unique_ptr<StageModule<T>> module;
  std::int64_t vocab = 0;
  models::LayerKind kind = models::LayerKind::kRecurrence;
  bool phases = false;   // a GDN or Mamba-3 recurrence layer: TimePhasesOnce applies
  CoreDims dims;         // its core's shapes (phases only)
  std::string architecture;
};

template <typename T>
Result<std::unique_ptr<LayerTimer<T>>> LayerTimer<T>::Make(const pb::ModelSpec& model,
                                                           models::LayerKind kind,
                                                           models::Recompute recompute,
                                                           int microbatch_size,
                                                           Device* device,
                                                           bool st_overlap,
                                                           std::int64_t st_tile) {
  SF_ASSIGN_OR_RETURN(models::StageLayers layers, OneLayerOf(model, kind));
  std::unique_ptr<LayerTimer> timer(new LayerTimer());
  timer->state_ = std::make_unique<State>(device);
  SF_ASSIGN_OR_RETURN(timer->state_->module,
                      MakeStageModule<T>(model, layers,
                                         {.recompute = recompute,
                                          .seed = kSeed,
                                          .microbatch_size = microbatch_size,
                                          .st_overlap = st_overlap,
                                          .st_tile = st_tile},
                                         &timer->state_->alloc));
  timer->state_->vocab = model.vocab_size();
  timer->state_->kind = kind;
  timer->state_->architecture = model.architecture();
  const std::optional<CoreDims> core = RecurrenceCore(model, kind);
  timer->state_->phases = core.has_value();
  if (core) {
    timer->state_->dims = *core;
    timer->state_->dims.st_tile = st_tile;
  }
  return timer;
}

template <typename T>
LayerTimer<T>::~LayerTimer() {
  if (state_) state_->module.reset();  // before the allocator
}

template <typename T>
Result<std::pair<double, double>> LayerTimer<T>::TimeOnce(std::int64_t tokens,
                                                          std::int64_t prefix) {
  if (tokens < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  if (prefix < 0) return Status::Invalid("profile: a chunk's prefix must be >= 0 tokens");
  StageModule<T>& module = *state_->module;
  const int B = module.microbatch_size();
  const std::int64_t s = tokens, C = module.hidden_size();
  // Attention: [prefix | timed chunk | one token], or [timed | one token]
  // without a prefix, so that the timed chunk attends to `prefix` earlier
  // tokens and later chunks exist. Other kinds: the middle of three chunks of
  // s (a boundary state in and out).
  const bool attention = state_->kind == models::LayerKind::kAttention;
  std::vector<std::int64_t> bounds = {0, s, 2 * s, kChunks * s};
  int timed = 1;
  if (attention) {
    bounds = prefix > 0 ? std::vector<std::int64_t>{0, prefix, prefix + s, prefix + s + 1}
                        : std::vector<std::int64_t>{0, s, s + 1};
    timed = prefix > 0 ? 1 : 0;
  }
  const double total_tokens = static_cast<double>(bounds.back()) * B;
  // The token ids and the inputs and output gradients alone, in double (no
  // overflow): a chunk beyond the machine's memory is refused up front.
  const double needed_bytes =
      total_tokens * (sizeof(std::int32_t) + 2.0 * static_cast<double>(C) * sizeof(T));
  if (needed_bytes > static_cast<double>(PhysicalMemoryBytes())) {
    return Status::Invalid("a chunk of " + std::to_string(s) + " tokens needs over " +
                           FormatBytes(static_cast<std::int64_t>(
                               std::min(needed_bytes, 9.0e18))) +
                           ", more than this machine's memory (" +
                           FormatBytes(PhysicalMemoryBytes()) +
                           "); profile shorter chunks (lower -T or raise -N)");
  }
  const schedule::Partition partition(bounds);
  const Batch batch = MakeBatch(bounds.back(), state_->vocab, B);
  SF_ASSIGN_OR_RETURN(std::vector<Tensor<T>> xs,
                      ChunkInputs<T>(state_->alloc, !module.is_first(), partition, B, C, 1.0, 11));
  // Output gradients of the size a mean loss over the chunk's tokens gives.
  SF_ASSIGN_OR_RETURN(std::vector<Tensor<T>> dys,
                      ChunkInputs<T>(state_->alloc, !module.is_last(), partition, B, C,
                                     1.0 / (static_cast<double>(s) * B), 23));
  std::pair<double, double> seconds;
  SF_RETURN_IF_ERROR(RunRepetition(state_->alloc.device(), module, batch, partition, timed, xs, dys, &seconds.first,
                                   &seconds.second));
  return seconds;
}

template <typename T>
bool LayerTimer<T>::has_phases() const {
  return state_->phases;
}

namespace {

// The core's inputs, outputs and phase workspaces for B sequences of s
// tokens (shapes as the layers': gdn_layer.cc, mamba3_layer.cc), all
// kWorkspace. GDN's decay g is `a`, its dg `da`; the carries and gamma are
// Mamba-3's only (empty for GDN).
// States, their gradients and the phase workspaces are StatOf<T> (float in
// bf16, precision.h), the rest T.
template <typename T>
struct CoreBuffers {
  Tensor<T> q, k, v, a, gamma, beta, k_in, v_in;  // inputs
  Tensor<T> dO, dk_out, dv_out;                   // inputs of the backward
  Tensor<T> o, k_out, v_out;                      // outputs of the forward
  Tensor<T> dq, dk, dv, da, dgamma, dbeta, dk_in, dv_in;  // of the backward
  Tensor<StatOf<T>> S_in, dS_out, S_out, dS_in;   // states and their gradients
  Tensor<StatOf<T>> fws, bws;  // (B, phase workspace) forward, backward
  std::int64_t fws_n = 0, bws_n = 0;  // elements per sequence
};

template <typename T>
Status AllocateCoreBuffers(TrackingAllocator& alloc, const CoreDims& d, std::int64_t B,
                           std::int64_t s, CoreBuffers<T>* c) {
  auto make = [&](auto* t, std::vector<std::int64_t> shape) -> Status {
    using Made = std::remove_pointer_t<decltype(t)>;  // Tensor<T> or Tensor<StatOf<T>>
    SF_ASSIGN_OR_RETURN(*t, Made::Zeros(alloc, BufferClass::kWorkspace, shape));
    return Status::Ok();
  };
  const std::int64_t S = B * s;
  for (Tensor<T>* t : {&c->q, &c->k, &c->dq, &c->dk}) SF_RETURN_IF_ERROR(make(t, {S, d.HK()}));
  for (Tensor<T>* t : {&c->v, &c->dO, &c->o, &c->dv}) SF_RETURN_IF_ERROR(make(t, {S, d.HV()}));
  for (Tensor<T>* t : {&c->a, &c->beta, &c->da, &c->dbeta}) SF_RETURN_IF_ERROR(make(t, {S, d.H}));
  for (Tensor<StatOf<T>>* t : {&c->S_in, &c->dS_out, &c->S_out, &c->dS_in}) {
    SF_RETURN_IF_ERROR(make(t, {B, d.state()}));
  }
  if (d.mamba3) {
    for (Tensor<T>* t : {&c->gamma, &c->dgamma}) SF_RETURN_IF_ERROR(make(t, {S, d.H}));
    for (Tensor<T>* t : {&c->k_in, &c->dk_out, &c->k_out, &c->dk_in}) {
      SF_RETURN_IF_ERROR(make(t, {B, d.HK()}));
    }
    for (Tensor<T>* t : {&c->v_in, &c->dv_out, &c->v_out, &c->dv_in}) {
      SF_RETURN_IF_ERROR(make(t, {B, d.HV()}));
    }
  }
  Ops<T>& ops = alloc.device().template ops<T>();
  c->fws_n = d.mamba3 ? ops.Mamba3CoreForwardPhaseWorkspaceSize(s, d.H, d.Dk, d.Dv, d.block_size)
                      : ops.GdnCoreForwardPhaseWorkspaceSize(s, d.H, d.Dk, d.Dv, d.block_size);
  c->bws_n = d.mamba3 ? ops.Mamba3CoreBackwardPhaseWorkspaceSize(s, d.H, d.Dk, d.Dv, d.block_size)
                      : ops.GdnCoreBackwardPhaseWorkspaceSize(s, d.H, d.Dk, d.Dv, d.block_size);
  SF_RETURN_IF_ERROR(make(&c->fws, {B, std::max<std::int64_t>(1, c->fws_n)}));
  return make(&c->bws, {B, std::max<std::int64_t>(1, c->bws_n)});
}

// Layer-like values: unit-norm q, k rows (GDN; Mamba-3's normalised and
// rotated q, k have unit-scale entries), log decays in [-0.5, -0.01], GDN's
// beta in [0.1, 0.9], Mamba-3's gamma and beta (lambda dt, (1 - lambda) dt)
// in [0.01, 0.5]; gradients of a mean loss's size.
template <typename T>
void FillCoreBuffers(const CoreDims& d, std::int64_t S, CoreBuffers<T>* c) {
  const double unit = d.mamba3 ? 1.0 : 1.0 / std::sqrt(static_cast<double>(d.Dk));
  FillPattern(&c->q, 31, unit);
  FillPattern(&c->k, 37, unit);
  FillPattern(&c->v, 41, 1.0);
  FillRange(&c->a, 43, -0.5, -0.01);
  if (d.mamba3) {
    FillRange(&c->beta, 47, 0.01, 0.5);
    FillRange(&c->gamma, 67, 0.01, 0.5);
    FillPattern(&c->k_in, 71, 1.0);
    FillPattern(&c->v_in, 73, 1.0);
    FillPattern(&c->dk_out, 79, 1.0 / static_cast<double>(S));
    FillPattern(&c->dv_out, 83, 1.0 / static_cast<double>(S));
  } else {
    FillRange(&c->beta, 47, 0.1, 0.9);
  }
  FillPattern(&c->S_in, 53, 0.5);
  FillPattern(&c->dO, 59, 1.0 / static_cast<double>(S));
  FillPattern(&c->dS_out, 61, 1.0 / static_cast<double>(S));
}

template <typename T>
Result<CoreBuffers<T>> MakeCoreBuffers(TrackingAllocator& alloc, const CoreDims& d,
                                       std::int64_t B, std::int64_t s) {
  CoreBuffers<T> c;
  SF_RETURN_IF_ERROR(AllocateCoreBuffers(alloc, d, B, s, &c));
  FillCoreBuffers(d, B * s, &c);
  return c;
}

// Sequence b's part of one core buffer: `rows` rows of width `w` each (a
// (B rows, w) buffer), nullptr for an empty (unused) tensor.
template <typename T>
T* Part(Tensor<T>& t, std::int64_t b, std::int64_t rows, std::int64_t w) {
  return t.numel() == 0 ? nullptr : t.data() + b * rows * w;
}

// Phase `p` of the GDN core over sequence b.
template <typename T>
void RunGdnPhase(Ops<T>& ops, CoreBuffers<T>& c, const CoreDims& d, std::int64_t b,
                 std::int64_t s, GdnPhase p, bool backward) {
  const std::int64_t HK = d.HK(), HV = d.HV(), H = d.H, st = d.state();
  if (!backward) {
    ops.GdnCoreForwardPhase(p, Part(c.o, b, s, HV), Part(c.S_out, b, 1, st),
                            Part(c.fws, b, 1, c.fws.dim(1)), Part(c.q, b, s, HK),
                            Part(c.k, b, s, HK), Part(c.v, b, s, HV), Part(c.a, b, s, H),
                            Part(c.beta, b, s, H), Part(c.S_in, b, 1, st), s, d.H, d.Dk, d.Dv,
                            d.block_size, d.st_tile);
    return;
  }
  ops.GdnCoreBackwardPhase(p, Part(c.dq, b, s, HK), Part(c.dk, b, s, HK), Part(c.dv, b, s, HV),
                           Part(c.da, b, s, H), Part(c.dbeta, b, s, H), Part(c.dS_in, b, 1, st),
                           Part(c.bws, b, 1, c.bws.dim(1)), Part(c.dO, b, s, HV),
                           Part(c.dS_out, b, 1, st), Part(c.q, b, s, HK), Part(c.k, b, s, HK),
                           Part(c.v, b, s, HV), Part(c.a, b, s, H), Part(c.beta, b, s, H),
                           Part(c.S_in, b, 1, st), s, d.H, d.Dk, d.Dv, d.block_size, d.st_tile);
}

// Phase `p` of the Mamba-3 core over sequence b.
template <typename T>
void RunMamba3Phase(Ops<T>& ops, CoreBuffers<T>& c, const CoreDims& d, std::int64_t b,
                    std::int64_t s, GdnPhase p, bool backward) {
  const std::int64_t HK = d.HK(), HV = d.HV(), H = d.H, st = d.state();
  if (!backward) {
    ops.Mamba3CoreForwardPhase(
        p, Part(c.o, b, s, HV), Part(c.S_out, b, 1, st), Part(c.k_out, b, 1, HK),
        Part(c.v_out, b, 1, HV), Part(c.fws, b, 1, c.fws.dim(1)), Part(c.q, b, s, HK),
        Part(c.k, b, s, HK), Part(c.v, b, s, HV), Part(c.a, b, s, H), Part(c.gamma, b, s, H),
        Part(c.beta, b, s, H), Part(c.S_in, b, 1, st), Part(c.k_in, b, 1, HK),
        Part(c.v_in, b, 1, HV), s, d.H, d.Dk, d.Dv, d.block_size, d.st_tile);
    return;
  }
  ops.Mamba3CoreBackwardPhase(
      p, Part(c.dq, b, s, HK), Part(c.dk, b, s, HK), Part(c.dv, b, s, HV), Part(c.da, b, s, H),
      Part(c.dgamma, b, s, H), Part(c.dbeta, b, s, H), Part(c.dS_in, b, 1, st),
      Part(c.dk_in, b, 1, HK), Part(c.dv_in, b, 1, HV), Part(c.bws, b, 1, c.bws.dim(1)),
      Part(c.dO, b, s, HV), Part(c.dS_out, b, 1, st), Part(c.dk_out, b, 1, HK),
      Part(c.dv_out, b, 1, HV), Part(c.q, b, s, HK), Part(c.k, b, s, HK), Part(c.v, b, s, HV),
      Part(c.a, b, s, H), Part(c.gamma, b, s, H), Part(c.beta, b, s, H), Part(c.S_in, b, 1, st),
      Part(c.k_in, b, 1, HK), Part(c.v_in, b, 1, HV), s, d.H, d.Dk, d.Dv, d.block_size, d.st_tile);
}

// Phase `p` of the forward (backward: `backward`) over every sequence.
template <typename T>
void RunCorePhase(Ops<T>& ops, CoreBuffers<T>& c, const CoreDims& d, std::int64_t B,
                  std::int64_t s, GdnPhase p, bool backward) {
  for (std::int64_t b = 0; b < B; ++b) {
    if (d.mamba3) {
      RunMamba3Phase(ops, c, d, b, s, p, backward);
    } else {
      RunGdnPhase(ops, c, d, b, s, p, backward);
    }
  }
}

}  // namespace

template <typename T>
Result<CorePhaseSeconds> LayerTimer<T>::TimePhasesOnce(std::int64_t tokens) {
  if (!state_->phases) {
    return Status::Invalid(std::string("profile: no core phases to time for a ") +
                           std::string(models::LayerKindName(state_->kind)) + " layer of a " +
                           state_->architecture +
                           " model (GDN and Mamba-3 recurrence layers only)");
  }
  if (tokens < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  const CoreDims& d = state_->dims;
  const std::int64_t B = state_->module->microbatch_size();
  Device& device = state_->alloc.device();
  SF_ASSIGN_OR_RETURN(CoreBuffers<T> c, MakeCoreBuffers<T>(state_->alloc, d, B, tokens));
  CorePhaseSeconds seconds;
  for (bool backward : {false, true}) {
    for (int p = 0; p < 3; ++p) {
      SF_RETURN_IF_ERROR(device.TimerStart());
      RunCorePhase(device.ops<T>(), c, d, B, tokens, kGdnPhases[p], backward);
      SF_ASSIGN_OR_RETURN(const double s, device.TimerStop());
      (backward ? seconds.backward : seconds.forward)[p] = s;
    }
  }
  return seconds;
}

template <typename T>
Result<PassSamples> TimeLayerPasses(const pb::ModelSpec& model, models::LayerKind kind,
                                    models::Recompute recompute, std::int64_t tokens,
                                    const TimingOptions& options) {
  SF_RETURN_IF_ERROR(CheckOptions(tokens, options));
  SF_ASSIGN_OR_RETURN(std::unique_ptr<LayerTimer<T>> timer,
                      LayerTimer<T>::Make(model, kind, recompute));
  PassSamples samples;
  for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
    SF_ASSIGN_OR_RETURN(auto seconds, timer->TimeOnce(tokens));
    if (rep < options.warmup) continue;
    samples.forward_s.push_back(seconds.first);
    samples.backward_s.push_back(seconds.second);
  }
  return samples;
}

template <typename T>
Result<std::vector<double>> TimeOptimizerPerParam(const pb::ModelSpec& model,
                                                  const TimingOptions& options,
                                                  Device* device) {
  SF_RETURN_IF_ERROR(CheckOptions(1, options));
  TrackingAllocator alloc(0, std::nullopt, device);
  const int layers = static_cast<int>(models::LayerList(model).size());
  SF_ASSIGN_OR_RETURN(
      std::unique_ptr<StageModule<T>> module,
      MakeStageModule<T>(model, {0, layers}, {.recompute = models::Recompute::kNone, .seed = kSeed}, &alloc));
  std::vector<ParamRef<T>> params = module->Parameters();
  double count = 0;
  for (const ParamRef<T>& p : params) {
    FillPattern(p.grad, 7, 1e-3);
    count += static_cast<double>(p.value->numel());
  }
  SF_ASSIGN_OR_RETURN(AdamW<T> optimizer, AdamW<T>::Make(params, alloc, AdamWOptions{}));
  std::vector<double> per_param;
  for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
    SF_RETURN_IF_ERROR(alloc.device().TimerStart());
    optimizer.Step();
    module->ZeroGrads();
    SF_ASSIGN_OR_RETURN(const double seconds, alloc.device().TimerStop());
    for (const ParamRef<T>& p : params) FillPattern(p.grad, 7 + rep, 1e-3);  // untimed
    if (rep >= options.warmup) per_param.push_back(seconds / count);
  }
  return per_param;
}

template class LayerTimer<float>;
template class LayerTimer<double>;
template Result<PassSamples> TimeLayerPasses<float>(const pb::ModelSpec&, models::LayerKind,
                                                    models::Recompute, std::int64_t,
                                                    const TimingOptions&);
template Result<PassSamples> TimeLayerPasses<double>(const pb::ModelSpec&, models::LayerKind,
                                                     models::Recompute, std::int64_t,
                                                     const TimingOptions&);
template Result<std::vector<double>> TimeOptimizerPerParam<float>(const pb::ModelSpec&,
                                                                  const TimingOptions&,
                                                                  Device*);
template Result<std::vector<double>> TimeOptimizerPerParam<double>(const pb::ModelSpec&,
                                                                   const TimingOptions&,
                                                                   Device*);
template class LayerTimer<bf16>;
template Result<PassSamples> TimeLayerPasses<bf16>(const pb::ModelSpec&, models::LayerKind,
                                                     models::Recompute, std::int64_t,
                                                     const TimingOptions&);
template Result<std::vector<double>> TimeOptimizerPerParam<bf16>(const pb::ModelSpec&,
                                                                   const TimingOptions&,
                                                                   Device*);

}  // namespace stateflow::backend

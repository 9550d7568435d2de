// CostModel: the per-layer formulas of layer_formulas.h scaled to one chunk of
// one microbatch on one TP rank, plus times from the device's peak, efficiency
// curve and bandwidth. Derivations: docs/cost-model.md.
#include "models/cost_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <optional>

#include "models/family.h"
#include "models/kernel_costs.h"
#include "models/layer_formulas.h"
#include "models/limits.h"

namespace stateflow::models {
namespace {

// Mixed-precision Adam defaults (proto/stateflow.proto, PrecisionSpec).
constexpr double kDefaultWeightBytes = 2;
constexpr double kDefaultGradientBytes = 4;
constexpr double kDefaultOptimizerBytes = 12;
constexpr double kDefaultActivationBytes = 2;

// 0 takes the default; anything else must be in kPrecisionBytes.
Status FillPrecisionField(const char* field, double default_bytes,
                          double* bytes) {
  if (*bytes == 0) *bytes = default_bytes;
  return CheckRange(std::string("precision.") + field + " (0 takes the default)", *bytes,
                    kPrecisionBytes);
}

Result<pb::PrecisionSpec> FillPrecision(pb::PrecisionSpec p) {
  double w = p.weight_bytes(), g = p.gradient_bytes();
  double o = p.optimizer_bytes(), a = p.activation_bytes();
  SF_RETURN_IF_ERROR(FillPrecisionField("weight_bytes", kDefaultWeightBytes, &w));
  SF_RETURN_IF_ERROR(
      FillPrecisionField("gradient_bytes", kDefaultGradientBytes, &g));
  SF_RETURN_IF_ERROR(
      FillPrecisionField("optimizer_bytes", kDefaultOptimizerBytes, &o));
  SF_RETURN_IF_ERROR(
      FillPrecisionField("activation_bytes", kDefaultActivationBytes, &a));
  p.set_weight_bytes(w);
  p.set_gradient_bytes(g);
  p.set_optimizer_bytes(o);
  p.set_activation_bytes(a);
  return p;
}

bool IsBlock(LayerKind kind) {
  return kind == LayerKind::kRecurrence || kind == LayerKind::kAttention;
}

// The causal query-key pairs of chunk [c, c + s): c s + s^2 / 2 (the paper's
// Cost_i; the exact count c s + s (s + 1) / 2 differs by s / 2).
double Pairs(std::int64_t c, std::int64_t s) {
  const double cd = static_cast<double>(c), sd = static_cast<double>(s);
  return cd * sd + sd * sd / 2;
}

}  // namespace

Result<pb::PrecisionSpec> PrecisionForDtype(std::string_view dtype) {
  double bytes = 0;
  if (dtype.empty() || dtype == "float32") {
    bytes = 4;
  } else if (dtype == "float64") {
    bytes = 8;
  } else if (dtype == "bf16") {
    // Mixed precision (backend/device/precision.h): bf16 weights and
    // activations, fp32 gradients, fp32 master weights beside AdamW's m and
    // v; statistics and states fp32 (StatBytes).
    pb::PrecisionSpec p;
    p.set_weight_bytes(2);
    p.set_gradient_bytes(4);
    p.set_optimizer_bytes(12);
    p.set_activation_bytes(2);
    return p;
  } else {
    return Status::Invalid("train.dtype: unknown '" + std::string(dtype) +
                           "' (known: float32, float64, bf16)");
  }
  pb::PrecisionSpec p;
  p.set_weight_bytes(bytes);
  p.set_gradient_bytes(bytes);
  p.set_optimizer_bytes(2 * bytes);  // AdamW's m and v
  p.set_activation_bytes(bytes);
  return p;
}

Result<Recompute> ParseRecompute(std::string_view text) {
  if (text.empty() || text == "none") return Recompute::kNone;
  if (text == "full") return Recompute::kFull;
  return Status::Invalid("schedule.recompute: unknown '" + std::string(text) +
                         "' (known: none, full)");
}

std::string_view RecomputeName(Recompute recompute) {
  return recompute == Recompute::kFull ? "full" : "none";
}

Result<System> ParseSystem(std::string_view text) {
  if (text.empty() || text == "stateflow") return System::kStateFlow;
  if (text == "megatron-core") return System::kMegatronCore;
  if (text == "ms-swift") return System::kMsSwift;
  return Status::Invalid("schedule.system: unknown '" + std::string(text) +
                         "' (known: stateflow, megatron-core, ms-swift)");
}

std::string_view SystemName(System system) {
  switch (system) {
    case System::kStateFlow: return "stateflow";
    case System::kMegatronCore: return "megatron-core";
    case System::kMsSwift: return "ms-swift";
  }
  return "stateflow";
}

Status FrameworkSettingsFor(System system, const pb::FrameworkSpec& spec,
                            CostModelOptions* options) {
  options->vocab_divisible_by = 1;
  options->hidden_dropout = 0;
  options->attention_mask = false;
  // Checked whatever the system, so that a bad value never passes unseen.
  if (spec.has_vocab_divisible_by()) {
    SF_RETURN_IF_ERROR(
        CheckRange("framework.vocab_divisible_by", spec.vocab_divisible_by(), kVocabDivisibleBy));
  }
  if (spec.has_hidden_dropout() && !(spec.hidden_dropout() >= 0 && spec.hidden_dropout() < 1)) {
    char got[32];
    std::snprintf(got, sizeof got, "%g", spec.hidden_dropout());
    return Status::Invalid(std::string("framework.hidden_dropout must be in [0, 1), got ") + got);
  }
  if (system == System::kStateFlow) return Status::Ok();
  // Megatron-Core r0.12, megatron/training/arguments.py:
  // --make-vocab-size-divisible-by 128, --hidden-dropout 0.1, and
  // --no-create-attention-mask-in-dataloader (store_false: the mask is made
  // unless it is given). ms-swift 3.6 (swift/megatron/argument/megatron_args.py):
  // hidden_dropout 0, no_create_attention_mask_in_dataloader True, and the
  // model's vocab_size unpadded.
  const bool megatron = system == System::kMegatronCore;
  options->vocab_divisible_by =
      spec.has_vocab_divisible_by() ? static_cast<int>(spec.vocab_divisible_by()) : megatron ? 128 : 1;
  options->hidden_dropout = spec.has_hidden_dropout() ? spec.hidden_dropout() : megatron ? 0.1 : 0;
  options->attention_mask = spec.has_attention_mask() ? spec.attention_mask() : megatron;
  return Status::Ok();
}

std::string FrameworkSettingsText(const CostModel& cm) {
  const CostModelOptions& o = cm.options();
  if (o.system == System::kStateFlow) return "";
  std::string text = "vocabulary " + std::to_string(cm.model().vocab_size());
  if (o.vocab_divisible_by > 1) text += " (" + std::to_string(o.vocab_divisible_by) + " x TP)";
  if (o.hidden_dropout > 0) {
    char p[32];
    std::snprintf(p, sizeof p, "%g", o.hidden_dropout);
    text += std::string(", hidden dropout ") + p;
  } else {
    text += ", no dropout";
  }
  text += o.attention_mask ? ", attention mask" : ", no attention mask";
  return text;
}

Result<CostModel> CostModel::Make(const pb::ModelSpec& model,
                                  const pb::PrecisionSpec& precision,
                                  const pb::ClusterSpec& cluster,
                                  const CostModelOptions& options) {
  SF_RETURN_IF_ERROR(ValidateModel(model, options.tensor_size));
  if (options.microbatch_size < 1) {
    return Status::Invalid("parallel.microbatch_size must be >= 1");
  }
  if (options.data_size < 1) {
    return Status::Invalid("parallel.data_size must be >= 1");
  }
  if (options.context_size < 1) {
    return Status::Invalid("parallel.context_size must be >= 1");
  }
  SF_ASSIGN_OR_RETURN(pb::PrecisionSpec filled, FillPrecision(precision));
  SF_RETURN_IF_ERROR(ValidateCluster(cluster));
  CostModel cm;
  cm.model_ = model;
  if (options.vocab_divisible_by < 1) {
    return Status::Invalid("framework.vocab_divisible_by must be >= 1");
  }
  if (options.vocab_divisible_by > 1) {  // Megatron's _vocab_size_with_padding
    const std::uint64_t multiple =
        static_cast<std::uint64_t>(options.vocab_divisible_by) * options.tensor_size;
    cm.model_.set_vocab_size((model.vocab_size() + multiple - 1) / multiple * multiple);
  }
  cm.precision_ = std::move(filled);
  cm.cluster_ = cluster;
  cm.rates_ = KernelRates(cluster.kernel_costs());
  cm.options_ = options;
  cm.layers_ = LayerList(model);
  cm.FillTables();
  for (bool backward : {false, true}) {
    const Family& family = FamilyOfValid(model);
    const double act = cm.precision_.activation_bytes();
    cm.attention_curve_[backward] = cm.rates_.SeqCurve("", model.attn_head_dim(), backward, act);
    cm.recurrence_curve_[backward] =
        cm.rates_.SeqCurve(family.kernel_name(), family.KernelHeadDim(model), backward, act);
  }
  return cm;
}

void CostModel::FillTables() {
  const int tp = options_.tensor_size;
  const double act = precision_.activation_bytes();
  for (LayerKind kind : {LayerKind::kEmbedding, LayerKind::kRecurrence,
                         LayerKind::kAttention, LayerKind::kHead}) {
    KindTable& t = tables_[static_cast<int>(kind)];
    const bool present =
        kind != LayerKind::kAttention || model_.layer_pattern() == "hybrid";
    if (!present) continue;  // attention fields may be unset
    const FlopCoeffs f = LayerFlopCoeffs(model_, kind);
    // Every tensor rank's GEMMs: its share of each (TensorShard: the split
    // columns / TP, the replicated ones whole, as the backend computes
    // them: Mamba-3's B, C and angle projections, KDA's low-rank downs).
    // Their 2 n k per token are the matmul terms of fwd_token (4 n k of
    // bwd_token), so the replicated columns' FLOPs are added back whole.
    double replicated_fwd = 0;
    for (const Gemm& whole : LayerGemms(model_, kind)) {
      replicated_fwd += 2 * whole.replicated * whole.k;
      t.gemms.push_back(TensorShard(whole, tp));
    }
    const double unsplit = replicated_fwd * (1 - 1.0 / tp);
    t.fwd_token = f.fwd_token / tp + unsplit;
    t.fwd_pair = f.fwd_pair / tp;
    t.bwd_token = f.bwd_token / tp + 2 * unsplit;
    t.bwd_pair = f.bwd_pair / tp;
    t.params = LayerParamCountPerTensorRank(model_, kind, tp);
    t.stored_per_token = StoredBytesPerTokenNoRecompute(model_, kind, act, tp);
    t.boundary_bytes = BoundaryStateBytesPerSequence(model_, kind, act, tp);
    t.w_store_per_token = WeightGradStoreElementsPerToken(model_, kind, tp);
    t.core = RecurrenceCoreFlops(model_, kind);
    t.core.fwd /= tp;
    t.core.bwd /= tp;
    if (kind == LayerKind::kAttention) {
      t.kv_per_token = 2.0 * KvHeads(model_) * model_.attn_head_dim() * act / tp;
    }
  }
}

const CostModel::KindTable& CostModel::Table(int l) const {
  assert(l >= 0 && l < num_layers());
  return tables_[static_cast<int>(layers_[l])];
}

// ---------------------------------------------------------------- FLOPs ----

double CostModel::ForwardFlops(int l, std::int64_t c, std::int64_t s) const {
  const KindTable& t = Table(l);
  return options_.microbatch_size *
         (t.fwd_token * static_cast<double>(s) + t.fwd_pair * Pairs(c, s));
}

double CostModel::BackwardFlops(int l, std::int64_t c, std::int64_t s) const {
  const KindTable& t = Table(l);
  return options_.microbatch_size *
         (t.bwd_token * static_cast<double>(s) + t.bwd_pair * Pairs(c, s));
}

bool CostModel::Recomputed(int l) const {
  return options_.recompute == Recompute::kFull && IsBlock(layers_[l]);
}

double CostModel::RecomputeFlops(int l, std::int64_t c, std::int64_t s) const {
  return Recomputed(l) ? ForwardFlops(l, c, s) : 0.0;
}

schedule::ChunkCostCoefficients CostModel::ChunkCoefficients(int first,
                                                             int last) const {
  assert(0 <= first && first <= last && last <= num_layers());
  schedule::ChunkCostCoefficients coeffs;
  coeffs.per_token = 0;
  coeffs.per_pair = 0;
  for (int l = first; l < last; ++l) {
    const KindTable& t = Table(l);
    coeffs.per_token += options_.microbatch_size * (t.fwd_token + t.bwd_token);
    coeffs.per_pair += options_.microbatch_size * (t.fwd_pair + t.bwd_pair);
  }
  return coeffs;
}

// ---------------------------------------------------------------- times ----

double CostModel::Efficiency(double tokens) const {
  const auto& points = cluster_.device().efficiency();
  if (points.empty()) return 1.0;
  if (!(tokens > points[0].tokens())) return points[0].efficiency();
  const int last = points.size() - 1;
  if (tokens >= points[last].tokens()) return points[last].efficiency();
  int i = 1;
  while (points[i].tokens() < tokens) ++i;
  const double x0 = std::log(points[i - 1].tokens());
  const double x1 = std::log(points[i].tokens());
  const double u = (std::log(tokens) - x0) / (x1 - x0);
  return points[i - 1].efficiency() +
         u * (points[i].efficiency() - points[i - 1].efficiency());
}

// With kernel costs: each GEMM at its shape's rate (backward: the input
// gradient [t, n] x [n, k] and the weight gradient [k, t] x [t, n]), the
// attention core's pair FLOPs at the attention kernel's rate for a sequence
// of the chunk's s tokens, the recurrence core at its kernel's rate; what no
// table covers (elementwise work, and every component without points) at
// peak * efficiency(t). docs/cost-model.md, "Kernel costs".
double CostModel::ComputeTime(int l, std::int64_t c, std::int64_t s, bool backward,
                              double flops, double* table_s) const {
  const double rate = cluster_.device().peak_flops() * Efficiency(Tokens(s));
  if (table_s != nullptr) *table_s = 0;
  if (!cluster_.has_kernel_costs()) return flops / rate;
  const KernelRates& rates = rates_;
  const KindTable& table = Table(l);
  const double t = Tokens(s), act = precision_.activation_bytes();
  double time = 0, covered = 0;
  const auto add = [&](double f, std::optional<double> r) {
    if (r && f > 0) {
      time += f / *r;
      covered += f;
    }
  };
  for (const Gemm& g : table.gemms) {
    const double f = 2 * t * g.n * g.k;
    if (backward) {
      add(f, rates.Gemm(t, g.k, g.n, act));  // dX
      add(f, rates.Gemm(g.k, g.n, t, act));  // dW
    } else {
      add(f, rates.Gemm(t, g.n, g.k, act));
    }
  }
  const double pairs = options_.microbatch_size * Pairs(c, s);
  // rates.Attention and rates.Recurrence at the model's head dims, their
  // points chosen once (Make).
  const auto at_length = [&](const KernelRates::Curve& curve) -> std::optional<double> {
    if (curve.empty()) return std::nullopt;
    return LogLogInterpolate(curve, static_cast<double>(s));
  };
  if (layers_[l] == LayerKind::kAttention) {
    add((backward ? table.bwd_pair : table.fwd_pair) * pairs, at_length(attention_curve_[backward]));
  }
  if (layers_[l] == LayerKind::kRecurrence) {
    add((backward ? table.core.bwd : table.core.fwd) * t, at_length(recurrence_curve_[backward]));
  }
  if (table_s != nullptr) *table_s = time;
  return time + std::max(0.0, flops - covered) / rate;
}

double CostModel::AllReduceTime(double bytes, int ranks, const pb::LinkSpec& link) const {
  if (ranks <= 1) return 0.0;
  if (&link == &cluster_.intra_node_link() && cluster_.has_kernel_costs()) {
    const std::optional<double> busbw = rates_.AllReduceBusBandwidth(bytes, ranks);
    if (busbw) return 2.0 * (ranks - 1) / ranks * bytes / *busbw;
  }
  return RingAllReduceTime(bytes, ranks, link);
}

// The bytes a pass must at least move: a block or the head reads its weights
// once and its input, and writes its output; the embedding gathers s rows.
double CostModel::MinForwardBytes(int l, std::int64_t s) const {
  const double act_row = Tokens(s) * model_.hidden_size() *
                         precision_.activation_bytes();
  if (layers_[l] == LayerKind::kEmbedding) {
    return Tokens(s) * model_.hidden_size() * precision_.weight_bytes() +
           act_row;
  }
  return WeightBytes(l) + 2 * act_row;
}

// Backward also reads and writes the gradient accumulators (for the
// embedding, the s rows it scatters into).
double CostModel::MinBackwardBytes(int l, std::int64_t s) const {
  const double act_row = Tokens(s) * model_.hidden_size() *
                         precision_.activation_bytes();
  if (layers_[l] == LayerKind::kEmbedding) {
    return Tokens(s) * model_.hidden_size() * 2 * precision_.gradient_bytes() +
           act_row;
  }
  return WeightBytes(l) + 2 * GradientBytes(l) + 2 * act_row;
}

double RingAllReduceTime(double bytes, int ranks, const pb::LinkSpec& link) {
  if (ranks <= 1) return 0.0;
  const double n = ranks;
  return 2.0 * (n - 1) / n * bytes / link.bandwidth_bytes_per_s() +
         2.0 * (n - 1) * link.latency_s();
}

double CostModel::TensorParallelForwardCommTime(int l, std::int64_t s,
                                                 const pb::LinkSpec* on) const {
  const int tp = options_.tensor_size;
  if (tp <= 1) return 0.0;
  const pb::LinkSpec& link = on != nullptr ? *on : cluster_.intra_node_link();
  const double rows = BoundaryActivationBytes(s);  // [t, h] in act
  switch (layers_[l]) {
    case LayerKind::kEmbedding: return AllReduceTime(rows, tp, link);
    case LayerKind::kRecurrence:
    case LayerKind::kAttention: return 2 * AllReduceTime(rows, tp, link);
    case LayerKind::kHead: return 3 * AllReduceTime(Tokens(s) * kFp32Bytes, tp, link);
  }
  return 0.0;
}

double CostModel::TensorParallelBackwardCommTime(int l, std::int64_t s,
                                                  const pb::LinkSpec* on) const {
  const int tp = options_.tensor_size;
  if (tp <= 1) return 0.0;
  const pb::LinkSpec& link = on != nullptr ? *on : cluster_.intra_node_link();
  const double rows = BoundaryActivationBytes(s);
  switch (layers_[l]) {
    case LayerKind::kEmbedding: return 0.0;
    case LayerKind::kRecurrence:
    case LayerKind::kAttention: return 2 * AllReduceTime(rows, tp, link);
    case LayerKind::kHead: return AllReduceTime(rows, tp, link);
  }
  return 0.0;
}

const pb::LinkSpec& CostModel::DataParallelLink() const {
  // Megatron's order tp-cp-dp-pp: a stage's gradient group (DP x CP) spans
  // TP * CP * DP consecutive devices.
  const double group =
      static_cast<double>(options_.tensor_size) * options_.context_size * options_.data_size;
  return group <= cluster_.devices_per_node() ? cluster_.intra_node_link()
                                              : cluster_.inter_node_link();
}

double CostModel::DataParallelSyncTime(int first, int last, const pb::LinkSpec* link) const {
  assert(0 <= first && first <= last && last <= num_layers());
  // The CP devices of a replica hold the same weights with partial
  // gradients: the sum runs over DP x CP (Megatron's data-parallel group
  // with context parallelism).
  const int dp = options_.data_size * options_.context_size;
  if (dp <= 1) return 0.0;
  double gradient = 0, weight = 0;
  for (int l = first; l < last; ++l) {
    gradient += GradientBytes(l);
    weight += WeightBytes(l);
  }
  auto all_reduce = [&](double bytes) {
    return link != nullptr ? RingAllReduceTime(bytes, dp, *link)
                           : AllReduceTime(bytes, dp, DataParallelLink());
  };
  if (!options_.distributed_optimizer) return all_reduce(gradient);
  return 0.5 * all_reduce(gradient) + 0.5 * all_reduce(weight);
}

double CostModel::GradBucketSize() const {
  if (options_.grad_bucket_size > 0) return static_cast<double>(options_.grad_bucket_size);
  const double group = static_cast<double>(options_.data_size) * options_.context_size;
  return std::max(40e6, 1e6 * group);  // megatron/training/training.py, get_model
}

double CostModel::OverlappedDataParallelSync(int first, int last,
                                             const std::vector<double>& backward_s,
                                             double lead_s, const pb::LinkSpec* link) const {
  assert(0 <= first && first <= last && last <= num_layers());
  assert(backward_s.size() == static_cast<std::size_t>(last - first));
  const int dp = options_.data_size * options_.context_size;
  if (dp <= 1) return 0.0;
  auto all_reduce = [&](double bytes) {
    return link != nullptr ? RingAllReduceTime(bytes, dp, *link)
                           : AllReduceTime(bytes, dp, DataParallelLink());
  };
  // A reduce-scatter is half a ring all-reduce of the same bytes.
  const double share = options_.distributed_optimizer ? 0.5 : 1.0;
  const double bucket_size = GradBucketSize();
  double ready = lead_s, comm_end = 0, params = 0, bytes = 0, weight = 0;
  for (int l = last - 1; l >= first; --l) {
    ready += backward_s[static_cast<std::size_t>(l - first)];
    params += ParamCount(l);
    bytes += GradientBytes(l);
    weight += WeightBytes(l);
    if (params >= bucket_size || l == first) {
      comm_end = std::max(ready, comm_end) + share * all_reduce(bytes);
      params = bytes = 0;
    }
  }
  if (options_.distributed_optimizer) comm_end += 0.5 * all_reduce(weight);
  return comm_end;
}

double CostModel::StageOptimizerParams(int first, int last) const {
  assert(0 <= first && first <= last && last <= num_layers());
  double params = 0;
  for (int l = first; l < last; ++l) params += ParamCount(l);
  const int group = options_.data_size * options_.context_size;  // sharded over DP x CP
  if (!options_.distributed_optimizer || group <= 1) return params;
  // Whole parameters per device (the model's counts are integers after TP).
  const auto n = static_cast<std::int64_t>(std::llround(params));
  return static_cast<double>(ShardOf(n, group, 0).count);
}

double CostModel::StageOptimizerBytes(int first, int last) const {
  assert(0 <= first && first <= last && last <= num_layers());
  if (!options_.distributed_optimizer || options_.data_size * options_.context_size <= 1) {
    double bytes = 0;
    for (int l = first; l < last; ++l) bytes += OptimizerBytes(l);
    return bytes;
  }
  return StageOptimizerParams(first, last) * precision_.optimizer_bytes();
}

Shard ShardOf(std::int64_t n, int replicas, int d) {
  assert(replicas >= 1 && 0 <= d && d < replicas && n >= 0);
  const std::int64_t base = n / replicas, extra = n % replicas;
  return Shard{d * base + std::min<std::int64_t>(d, extra), base + (d < extra ? 1 : 0)};
}

double CostModel::ForwardTime(int l, std::int64_t c, std::int64_t s) const {
  return ForwardTerms(l, c, s).total_s;
}

PassTerms CostModel::OwnTerms(int l, std::int64_t c, std::int64_t s, bool backward) const {
  PassTerms t;
  const int cp = options_.context_size;
  auto flops_of = [&](std::int64_t at, std::int64_t len) {
    return backward ? BackwardFlops(l, at, len) : ForwardFlops(l, at, len);
  };
  double compute_s = 0, table_s = 0;
  const std::int64_t whole = s;
  if (cp > 1) {
    // One CP device's part: the last device's tokens (the largest share,
    // and under contiguous attention shards the most causal work), or for
    // zig-zag attention an even share of the whole chunk's work.
    const std::int64_t local = LocalTokens(s);
    if (layers_[l] == LayerKind::kAttention && !options_.context_contiguous) {
      compute_s = ComputeTime(l, c, s, backward, flops_of(c, s), &table_s) / cp;
      table_s /= cp;
    } else {
      compute_s = ComputeTime(l, c + s - local, local, backward, flops_of(c + s - local, local),
                              &table_s);
    }
    const double extra = ContextParallelExtraFlops(l, local, backward);
    compute_s += extra / (cluster_.device().peak_flops() * Efficiency(Tokens(local)));
    c += s - local;
    s = local;
  } else {
    compute_s = ComputeTime(l, c, s, backward, flops_of(c, s), &table_s);
  }
  const double memory_s =
      (backward ? MinBackwardBytes(l, s) : MinForwardBytes(l, s)) /
      cluster_.device().memory_bandwidth_bytes_per_s();
  // The kernel time max(compute, memory), counted under the bound that set it.
  (memory_s > compute_s ? t.memory_s : t.compute_s) = std::max(compute_s, memory_s);
  if (memory_s <= compute_s) t.table_s = table_s;
  const StTiming st = StateTransition(l, s, backward);
  t.st_exposed_s = st.exposed_s;
  t.st_hidden_s = st.hidden_s;
  t.tp_comm_s =
      backward ? TensorParallelBackwardCommTime(l, s) : TensorParallelForwardCommTime(l, s);
  if (cp > 1) {
    t.cp_comm_s = ContextParallelCommTime(l, c - (whole - s), whole, backward,
                                          t.compute_s + t.memory_s);
  }
  t.total_s = (t.compute_s + t.memory_s) + t.st_exposed_s + t.tp_comm_s + t.cp_comm_s;
  return t;
}

std::int64_t CostModel::LocalTokens(std::int64_t s) const {
  const std::int64_t cp = options_.context_size;
  return (s + cp - 1) / cp;
}

const pb::LinkSpec& CostModel::ContextParallelLink() const {
  const double group = static_cast<double>(options_.tensor_size) * options_.context_size;
  return group <= cluster_.devices_per_node() ? cluster_.intra_node_link()
                                              : cluster_.inter_node_link();
}

double CostModel::ContextParallelCommTime(int l, std::int64_t c, std::int64_t s, bool backward,
                                          double compute_s) const {
  const int cp = options_.context_size;
  if (cp <= 1) return 0.0;
  const pb::LinkSpec& link = ContextParallelLink();
  const double hops = cp - 1;
  switch (layers_[l]) {
    case LayerKind::kRecurrence:
      // flash-linear-attention's context parallel for GDN and KDA (KCP):
      // every device all-gathers each device's state contribution and
      // transition (backward: their gradients), then folds its
      // predecessors' in; a ring all-gather of b bytes a device takes
      // CP - 1 steps of b. The main kernel needs the result: not hidden.
      return hops * (link.latency_s() + ContextParallelStateBytes(l) / link.bandwidth_bytes_per_s());
    case LayerKind::kAttention: {
      // A ring over the K/V of every token the chunk attends to.
      const double tokens = std::ceil(static_cast<double>(c + s) / cp);
      const double step_bytes =
          tokens * (KvBytesPerToken(l) + (backward ? KvGradBytesPerToken(l) : 0.0));
      const double ring = hops * (link.latency_s() + step_bytes / link.bandwidth_bytes_per_s());
      return std::max(0.0, ring - compute_s);
    }
    case LayerKind::kEmbedding:
    case LayerKind::kHead: return 0.0;
  }
  return 0.0;
}

// Whether the family's recurrence is a delta rule, whose state transition
// across a span of tokens is a d_k x d_k matrix (GDN, KDA, DeltaNet) rather
// than a decay (Mamba-3).
bool DeltaRuleTransition(const pb::ModelSpec& model) {
  return FamilyOfValid(model).kernel_name() != "mamba3";
}

double CostModel::ContextParallelStateBytes(int l) const {
  if (layers_[l] != LayerKind::kRecurrence) return 0.0;
  const double heads = std::ceil(static_cast<double>(model_.num_heads()) / options_.tensor_size);
  const double k = model_.head_dim_k();
  // The transition in fp32 (fla keeps the chain product in fp32); a decay:
  // one value a head.
  const double transition = DeltaRuleTransition(model_) ? k * k : 1.0;
  return BoundaryStateBytes(l) + options_.microbatch_size * heads * transition * kFp32Bytes;
}

double CostModel::ContextParallelExtraFlops(int l, std::int64_t s, bool backward) const {
  if (options_.context_size <= 1 || layers_[l] != LayerKind::kRecurrence) return 0.0;
  const StFlops f = RecurrenceStFlops(model_);  // per token, all heads
  // The state contribution with a zero entering state: one more pass of the
  // state recurrence (its backward: of the state gradient's).
  double per_token = backward ? f.st_bwd : f.st;
  if (DeltaRuleTransition(model_)) {
    // The transition: k^T w per token (2 d_k^2 a head) and the chain product
    // of d_k x d_k matrices per kernel chunk of 64 tokens (2 d_k^3 / 64).
    const double k = model_.head_dim_k();
    per_token += model_.num_heads() * 2 * k * k * (1 + k / 64);
  }
  return Tokens(s) * per_token / options_.tensor_size;
}

PassTerms CostModel::ForwardTerms(int l, std::int64_t c, std::int64_t s) const {
  return OwnTerms(l, c, s, /*backward=*/false);
}

// The ST's tiles: heads on the device x ceil(d_v / B_V) x microbatch size
// (the paper's launch grid G = B_chunk A ceil(d_v / B_V)). Its FLOPs at the
// whole device take st_s; at coverage u they take st_s / u, u st_s of it
// overlappable by nothing (the ST's own share of the device). Without
// overlap the pass is Pre + ST + Out: (1 - u) / u st_s more than the
// whole-device sum the FLOP count already charges. Split-and-overlap (two
// segments, Pre1 -> (ST1 || Pre2) -> (ST2 || Out1) -> Out2): a window
// with ST time x at coverage u beside parallel work w takes max(x, w + u x),
// which hides min(w, (1 - u) x) of the ST's exposed time; summed over both
// windows the pass saves min(Pre, X) / 2 + min(Out, X) / 2 with X = (1 - u)
// st_s / u. Derivation: docs/cost-model.md, section 2, "State transition".
StTiming CostModel::StateTransition(int l, std::int64_t s, bool backward) const {
  StTiming t;
  const pb::DeviceSpec& d = cluster_.device();
  if (layers_[l] != LayerKind::kRecurrence || d.compute_units() == 0 || s <= 0) return t;
  const StFlops f = RecurrenceStFlops(model_);  // per token, all heads
  const double tp = options_.tensor_size;
  const double rate = d.peak_flops() * Efficiency(Tokens(s));
  const double tokens = Tokens(s);
  const double pre = f.pre * tokens / tp / rate, st = f.st * tokens / tp / rate;
  const double out = f.out * tokens / tp / rate;
  if (backward) {
    t.before_s = pre + (f.out_bwd * tokens / tp / rate);
    t.st_s = st + f.st_bwd * tokens / tp / rate;
    t.after_s = f.pre_bwd * tokens / tp / rate;
  } else {
    t.before_s = pre;
    t.st_s = st;
    t.after_s = out;
  }
  const double heads = std::ceil(static_cast<double>(model_.num_heads()) / tp);
  const double tile = options_.st_tile > 0 ? options_.st_tile : 64;
  const double tiles = options_.microbatch_size * heads *
                       std::ceil(static_cast<double>(model_.head_dim_v()) / tile);
  t.tiles = tiles;
  t.coverage = std::min(1.0, tiles / d.compute_units());
  const double exposed = (1.0 - t.coverage) / t.coverage * t.st_s;  // X
  t.exposed_s = exposed;
  if (options_.st_overlap) {
    t.hidden_s = std::min(t.before_s, exposed) / 2 + std::min(t.after_s, exposed) / 2;
    t.exposed_s -= t.hidden_s;
  }
  return t;
}

double MeasuredStOverlapSaving(double pre_s, double st_s, double out_s, double coverage) {
  assert(coverage > 0 && coverage <= 1);
  const double X = (1.0 - coverage) * st_s;  // the ST's time with units idle beside it
  return std::min(pre_s, X) / 2 + std::min(out_s, X) / 2;
}

double CostModel::BackwardTime(int l, std::int64_t c, std::int64_t s) const {
  return BackwardTerms(l, c, s).total_s;
}

double CostModel::WeightGradTime(int l, std::int64_t c, std::int64_t s) const {
  if (layers_[l] == LayerKind::kEmbedding) return BackwardTime(l, c, s);
  if (layers_[l] == LayerKind::kHead) return 0;  // in I: the loss path's slices
  const std::int64_t local = LocalTokens(s);  // one CP device's tokens
  const double t = Tokens(local), act = precision_.activation_bytes();
  const double rate = cluster_.device().peak_flops() * Efficiency(t);
  double time = 0;
  for (const Gemm& g : Table(l).gemms) {
    const double flops = 2 * t * g.n * g.k;
    std::optional<double> r;
    if (cluster_.has_kernel_costs()) r = rates_.Gemm(g.k, g.n, t, act);
    time += flops / (r ? *r : rate);
  }
  const PassTerms own = OwnTerms(l, c, s, /*backward=*/true);
  return std::min(time, own.compute_s + own.memory_s);
}

double CostModel::WeightGradRetainedBytes(int l, std::int64_t s) const {
  return Tokens(s) * Table(l).w_store_per_token * precision_.activation_bytes();
}

PassTerms CostModel::BackwardTerms(int l, std::int64_t c, std::int64_t s) const {
  PassTerms t = OwnTerms(l, c, s, /*backward=*/true);
  if (Recomputed(l)) {
    const PassTerms replay = ForwardTerms(l, c, s);
    t.compute_s += replay.compute_s;
    t.memory_s += replay.memory_s;
    t.st_exposed_s += replay.st_exposed_s;
    t.st_hidden_s += replay.st_hidden_s;
    t.tp_comm_s += replay.tp_comm_s;
    t.recompute_s = replay.total_s;
    t.total_s += replay.total_s;
    t.table_s += replay.table_s;
  }
  return t;
}

// ---------------------------------------------------------------- bytes ----

double CostModel::ParamCount(int l) const { return Table(l).params; }

double CostModel::WeightBytes(int l) const {
  return ParamCount(l) * precision_.weight_bytes();
}

double CostModel::GradientBytes(int l) const {
  return ParamCount(l) * precision_.gradient_bytes();
}

double CostModel::OptimizerBytes(int l) const {
  return ParamCount(l) * precision_.optimizer_bytes();
}

double CostModel::StoredActivationBytes(int l, std::int64_t s) const {
  if (layers_[l] == LayerKind::kEmbedding) return Tokens(s) * DropoutMaskBytesPerToken(l);
  if (Recomputed(l)) {  // only the layer's input
    return Tokens(s) * model_.hidden_size() * precision_.activation_bytes();
  }
  return Tokens(s) * (Table(l).stored_per_token + DropoutMaskBytesPerToken(l));
}

double CostModel::DropoutMaskBytesPerToken(int l) const {
  if (options_.hidden_dropout <= 0) return 0;
  const double h = static_cast<double>(model_.hidden_size());
  switch (layers_[l]) {
    case LayerKind::kEmbedding: return h;
    case LayerKind::kHead: return 0;
    case LayerKind::kRecurrence:
    case LayerKind::kAttention: return 2 * h;
  }
  return 0;
}

double CostModel::AttentionMaskBytes(std::int64_t seq_len) const {
  if (!options_.attention_mask) return 0;
  return static_cast<double>(options_.microbatch_size) *
         static_cast<double>(LocalTokens(seq_len)) * static_cast<double>(seq_len);
}

double CostModel::BoundaryStateBytes(int l) const {
  return options_.microbatch_size * Table(l).boundary_bytes;
}

double CostModel::KvBytesPerToken(int l) const {
  return options_.microbatch_size * Table(l).kv_per_token;
}

double CostModel::KvGradBytesPerToken(int l) const {
  return KvBytesPerToken(l) / precision_.activation_bytes() *
         StatBytes(precision_.activation_bytes());
}

double CostModel::LogitsBytes(int l, std::int64_t s) const {
  if (layers_[l] != LayerKind::kHead) return 0;
  const double act = precision_.activation_bytes();
  if (FullLogitsLoss(options_.system)) {
    return Tokens(s) * static_cast<double>(model_.vocab_size()) / options_.tensor_size *
           (act + StatBytes(act));
  }
  const double columns = std::min<double>(
      kLossVocabSlice, static_cast<double>(model_.vocab_size()) / options_.tensor_size);
  // The backward's bf16 copy of the slice's d(logits) when activations are
  // narrower than fp32 (what the GEMMs read: HeadBackwardMemory).
  return Tokens(s) * columns * (StatBytes(act) + (act < StatBytes(act) ? act : 0));
}

// ---------------------------------------------------------- memory events ----

namespace {

TensorBytes SizesOf(double tokens, std::int64_t s, double act, const CostModelOptions& o) {
  TensorBytes b;
  b.tokens = tokens;
  b.seq_tokens = static_cast<double>(s);
  b.act = act;
  b.tensor_size = o.tensor_size;
  b.core_workspace = o.core_workspace;
  return b;
}

}  // namespace

MemorySegment CostModel::ForwardMemory(int l, std::int64_t s) const {
  const TensorBytes b = SizesOf(Tokens(s), s, precision_.activation_bytes(),
                                options_);
  // The framework's dropout masks: saved by the forward, or (recompute)
  // made again by the backward's replay.
  const double masks = Tokens(s) * DropoutMaskBytesPerToken(l);
  switch (layers_[l]) {
    case LayerKind::kEmbedding: {
      MemorySegment seg;  // the gathered rows
      seg.Add(BufferClass::kWorkspace, BoundaryActivationBytes(s));
      if (masks > 0) seg.Add(BufferClass::kActivations, masks);  // never recomputed
      return seg;
    }
    case LayerKind::kHead:
      return FullLogitsLoss(options_.system) ? HeadFullLogitsForwardMemory(model_, b)
                                             : HeadForwardMemory(model_, b);
    case LayerKind::kRecurrence:
    case LayerKind::kAttention: {
      MemorySegment seg = layers_[l] == LayerKind::kRecurrence
                              ? RecurrenceLayerForwardMemory(model_, b, Recomputed(l))
                              : AttentionLayerForwardMemory(model_, b, Recomputed(l));
      if (masks > 0 && !Recomputed(l)) seg.Add(BufferClass::kActivations, masks);
      return seg;
    }
  }
  return {};
}

MemorySegment CostModel::BackwardMemory(int l, std::int64_t s) const {
  const TensorBytes b = SizesOf(Tokens(s), s, precision_.activation_bytes(),
                                options_);
  const double masks = Tokens(s) * DropoutMaskBytesPerToken(l);
  switch (layers_[l]) {
    case LayerKind::kEmbedding: {  // a scatter-add into its gradient
      MemorySegment seg;
      if (masks > 0) seg.Add(BufferClass::kActivations, -masks);
      return seg;
    }
    case LayerKind::kHead:
      return FullLogitsLoss(options_.system) ? HeadFullLogitsBackwardMemory(model_, b)
                                             : HeadBackwardMemory(model_, b);
    case LayerKind::kRecurrence:
    case LayerKind::kAttention: {
      MemorySegment layer = layers_[l] == LayerKind::kRecurrence
                                ? RecurrenceLayerBackwardMemory(model_, b, Recomputed(l))
                                : AttentionLayerBackwardMemory(model_, b, Recomputed(l));
      if (masks <= 0) return layer;
      MemorySegment seg;
      if (Recomputed(l)) seg.Add(BufferClass::kActivations, masks);  // the replay's
      seg.Append(layer);
      seg.Add(BufferClass::kActivations, -masks);
      return seg;
    }
  }
  return {};
}

double CostModel::ForwardWorkspaceBytes(int l, std::int64_t s) const {
  return ForwardMemory(l, s).class_peak(BufferClass::kWorkspace);
}

double CostModel::BackwardWorkspaceBytes(int l, std::int64_t s) const {
  return BackwardMemory(l, s).class_peak(BufferClass::kWorkspace);
}

double CostModel::BoundaryActivationBytes(std::int64_t s) const {
  return Tokens(s) * model_.hidden_size() * precision_.activation_bytes();
}

}  // namespace stateflow::models

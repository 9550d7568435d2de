// The analytic cost and memory model of one model on one device kind: FLOPs,
// time and bytes per layer of the layer list (model.h) for one chunk of one
// microbatch, given the chunk's start c and length s (tokens), under a
// tensor-parallel degree and a recompute mode. Formulas, their derivations and
// which numbers are assumptions: docs/cost-model.md.
//
// Everything is per device (already divided by TP) and per microbatch
// (microbatch_size sequences). Every per-layer function depends on the layer
// `l` only through its kind, layers()[l] (callers may evaluate one layer of
// each kind and multiply; the simulator's cost tables do).
//
// Not a scheduler and not a simulator: it answers "how much", never "when".
//
//   Result<CostModel> cm = CostModel::Make(model, precision, cluster, opts);
//   double t = cm->ForwardTime(layer, c, s);
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer_class.h"
#include "common/status.h"
#include "models/kernel_costs.h"
#include "models/memory_segment.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"
#include "schedule/partition.h"

namespace stateflow::models {

enum class Recompute { kNone, kFull };

// The training system a schedule runs in (ScheduleSpec.system): it decides
// the head's output layer and loss path (docs/cost-model.md, "Systems").
//   kStateFlow     this project's runtime: the sliced loss (kLossVocabSlice
//                  columns at a time, within one pass), as the backend runs it.
//   kMegatronCore  Megatron-Core r0.12: the output layer makes the chunk's full
//                  logits (t, V/TP) in the activation dtype; the unfused
//                  vocab-parallel cross-entropy copies them to float32, turns
//                  the copy into the softmax in place and saves it for the
//                  backward (tensor_parallel/cross_entropy.py).
//   kMsSwift       ms-swift 3.6 trains these models through Megatron-Core
//                  (swift/megatron): the same head and loss path.
enum class System { kStateFlow, kMegatronCore, kMsSwift };

// "stateflow", "megatron-core" or "ms-swift" ("" means stateflow). Error
// names schedule.system and the known systems.
Result<System> ParseSystem(std::string_view text);
std::string_view SystemName(System system);
// Whether the system computes the loss over the full logits of a chunk (the
// frameworks) rather than vocabulary slices (StateFlow's runtime).
inline bool FullLogitsLoss(System system) { return system != System::kStateFlow; }
// Whether the system splits the layers over the pipeline stages evenly by
// count (the frameworks: models::EvenLayerStages) rather than balanced by
// their cost (StateFlow's runtime: models::AssignStages).
inline bool FrameworkLayerSplit(System system) { return system != System::kStateFlow; }

// The framework settings of `system` from `spec` (Scenario.framework): each
// unset field takes the system's default (Megatron-Core: vocabulary padded to
// a multiple of 128 * TP, hidden dropout 0.1, the data loader's attention
// mask; ms-swift: none of them); under kStateFlow all are off whatever
// `spec` says. Writes vocab_divisible_by, hidden_dropout and attention_mask
// of `options`. Error (one line naming the field): vocab_divisible_by
// outside [1, 4096], hidden_dropout outside [0, 1).
struct CostModelOptions;
Status FrameworkSettingsFor(System system, const pb::FrameworkSpec& spec,
                            CostModelOptions* options);

// What FrameworkSettingsFor decided, in words, for `cm`'s model (its padded
// vocabulary): "vocabulary 50688 (128 x TP), hidden dropout 0.1, attention
// mask", "vocabulary 50304, no dropout, no attention mask"; "" under
// kStateFlow.
class CostModel;
std::string FrameworkSettingsText(const CostModel& cm);

// StateFlow's sliced loss: the head computes logits and the cross-entropy over
// vocabulary slices of this many columns, so only one (t, slice) block of
// logits exists at a time, within one forward or backward (the backend's
// HeadLayer; docs/cost-model.md, section 3).
inline constexpr int kLossVocabSlice = 128;

// "none" or "full" ("" means none). Error names schedule.recompute.
Result<Recompute> ParseRecompute(std::string_view text);
std::string_view RecomputeName(Recompute recompute);  // "none" or "full"

// One matmul of a layer's forward, [t, k] x [k, n] for t tokens, before TP:
// column-parallel ones (input projections, the output layer) split n by TP,
// row-parallel ones (output projections, the MLP's down projection) split k
// (Megatron-LM's layout). Their 2 n k per token are the matmul terms of
// LayerFlopCoeffs' fwd_token; the backward runs each twice (input and
// weight gradients).
struct Gemm {
  double n = 0, k = 0;
  bool row_parallel = false;
  // The distinct [t, k] inputs the group's linears read (1: one input
  // shared, as q, k and v read one normalised x; 2: KDA's two low-rank up
  // projections, each from its own rank-r factor). FLOPs and time take the
  // group as one [t, k] x [k, n]; a split backward's W store keeps each
  // input (layer_formulas.h, WeightGradStoreElementsPerToken).
  double inputs = 1;
  // Of a column-parallel group's n, the columns every tensor rank computes
  // whole (Mamba-3's B, C and angle projections, KDA's low-rank downs): not
  // split by TP.
  double replicated = 0;
};

// One tensor rank's share of `g` under tensor parallelism `tensor_size`:
// k / TP for a row-parallel linear, the split columns / TP plus the
// replicated ones for a column-parallel group.
inline Gemm TensorShard(Gemm g, int tensor_size) {
  if (g.row_parallel) {
    g.k /= tensor_size;
  } else {
    g.n = (g.n - g.replicated) / tensor_size + g.replicated;
  }
  return g;
}

// The recurrence core's forward and backward FLOPs per token of one
// sequence, all heads, before TP (the chunked kernel's share of
// LayerFlopCoeffs: GdnCoreFlops or MambaCoreFlops, backward 2x plus the
// replay). 0 for other kinds.
struct CoreFlops {
  double fwd = 0, bwd = 0;
};

// Whose scratch the recurrence cores take (backend/device/ops.h, the
// *WorkspaceSize queries): the CPU kernels' (backend/kernels/gdn_core.h,
// mamba3_core.h: no forward scratch, the backward's entering states) or the
// grid devices' ("host-grid" and "cuda" share one: backend/device/
// grid_kernels/gdn_common.h, mamba3_core.h, every block's intermediate
// results of a pass at once).
enum class CoreWorkspace { kCpu, kGrid };

struct CostModelOptions {
  int tensor_size = 1;      // TP
  int data_size = 1;        // DP: replicas whose gradients are all-reduced
  // parallel.distributed_optimizer: optimizer state sharded over DP; the
  // gradient sync is a reduce-scatter of gradients and an all-gather of weights.
  bool distributed_optimizer = false;
  // parallel.overlap_grad_reduce and grad_bucket_size (0: Megatron's
  // default): the first stage's DP sync in buckets overlapped with its last
  // backward (OverlappedDataParallelSync).
  bool overlap_grad_reduce = false;
  std::int64_t grad_bucket_size = 0;
  // parallel.context_size (CP) and its attention split (zig-zag unless
  // context_contiguous): docs/cost-model.md, "Context parallelism".
  int context_size = 1;
  bool context_contiguous = false;
  int microbatch_size = 1;
  Recompute recompute = Recompute::kNone;
  System system = System::kStateFlow;
  // The framework's settings (Scenario.framework, FrameworkSettingsFor;
  // docs/cost-model.md, "Systems"); their values under kStateFlow are these
  // defaults, which change nothing.
  //   vocab_divisible_by  the vocabulary padded to a multiple of this * TP
  //                       (CostModel::Make pads model().vocab_size());
  //   hidden_dropout      > 0: the dropout masks (DropoutMaskBytesPerToken);
  //   attention_mask      the data loader's bool [B, 1, T, T] mask on the
  //                       stages holding the embedding or the head
  //                       (AttentionMaskBytes).
  int vocab_divisible_by = 1;
  double hidden_dropout = 0;
  bool attention_mask = false;
  // The recurrence core's state transition (docs/cost-model.md, section 2,
  // "State transition"): B_V, the tile of the value dimension, and
  // split-and-overlap.
  int st_tile = 64;
  bool st_overlap = false;
  // Whose recurrence-core scratch the memory events count: the CPU kernels'
  // or the grid devices' (train.device "host-grid" or "cuda").
  CoreWorkspace core_workspace = CoreWorkspace::kCpu;
};

// The state transition of one pass of a recurrence layer over one chunk
// (CostModel::StateTransition): its parallel work before and after the ST
// and the ST itself, in seconds at the whole device's rate, the fraction of
// the device the ST's tiles cover, and the time it adds to the pass.
struct StTiming {
  double before_s = 0;  // Pre (backward: Pre recompute and Out backward)
  double st_s = 0;      // ST at the whole device (backward: replay + ST bwd)
  double after_s = 0;   // Out (backward: Pre backward)
  double coverage = 1;  // u = min(1, tiles / compute_units)
  double tiles = 0;     // the ST's parallel units: B heads/TP ceil(d_v / B_V)
  double exposed_s = 0; // added to the pass: see docs/cost-model.md
  double hidden_s = 0;  // what split-and-overlap took off exposed_s (0 off)
};

// One pass of one layer over one chunk, term by term, as ForwardTime and
// BackwardTime add them (`stateflow simulate --explain` sums these). The
// kernel time, max(FLOPs at the device's rate, bytes / bandwidth), counts
// under compute_s or memory_s, whichever bound it; a backward under full
// recompute has its forward replay's terms added into the same fields, and
// that replay's total in recompute_s as well. So
//   total_s = compute_s + memory_s + st_exposed_s + tp_comm_s
// up to rounding (total_s is accumulated as the times are, so it equals
// ForwardTime / BackwardTime bit for bit); st_hidden_s and recompute_s are
// not added (the first is time saved, the second a share of the others).
struct PassTerms {
  double compute_s = 0;     // kernel time of a FLOP-bound pass
  double memory_s = 0;      // kernel time of a bytes-bound pass
  double st_exposed_s = 0;  // the state transition's exposed time
  double st_hidden_s = 0;   // what split-and-overlap hid of it
  double tp_comm_s = 0;     // tensor-parallel all-reduces
  double cp_comm_s = 0;     // context parallelism's exposed communication
  double recompute_s = 0;   // of the total: the forward replayed in backward
  double total_s = 0;
  // Of compute_s: the kernels timed at the cluster's kernel-cost tables'
  // rates (GEMMs, attention and recurrence cores; 0 without tables); the
  // rest of compute_s is on the efficiency curve.
  double table_s = 0;
};

// Split-and-overlap's saving on a recurrence pass whose core phases were
// measured one after another: parallel work before the ST (pre_s), the ST
// (st_s, measured: its exposure included, at coverage u = `coverage`), the
// parallel work after it (out_s). Two equal segments, Pre1 -> (ST1 || Pre2)
// -> (ST2 || Out1) -> Out2, a window with ST time x beside parallel work w
// taking max(x, w + u x):
//   saving = min(pre_s, X) / 2 + min(out_s, X) / 2,   X = (1 - u) st_s,
// the overlapped pass = pre_s + st_s + out_s - saving. The analytic model's
// (CostModel::StateTransition) with st_s = S / u. REQUIRES: 0 < coverage <= 1.
// Derivation and assumptions: docs/cost-model.md, section 2, "State
// transition", measured phases.
double MeasuredStOverlapSaving(double pre_s, double st_s, double out_s, double coverage);

// The precision of a run of the backend in `dtype` ("float32", "float64"):
// weights, gradients and activations in that type, AdamW's two moments as
// optimizer state (2 x the type), no master copy. "" means float32. Error
// (one line) names train.dtype and the known types.
Result<pb::PrecisionSpec> PrecisionForDtype(std::string_view dtype);

// A ring all-reduce of `bytes` (per rank) over `ranks` ranks on `link`:
//   2 (n - 1) / n * bytes / bandwidth + 2 (n - 1) * latency
// (n - 1 reduce-scatter and n - 1 all-gather steps, each moving bytes / n).
// 0 when ranks <= 1.
double RingAllReduceTime(double bytes, int ranks, const pb::LinkSpec& link);

// The distributed optimizer's shard of replica d of `replicas`: elements
// [begin, begin + count) of n laid end to end, n / replicas each and one
// more for the first n mod replicas (the backend's AdamW and the memory
// model share it). REQUIRES: 0 <= d < replicas, n >= 0.
struct Shard {
  std::int64_t begin = 0, count = 0;
};
Shard ShardOf(std::int64_t n, int replicas, int d);

class CostModel {
 public:
  // Validates the model (ValidateModel), precision (bytes > 0 after defaults)
  // and cluster (ValidateCluster).
  static Result<CostModel> Make(const pb::ModelSpec& model,
                                const pb::PrecisionSpec& precision,
                                const pb::ClusterSpec& cluster,
                                const CostModelOptions& options);

  const std::vector<LayerKind>& layers() const { return layers_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  const pb::ModelSpec& model() const { return model_; }
  const pb::ClusterSpec& cluster() const { return cluster_; }
  // The precision with defaults filled in.
  const pb::PrecisionSpec& precision() const { return precision_; }
  const CostModelOptions& options() const { return options_; }

  // ---- FLOPs of layer `l` on the chunk [c, c + s) ----
  double ForwardFlops(int l, std::int64_t c, std::int64_t s) const;
  // Backward (input and weight gradients), without recompute.
  double BackwardFlops(int l, std::int64_t c, std::int64_t s) const;
  // What backward re-runs under full recompute (the forward), else 0.
  double RecomputeFlops(int l, std::int64_t c, std::int64_t s) const;
  // Whether backward replays layer l's forward: blocks under full recompute
  // (the embedding and head are outside the recompute region, as in
  // Megatron-LM's full recompute of transformer layers).
  bool Recomputed(int l) const;

  // ---- time in seconds on the cluster's device ----
  // Whether layer l's pass times depend on where its chunk starts (c), not
  // only on its length (s): softmax attention's, through the causal pairs
  // the chunk attends to (and under CP their K/V ring). For every other
  // kind ForwardTime(l, c, s) == ForwardTime(l, 0, s), bit for bit (and the
  // backward's likewise; tested), which lets a memo key on the length alone.
  bool TimeDependsOnStart(int l) const { return layers_[l] == LayerKind::kAttention; }
  double ForwardTime(int l, std::int64_t c, std::int64_t s) const;
  // Includes recompute under full recompute.
  double BackwardTime(int l, std::int64_t c, std::int64_t s) const;
  // The same times term by term (their total_s is the time above).
  PassTerms ForwardTerms(int l, std::int64_t c, std::int64_t s) const;
  PassTerms BackwardTerms(int l, std::int64_t c, std::int64_t s) const;
  // The backward split in two (issue 27, the zero-bubble W pass): of
  // BackwardTime, the part that computes weight gradients only and can run
  // later (W), the rest being the input-gradient pass (I = BackwardTime -
  // WeightGradTime), which carries everything the previous stage or chunk
  // waits for: the input-gradient GEMMs, the recurrence or attention core
  // and the boundary-state gradient, the norms' and convolutions' backward
  // (their few elementwise weight-gradient FLOPs stay in I), the
  // tensor-parallel all-reduces and any recompute replay (which I runs
  // first). W is the weight-gradient GEMM of each linear, X^T dY: the same
  // 2 t n k FLOPs as its forward, timed at the kernel table's [k, t] x
  // [t, n] rate where there is one (ComputeTime's dW term); the embedding's
  // whole backward (it has no input gradient); none of the head's: its
  // output layer's weight gradient is made slice by slice inside the loss
  // path, which never holds the whole logits gradient (so W keeps nothing
  // of it). At most the own backward's kernel time, so that I >= 0.
  double WeightGradTime(int l, std::int64_t c, std::int64_t s) const;
  // What I leaves alive until W, in bytes, for s tokens (one CP device's, as
  // the memory functions below take them): each linear's input X and output
  // gradient dY (t (k + n) elements of activation precision per GEMM, after
  // the TP split; one GEMM per distinct input, as LayerGemms groups them);
  // the embedding's output gradient (t h); nothing for the head. The
  // backend's split keeps exactly these (the weight-gradient store of the
  // zero-bubble implementations).
  double WeightGradRetainedBytes(int l, std::int64_t s) const;
  // Tensor-parallel all-reduces of one pass of layer l over s tokens, on the
  // intra-node link (0 when TP = 1). Megatron-LM style: a block all-reduces
  // its [t, h] output twice in forward (after the mixer's and the MLP's
  // row-parallel projections) and its [t, h] input gradient twice in
  // backward (the column-parallel input projections); the vocab-parallel
  // embedding once in forward; the head's cross-entropy three fp32 values
  // per token in forward (max, target logit, sum of exponentials) and the
  // output layer's input gradient once in backward. ForwardTime and
  // BackwardTime include these (a recompute replay its forward's again).
  // `link`: the TP group's (nullptr: the cluster's intra-node link; a
  // replayed cost table's measured link, sim/cost_source.cc).
  double TensorParallelForwardCommTime(int l, std::int64_t s,
                                       const pb::LinkSpec* link = nullptr) const;
  double TensorParallelBackwardCommTime(int l, std::int64_t s,
                                        const pb::LinkSpec* link = nullptr) const;

  // ---- context parallelism ----
  // The tokens of an s-token chunk on one CP device: ceil(s / CP) (the
  // largest share; s when CP = 1). Every per-device size of a chunk (its
  // activations, messages, workspace; the K/V buffer's T) is counted at it.
  std::int64_t LocalTokens(std::int64_t s) const;
  // The link of a CP group: TP * CP consecutive devices (Megatron-LM's order
  // tp-cp-dp-pp), intra-node when they fit in one node.
  const pb::LinkSpec& ContextParallelLink() const;
  // The exposed CP communication of one pass of layer l over the chunk
  // [c, c + s) whose compute takes `compute_s` on each device: a
  // recurrence layer's ring all-gather of every device's
  // ContextParallelStateBytes (CP - 1 steps of a latency plus those bytes),
  // which the layer waits for; an
  // attention layer's ring of CP - 1 steps, each the K/V (backward: also
  // dK/dV) of (c + s) / CP tokens, overlapped with the pass's compute:
  // max(0, ring - compute_s). 0 when CP = 1 and for other layers.
  double ContextParallelCommTime(int l, std::int64_t c, std::int64_t s, bool backward,
                                 double compute_s) const;
  // What one CP device contributes to a recurrence layer's all-gather
  // (flash-linear-attention's KCP for GDN and KDA): its span's state with a
  // zero entering state (the boundary state's bytes, conv tail included)
  // and its span's transition, a d_k x d_k fp32 matrix a head for a delta
  // rule (GDN, KDA, DeltaNet), one decay a head for Mamba-3. 0 for other
  // layers.
  double ContextParallelStateBytes(int l) const;
  // The recurrence core's extra FLOPs on one CP device over s tokens (0 when
  // CP = 1 and for other layers): one more pass of the state recurrence (the
  // contribution with a zero entering state; backward: of the state
  // gradient's) and, for a delta rule, the transition (2 d_k^2 a token and
  // head, and the chain product's 2 d_k^3 per 64-token kernel chunk).
  double ContextParallelExtraFlops(int l, std::int64_t s, bool backward) const;

  // ---- data parallelism ----
  // The link of one stage's DP all-reduce. Devices are numbered TP innermost,
  // then DP, then PP (Megatron-LM's default order), so a stage's DP group
  // spans TP * DP consecutive devices: the intra-node link when
  // TP * DP <= devices_per_node, else the inter-node link.
  const pb::LinkSpec& DataParallelLink() const;
  // The gradient all-reduce of layers [first, last) across the DP replicas
  // at the end of the step: a ring all-reduce of their gradient bytes (per
  // TP rank) on DataParallelLink(); with the distributed optimizer a
  // reduce-scatter of the gradient bytes and an all-gather of the weight
  // bytes, each half of a ring all-reduce of its bytes (a ring moves
  // (DP - 1) / DP of the bytes in DP - 1 steps for each, 2 (DP - 1) / DP in
  // 2 (DP - 1) for the all-reduce; NCCL's bus bandwidth is defined so).
  // 0 when DP = 1.
  // `link`, when given, replaces DataParallelLink() and its measured
  // all-reduce curve: a ring on that link (a replayed cost table's measured
  // link).
  double DataParallelSyncTime(int first, int last, const pb::LinkSpec* link = nullptr) const;
  // The same sync overlapped with the backward that makes the gradients of
  // layers [first, last) final (Megatron-Core's overlap_grad_reduce on
  // pipeline rank 0): that backward starts at 0, spends `lead_s` before its
  // first layer (the action's fixed overhead), then runs layers last - 1
  // down to first, layer l taking backward_s[l - first]. Buckets are filled
  // from the last layer down, a bucket closing once it holds at least
  // GradBucketSize() parameters (at layer boundaries; Megatron closes them at
  // parameter boundaries) or at the first layer; each is ready when its
  // lowest layer's backward ends, and the buckets' all-reduces (reduce-
  // scatters under the distributed optimizer) run one after another on the
  // DP group, each starting when it is ready and the previous one is done.
  // Returns the time from 0 until the last one ends, plus, under the
  // distributed optimizer, the all-gather of the weights (not overlapped).
  // 0 when DP x CP = 1. `link` as for DataParallelSyncTime.
  // REQUIRES: backward_s.size() == last - first.
  double OverlappedDataParallelSync(int first, int last, const std::vector<double>& backward_s,
                                    double lead_s, const pb::LinkSpec* link = nullptr) const;
  // Parameters per gradient bucket: options().grad_bucket_size, or
  // Megatron-Core's default max(40,000,000, 1,000,000 x DP x CP).
  double GradBucketSize() const;
  // The parameters of layers [first, last) one DP replica's optimizer
  // updates: all of them, or with the distributed optimizer (DP > 1)
  // replica 0's shard, ceil(params / DP).
  double StageOptimizerParams(int first, int last) const;
  // The optimizer state of layers [first, last) on one DP replica:
  // OptimizerBytes summed, or with the distributed optimizer (DP > 1) the
  // largest replica's shard, ceil(params / DP) parameters' worth: replica
  // d holds ShardOf(params, DP, d) (below) of the stage's parameters laid
  // end to end, so replica 0 holds the most.
  double StageOptimizerBytes(int first, int last) const;

  // ---- bytes ----
  double ParamCount(int l) const;  // per device (after TP)
  double WeightBytes(int l) const;
  double GradientBytes(int l) const;
  double OptimizerBytes(int l) const;
  // Saved by forward for backward, freed when the chunk's backward ends (the
  // activations of ForwardMemory). 0 for the embedding (its token ids belong
  // to the batch).
  double StoredActivationBytes(int l, std::int64_t s) const;
  // The recurrent state and conv tail a chunk hands to the next (0 for
  // attention, embedding, head). A state gradient has the same size.
  double BoundaryStateBytes(int l) const;
  // K/V of one token position (microbatch_size sequences) of one
  // softmax-attention layer (0 for other layers): its K/V buffer holds
  // KvBytesPerToken * seq_len from the microbatch's first forward to its last
  // backward.
  double KvBytesPerToken(int l) const;
  // The gradient accumulator of that K/V buffer (statistic precision: later
  // chunks' backward adds into earlier positions' dK, dV): held from the
  // microbatch's first backward to its last. 0 for other layers.
  double KvGradBytesPerToken(int l) const;
  // The most logits bytes the head holds at once (0 for other layers). Under
  // System::kStateFlow one vocabulary slice (t, min(128, V/TP)) in float32,
  // plus in the backward, when activations are narrower (bf16), its
  // d(logits) in the activation dtype; only within the head's forward or
  // backward, never from one to the other.
  // Under a framework (FullLogitsLoss) the full logits (t, V/TP) in the
  // activation dtype beside their float32 copy, within the forward; the
  // float32 softmax (t, V/TP) stays from the forward to the backward.
  double LogitsBytes(int l, std::int64_t s) const;
  // Bytes of the activation (or its gradient) sent between stages for s tokens.
  double BoundaryActivationBytes(std::int64_t s) const;
  // The framework's dropout masks of layer l per token (options().hidden_dropout
  // > 0; else 0): one byte per element of each [t, h] dropout, as
  // torch.nn.functional.dropout saves its mask. The embedding's dropout (h),
  // kept from its forward to its backward; a block's two bias-dropout-adds
  // (2 h), stored with its activations, or within its backward's replay under
  // recompute; the head: none.
  double DropoutMaskBytesPerToken(int l) const;
  // The data loader's causal mask of one microbatch (options().attention_mask;
  // else 0): bool [B, 1, T / CP, T], on a stage holding the embedding or the
  // head (memory_model.h says when it lives).
  double AttentionMaskBytes(std::int64_t seq_len) const;

  // ---- memory events of one pass of one layer (memory_segment.h) ----
  // Layer l's forward over a chunk of s tokens, in the order the backend
  // allocates and frees: what it saves (kActivations), its transient tensors
  // (kWorkspace), logits slices (kLogits); it ends holding its output (t, h)
  // in kWorkspace (the head: nothing). Its input, boundary states and K/V
  // buffers are the stage's (memory_model.h). Every layer kind lists the
  // backend's tensors one by one (layer_formulas.h: GDN, Mamba-3 and
  // attention layers, the head; the embedding's one output here), as
  // docs/cost-model.md section 3 lists them.
  MemorySegment ForwardMemory(int l, std::int64_t s) const;
  // Its backward, including a recompute's replay: frees what the forward
  // saved and ends holding the input gradient (t, h) (the embedding: nothing).
  MemorySegment BackwardMemory(int l, std::int64_t s) const;
  // The highest workspace within one pass of layer l, its output included.
  double ForwardWorkspaceBytes(int l, std::int64_t s) const;
  double BackwardWorkspaceBytes(int l, std::int64_t s) const;
  // The bytes a pass of layer l over s tokens must at least move (its
  // weights once, its input and output; backward also the gradient
  // accumulators): the memory-bound floor of its time.
  double MinForwardBytes(int l, std::int64_t s) const;
  double MinBackwardBytes(int l, std::int64_t s) const;

  // Coefficients of the paper's Cost_i for layers [first, last): W_tok and
  // W_soft in FLOPs (forward + backward).
  schedule::ChunkCostCoefficients ChunkCoefficients(int first, int last) const;

  // The ST model of layer l's forward (backward = false) or backward over s
  // tokens: zeros but coverage 1 for non-recurrence layers and when the
  // device has no compute_units. ForwardTime / BackwardTime add exposed_s.
  StTiming StateTransition(int l, std::int64_t s, bool backward) const;

  // Fraction of peak reached by a kernel over `tokens` tokens (the cluster's
  // efficiency curve; 1 if it has none).
  double Efficiency(double tokens) const;

 private:
  // Per layer kind, per sequence, already divided by TP.
  struct KindTable {
    double fwd_token = 0, fwd_pair = 0, bwd_token = 0, bwd_pair = 0;  // FLOPs
    double params = 0;
    double stored_per_token = 0;  // bytes, no recompute
    double boundary_bytes = 0;
    double kv_per_token = 0;  // bytes, activation precision
    std::vector<Gemm> gemms;  // forward matmuls, n and k after the TP split
    double w_store_per_token = 0;  // WeightGradStoreElementsPerToken
    CoreFlops core;           // recurrence core per token, after TP
  };

  CostModel() = default;
  void FillTables();
  const KindTable& Table(int l) const;
  // One pass's own terms (no recompute): its kernel time max(compute, bytes
  // / bandwidth) for s tokens, compute the pass's FLOPs at peak *
  // efficiency, or, when the cluster has kernel costs, its GEMMs, attention
  // and recurrence cores at their measured rates and the rest at the curve
  // (ComputeTime); then the ST's exposed time and the TP all-reduces.
  PassTerms OwnTerms(int l, std::int64_t c, std::int64_t s, bool backward) const;
  // `table_s` (may be null): of the result, the time at the kernel tables'
  // rates.
  double ComputeTime(int l, std::int64_t c, std::int64_t s, bool backward, double flops,
                     double* table_s = nullptr) const;
  // A ring all-reduce on `link`; on the intra-node link with measured
  // all-reduce bus bandwidth, 2 (n - 1) / n * bytes / busbw(bytes) instead.
  double AllReduceTime(double bytes, int ranks, const pb::LinkSpec& link) const;
  double Tokens(std::int64_t s) const {
    return static_cast<double>(s) * options_.microbatch_size;
  }

  pb::ModelSpec model_;
  pb::PrecisionSpec precision_;
  pb::ClusterSpec cluster_;
  KernelRates rates_;  // cluster_.kernel_costs(), prepared once
  // The attention and recurrence kernels' rate curves at the model's head
  // dims, [backward]: rates_.SeqCurve chosen once (empty: no points).
  std::array<KernelRates::Curve, 2> attention_curve_, recurrence_curve_;
  CostModelOptions options_;
  std::vector<LayerKind> layers_;
  std::array<KindTable, 4> tables_;  // indexed by LayerKind
};

}  // namespace stateflow::models

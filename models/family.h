// A recurrent model family on the analytic side: everything the cost and
// memory model needs to know about one kind of recurrence mixer (Gated
// DeltaNet, Mamba-3, Kimi Delta Attention), declared in one place
// (models/families/<name>.cc) and found through the registry by the value of
// `model.architecture`. The architecture string is compared here and nowhere
// else: every other caller asks FamilyOf(model).
//
// A family declares, for one layer of its kind (mixer plus the block's MLP
// half) and one sequence, before any TP split unless said otherwise: its
// fields' checks, its parameters, its FLOPs per pass and per phase (Pre / ST
// / Out), its GEMMs, its boundary state, and the one list of its memory
// events (what a chunk's forward saves and allocates, what its backward
// allocates and frees, in the backend's order), from which the simulator's
// per-token stored sizes are derived too (layer_formulas.h).
//
// Not the backend's layer or kernels (backend/families/registry.h has the
// other half of a family), not softmax attention, the embedding or the head
// (layer kinds of every model: layer_formulas.h).
//
//   SF_ASSIGN_OR_RETURN(const Family* f, FamilyOf(model));
//   MemorySegment fwd = f->ForwardMemory(model, bytes, /*recompute_full=*/false);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "models/cost_model.h"
#include "models/memory_segment.h"
#include "proto/stateflow.pb.h"

namespace stateflow::models {

struct TensorBytes;  // layer_formulas.h

// The recurrence core's FLOPs per token of one sequence, all heads, before
// TP, split as the paper's Pre / ST / Out (the kernels' block counts with
// L = T_C): forward pre, st, out; backward out_bwd (Out backward), st_bwd
// (ST backward, beside the ST replay), pre_bwd (Pre backward). Only the
// state-transition model of docs/cost-model.md section 2 uses them.
struct StFlops {
  double pre = 0, st = 0, out = 0;
  double out_bwd = 0, st_bwd = 0, pre_bwd = 0;
};

class Family {
 public:
  virtual ~Family() = default;

  // The value of model.architecture that selects this family ("gdn").
  virtual std::string_view name() const = 0;
  // One line for listings: "Gated DeltaNet (scalar-gated delta rule)".
  virtual std::string_view description() const = 0;
  // The KernelCosts recurrence table whose rates this family's core takes
  // (models/kernel_costs.h; "gdn", "mamba3", "kda"), and the head dim the
  // table is read at.
  virtual std::string_view kernel_name() const = 0;
  virtual double KernelHeadDim(const pb::ModelSpec& model) const = 0;

  // Checks the fields this family reads beyond the ones every model has
  // (ValidateModel checks num_layers, hidden_size, num_heads, mlp_size,
  // vocab_size, conv_width): ranges, and what TP must divide. Errors name
  // the field.
  virtual Status Validate(const pb::ModelSpec& model, int tensor_size) const = 0;

  // Parameters of the mixer: the block without its MLP and the MLP's norm
  // (MlpAndNormsParamCount), with the mixer's own pre-norm.
  virtual double MixerParams(const pb::ModelSpec& model) const = 0;
  // Of those, the ones tensor parallelism keeps whole on every TP rank
  // (backend/layers/tensor_parallel.h: what no head owns -- a norm shared by
  // the heads, Mamba-3's one B/C group, a bias of the row-parallel output;
  // not the mixer's pre-norm, counted by MlpAndNormsParamCount).
  virtual double MixerReplicatedParams(const pb::ModelSpec& model) const = 0;
  // FLOPs per token, forward, all heads: the mixer outside its core
  // (projections, convolutions, gates, norms; not the MLP half), the core,
  // and what the core's backward does beyond twice its forward (the replay
  // of the block states).
  virtual double DenseFlops(const pb::ModelSpec& model) const = 0;
  virtual double CoreFlops(const pb::ModelSpec& model) const = 0;
  virtual double ReplayFlops(const pb::ModelSpec& model) const = 0;
  virtual StFlops PhaseFlops(const pb::ModelSpec& model) const = 0;
  // The mixer's matmuls (Gemm, cost_model.h): the input projections as one,
  // then the output projection. The MLP's are the block's.
  virtual std::vector<Gemm> MixerGemms(const pb::ModelSpec& model) const = 0;

  // The allocations and frees, in order, of one pass of one layer over one
  // chunk, as the backend's layer makes them (the layer input copied, every
  // saved tensor, every transient, the core's device scratch, the MLP half),
  // boundary states excluded (the stage adds them: memory_model.h).
  // recompute_full: the forward saves only its input; the backward replays
  // the forward (its tensors transient) first.
  virtual MemorySegment ForwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                      bool recompute_full) const = 0;
  virtual MemorySegment BackwardMemory(const pb::ModelSpec& model, const TensorBytes& b,
                                       bool recompute_full) const = 0;
  // The boundary state of one sequence after TP, in bytes (the layer's
  // State: Zeros allocates exactly this).
  virtual double BoundaryStateBytes(const pb::ModelSpec& model, double activation_bytes,
                                    int tensor_size) const = 0;
};

// The registered families, in registration order (models/families/registry.cc).
const std::vector<const Family*>& Families();
// The family named `architecture`, or nullptr.
const Family* FindFamily(std::string_view architecture);
// "gdn, mamba3, kda": for error messages.
std::string FamilyNames();
// The family of model.architecture. Error: "model.architecture: unknown
// 'foo' (known: gdn, mamba3, kda)".
Result<const Family*> FamilyOf(const pb::ModelSpec& model);
// REQUIRES: ValidateModel(model).ok() (so the family exists).
const Family& FamilyOfValid(const pb::ModelSpec& model);

}  // namespace stateflow::models

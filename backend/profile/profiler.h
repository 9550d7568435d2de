// The compute half of `stateflow profile`: every layer kind of a model timed
// forward and backward at every requested chunk length under every
// requested recompute mode (layer_timer.h), and the per-parameter optimizer
// time, as the samples of a CostTable (proto/stateflow.proto) that the
// simulator replays (sim/cost_table.h).
//
// Not the link (link_timer.h, which needs a second MPI rank), not provenance
// and not the choice of lengths: the command line derives them from a
// scenario (tools/profile_command.cc).
//
//   ProfileRequest req{.model = model, .tokens = {32, 64}, .recompute = {Recompute::kNone}};
//   SF_ASSIGN_OR_RETURN(pb::CostTable table, ProfileLayers(req, nullptr));
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/device/device.h"
#include "backend/profile/layer_timer.h"
#include "common/status.h"
#include "models/cost_model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::backend {

struct ProfileRequest {
  pb::ModelSpec model;
  std::vector<std::int64_t> tokens;            // chunk lengths s, each timed
  // Softmax attention's chunks: (length s, prefix c) pairs, each timed (its
  // cost depends on both); needed when the model has attention layers.
  std::vector<std::pair<std::int64_t, std::int64_t>> attention_chunks;
  std::vector<models::Recompute> recompute;    // modes, each timed
  int microbatch_size = 1;                     // B sequences per timed chunk
  std::string dtype = "float32";               // or "float64"
  TimingOptions timing;
  Device* device = nullptr;                    // where to time; nullptr: the CPU
  // schedule.st_overlap: the whole-layer times of recurrence layers with
  // the core split and overlapped (the phases are timed sequentially
  // either way); recorded in CostTable.st_overlap.
  bool st_overlap = false;
  // schedule.st_tile: the recurrence layers' ST tile B_V, in the whole-layer
  // times and the phases alike; recorded in CostTable.st_tile.
  int st_tile = 0;
  // parallel.tensor_size: one tensor rank's share of each layer, its sums
  // left out (LayerTimer); recorded in CostTable.tensor_size.
  int tensor_size = 1;
};

// Called after each repetition and after the optimizer, with the count done
// and the total.
using ProfileProgress = std::function<void(int done, int total)>;
// Called with one line per timing step (a layer module built, one
// repetition's passes, split, phases; the optimizer) and its wall seconds,
// as each ends (the profile command's --verbose).
using ProfileTrace = std::function<void(const std::string& line)>;

// A CostTable with `model`, `dtype`, `microbatch_size`, one CostSample per
// (layer kind, pass, mode, length; attention: length and prefix) -- median,
// p10, p90 of the kept repetitions -- and
// optimizer_s_per_param (median); recurrence samples (GDN, Mamba-3) also
// carry the core's phases (pre_s, st_s, out_s: medians of
// LayerTimer::TimePhasesOnce, timed in the same repetitions); st_overlap and
// st_tile as requested.
// Link and provenance are left empty.
// Repetitions are interleaved: each one times every (kind, mode, length)
// once (LayerTimer), so that a burst of load on a shared machine spreads
// over every sample instead of spoiling a few.
// Errors: no lengths or modes, a length < 1, an unknown dtype (names
// --dtype), and the timer's (an unsupported model names its field).
Result<pb::CostTable> ProfileLayers(const ProfileRequest& request,
                                    const ProfileProgress& progress,
                                    const ProfileTrace& trace = nullptr);

// The distinct layer kinds of the model's layer list, in list order.
std::vector<models::LayerKind> LayerKindsOf(const pb::ModelSpec& model);

}  // namespace stateflow::backend

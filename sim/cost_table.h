// Reading a measured CostTable (proto/stateflow.proto) for replay: checks it
// (no negative or non-finite time, known layer kinds and passes, core phases
// only on recurrence samples, a model whose layer shapes match the
// scenario's) and answers the time of one layer kind's
// pass over a chunk by interpolating between measured chunk lengths, linear in
// tokens (recurrence and dense work are linear in tokens). A length outside
// the measured range is an error naming the kind, pass and range, never an
// extrapolation.
//
// Not a cost source by itself: MakeReplayCostSource (cost_source.h) sums these
// times over each stage's layers.
//
//   Result<CostTableIndex> index = CostTableIndex::Make(table, "costs.textproto");
//   Result<double> t = index->Time(LayerKind::kRecurrence, "forward", Recompute::kNone, 512, 0);
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "models/cost_model.h"
#include "models/model.h"
#include "proto/stateflow.pb.h"

namespace stateflow::sim {

// A recurrence pass's core phases as measured (CostSample pre_s, st_s,
// out_s), interpolated like the pass's time; `measured` false when the table
// has none there (a table written before phases, or a Mamba-3 model).
struct CorePhases {
  double pre_s = 0, st_s = 0, out_s = 0;
  bool measured = false;
};

class CostTableIndex {
 public:
  // Errors name `source` and the sample ("costs.textproto: samples[3].median_s
  // is negative").
  static Result<CostTableIndex> Make(const pb::CostTable& table, std::string_view source);

  // Seconds of `pass` ("forward" or "backward") of one layer of `kind` over a
  // chunk of `tokens` tokens after `prefix` tokens, as measured under
  // `recompute`.
  Result<double> Time(models::LayerKind kind, std::string_view pass,
                      models::Recompute recompute, double tokens, double prefix) const;

  // The core's phases of a recurrence `pass` at `tokens` (linear in tokens
  // between the measured lengths, as Time; measured only when both
  // neighbouring samples have them). Errors: Time's.
  Result<CorePhases> Phases(std::string_view pass, models::Recompute recompute,
                            double tokens) const;

  // CostTable.st_overlap: the whole-layer times were measured with the core
  // split and overlapped. CostTable.st_tile: the B_V they ran at (0: unset).
  bool st_overlap() const { return st_overlap_; }
  int st_tile() const { return st_tile_; }

  const pb::LinkSpec& link() const { return link_; }
  // The TP sums' link (CostTable.tensor_link), or link() in a table without
  // one.
  const pb::LinkSpec& tensor_link() const { return has_tensor_link_ ? tensor_link_ : link_; }
  double optimizer_s_per_param() const { return optimizer_s_per_param_; }
  // The TP degree the layers were measured at (CostTable.tensor_size, >= 1).
  int tensor_size() const { return tensor_size_; }
  const std::string& source() const { return source_; }

 private:
  // (kind, pass, recompute) -> prefix -> samples sorted by tokens.
  using Key = std::tuple<std::string, std::string, std::string>;
  struct Point {
    double tokens = 0, seconds = 0;
    CorePhases phases;
    bool operator<(const Point& o) const { return tokens < o.tokens; }
  };
  using Curve = std::vector<Point>;  // sorted by tokens
  // The measured points around `tokens` and the weight of the upper one.
  struct Bracket {
    const Point* lo;
    const Point* hi;
    double w;
  };
  Result<Bracket> Find(models::LayerKind kind, std::string_view pass,
                       models::Recompute recompute, double tokens, double prefix) const;

  std::string source_;
  std::map<Key, std::map<double, Curve>> curves_;
  pb::LinkSpec link_;
  pb::LinkSpec tensor_link_;
  bool has_tensor_link_ = false;
  double optimizer_s_per_param_ = 0;
  int tensor_size_ = 1;
  bool st_overlap_ = false;
  int st_tile_ = 0;
};

// Checks that the table was measured on a model with the same layer shapes as
// `model` (the name may differ) and at the scenario's `microbatch_size`. The
// error names the first differing field.
Status CheckCostTableModel(const pb::CostTable& table, const pb::ModelSpec& model,
                           std::string_view source, int microbatch_size);

// "embedding", "recurrence", "attention", "head".
std::string_view CostKindName(models::LayerKind kind);

// "recurrence/forward/none/64/0": what a sample measured (kind, pass,
// recompute mode, tokens, prefix), equal for the same measurement in two
// tables.
std::string CostSampleKey(const pb::CostSample& sample);

// How MergeCostTables combines the medians that several tables measured for
// one sample, and their optimizer times.
enum class MergeStatistic {
  // The mean: tables timed at the same moment by concurrent processes
  // (`profile --concurrent K`, one per core as the ranks of a K-stage run):
  // each process is one stage's core, and their mean is the cost a stage
  // sees on average.
  kMeanOverConcurrentProcesses,
  // The median: tables timed one after another (`validate --rounds`, one
  // profile before each run): a round that a busy machine slowed down moves
  // it less than a mean.
  kMedianOverRounds,
};

// One table from several: every sample any of them measured (by
// CostSampleKey, in the order of first appearance), its median_s (and pre_s, st_s, out_s) the
// `statistic` of the medians of the tables that measured it, p10_s the
// lowest, p90_s the highest, repetitions summed; optimizer_s_per_param the
// `statistic` of theirs; everything else (model, link, notes, provenance)
// the first table's. `spread` (may be null) gets the largest ratio - 1 of
// the highest to the lowest median of any sample (0 when all agree).
// REQUIRES: tables non-empty.
pb::CostTable MergeCostTables(const std::vector<pb::CostTable>& tables, MergeStatistic statistic,
                              double* spread = nullptr);

// Sorts the samples by (kind, recompute, pass, tokens, prefix).
void SortCostSamples(pb::CostTable* table);

// The table in text format, opened by comment lines saying what it is and
// how to replay it.
std::string CostTableText(const pb::CostTable& table);

}  // namespace stateflow::sim

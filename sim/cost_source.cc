#include "sim/cost_source.h"

#include "models/memory_model.h"
#include "sim/cost_table.h"

#include <algorithm>
#include <cassert>
#include <optional>

namespace stateflow::sim {
namespace {

using schedule::Action;
using schedule::Pass;

// The layers [first, last) grouped by kind: one representative layer of each
// kind and how many there are. The cost model's per-layer functions depend
// on a layer only through its kind (models/cost_model.h), so a stage's sums
// over layers are sums over at most four kinds.
struct KindGroup {
  int layer = 0;
  int count = 0;
};

std::vector<KindGroup> GroupByKind(const models::CostModel& cm,
                                   const models::StageLayers& layers) {
  std::vector<KindGroup> groups;
  for (int l = layers.first; l < layers.last; ++l) {
    auto same = std::find_if(groups.begin(), groups.end(), [&](const KindGroup& g) {
      return cm.layers()[g.layer] == cm.layers()[l];
    });
    if (same == groups.end()) {
      groups.push_back({l, 1});
    } else {
      ++same->count;
    }
  }
  return groups;
}

// One layer's forward, backward and weight-gradient time on one chunk.
struct KindTimes {
  double forward_s = 0;
  double backward_s = 0;
  double weight_s = 0;  // of backward_s: CostModel::WeightGradTime
};

// The cost model's times per (layer kind, chunk), each computed once and
// shared by every stage holding a layer of that kind (the time depends on a
// layer only through its kind); from the shared memo when there is one.
class ChunkTimes {
 public:
  ChunkTimes(const models::CostModel& cm, const schedule::Partition& partition,
             models::LayerTimeCache* shared)
      : cm_(cm),
        partition_(partition),
        shared_(shared),
        times_(4 * static_cast<std::size_t>(partition.num_chunks())) {}
  const KindTimes& Of(int l, int i) {
    std::optional<KindTimes>& t = times_[4 * static_cast<std::size_t>(i) +
                                         static_cast<std::size_t>(cm_.layers()[l])];
    if (!t) {
      const std::int64_t c = partition_.start(i), s = partition_.length(i);
      if (shared_ != nullptr) {
        const models::LayerTimeCache::Times& m = shared_->Get(l, c, s);
        t = KindTimes{m.forward_s, m.backward_s, m.weight_s};
      } else {
        t = KindTimes{cm_.ForwardTime(l, c, s), cm_.BackwardTime(l, c, s),
                      cm_.WeightGradTime(l, c, s)};
      }
    }
    return *t;
  }

 private:
  const models::CostModel& cm_;
  const schedule::Partition& partition_;
  models::LayerTimeCache* shared_;  // may be null
  std::vector<std::optional<KindTimes>> times_;  // (N, 4 kinds)
};

// An action's memory segment as the engine applies it: the live bytes at the
// segment's first peak when the action starts, the rest when it ends.
MemoryEffect TwoPoints(const models::MemorySegment& seg) {
  ClassBytes at_end{};
  for (int c = 0; c < kNumBufferClasses; ++c) at_end[c] = seg.net()[c] - seg.at_peak()[c];
  return MemoryEffect{MemoryDelta(seg.at_peak()), MemoryDelta(at_end)};
}

// Per (stage, chunk) tables shared by both sources: memory always comes from
// the analytic model.
class TableCostSource : public CostSource {
 public:
  explicit TableCostSource(const SimSetup& setup)
      : stages_(static_cast<int>(setup.stage_layers.size())),
        chunks_(setup.partition.num_chunks()),
        forward_s_(Size()),
        backward_s_(Size()),
        weight_s_(setup.split_backward ? Size() : 0),
        transfer_latency_s_(Size()),
        transfer_occupancy_s_(Size()),
        forward_memory_(Size()),
        backward_memory_(Size()),
        weight_memory_(setup.split_backward ? Size() : 0),
        split_(setup.split_backward),
        static_(stages_),
        sync_s_(stages_, 0.0),
        setup_cost_model_(setup.cost_model) {
    const models::CostModel& cm = *setup.cost_model;
    const pb::LinkSpec& link = cm.cluster().pipeline_link();
    assert(setup.memory_cache == nullptr ||
           setup.memory_cache->cost_model().num_layers() == cm.num_layers());
    std::optional<models::ActionMemoryCache> own_cache;
    if (setup.memory_cache == nullptr) own_cache.emplace(cm);
    models::ActionMemoryCache& memory = setup.memory_cache ? *setup.memory_cache : *own_cache;
    assert(setup.time_cache == nullptr ||
           setup.time_cache->cost_model().num_layers() == cm.num_layers());
    ChunkTimes times(cm, setup.partition, setup.time_cache);
    first_layer_ = setup.stage_layers.empty() ? 0 : setup.stage_layers[0].first;
    const double overhead = cm.cluster().device().action_overhead_s();
    for (int r = 0; r < stages_; ++r) {
      const models::StageLayers& layers = setup.stage_layers[r];
      const std::vector<KindGroup> kinds = GroupByKind(cm, layers);
      sync_s_[r] = cm.DataParallelSyncTime(layers.first, layers.last);
      static_[r] = models::StaticStageBytes(cm, layers);
      for (int i = 0; i < chunks_; ++i) {
        const std::int64_t s = setup.partition.length(i);
        const int k = Key(r, i);
        for (const KindGroup& g : kinds) {
          const KindTimes& t = times.Of(g.layer, i);
          forward_s_[k] += g.count * t.forward_s;
          backward_s_[k] += g.count * t.backward_s;
          if (split_) weight_s_[k] += g.count * t.weight_s;
        }
        if (split_) backward_s_[k] -= weight_s_[k];  // I
        // The framework's fixed cost per action (DeviceSpec.action_overhead_s;
        // 0 in the presets). A replayed table's measured times hold it already.
        forward_s_[k] += overhead;
        backward_s_[k] += overhead;
        if (split_) weight_s_[k] += overhead;
        if (r == 0) {  // the first stage's layers one by one (overlap_grad_reduce)
          for (int l = layers.first; l < layers.last; ++l) {
            first_stage_layer_backward_s_.push_back(times.Of(l, i).backward_s);
          }
        }
        const double bytes = cm.BoundaryActivationBytes(cm.LocalTokens(s));  // one CP device's
        transfer_occupancy_s_[k] = bytes / link.bandwidth_bytes_per_s();
        transfer_latency_s_[k] = link.latency_s() + transfer_occupancy_s_[k];
        // The stage's memory model (models/memory_model.h): each action's
        // allocations and frees summarised as the live bytes at its peak
        // (applied at its start) and the rest (at its end), which keeps the
        // stage's peak total and the bytes per class at that peak exact.
        forward_memory_[k] =
            TwoPoints(memory.Get(layers, setup.partition, {r, Pass::kForward, 0, i}));
        backward_memory_[k] =
            TwoPoints(memory.Get(layers, setup.partition, {r, Pass::kBackward, 0, i}, split_));
        if (split_) {
          weight_memory_[k] =
              TwoPoints(memory.Get(layers, setup.partition, {r, Pass::kWeight, 0, i}, true));
        }
      }
    }
  }

  ClassBytes StaticBytes(int stage) const override { return static_[stage]; }

  // The per (stage, chunk) tables.
  double Duration(const Action& a) const override {
    switch (a.pass) {
      case Pass::kForward: return forward_s_[Key(a.stage, a.chunk)];
      case Pass::kBackward: return backward_s_[Key(a.stage, a.chunk)];
      case Pass::kWeight: return split_ ? weight_s_[Key(a.stage, a.chunk)] : 0.0;
    }
    return 0.0;
  }
  double TransferLatency(const Action& a) const override {
    return a.pass == Pass::kWeight ? 0.0 : transfer_latency_s_[Key(a.stage, a.chunk)];
  }
  double TransferOccupancy(const Action& a) const override {
    return a.pass == Pass::kWeight ? 0.0 : transfer_occupancy_s_[Key(a.stage, a.chunk)];
  }

  const MemoryEffect& Memory(const Action& a) const override {
    switch (a.pass) {
      case Pass::kForward: return forward_memory_[Key(a.stage, a.chunk)];
      case Pass::kBackward: return backward_memory_[Key(a.stage, a.chunk)];
      case Pass::kWeight: break;
    }
    static const MemoryEffect kNothing;  // a W of a plan that does not split
    return split_ ? weight_memory_[Key(a.stage, a.chunk)] : kNothing;
  }

 protected:
  // parallel.overlap_grad_reduce: the first stage's sync in buckets during
  // its final backward (CostModel::OverlappedDataParallelSync), the time it
  // runs past the stage's end; nullopt elsewhere, and when the gradients are
  // final after a W (whose time is not modelled yet).
  std::optional<double> Exposed(int stage, const Action& final_action, double final_start_s,
                                double stage_end_s, double lead_s,
                                const pb::LinkSpec* link) const {
    const models::CostModel& cm = *setup_cost_model_;
    if (!cm.options().overlap_grad_reduce || stage != 0 ||
        final_action.pass != Pass::kBackward) {
      return std::nullopt;
    }
    const std::size_t per_chunk = first_stage_layer_backward_s_.size() / chunks_;
    const auto from = first_stage_layer_backward_s_.begin() +
                      static_cast<std::ptrdiff_t>(per_chunk * final_action.chunk);
    const std::vector<double> layers(from, from + static_cast<std::ptrdiff_t>(per_chunk));
    const int first = first_layer_, last = first_layer_ + static_cast<int>(per_chunk);
    const double done =
        final_start_s + cm.OverlappedDataParallelSync(first, last, layers, lead_s, link);
    return std::max(0.0, done - stage_end_s);
  }

  // The engine's view of the tables below (for the sources whose answers
  // they are: not the uniform source's durations).
  ChunkTables MakeTables() const {
    return ChunkTables{.chunks = chunks_,
                       .forward_s = forward_s_.data(),
                       .backward_s = backward_s_.data(),
                       .weight_s = split_ ? weight_s_.data() : nullptr,
                       .transfer_latency_s = transfer_latency_s_.data(),
                       .transfer_occupancy_s = transfer_occupancy_s_.data(),
                       .forward_memory = forward_memory_.data(),
                       .backward_memory = backward_memory_.data(),
                       .weight_memory = split_ ? weight_memory_.data() : nullptr};
  }
  int Key(int stage, int chunk) const { return stage * chunks_ + chunk; }
  std::size_t Size() const { return static_cast<std::size_t>(stages_) * chunks_; }

  int stages_;
  int chunks_;
  std::vector<double> forward_s_;             // (P * N)
  std::vector<double> backward_s_;            // (P * N) I when split
  std::vector<double> weight_s_;              // (P * N) W; empty unless split
  std::vector<double> transfer_latency_s_;    // (P * N)
  std::vector<double> transfer_occupancy_s_;  // (P * N)
  std::vector<MemoryEffect> forward_memory_;  // (P * N)
  std::vector<MemoryEffect> backward_memory_; // (P * N)
  std::vector<MemoryEffect> weight_memory_;   // (P * N) W; empty unless split
  bool split_;
  std::vector<ClassBytes> static_;            // (P)
  std::vector<double> sync_s_;                // (P) DP gradient all-reduce
  const models::CostModel* setup_cost_model_;  // not owned
  // (N, the first stage's layers) each layer's backward time on each chunk.
  std::vector<double> first_stage_layer_backward_s_;
  int first_layer_ = 0;  // of the first stage
};

class AnalyticCostSource final : public TableCostSource {
 public:
  explicit AnalyticCostSource(const SimSetup& setup) : TableCostSource(setup) {}
  std::string name() const override { return "analytic"; }
  double GradientSyncTime(int stage) const override { return sync_s_[stage]; }
  std::optional<double> ExposedGradientSync(int stage, const Action& final_action,
                                            double final_start_s,
                                            double stage_end_s) const override {
    return Exposed(stage, final_action, final_start_s, stage_end_s,
                   setup_cost_model_->cluster().device().action_overhead_s(), nullptr);
  }
  const ChunkTables* Tables() const override { return &tables_; }

 private:
  const ChunkTables tables_ = MakeTables();
};

class UniformCostSource final : public TableCostSource {
 public:
  std::string name() const override { return "uniform"; }
  std::string time_unit() const override { return "units"; }
  explicit UniformCostSource(const SimSetup& setup)
      : TableCostSource(setup), parts_(chunks_ * std::max(1, setup.virtual_stages)) {}
  // A stage's chunk takes 1 and 2 units over its v model stages; a split
  // backward 1 (I) and 1 (W): the zero-bubble paper's F = B = W.
  double Duration(const Action& a) const override {
    switch (a.pass) {
      case Pass::kForward: return 1.0 / parts_;
      case Pass::kBackward: return (split_ ? 1.0 : 2.0) / parts_;
      case Pass::kWeight: return 1.0 / parts_;
    }
    return 0.0;
  }
  double TransferLatency(const Action&) const override { return 0.0; }
  double TransferOccupancy(const Action&) const override { return 0.0; }
  double GradientSyncTime(int) const override { return 0.0; }

 private:
  int parts_;  // N v
};

// What a recurrence layer's measured `pass` time needs added when the
// schedule's st_overlap differs from the table's: the overlap's saving from
// the measured phases (models::MeasuredStOverlapSaving), subtracted when the
// schedule overlaps and the table did not, added in the other case; 0 when
// they agree. The coverage u is the analytic model's (tiles over
// compute_units; 1 without compute_units). A recomputed layer's backward
// also re-runs its forward. Error: the modes differ and the table has no
// phases there (names the table and what to do).
Result<double> OverlapCorrection(const models::CostModel& cm, const CostTableIndex& table, int l,
                                 bool backward, double s) {
  const bool want = cm.options().st_overlap;
  if (want == table.st_overlap()) return 0.0;
  const models::Recompute mode = cm.options().recompute;
  const auto len = static_cast<std::int64_t>(s);
  double correction = 0;
  for (bool bwd : {false, true}) {
    if (bwd && !backward) continue;
    if (!bwd && backward && !cm.Recomputed(l)) continue;
    SF_ASSIGN_OR_RETURN(CorePhases p, table.Phases(bwd ? "backward" : "forward", mode, s));
    if (!p.measured) {
      return Status::Invalid(
          table.source() + ": measured with st_overlap " + (table.st_overlap() ? "on" : "off") +
          " and without the recurrence core's phases (pre_s, st_s, out_s) at " +
          std::to_string(len) + " tokens, so it cannot predict st_overlap " +
          (want ? "on" : "off") + " (profile again, or with the schedule's --st-overlap)");
    }
    const double u = cm.StateTransition(l, len, bwd).coverage;
    const double saving = models::MeasuredStOverlapSaving(p.pre_s, p.st_s, p.out_s, u);
    correction += want ? -saving : saving;
  }
  return correction;
}

class ReplayCostSource final : public TableCostSource {
 public:
  explicit ReplayCostSource(const SimSetup& setup) : TableCostSource(setup), optimizer_s_(stages_) {}

  // Fills the durations from the tables (stage r from tables[r], or all from
  // tables[0]); errors name the stage and chunk.
  Status Load(const SimSetup& setup, const std::vector<const CostTableIndex*>& tables) {
    const models::CostModel& cm = *setup.cost_model;
    const models::Recompute mode = cm.options().recompute;
    const int tp = cm.options().tensor_size;
    if (cm.options().context_size > 1) {
      return Status::Invalid("a measured cost table cannot replay parallel.context_size " +
                             std::to_string(cm.options().context_size) +
                             " (its layers were timed on whole chunks; simulate CP with the "
                             "analytic model)");
    }
    for (int r = 0; r < stages_; ++r) {
      const CostTableIndex& table = *tables[tables.size() == 1 ? 0 : static_cast<std::size_t>(r)];
      if (table.tensor_size() != tp) {
        return Status::Invalid(table.source() + ": measured at TP " +
                               std::to_string(table.tensor_size()) + ", the configuration's TP is " +
                               std::to_string(tp) + " (layer times are per device, after the split)");
      }
      const models::StageLayers& layers = setup.stage_layers[r];
      // The distributed optimizer updates replica 0's shard only.
      optimizer_s_[r] =
          cm.StageOptimizerParams(layers.first, layers.last) * table.optimizer_s_per_param();
      // The DP sync on the link the table measured (a ring over it); the TP
      // sums on the link fitted to the timed sums, else that link.
      sync_s_[r] = cm.DataParallelSyncTime(layers.first, layers.last, &table.link());
      if (r == 0) sync_link_ = table.link();
      const pb::LinkSpec* tp_link = &table.tensor_link();
      for (int i = 0; i < chunks_; ++i) {
        const double c = static_cast<double>(setup.partition.start(i));
        const double s = static_cast<double>(setup.partition.length(i));
        const int k = Key(r, i);
        forward_s_[k] = backward_s_[k] = 0;
        if (split_) weight_s_[k] = 0;
        for (int l = layers.first; l < layers.last; ++l) {
          const models::LayerKind kind = cm.layers()[l];
          Result<double> f = table.Time(kind, "forward", mode, s, c);
          // A split backward (the plan's W actions): B and W as profile
          // timed them apart (older tables lack them: the error says so).
          Result<double> b = table.Time(kind, split_ ? "input" : "backward", mode, s, c);
          if (split_) {
            Result<double> w = table.Time(kind, "weight", mode, s, c);
            if (!w.ok()) {
              return w.status().WithPrefix("stage " + std::to_string(r) + " chunk " +
                                           std::to_string(i) + " (a split backward's W; " +
                                           "profile again to time B and W)");
            }
            weight_s_[k] += *w;
          }
          if (!f.ok()) return f.status().WithPrefix("stage " + std::to_string(r) + " chunk " + std::to_string(i));
          if (!b.ok()) return b.status().WithPrefix("stage " + std::to_string(r) + " chunk " + std::to_string(i));
          // The TP all-reduces of the layer (0 at TP 1; the table timed
          // one rank's share without them) on the link the table measured;
          // a recompute replays its forward's again.
          const std::int64_t len = setup.partition.length(i);
          const double tp_forward = cm.TensorParallelForwardCommTime(l, len, tp_link);
          double f_overlap = 0, b_overlap = 0;  // the schedule's st_overlap
          if (kind == models::LayerKind::kRecurrence) {
            const std::string where = "stage " + std::to_string(r) + " chunk " + std::to_string(i);
            Result<double> fo = OverlapCorrection(cm, table, l, false, s);
            Result<double> bo = OverlapCorrection(cm, table, l, true, s);
            if (!fo.ok()) return fo.status().WithPrefix(where);
            if (!bo.ok()) return bo.status().WithPrefix(where);
            f_overlap = *fo;
            b_overlap = *bo;
          }
          forward_s_[k] += *f + f_overlap + tp_forward;
          const double layer_backward = *b + b_overlap +
                                        cm.TensorParallelBackwardCommTime(l, len, tp_link) +
                                        (cm.Recomputed(l) ? tp_forward : 0.0);
          backward_s_[k] += layer_backward;
          if (r == 0) {
            first_stage_layer_backward_s_[static_cast<std::size_t>(i) *
                                              static_cast<std::size_t>(layers.last - layers.first) +
                                          static_cast<std::size_t>(l - layers.first)] =
                layer_backward;
          }
        }
        const double bytes =
            cm.BoundaryActivationBytes(cm.LocalTokens(setup.partition.length(i)));
        transfer_occupancy_s_[k] = bytes / table.link().bandwidth_bytes_per_s();
        transfer_latency_s_[k] = table.link().latency_s() + transfer_occupancy_s_[k];
      }
    }
    return Status::Ok();
  }

  std::string name() const override { return "replay"; }
  const ChunkTables* Tables() const override { return &tables_; }
  // The DP gradient sync: a ring all-reduce (or reduce-scatter and
  // all-gather) of the stage's bytes over the link the table measured.
  double GradientSyncTime(int stage) const override { return sync_s_[stage]; }
  double OptimizerTime(int stage) const override { return optimizer_s_[stage]; }
  // The first stage's layers as the table timed them (they hold the fixed
  // per-action cost), on the link the table measured.
  std::optional<double> ExposedGradientSync(int stage, const Action& final_action,
                                            double final_start_s,
                                            double stage_end_s) const override {
    return Exposed(stage, final_action, final_start_s, stage_end_s, 0.0, &sync_link_);
  }

 private:
  std::vector<double> optimizer_s_;  // (P)
  pb::LinkSpec sync_link_;  // the first stage's table's link
  const ChunkTables tables_ = MakeTables();  // Load fills what they point at
};

}  // namespace

Result<std::unique_ptr<CostSource>> MakeReplayCostSource(const SimSetup& setup,
                                                         const CostTableIndex& table) {
  return MakeReplayCostSource(setup, std::vector<const CostTableIndex*>{&table});
}

Result<std::unique_ptr<CostSource>> MakeReplayCostSource(
    const SimSetup& setup, const std::vector<const CostTableIndex*>& per_stage) {
  assert(setup.cost_model != nullptr);
  const std::size_t stages = setup.stage_layers.size();
  if (per_stage.empty() || (per_stage.size() != 1 && per_stage.size() != stages)) {
    return Status::Invalid("replay: " + std::to_string(per_stage.size()) +
                           " cost tables for " + std::to_string(stages) +
                           " stages (give one, or one per stage)");
  }
  auto source = std::make_unique<ReplayCostSource>(setup);
  SF_RETURN_IF_ERROR(source->Load(setup, per_stage));
  return std::unique_ptr<CostSource>(std::move(source));
}

std::unique_ptr<CostSource> MakeAnalyticCostSource(const SimSetup& setup) {
  assert(setup.cost_model != nullptr);
  return std::make_unique<AnalyticCostSource>(setup);
}

std::unique_ptr<CostSource> MakeUniformCostSource(const SimSetup& setup) {
  assert(setup.cost_model != nullptr);
  return std::make_unique<UniformCostSource>(setup);
}


namespace {

class MeasuredDurationSource final : public CostSource {
 public:
  // `optimizer_s`: per model stage (a stage's measured optimizer step, which
  // updates all its model stages, on its first; 0 on the others).
  MeasuredDurationSource(std::unique_ptr<CostSource> base, const MeasuredDurations& measured,
                         std::vector<double> optimizer_s)
      : base_(std::move(base)), measured_(measured), optimizer_s_(std::move(optimizer_s)) {}
  std::string name() const override { return "measured-run"; }
  std::string time_unit() const override { return base_->time_unit(); }
  double Duration(const schedule::Action& action) const override {
    return measured_.action_s.at(action);
  }
  double TransferLatency(const schedule::Action& a) const override {
    return base_->TransferLatency(a);
  }
  double TransferOccupancy(const schedule::Action& a) const override {
    return base_->TransferOccupancy(a);
  }
  double GradientSyncTime(int stage) const override { return base_->GradientSyncTime(stage); }
  double OptimizerTime(int stage) const override {
    return optimizer_s_[static_cast<std::size_t>(stage)];
  }
  ClassBytes StaticBytes(int stage) const override { return base_->StaticBytes(stage); }
  const MemoryEffect& Memory(const schedule::Action& a) const override {
    return base_->Memory(a);
  }

 private:
  std::unique_ptr<CostSource> base_;
  MeasuredDurations measured_;
  std::vector<double> optimizer_s_;  // (P v)
};

}  // namespace

Result<std::unique_ptr<CostSource>> MakeMeasuredDurationSource(std::unique_ptr<CostSource> base,
                                                               const MeasuredDurations& measured,
                                                               const schedule::Plan& plan) {
  if (measured.optimizer_s.size() != static_cast<std::size_t>(plan.stages())) {
    return Status::Invalid("measured durations: optimizer times for " +
                           std::to_string(measured.optimizer_s.size()) + " stages, plan has " +
                           std::to_string(plan.stages()));
  }
  for (const std::vector<schedule::Action>& stage : plan.per_stage()) {
    for (const schedule::Action& a : stage) {
      auto it = measured.action_s.find(a);
      if (it == measured.action_s.end() || !(it->second >= 0)) {
        return Status::Invalid("measured durations: no time for action " + schedule::ToString(a) +
                               " of stage " + std::to_string(a.stage));
      }
    }
  }
  std::vector<double> optimizer_s(static_cast<std::size_t>(plan.model_stages()), 0.0);
  for (int r = 0; r < plan.stages(); ++r) {
    optimizer_s[static_cast<std::size_t>(plan.ModelStageOf(r, 0))] =
        measured.optimizer_s[static_cast<std::size_t>(r)];
  }
  return std::unique_ptr<CostSource>(
      new MeasuredDurationSource(std::move(base), measured, std::move(optimizer_s)));
}

}  // namespace stateflow::sim

#include "sim/explain.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace stateflow::sim {
namespace {

using models::CostModel;
using models::LayerKind;
using models::PassTerms;
using models::StTiming;
using schedule::Pass;

constexpr int kKinds = 4;

void Add(const PassTerms& t, double times, pb::TimeTerms* out) {
  out->set_compute_s(out->compute_s() + times * t.compute_s);
  out->set_memory_s(out->memory_s() + times * t.memory_s);
  out->set_st_exposed_s(out->st_exposed_s() + times * t.st_exposed_s);
  out->set_st_hidden_s(out->st_hidden_s() + times * t.st_hidden_s);
  out->set_tp_comm_s(out->tp_comm_s() + times * t.tp_comm_s);
  out->set_cp_comm_s(out->cp_comm_s() + times * t.cp_comm_s);
  out->set_recompute_s(out->recompute_s() + times * t.recompute_s);
  out->set_total_s(out->total_s() + times * t.total_s);
  out->set_table_s(out->table_s() + times * t.table_s);
}

void Add(const StTiming& t, pb::StateTransitionTerms* out) {
  out->set_pre_s(out->pre_s() + t.before_s);
  out->set_st_s(out->st_s() + t.st_s);
  out->set_out_s(out->out_s() + t.after_s);
  out->set_exposed_without_overlap_s(out->exposed_without_overlap_s() + t.exposed_s +
                                     t.hidden_s);
  out->set_hidden_s(out->hidden_s() + t.hidden_s);
  out->set_exposed_s(out->exposed_s() + t.exposed_s);
}

// The layers of a range by kind: how many, and one of them (the cost model's
// per-layer terms depend on a layer only through its kind).
struct KindCount {
  int layer = -1;
  int count = 0;
};

std::array<KindCount, kKinds> CountKinds(const CostModel& cm, int first, int last) {
  std::array<KindCount, kKinds> out{};
  for (int l = first; l < last; ++l) {
    KindCount& k = out[static_cast<int>(cm.layers()[l])];
    if (k.count++ == 0) k.layer = l;
  }
  return out;
}

// One layer's forward and backward terms per (kind, chunk), computed once.
class ChunkTerms {
 public:
  ChunkTerms(const CostModel& cm, const schedule::Partition& partition)
      : cm_(cm), partition_(partition),
        terms_(static_cast<std::size_t>(kKinds) * partition.num_chunks()) {}

  const PassTerms& Of(int layer, int chunk, Pass pass) {
    std::optional<std::array<PassTerms, 2>>& t =
        terms_[static_cast<std::size_t>(kKinds) * chunk +
               static_cast<std::size_t>(cm_.layers()[layer])];
    if (!t) {
      const std::int64_t c = partition_.start(chunk), s = partition_.length(chunk);
      t = std::array<PassTerms, 2>{cm_.ForwardTerms(layer, c, s), cm_.BackwardTerms(layer, c, s)};
    }
    return (*t)[pass == Pass::kForward ? 0 : 1];
  }

 private:
  const CostModel& cm_;
  const schedule::Partition& partition_;
  std::vector<std::optional<std::array<PassTerms, 2>>> terms_;  // (N, kinds)
};

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g s", s);
  return buf;
}

}  // namespace

Result<pb::Explanation> Explain(const Simulation& sim) {
  const std::string& source = sim.report.cost_model();
  if (source != "analytic") {
    return Status::Invalid("--explain: the terms are the analytic cost model's; this run's times "
                           "are '" + source + "' (" +
                           (source == "uniform" ? "idealised units" : "measured wholes") +
                           "), which have none");
  }
  const CostModel& cm = sim.config.placement->cost_model;
  const schedule::Partition& partition = sim.config.partition;
  const schedule::Plan& plan = sim.config.plan;
  const int chunks = partition.num_chunks();
  ChunkTerms terms(cm, partition);
  pb::Explanation out;

  // One layer of each kind, one microbatch: its N chunks.
  const std::array<KindCount, kKinds> model_kinds = CountKinds(cm, 0, cm.num_layers());
  const bool st_model = cm.cluster().device().compute_units() > 0;
  for (int k = 0; k < kKinds; ++k) {
    const KindCount& kind = model_kinds[k];
    if (kind.count == 0) continue;
    pb::LayerKindTerms* row = out.add_kinds();
    row->set_kind(std::string(models::LayerKindName(static_cast<LayerKind>(k))));
    row->set_layers(static_cast<std::uint32_t>(kind.count));
    const bool recurrence = static_cast<LayerKind>(k) == LayerKind::kRecurrence;
    for (int i = 0; i < chunks; ++i) {
      Add(terms.Of(kind.layer, i, Pass::kForward), 1, row->mutable_forward());
      Add(terms.Of(kind.layer, i, Pass::kBackward), 1, row->mutable_backward());
      if (recurrence && st_model) {
        const std::int64_t s = partition.length(i);
        const StTiming forward = cm.StateTransition(kind.layer, s, /*backward=*/false);
        Add(forward, row->mutable_st_forward());
        Add(cm.StateTransition(kind.layer, s, /*backward=*/true), row->mutable_st_backward());
        out.set_st_tiles(forward.tiles);
        out.set_st_coverage(forward.coverage);
      }
    }
  }

  // Each stage over the step: the plan's actions, as the engine ran them.
  const double step = sim.engine.step_time_s;
  // The layer kinds of each model stage (a stage's own, or with virtual
  // stages each of the model stages it holds).
  std::vector<std::array<KindCount, kKinds>> model_stage_kinds;
  for (const models::StageLayers& layers : sim.config.placement->stage_layers) {
    model_stage_kinds.push_back(CountKinds(cm, layers.first, layers.last));
  }
  for (int r = 0; r < plan.stages(); ++r) {
    pb::StageTerms* stage = out.add_stages();
    stage->set_stage(static_cast<std::uint32_t>(r));
    const double overhead = cm.cluster().device().action_overhead_s();
    for (const schedule::Action& a : plan.stage(r)) {
      // A split backward's terms are the whole backward's, counted with its
      // B (I + W add up to it); its W adds the fixed per-action cost only.
      for (const KindCount& kind : model_stage_kinds[static_cast<std::size_t>(a.stage)]) {
        if (kind.count > 0 && a.pass != Pass::kWeight) {
          Add(terms.Of(kind.layer, a.chunk, a.pass), kind.count, stage->mutable_busy());
        }
      }
      pb::TimeTerms* busy = stage->mutable_busy();
      busy->set_overhead_s(busy->overhead_s() + overhead);
      busy->set_total_s(busy->total_s() + overhead);
    }
    const StageResult& engine = sim.engine.stages[r];
    const double busy = stage->busy().total_s();
    if (std::abs(busy - engine.busy_s) > 1e-9 * std::abs(engine.busy_s)) {
      return Status::Internal("--explain: stage " + std::to_string(r) + "'s terms add up to " +
                              Seconds(busy) + " but the engine ran it busy for " +
                              Seconds(engine.busy_s));
    }
    stage->set_sync_s(engine.sync_s);
    stage->set_optimizer_s(engine.optimizer_s);
    stage->set_idle_s(std::max(0.0, step - engine.busy_s - engine.sync_s - engine.optimizer_s));
  }
  return out;
}

}  // namespace stateflow::sim

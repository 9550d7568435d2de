// The simulator's prediction of the state transition's split-and-overlap
// gain for one recurrence core forward (models/cost_model.h,
// CostModel::StateTransition; docs/cost-model.md section 2, "State
// transition"), to put beside the CPU measurement (bench_gdn_kernel,
// docs/performance.md) and to read for the paper's configurations. Nothing
// here is measured; nothing is fitted to a measurement.
//
// Three tables:
//   1. the CPU: the `cpu` cluster preset with compute_units = the thread
//      count (default 2), a GDN core of H = 1, 2, 4 heads of d_k = d_v = 128
//      (gdn-3b's head dims, its head count replaced) over T = 256..4096;
//   2. the paper's gdn-15b and gdn-32b at TP 4 and 8 on the A100 preset with
//      its 108 SMs as compute units, chunk s = 8192 (64K in N = 8).
//      Each row: Pre, ST, Out at the whole device's rate, the ST's coverage
//      u, the predicted pass time without and with overlap, and their ratio;
//   3. the whole step of the stateflow schedule for gdn-15b at TP 4 and
//      gdn-32b at TP 8 (P 4, M 8, N 4, T 64K, full recompute, the A100
//      preset): without the ST model, with the ST exposed at 108 compute
//      units, with split-and-overlap, the exposure's cost and the overlap's
//      gain (`stateflow simulate ... --compute-units 108 --st-overlap
//      off|on`, simulated here in one process).
// docs/cost-model.md shows the tables of the default run, and the
// doc_st_overlap_prediction test checks they are still what it prints.
//
//   ./bench/st_overlap_prediction                # B_V 64, 2 compute units
//   ./bench/st_overlap_prediction 128 2          # B_V 128
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "models/cost_model.h"
#include "models/model.h"
#include "scenario/resolve.h"
#include "sim/simulation.h"

namespace {

using stateflow::Result;
using namespace stateflow::models;

// Predicted forward of the core of the first recurrence layer over s tokens:
// Pre + ST + Out + the ST's exposed time, overlap off and on.
struct Prediction {
  StTiming off, on;
  double off_s() const { return off.before_s + off.st_s + off.after_s + off.exposed_s; }
  double on_s() const { return on.before_s + on.st_s + on.after_s + on.exposed_s; }
};

Result<Prediction> Predict(const stateflow::pb::ModelSpec& model,
                           const stateflow::pb::ClusterSpec& cluster, int tp, int tile,
                           std::int64_t s) {
  Prediction p;
  for (bool overlap : {false, true}) {
    CostModelOptions options;
    options.tensor_size = tp;
    options.st_tile = tile;
    options.st_overlap = overlap;
    SF_ASSIGN_OR_RETURN(CostModel cm,
                        CostModel::Make(model, stateflow::pb::PrecisionSpec{}, cluster, options));
    int l = 0;
    while (l < cm.num_layers() && cm.layers()[l] != LayerKind::kRecurrence) ++l;
    if (l == cm.num_layers()) return stateflow::Status::Invalid("no recurrence layer");
    (overlap ? p.on : p.off) = cm.StateTransition(l, s, /*backward=*/false);
  }
  return p;
}

void Row(const std::string& label, const Prediction& p, double unit, const char* unit_name) {
  std::printf("| %s | %.3g | %.3g | %.3g | %.2f | %.3g %s | %.3g %s | %.2fx |\n", label.c_str(),
              p.off.before_s / unit, p.off.st_s / unit, p.off.after_s / unit, p.off.coverage,
              p.off_s() / unit, unit_name, p.on_s() / unit, unit_name, p.off_s() / p.on_s());
}

// The stateflow schedule's step (P 4, M 8, N 4, T 64K, full recompute) on
// the A100 preset with `compute_units` (0: no ST model) and overlap.
Result<double> StepTime(const std::string& preset, int tp, int compute_units, bool overlap) {
  stateflow::pb::Scenario s;
  s.set_name("st-overlap-prediction");
  SF_ASSIGN_OR_RETURN(*s.mutable_model(), ModelPreset(preset));
  SF_ASSIGN_OR_RETURN(*s.mutable_cluster(), ClusterPreset("a100-80gb-nvlink"));
  s.mutable_cluster()->mutable_device()->set_compute_units(
      static_cast<std::uint32_t>(compute_units));
  s.mutable_parallel()->set_pipeline_size(4);
  s.mutable_parallel()->set_tensor_size(static_cast<std::uint32_t>(tp));
  s.mutable_parallel()->set_microbatches(8);
  s.set_seq_len(65536);
  stateflow::pb::ScheduleSpec* spec = s.mutable_schedule();
  spec->set_policy("stateflow");
  spec->set_chunks(4);
  spec->set_recompute("full");
  spec->set_st_overlap(overlap);
  SF_ASSIGN_OR_RETURN(stateflow::scenario::ResolvedScenario r,
                      stateflow::scenario::Resolve(std::move(s)));
  SF_ASSIGN_OR_RETURN(stateflow::sim::Simulation sim,
                      stateflow::sim::Simulate(r, r.proto().schedule()));
  return sim.report.step_time_s();
}

int Fail(const stateflow::Status& s) {
  std::fprintf(stderr, "st_overlap_prediction: %s\n", s.message().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const int tile = argc > 1 ? std::atoi(argv[1]) : 64;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  if (tile < 1 || threads < 1) {
    std::fprintf(stderr, "usage: st_overlap_prediction [B_V >= 1] [threads >= 1]\n");
    return 2;
  }
  Result<stateflow::pb::ClusterSpec> cpu = ClusterPreset("cpu");
  Result<stateflow::pb::ClusterSpec> a100 = ClusterPreset("a100-80gb-nvlink");
  Result<stateflow::pb::ModelSpec> gdn = ModelPreset("gdn-3b");
  if (!cpu.ok() || !a100.ok() || !gdn.ok()) return Fail(stateflow::Status::Invalid("presets"));
  cpu->mutable_device()->set_compute_units(static_cast<std::uint32_t>(threads));
  a100->mutable_device()->set_compute_units(108);

  std::printf("CPU: cpu preset, %d compute units, B_V %d, d_k = d_v = %u (times in ms)\n\n",
              threads, tile, gdn->head_dim_v());
  std::printf("| H, T | Pre | ST | Out | u | off | on | gain |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int h : {1, 2, 4}) {
    stateflow::pb::ModelSpec m = *gdn;
    m.set_num_heads(static_cast<std::uint32_t>(h));
    for (std::int64_t t : {256, 1024, 4096}) {
      Result<Prediction> p = Predict(m, *cpu, 1, tile, t);
      if (!p.ok()) return Fail(p.status());
      Row(std::to_string(h) + ", " + std::to_string(t), *p, 1e-3, "ms");
    }
  }
  std::printf("\nA100 preset, 108 compute units, B_V %d, chunk s = 8192 (times in ms)\n\n", tile);
  std::printf("| model, TP | Pre | ST | Out | u | off | on | gain |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const char* preset : {"gdn-15b", "gdn-32b"}) {
    Result<stateflow::pb::ModelSpec> m = ModelPreset(preset);
    if (!m.ok()) return Fail(m.status());
    for (int tp : {4, 8}) {
      Result<Prediction> p = Predict(*m, *a100, tp, tile, 8192);
      if (!p.ok()) return Fail(p.status());
      Row(std::string(preset) + ", TP " + std::to_string(tp), *p, 1e-3, "ms");
    }
  }
  std::printf("\nThe stateflow schedule's step: P 4, M 8, N 4, T 64K, full recompute, A100 preset; "
              "ST at 108 compute units, B_V 64\n\n");
  std::printf("| model, TP | no ST model | ST exposed | split-and-overlap | exposure costs | "
              "overlap gain |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const auto& [preset, tp] : {std::pair<const char*, int>{"gdn-15b", 4}, {"gdn-32b", 8}}) {
    Result<double> none = StepTime(preset, tp, 0, false);
    Result<double> off = StepTime(preset, tp, 108, false);
    Result<double> on = StepTime(preset, tp, 108, true);
    for (const Result<double>* r : {&none, &off, &on}) {
      if (!r->ok()) return Fail(r->status());
    }
    std::printf("| %s, TP %d | %.3f s | %.3f s | %.3f s | %.2f %% | %.2f %% |\n", preset, tp,
                *none, *off, *on, 100 * (*off / *none - 1), 100 * (*off / *on - 1));
  }
  return 0;
}

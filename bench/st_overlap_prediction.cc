// The simulator's prediction of the state transition's split-and-overlap
// gain for one recurrence core forward (models/cost_model.h,
// CostModel::StateTransition; docs/cost-model.md section 2, "State
// transition"), to put beside the CPU measurement (bench_gdn_kernel,
// docs/performance.md) and to read for the paper's configurations. Nothing
// here is measured; nothing is fitted to a measurement.
//
// Two tables:
//   1. the CPU: the `cpu` cluster preset with compute_units = the thread
//      count (default 2), a GDN core of H = 1, 2, 4 heads of d_k = d_v = 128
//      (gdn-3b's head dims, its head count replaced) over T = 256..4096;
//   2. the paper's gdn-15b and gdn-32b at TP 4 and 8 on the A100 preset with
//      its 108 SMs as compute units, chunk s = 8192 (64K in N = 8).
// Each row: Pre, ST, Out at the whole device's rate, the ST's coverage u,
// the predicted pass time without and with overlap, and their ratio.
//
//   ./bench/st_overlap_prediction                # B_V 64, 2 compute units
//   ./bench/st_overlap_prediction 128 2          # B_V 128
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "models/cost_model.h"
#include "models/model.h"

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
  return 0;
}

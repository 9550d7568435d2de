// The theoretical work of one chunk's kernels, so that the first GPU run can
// be read against it: per layer kind of a model, for a chunk of s tokens
// (microbatch size 1, TP 1, bf16 activations as the paper's runs), the
// forward and backward FLOPs, the bytes a pass must at least move (weights
// once, input and output, backward also the gradient accumulators), the
// arithmetic intensity, and the A100's floor for the pass:
// max(FLOPs / peak, bytes / bandwidth) at the preset's dense bf16 peak and
// HBM bandwidth. For the recurrence layer, the core's Pre / ST / Out FLOP
// split (the three grid passes of backend/device/grid_ops.h). Counts come
// from the simulator's cost model (models/cost_model.h), which derives them
// from the backend's kernels; nothing here is measured.
//
//   ./bench/kernel_counts                       # the 3B models, s = 4096
//   ./bench/kernel_counts gdn-15b 8192          # a preset, a chunk length
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/cost_model.h"
#include "models/layer_formulas.h"
#include "models/model.h"

namespace {

using stateflow::Result;
using namespace stateflow::models;

int Report(const std::string& preset, std::int64_t s) {
  Result<stateflow::pb::ModelSpec> model = ModelPreset(preset);
  Result<stateflow::pb::ClusterSpec> cluster = ClusterPreset("a100-80gb-nvlink");
  if (!model.ok() || !cluster.ok()) {
    std::fprintf(stderr, "kernel_counts: %s\n",
                 (!model.ok() ? model.status() : cluster.status()).message().c_str());
    return 2;
  }
  stateflow::pb::PrecisionSpec precision;  // defaults: bf16 activations
  Result<CostModel> cm = CostModel::Make(*model, precision, *cluster, CostModelOptions{});
  if (!cm.ok()) {
    std::fprintf(stderr, "kernel_counts: %s\n", cm.status().message().c_str());
    return 2;
  }
  const double peak = cluster->device().peak_flops();
  const double bw = cluster->device().memory_bandwidth_bytes_per_s();
  std::printf("\n%s, chunk s = %lld tokens at prefix 0 (attention: also at prefix 3 s)\n\n",
              preset.c_str(), static_cast<long long>(s));
  std::printf("| layer | pass | GFLOP | min MiB moved | FLOP/byte | A100 floor (us) |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  std::vector<bool> seen(8, false);
  for (int l = 0; l < cm->num_layers(); ++l) {
    const LayerKind kind = cm->layers()[l];
    const int k = static_cast<int>(kind);
    if (seen[k]) continue;
    seen[k] = true;
    const std::vector<std::int64_t> prefixes =
        kind == LayerKind::kAttention ? std::vector<std::int64_t>{0, 3 * s}
                                      : std::vector<std::int64_t>{0};
    for (std::int64_t c : prefixes) {
      for (int pass = 0; pass < 2; ++pass) {
        const double flops = pass == 0 ? cm->ForwardFlops(l, c, s) : cm->BackwardFlops(l, c, s);
        const double bytes = pass == 0 ? cm->MinForwardBytes(l, s) : cm->MinBackwardBytes(l, s);
        const double floor_s = std::max(flops / peak, bytes / bw);
        std::string name(LayerKindName(kind));
        if (kind == LayerKind::kAttention) name += " (prefix " + std::to_string(c) + ")";
        std::printf("| %s | %s | %.2f | %.1f | %.0f | %.1f |\n", name.c_str(),
                    pass == 0 ? "forward" : "backward", flops / 1e9, bytes / (1 << 20),
                    flops / bytes, floor_s * 1e6);
      }
    }
  }
  if (seen[static_cast<int>(LayerKind::kRecurrence)]) {
    const StFlops f = RecurrenceStFlops(*model);
    const double t = static_cast<double>(s) / 1e9;  // GFLOP per token -> per chunk
    std::printf("\nRecurrence core, GFLOP per chunk: forward Pre %.3f, ST %.3f, Out %.3f; "
                "backward Out %.3f, ST %.3f, Pre %.3f\n",
                f.pre * t, f.st * t, f.out * t, f.out_bwd * t, f.st_bwd * t, f.pre_bwd * t);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) return Report(argv[1], std::atoll(argv[2]));
  if (argc != 1) {
    std::fprintf(stderr, "usage: kernel_counts [PRESET CHUNK_TOKENS]\n");
    return 2;
  }
  for (const char* preset : {"gdn-3b", "gdn-hybrid-3b", "mamba3-3b", "kda-hybrid-3b"}) {
    if (int rc = Report(preset, 4096); rc != 0) return rc;
  }
  return 0;
}

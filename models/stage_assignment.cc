// AssignStages: exact min-max contiguous partition of the mixer layers into
// stages, by dynamic programming over (stages used, mixer layers covered).
//
// The embedding is glued to mixer layer 0 and the head to mixer layer L-1, so
// the problem is: cut L non-negative mixer-layer costs b_0..b_{L-1} into P non-empty contiguous
// groups minimising the largest group sum. best[k][j] is that minimum for the
// first j layers in k groups:
//   best[1][j] = sum(b_0..b_{j-1})
//   best[k][j] = min over i in [k-1, j-1] of max(best[k-1][i], sum(b_i..b_{j-1}))
// O(P L^2) time: 64 stages x 66 layers is ~3e5 steps.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "models/model.h"

namespace stateflow::models {
namespace {

Status CheckInputs(const std::vector<double>& layer_costs, int stages) {
  if (layer_costs.size() < 3) {
    return Status::Invalid(
        "layer_costs: need at least 3 layers (embedding, a mixer layer, head), got " +
        std::to_string(layer_costs.size()));
  }
  for (size_t l = 0; l < layer_costs.size(); ++l) {
    if (!(layer_costs[l] >= 0) || !std::isfinite(layer_costs[l])) {
      return Status::Invalid("layer_costs[" + std::to_string(l) +
                             "] must be finite and >= 0");
    }
  }
  const int layers = static_cast<int>(layer_costs.size()) - 2;
  if (stages < 1) return Status::Invalid("parallel.pipeline_size must be >= 1");
  if (stages > layers) {
    return Status::Invalid("parallel.pipeline_size (" + std::to_string(stages) +
                           ") must be <= model.num_layers (" +
                           std::to_string(layers) +
                           "): every stage needs at least one mixer layer");
  }
  return Status::Ok();
}

// Mixer layer costs with the embedding added to the first and the head to the last.
std::vector<double> MixerLayerCosts(const std::vector<double>& layer_costs) {
  std::vector<double> b(layer_costs.begin() + 1, layer_costs.end() - 1);
  b.front() += layer_costs.front();
  b.back() += layer_costs.back();
  return b;
}

// cuts[r] = first mixer layer of group r (cuts[0] = 0), for P groups.
std::vector<int> OptimalCuts(const std::vector<double>& b, int groups) {
  const int n = static_cast<int>(b.size());
  std::vector<double> prefix(n + 1, 0.0);
  for (int j = 0; j < n; ++j) prefix[j + 1] = prefix[j] + b[j];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][j], arg[k][j] = start of the last group.
  std::vector<std::vector<double>> best(groups + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> arg(groups + 1, std::vector<int>(n + 1, 0));
  for (int j = 1; j <= n; ++j) best[1][j] = prefix[j];
  for (int k = 2; k <= groups; ++k) {
    for (int j = k; j <= n; ++j) {
      for (int i = k - 1; i <= j - 1; ++i) {
        const double cost = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (cost < best[k][j]) {
          best[k][j] = cost;
          arg[k][j] = i;
        }
      }
    }
  }
  std::vector<int> cuts(groups, 0);
  int j = n;
  for (int k = groups; k >= 2; --k) {
    cuts[k - 1] = arg[k][j];
    j = arg[k][j];
  }
  return cuts;
}

}  // namespace

Result<std::vector<StageLayers>> AssignStages(
    const std::vector<double>& layer_costs, int stages) {
  SF_RETURN_IF_ERROR(CheckInputs(layer_costs, stages));
  const std::vector<double> b = MixerLayerCosts(layer_costs);
  const std::vector<int> cuts = OptimalCuts(b, stages);
  const int num_layers = static_cast<int>(layer_costs.size());
  std::vector<StageLayers> out(stages);
  for (int r = 0; r < stages; ++r) {
    // Mixer layer j is layer j + 1; stage 0 also takes layer 0, the last the head.
    out[r].first = r == 0 ? 0 : cuts[r] + 1;
    out[r].last = r + 1 < stages ? cuts[r + 1] + 1 : num_layers;
  }
  return out;
}

Result<std::vector<StageLayers>> EvenLayerStages(int layers, int stages) {
  if (stages < 1) return Status::Invalid("parallel.pipeline_size must be >= 1");
  if (layers < 1) return Status::Invalid("model.num_layers must be >= 1");
  if (layers % stages != 0) {
    return Status::Invalid("parallel.pipeline_size: " + std::to_string(stages) +
                           " does not divide model.num_layers " + std::to_string(layers) +
                           " (Megatron-Core splits the layers evenly over the stages)");
  }
  const int per_stage = layers / stages;
  std::vector<StageLayers> out(stages);
  for (int r = 0; r < stages; ++r) {
    // Mixer layer j is layer j + 1; stage 0 also takes layer 0, the last the head.
    out[r].first = r == 0 ? 0 : 1 + r * per_stage;
    out[r].last = r + 1 < stages ? 1 + (r + 1) * per_stage : layers + 2;
  }
  return out;
}

}  // namespace stateflow::models

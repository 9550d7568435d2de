#include "backend/profile/profiler.h"

#include <algorithm>

#include "backend/profile/spread.h"

namespace stateflow::backend {
namespace {

pb::CostSample MakeSample(models::LayerKind kind, const char* pass, models::Recompute mode,
                          std::int64_t tokens, const std::vector<double>& seconds) {
  const Spread spread = Summarize(seconds);
  pb::CostSample s;
  s.set_layer_kind(std::string(models::LayerKindName(kind)));
  s.set_pass(pass);
  s.set_recompute(std::string(models::RecomputeName(mode)));
  s.set_tokens(static_cast<double>(tokens));
  s.set_median_s(spread.median_s);
  s.set_p10_s(spread.p10_s);
  s.set_p90_s(spread.p90_s);
  s.set_repetitions(static_cast<std::uint32_t>(seconds.size()));
  return s;
}

template <typename T>
Status Fill(const ProfileRequest& request, const ProfileProgress& progress, pb::CostTable* table) {
  const std::vector<models::LayerKind> kinds = LayerKindsOf(request.model);
  const int total =
      static_cast<int>(kinds.size() * request.recompute.size() * request.tokens.size()) + 1;
  int done = 0;
  for (models::LayerKind kind : kinds) {
    for (models::Recompute mode : request.recompute) {
      for (std::int64_t s : request.tokens) {
        SF_ASSIGN_OR_RETURN(PassSamples t,
                            TimeLayerPasses<T>(request.model, kind, mode, s, request.timing));
        *table->add_samples() = MakeSample(kind, "forward", mode, s, t.forward_s);
        *table->add_samples() = MakeSample(kind, "backward", mode, s, t.backward_s);
        if (progress) progress(++done, total);
      }
    }
  }
  SF_ASSIGN_OR_RETURN(std::vector<double> per_param,
                      TimeOptimizerPerParam<T>(request.model, request.timing));
  table->set_optimizer_s_per_param(Quantile(per_param, 0.5));
  if (progress) progress(++done, total);
  return Status::Ok();
}

}  // namespace

std::vector<models::LayerKind> LayerKindsOf(const pb::ModelSpec& model) {
  std::vector<models::LayerKind> kinds;
  for (models::LayerKind k : models::LayerList(model)) {
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
  }
  return kinds;
}

Result<pb::CostTable> ProfileLayers(const ProfileRequest& request,
                                    const ProfileProgress& progress) {
  if (request.tokens.empty()) return Status::Invalid("profile: no chunk lengths to time");
  if (request.recompute.empty()) return Status::Invalid("profile: no recompute modes to time");
  if (request.dtype != "float32" && request.dtype != "float64") {
    return Status::Invalid("--dtype: unknown '" + request.dtype + "' (known: float32, float64)");
  }
  pb::CostTable table;
  *table.mutable_model() = request.model;
  table.set_dtype(request.dtype);
  const Status filled = request.dtype == "float64" ? Fill<double>(request, progress, &table)
                                                   : Fill<float>(request, progress, &table);
  SF_RETURN_IF_ERROR(filled);
  return table;
}

}  // namespace stateflow::backend

#include "backend/profile/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "backend/profile/spread.h"

namespace stateflow::backend {
namespace {

// --verbose: one line per timing step, with the wall seconds since `start`.
class Tracer {
 public:
  explicit Tracer(const ProfileTrace& trace) : trace_(trace) {}
  bool on() const { return static_cast<bool>(trace_); }
  void Start() { start_ = std::chrono::steady_clock::now(); }
  void Done(const std::string& what) const {
    if (!trace_) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char buf[32];
    std::snprintf(buf, sizeof(buf), ": %.3f s", s);
    trace_(what + buf);
  }

 private:
  ProfileTrace trace_;
  std::chrono::steady_clock::time_point start_;
};

std::string StepName(models::LayerKind kind, std::int64_t tokens, std::int64_t prefix, int rep) {
  std::string name = std::string(models::LayerKindName(kind)) + " s " + std::to_string(tokens);
  if (prefix > 0) name += " prefix " + std::to_string(prefix);
  return name + " repetition " + std::to_string(rep);
}

pb::CostSample MakeSample(models::LayerKind kind, const char* pass, models::Recompute mode,
                          std::int64_t tokens, std::int64_t prefix,
                          const std::vector<double>& seconds) {
  const Spread spread = Summarize(seconds);
  pb::CostSample s;
  s.set_layer_kind(std::string(models::LayerKindName(kind)));
  s.set_pass(pass);
  s.set_recompute(std::string(models::RecomputeName(mode)));
  s.set_tokens(static_cast<double>(tokens));
  s.set_prefix(static_cast<double>(prefix));
  s.set_median_s(spread.median_s);
  s.set_p10_s(spread.p10_s);
  s.set_p90_s(spread.p90_s);
  s.set_repetitions(static_cast<std::uint32_t>(seconds.size()));
  return s;
}

// The medians of the core's phases over the repetitions, into the forward
// and backward samples.
void SetPhases(pb::CostSample* forward, pb::CostSample* backward,
               const std::vector<CorePhaseSeconds>& reps) {
  if (reps.empty()) return;
  std::vector<double> f[3], b[3];
  for (const CorePhaseSeconds& r : reps) {
    for (int p = 0; p < 3; ++p) {
      f[p].push_back(r.forward[p]);
      b[p].push_back(r.backward[p]);
    }
  }
  forward->set_pre_s(Quantile(f[0], 0.5));
  forward->set_st_s(Quantile(f[1], 0.5));
  forward->set_out_s(Quantile(f[2], 0.5));
  backward->set_pre_s(Quantile(b[0], 0.5));
  backward->set_st_s(Quantile(b[1], 0.5));
  backward->set_out_s(Quantile(b[2], 0.5));
}

// A chunk to time: its length and the tokens before it (attention only).
struct Point {
  std::int64_t tokens = 0, prefix = 0;
};

// One timer per (kind, mode), each timed at every point of its kind.
template <typename T>
struct Timed {
  models::LayerKind kind;
  models::Recompute mode;
  std::unique_ptr<LayerTimer<T>> timer;
  std::vector<Point> points;
  std::vector<PassSamples> by_point;  // (points)
  std::vector<std::vector<CorePhaseSeconds>> phases;  // (points, repetitions)
};

// Attention at every (length, prefix) asked for; other kinds at every length.
std::vector<Point> PointsOf(const ProfileRequest& request, models::LayerKind kind) {
  std::vector<Point> points;
  if (kind == models::LayerKind::kAttention) {
    for (const auto& [s, c] : request.attention_chunks) points.push_back({s, c});
  } else {
    for (std::int64_t s : request.tokens) points.push_back({s, 0});
  }
  return points;
}

// Repetition by repetition, every (kind, mode, length) once, so that the
// samples of each are spread over the whole profile.
template <typename T>
Status TimeInterleaved(const ProfileRequest& request, const ProfileProgress& progress,
                       const ProfileTrace& trace,
                       std::vector<Timed<T>>* timed) {
  const int reps = request.timing.warmup + request.timing.repetitions;
  Tracer tracer(trace);
  for (int rep = 0; rep < reps; ++rep) {
    for (Timed<T>& t : *timed) {
      for (std::size_t j = 0; j < t.points.size(); ++j) {
        const std::string step =
            tracer.on() ? StepName(t.kind, t.points[j].tokens, t.points[j].prefix, rep) : "";
        tracer.Start();
        SF_ASSIGN_OR_RETURN(auto seconds, t.timer->TimeOnce(t.points[j].tokens, t.points[j].prefix));
        tracer.Done(step + " (" + (rep < request.timing.warmup ? "warm-up, " : "") +
                    "forward " + std::to_string(seconds.first) + " s, backward " +
                    std::to_string(seconds.second) + " s timed)");
        if (rep < request.timing.warmup) continue;
        t.by_point[j].forward_s.push_back(seconds.first);
        t.by_point[j].backward_s.push_back(seconds.second);
        tracer.Start();
        SF_ASSIGN_OR_RETURN(auto split, t.timer->TimeSplitOnce(t.points[j].tokens, t.points[j].prefix));
        tracer.Done(step + ", split backward");
        t.by_point[j].input_s.push_back(split.first);
        t.by_point[j].weight_s.push_back(split.second);
        if (t.timer->has_phases()) {
          tracer.Start();
          SF_ASSIGN_OR_RETURN(CorePhaseSeconds phases, t.timer->TimePhasesOnce(t.points[j].tokens));
          tracer.Done(step + ", core phases");
          t.phases[j].push_back(phases);
        }
      }
    }
    if (progress) progress(rep + 1, reps + 1);
  }
  return Status::Ok();
}

template <typename T>
Status Fill(const ProfileRequest& request, const ProfileProgress& progress,
            const ProfileTrace& trace, pb::CostTable* table) {
  std::vector<Timed<T>> timed;
  Tracer tracer(trace);
  for (models::LayerKind kind : LayerKindsOf(request.model)) {
    for (models::Recompute mode : request.recompute) {
      tracer.Start();
      SF_ASSIGN_OR_RETURN(auto timer,
                          LayerTimer<T>::Make(request.model, kind, mode, request.microbatch_size,
                                              request.device, request.st_overlap,
                                              request.st_tile, request.tensor_size));
      tracer.Done(std::string(models::LayerKindName(kind)) + " layer built (recompute " +
                  std::string(models::RecomputeName(mode)) + ")");
      std::vector<Point> points = PointsOf(request, kind);
      const std::size_t n = points.size();
      timed.push_back(Timed<T>{kind, mode, std::move(timer), std::move(points),
                               std::vector<PassSamples>(n),
                               std::vector<std::vector<CorePhaseSeconds>>(n)});
    }
  }
  SF_RETURN_IF_ERROR(TimeInterleaved(request, progress, trace, &timed));
  for (const Timed<T>& t : timed) {
    for (std::size_t j = 0; j < t.points.size(); ++j) {
      const Point& p = t.points[j];
      pb::CostSample* forward = table->add_samples();
      *forward = MakeSample(t.kind, "forward", t.mode, p.tokens, p.prefix, t.by_point[j].forward_s);
      pb::CostSample* backward = table->add_samples();
      *backward =
          MakeSample(t.kind, "backward", t.mode, p.tokens, p.prefix, t.by_point[j].backward_s);
      SetPhases(forward, backward, t.phases[j]);
      // The split backward's B and W (zero-bubble plans replay these).
      *table->add_samples() =
          MakeSample(t.kind, "input", t.mode, p.tokens, p.prefix, t.by_point[j].input_s);
      *table->add_samples() =
          MakeSample(t.kind, "weight", t.mode, p.tokens, p.prefix, t.by_point[j].weight_s);
    }
  }
  tracer.Start();
  SF_ASSIGN_OR_RETURN(std::vector<double> per_param,
                      TimeOptimizerPerParam<T>(request.model, request.timing, request.device));
  tracer.Done("optimizer timed (its layers built, every repetition)");
  table->set_optimizer_s_per_param(Quantile(per_param, 0.5));
  const int reps = request.timing.warmup + request.timing.repetitions;
  if (progress) progress(reps + 1, reps + 1);
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
                                    const ProfileProgress& progress,
                                    const ProfileTrace& trace) {
  if (request.tokens.empty()) return Status::Invalid("profile: no chunk lengths to time");
  for (std::int64_t s : request.tokens) {
    if (s < 1) return Status::Invalid("profile: a chunk must have >= 1 tokens");
  }
  for (const auto& [s, c] : request.attention_chunks) {
    if (s < 1 || c < 0) {
      return Status::Invalid("profile: an attention chunk must have >= 1 tokens and a prefix >= 0");
    }
  }
  if (request.microbatch_size < 1) return Status::Invalid("profile: microbatch_size must be >= 1");
  const std::vector<models::LayerKind> kinds = LayerKindsOf(request.model);
  if (std::find(kinds.begin(), kinds.end(), models::LayerKind::kAttention) != kinds.end() &&
      request.attention_chunks.empty()) {
    return Status::Invalid("profile: the model has attention layers but no (length, prefix) chunks to time them at");
  }
  if (request.timing.repetitions < 1) return Status::Invalid("--repetitions must be >= 1");
  if (request.timing.warmup < 0) return Status::Invalid("--warmup must be >= 0");
  if (request.recompute.empty()) return Status::Invalid("profile: no recompute modes to time");
  if (request.dtype != "float32" && request.dtype != "float64" && request.dtype != "bf16") {
    return Status::Invalid("--dtype: unknown '" + request.dtype +
                           "' (known: float32, float64, bf16)");
  }
  if (request.dtype == "bf16" && (request.device == nullptr || !request.device->has_bf16())) {
    return Status::Invalid("--dtype: bf16 runs on the grid devices (--device host-grid or "
                           "cuda); the cpu device's kernels are float32 and float64");
  }
  pb::CostTable table;
  *table.mutable_model() = request.model;
  table.set_dtype(request.dtype);
  table.set_microbatch_size(static_cast<std::uint32_t>(request.microbatch_size));
  table.set_device(request.device != nullptr ? request.device->name() : "cpu");
  table.set_st_overlap(request.st_overlap);
  table.set_st_tile(static_cast<std::uint32_t>(std::max(0, request.st_tile)));
  table.set_tensor_size(static_cast<std::uint32_t>(std::max(1, request.tensor_size)));
  const Status filled = request.dtype == "float64" ? Fill<double>(request, progress, trace, &table)
                        : request.dtype == "bf16"  ? Fill<bf16>(request, progress, trace, &table)
                                                   : Fill<float>(request, progress, trace, &table);
  SF_RETURN_IF_ERROR(filled);
  return table;
}

}  // namespace stateflow::backend

// The profiler's pieces in one process: percentiles against their
// definition, the link fit recovering a known latency and bandwidth (and its
// fallbacks), one-layer ranges of the layer list, layer and optimizer
// timings of the right shape with errors for what the backend cannot run,
// the in-process ping-pong, and a profiled table that the simulator's
// replay index accepts and answers at the measured lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <tuple>

#include "backend/profile/gemm_timer.h"
#include "backend/profile/layer_timer.h"
#include "backend/profile/link_timer.h"
#include "backend/profile/profiler.h"
#include "backend/profile/spread.h"
#include "models/model.h"
#include "sim/cost_table.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::backend {
namespace {

using models::LayerKind;
using models::Recompute;

pb::ModelSpec Tiny() { return *models::ModelPreset("gdn-tiny"); }

const TimingOptions kQuick{.repetitions = 3, .warmup = 1};

// ---- percentiles ----------------------------------------------------------------

TEST(Spread, QuantilesInterpolateOrderStatistics) {
  // 11 values 10, 20, ..., 110 shuffled: the q-quantile sits at position
  // 10 q of the sorted list, i.e. 10 + 100 q.
  const std::vector<double> values = {70, 10, 110, 40, 90, 20, 60, 100, 30, 80, 50};
  for (double q : {0.0, 0.1, 0.25, 0.5, 0.9, 1.0}) {
    EXPECT_NEAR(Quantile(values, q), 10 + 100 * q, 1e-12) << q;
  }
  const Spread s = Summarize(values);
  EXPECT_DOUBLE_EQ(s.median_s, 60);
  EXPECT_DOUBLE_EQ(s.p10_s, 20);
  EXPECT_DOUBLE_EQ(s.p90_s, 100);
  // Between order statistics: {1, 2} has median 1.5 and p10 1.1.
  EXPECT_DOUBLE_EQ(Quantile({2, 1}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(Quantile({2, 1}, 0.1), 1.1);
  const Spread one = Summarize({0.25});
  EXPECT_EQ(std::make_tuple(one.median_s, one.p10_s, one.p90_s), std::make_tuple(0.25, 0.25, 0.25));
}

// ---- link fit ---------------------------------------------------------------------

std::vector<pb::LinkSample> Samples(const std::vector<std::pair<double, double>>& points) {
  std::vector<pb::LinkSample> out;
  for (const auto& [bytes, seconds] : points) {
    pb::LinkSample s;
    s.set_bytes(bytes);
    s.set_median_s(seconds);
    s.set_repetitions(1);
    out.push_back(s);
  }
  return out;
}

TEST(FitLink, RecoversLatencyAndBandwidthOfExactSamples) {
  const double latency = 3e-6, bandwidth = 5e9;
  std::vector<std::pair<double, double>> points;
  for (double bytes : {256.0, 4096.0, 65536.0, 1048576.0}) {
    points.emplace_back(bytes, latency + bytes / bandwidth);
  }
  Result<pb::LinkSpec> link = FitLink(Samples(points));
  ASSERT_TRUE(link.ok()) << link.status().message();
  EXPECT_NEAR(link->latency_s(), latency, 1e-15);
  EXPECT_NEAR(link->bandwidth_bytes_per_s() / bandwidth, 1.0, 1e-9);
}

TEST(FitLink, LeastSquaresOfNoisySamplesAndFallbacks) {
  // Residuals +e, -e, -e, +e around the line at x = 0, 1, 2, 3 (units of
  // 1000 bytes) are orthogonal to 1 and x, so least squares returns the line.
  const double a = 2e-6, b = 1e-9, e = 1e-7;
  const std::vector<double> sign = {1, -1, -1, 1};
  std::vector<std::pair<double, double>> points;
  for (int k = 0; k < 4; ++k) points.emplace_back(1000.0 * k, a + b * 1000.0 * k + sign[k] * e);
  Result<pb::LinkSpec> fit = FitLink(Samples(points));
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->latency_s(), a, 1e-15);
  EXPECT_NEAR(fit->bandwidth_bytes_per_s() * b, 1.0, 1e-9);

  // A negative intercept is refitted through the origin: slope sum(xy)/sum(xx).
  const auto through_origin = Samples({{1000, 0.5e-6}, {2000, 2e-6}});
  Result<pb::LinkSpec> origin = FitLink(through_origin);
  ASSERT_TRUE(origin.ok());
  EXPECT_EQ(origin->latency_s(), 0.0);
  const double slope = (1000 * 0.5e-6 + 2000 * 2e-6) / (1000.0 * 1000 + 2000.0 * 2000);
  EXPECT_NEAR(origin->bandwidth_bytes_per_s() * slope, 1.0, 1e-12);

  // No size dependence: the mean time is the latency, bandwidth stays > 0.
  Result<pb::LinkSpec> flat = FitLink(Samples({{100, 4e-6}, {10000, 2e-6}}));
  ASSERT_TRUE(flat.ok());
  EXPECT_NEAR(flat->latency_s(), 3e-6, 1e-18);
  EXPECT_GT(flat->bandwidth_bytes_per_s(), 0);

  EXPECT_FALSE(FitLink({}).ok());
  Result<pb::LinkSpec> bad = FitLink(Samples({{100, -1}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("link_samples[0]"), std::string::npos);
}

// ---- layers -----------------------------------------------------------------------

TEST(LayerTimer, OneLayerOfEachKind) {
  const pb::ModelSpec model = Tiny();
  const int L = static_cast<int>(model.num_layers());
  const std::vector<std::tuple<LayerKind, int>> expected = {
      {LayerKind::kEmbedding, 0}, {LayerKind::kRecurrence, 1}, {LayerKind::kHead, L + 1}};
  for (const auto& [kind, first] : expected) {
    Result<models::StageLayers> layers = OneLayerOf(model, kind);
    ASSERT_TRUE(layers.ok());
    EXPECT_EQ(layers->first, first);
    EXPECT_EQ(layers->last, first + 1);
  }
  Result<models::StageLayers> none = OneLayerOf(model, LayerKind::kAttention);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("attention"), std::string::npos);
}

TEST(LayerTimer, EveryKindAndModeGivesOnePositiveTimePerRepetition) {
  for (LayerKind kind : {LayerKind::kEmbedding, LayerKind::kRecurrence, LayerKind::kHead}) {
    for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      Result<PassSamples> t = TimeLayerPasses<float>(Tiny(), kind, mode, 5, kQuick);
      ASSERT_TRUE(t.ok()) << t.status().message();
      ASSERT_EQ(t->forward_s.size(), 3u);
      ASSERT_EQ(t->backward_s.size(), 3u);
      for (double s : t->forward_s) EXPECT_GT(s, 0);
      for (double s : t->backward_s) EXPECT_GT(s, 0);
    }
  }
  Result<PassSamples> one =
      TimeLayerPasses<double>(Tiny(), LayerKind::kRecurrence, Recompute::kNone, 1, {1, 0});
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->forward_s.size(), 1u);
}

TEST(LayerTimer, WhatTheBackendCannotRunIsAnError) {
  pb::ModelSpec tied = *models::ModelPreset("mamba3-tiny");
  tied.set_untied_embeddings(false);
  Result<PassSamples> unsupported =
      TimeLayerPasses<float>(tied, LayerKind::kRecurrence, Recompute::kNone, 8, kQuick);
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.status().message().find("model.untied_embeddings"), std::string::npos);
  Result<PassSamples> missing = TimeLayerPasses<float>(Tiny(), LayerKind::kAttention,
                                                       Recompute::kNone, 8, kQuick);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("has no attention layer"), std::string::npos);
  EXPECT_FALSE(TimeLayerPasses<float>(Tiny(), LayerKind::kHead, Recompute::kNone, 0, kQuick).ok());
  EXPECT_FALSE(TimeLayerPasses<float>(Tiny(), LayerKind::kHead, Recompute::kNone, 4, {0, 1}).ok());
  EXPECT_FALSE(TimeLayerPasses<float>(Tiny(), LayerKind::kHead, Recompute::kNone, 4, {1, -1}).ok());
}

// A GDN recurrence layer's core phases: six positive spans per repetition,
// with or without the layer's split-and-overlap; other kinds have none (an
// error naming the kind and architecture).
TEST(LayerTimer, GdnCorePhasesArePositiveSpans) {
  for (bool overlap : {false, true}) {
    Result<std::unique_ptr<LayerTimer<float>>> timer = LayerTimer<float>::Make(
        Tiny(), LayerKind::kRecurrence, Recompute::kNone, 2, nullptr, overlap);
    ASSERT_TRUE(timer.ok()) << timer.status().message();
    ASSERT_TRUE((*timer)->has_phases());
    Result<CorePhaseSeconds> t = (*timer)->TimePhasesOnce(70);  // a partial block
    ASSERT_TRUE(t.ok()) << t.status().message();
    for (int p = 0; p < 3; ++p) {
      EXPECT_GT(t->forward[p], 0) << p;
      EXPECT_GT(t->backward[p], 0) << p;
    }
    EXPECT_FALSE((*timer)->TimePhasesOnce(0).ok());
  }
  Result<std::unique_ptr<LayerTimer<double>>> head =
      LayerTimer<double>::Make(Tiny(), LayerKind::kHead, Recompute::kNone);
  ASSERT_TRUE(head.ok());
  EXPECT_FALSE((*head)->has_phases());
  Result<CorePhaseSeconds> none = (*head)->TimePhasesOnce(8);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("head layer of a gdn model"), std::string::npos)
      << none.status().message();
}

// A Mamba-3 recurrence layer's core phases likewise (mamba3 and the Mamba-3
// layers of mamba3-hybrid), with or without split-and-overlap, at a partial
// block and at several blocks; the hybrid's attention layers have none.
TEST(LayerTimer, Mamba3CorePhasesArePositiveSpans) {
  for (const char* name : {"mamba3-tiny", "mamba3-hybrid-tiny"}) {
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(std::string(name) + (overlap ? " overlapped" : " sequential"));
      Result<std::unique_ptr<LayerTimer<double>>> timer = LayerTimer<double>::Make(
          *models::ModelPreset(name), LayerKind::kRecurrence, Recompute::kNone, 2, nullptr,
          overlap);
      ASSERT_TRUE(timer.ok()) << timer.status().message();
      ASSERT_TRUE((*timer)->has_phases());
      for (std::int64_t tokens : {70, 192}) {
        Result<CorePhaseSeconds> t = (*timer)->TimePhasesOnce(tokens);
        ASSERT_TRUE(t.ok()) << t.status().message();
        for (int p = 0; p < 3; ++p) {
          EXPECT_GT(t->forward[p], 0) << tokens << " " << p;
          EXPECT_GT(t->backward[p], 0) << tokens << " " << p;
        }
      }
      EXPECT_FALSE((*timer)->TimePhasesOnce(0).ok());
    }
  }
  Result<std::unique_ptr<LayerTimer<float>>> attention = LayerTimer<float>::Make(
      *models::ModelPreset("mamba3-hybrid-tiny"), LayerKind::kAttention, Recompute::kNone);
  ASSERT_TRUE(attention.ok()) << attention.status().message();
  EXPECT_FALSE((*attention)->has_phases());
  Result<CorePhaseSeconds> none = (*attention)->TimePhasesOnce(8);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("attention layer of a mamba3 model"), std::string::npos)
      << none.status().message();
}

TEST(LayerTimer, OptimizerPerParameter) {
  Result<std::vector<double>> t = TimeOptimizerPerParam<float>(Tiny(), kQuick);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 3u);
  // An AdamW update reads and writes a few words per parameter: more than
  // nothing, far less than a microsecond.
  for (double s : *t) {
    EXPECT_GT(s, 0);
    EXPECT_LT(s, 1e-6);
  }
}

// ---- link ping-pong in one process ------------------------------------------------------

TEST(LinkTimer, InProcessPingPongOneSamplePerSize) {
  const std::vector<std::int64_t> elements = {1, 64, 4096};
  Result<std::vector<pb::LinkSample>> samples = PingPongInProcess<double>(elements, kQuick);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  ASSERT_EQ(samples->size(), elements.size());
  for (std::size_t k = 0; k < elements.size(); ++k) {
    EXPECT_EQ((*samples)[k].bytes(), static_cast<double>(elements[k] * sizeof(double)));
    EXPECT_EQ((*samples)[k].repetitions(), 3u);
    EXPECT_GT((*samples)[k].median_s(), 0);
  }
  EXPECT_FALSE(PingPongInProcess<float>({}, kQuick).ok());
  EXPECT_FALSE(PingPongInProcess<float>({0}, kQuick).ok());
}

// ---- the linear kernel's GEMMs -----------------------------------------------------------

TEST(GemmTimer, EveryPassAndTypeGivesOnePositiveTimePerRepetition) {
  Result<Device*> grid = GetDevice("host-grid", 0);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  for (LinearPass pass : {LinearPass::kForward, LinearPass::kInputGrad, LinearPass::kWeightGrad}) {
    SCOPED_TRACE(LinearPassName(pass));
    const LinearShape shape{pass, 24, 16, 40};
    for (Result<std::vector<double>> t :
         {TimeLinear<float>(nullptr, shape, kQuick), TimeLinear<double>(nullptr, shape, kQuick),
          TimeLinear<bf16>(*grid, shape, kQuick), TimeLinear<float>(*grid, shape, kQuick)}) {
      ASSERT_TRUE(t.ok()) << t.status().message();
      ASSERT_EQ(t->size(), 3u);
      for (double s : *t) EXPECT_GT(s, 0);
    }
  }
}

TEST(GemmTimer, BadShapesAreErrorsNamingTheDimension) {
  for (const auto& [shape, word] :
       {std::pair<LinearShape, std::string>{{LinearPass::kForward, 0, 4, 4}, "rows 0"},
        {{LinearPass::kInputGrad, 4, -1, 4}, "in -1"},
        {{LinearPass::kWeightGrad, 4, 4, 0}, "out 0"},
        {{LinearPass::kForward, 1 << 20, 1 << 12, 4}, "2^31"}}) {
    Result<std::vector<double>> t = TimeLinear<float>(nullptr, shape, kQuick);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(word), std::string::npos) << t.status().message();
  }
  EXPECT_FALSE(TimeLinear<float>(nullptr, {LinearPass::kForward, 4, 4, 4}, {.repetitions = 0}).ok());
}

// Each pass's point is in the cost model's (m, n, k) for that pass
// (CostModel::ComputeTime looks up the forward at (t, n, k), dX at (t, k, n),
// dW at (k, n, t) for a linear of k inputs and n outputs), at 2 R C D FLOPs.
TEST(GemmTimer, PointsFollowTheCostModelsConvention) {
  const double flops = 2.0 * 24 * 16 * 40;
  const struct {
    LinearPass pass;
    double m, n, k;
  } cases[] = {{LinearPass::kForward, 24, 40, 16},
               {LinearPass::kInputGrad, 24, 16, 40},
               {LinearPass::kWeightGrad, 16, 40, 24}};
  for (const auto& c : cases) {
    const pb::GemmPoint p = GemmPointOf({c.pass, 24, 16, 40}, 2e-6, "fp64");
    EXPECT_EQ(p.m(), c.m);
    EXPECT_EQ(p.n(), c.n);
    EXPECT_EQ(p.k(), c.k);
    EXPECT_EQ(p.dtype(), "fp64");
    EXPECT_DOUBLE_EQ(p.flops_per_s(), flops / 2e-6);
  }
  EXPECT_TRUE(std::isfinite(GemmPointOf({LinearPass::kForward, 1, 1, 1}, 0, "fp32").flops_per_s()));
}

// ---- the whole table ---------------------------------------------------------------------

TEST(Profiler, TableHasEverySampleAndReplays) {
  ProfileRequest request{.model = Tiny(),
                         .tokens = {4, 12},
                         .attention_chunks = {},
                         .recompute = {Recompute::kNone, Recompute::kFull},
                         .dtype = "float32",
                         .timing = kQuick};
  int calls = 0, last_total = 0;
  Result<pb::CostTable> table = ProfileLayers(request, [&](int done, int total) {
    EXPECT_EQ(done, ++calls);
    last_total = total;
  });
  ASSERT_TRUE(table.ok()) << table.status().message();
  // One call per repetition (warm-up included), then the optimizer.
  EXPECT_EQ(calls, kQuick.warmup + kQuick.repetitions + 1);
  EXPECT_EQ(last_total, calls);
  // kinds x passes (forward, backward, and the split backward's input and
  // weight) x modes x lengths.
  ASSERT_EQ(table->samples_size(), 3 * 4 * 2 * 2);
  std::set<std::tuple<std::string, std::string, std::string, double>> keys;
  for (const pb::CostSample& s : table->samples()) {
    keys.insert({s.layer_kind(), s.pass(), s.recompute(), s.tokens()});
    EXPECT_LE(s.p10_s(), s.median_s());
    EXPECT_LE(s.median_s(), s.p90_s());
    EXPECT_EQ(s.repetitions(), 3u);
  }
  EXPECT_EQ(keys.size(), 48u);
  EXPECT_GT(table->optimizer_s_per_param(), 0);
  EXPECT_EQ(table->dtype(), "float32");
  EXPECT_FALSE(table->st_overlap());
  // The recurrence's forward and backward samples carry the core's phases,
  // the others none.
  for (const pb::CostSample& s : table->samples()) {
    if (s.layer_kind() == "recurrence" && (s.pass() == "forward" || s.pass() == "backward")) {
      EXPECT_GT(s.pre_s(), 0) << sim::CostSampleKey(s);
      EXPECT_GT(s.st_s(), 0) << sim::CostSampleKey(s);
      EXPECT_GT(s.out_s(), 0) << sim::CostSampleKey(s);
    } else {
      EXPECT_EQ(s.pre_s() + s.st_s() + s.out_s(), 0) << sim::CostSampleKey(s);
    }
  }

  // With a link, the simulator's index accepts it and answers the measured
  // points exactly, and the midpoint by linear interpolation.
  table->mutable_link()->set_latency_s(1e-6);
  table->mutable_link()->set_bandwidth_bytes_per_s(1e9);
  ASSERT_TRUE(sim::CheckCostTableModel(*table, Tiny(), "profiled", 1).ok());
  Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(*table, "profiled");
  ASSERT_TRUE(index.ok()) << index.status().message();
  double at4 = 0, at12 = 0;
  for (const pb::CostSample& s : table->samples()) {
    if (s.layer_kind() != "recurrence" || s.pass() != "backward" || s.recompute() != "full")
      continue;
    (s.tokens() == 4 ? at4 : at12) = s.median_s();
  }
  EXPECT_EQ(*index->Time(LayerKind::kRecurrence, "backward", Recompute::kFull, 4, 0), at4);
  EXPECT_NEAR(*index->Time(LayerKind::kRecurrence, "backward", Recompute::kFull, 8, 0),
              (at4 + at12) / 2, 1e-15);
}

// schedule.st_overlap and st_tile are recorded in the table (the layers
// then ran their core split and overlapped; the phases are still there).
TEST(Profiler, RecordsTheOverlapModeAndTile) {
  ProfileRequest request{.model = Tiny(),
                         .tokens = {64},
                         .attention_chunks = {},
                         .recompute = {Recompute::kNone},
                         .dtype = "float64",
                         .timing = {.repetitions = 1, .warmup = 0},
                         .st_overlap = true,
                         .st_tile = 16};
  Result<pb::CostTable> table = ProfileLayers(request, nullptr);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_TRUE(table->st_overlap());
  EXPECT_EQ(table->st_tile(), 16u);
  int with_phases = 0;
  for (const pb::CostSample& s : table->samples()) with_phases += s.st_s() > 0;
  EXPECT_EQ(with_phases, 2);  // the recurrence forward and backward
}

// A profiled Mamba-3 table (measured sequentially, with phases) replays with
// either overlap mode: st_overlap off gives the measured passes, on takes
// off each recurrence pass's saving derived by hand from its measured
// phases, the window model of docs/cost-model.md ("Measured phases"): at
// coverage u, X = (1 - u) st_s, saving = min(pre_s, X) / 2 + min(out_s, X) / 2.
// One stage, one microbatch, one chunk: the step is the sum of the passes,
// so the two replays differ by exactly the savings of its recurrence layers.
TEST(Profiler, Mamba3TableReplaysWithEitherOverlapMode) {
  const pb::ModelSpec model = *models::ModelPreset("mamba3-tiny");
  const std::int64_t tokens = 128;  // two blocks of T_C = 64
  ProfileRequest request{.model = model,
                         .tokens = {tokens},
                         .attention_chunks = {},
                         .recompute = {Recompute::kNone},
                         .dtype = "float32",
                         .timing = kQuick};
  Result<pb::CostTable> table = ProfileLayers(request, nullptr);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_FALSE(table->st_overlap());
  double saving[2] = {0, 0};  // forward, backward: derived below
  // u: the ST's tiles (heads x ceil(head_dim_v / st_tile), st_tile 64) over
  // twice as many compute units.
  const double tiles = model.num_heads() * std::ceil(model.head_dim_v() / 64.0);
  const double u = 0.5;
  int phased = 0;
  for (const pb::CostSample& s : table->samples()) {
    if (s.layer_kind() != "recurrence" || s.pass() == "input" || s.pass() == "weight") {
      EXPECT_EQ(s.pre_s() + s.st_s() + s.out_s(), 0) << sim::CostSampleKey(s);
      continue;
    }
    ++phased;
    EXPECT_GT(s.pre_s(), 0) << sim::CostSampleKey(s);
    EXPECT_GT(s.st_s(), 0) << sim::CostSampleKey(s);
    EXPECT_GT(s.out_s(), 0) << sim::CostSampleKey(s);
    const double X = (1 - u) * s.st_s();
    saving[s.pass() == "backward"] = std::min(s.pre_s(), X) / 2 + std::min(s.out_s(), X) / 2;
  }
  EXPECT_EQ(phased, 2);  // the recurrence forward and backward
  table->mutable_link()->set_latency_s(1e-6);
  table->mutable_link()->set_bandwidth_bytes_per_s(1e9);
  Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(*table, "mamba3.textproto");
  ASSERT_TRUE(index.ok()) << index.status().message();

  pb::Scenario scenario;
  scenario.set_name("mamba3-phases");
  *scenario.mutable_model() = model;
  *scenario.mutable_cluster() = *models::ClusterPreset("cpu");
  scenario.mutable_cluster()->mutable_device()->set_compute_units(
      static_cast<std::uint32_t>(tiles / u));
  scenario.mutable_parallel()->set_pipeline_size(1);
  scenario.mutable_parallel()->set_tensor_size(1);
  scenario.mutable_parallel()->set_data_size(1);
  scenario.mutable_parallel()->set_microbatch_size(1);
  scenario.mutable_parallel()->set_microbatches(1);
  scenario.set_seq_len(tokens);
  double step[2] = {0, 0};  // st_overlap off, on
  for (bool overlap : {false, true}) {
    pb::ScheduleSpec spec;
    spec.set_policy("1f1b");
    spec.set_chunks(1);
    spec.set_granularity(1);
    spec.set_recompute("none");
    spec.set_st_overlap(overlap);
    Result<sim::Simulation> run =
        sim::Simulate(testing::MustResolve(scenario), spec, {.costs = &*index});
    ASSERT_TRUE(run.ok()) << run.status().message();
    step[overlap] = run->report.step_time_s();
  }
  int recurrence_layers = 0;
  for (LayerKind k : models::LayerList(model)) recurrence_layers += k == LayerKind::kRecurrence;
  EXPECT_EQ(recurrence_layers, model.num_layers());
  const double expected = recurrence_layers * (saving[0] + saving[1]);
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(step[0] - step[1], expected, 1e-12 * step[0]);
}

// A hybrid: attention is timed at every (length, prefix) asked for, the
// other kinds at every length, all at the asked microbatch size; the index
// answers attention by (tokens, prefix) and refuses a prefix not measured.
TEST(Profiler, AttentionIsTimedByLengthAndPrefix) {
  const pb::ModelSpec hybrid = *models::ModelPreset("gdn-hybrid-tiny");
  ProfileRequest request{.model = hybrid,
                         .tokens = {8, 16},
                         .attention_chunks = {{8, 0}, {8, 8}, {16, 16}},
                         .recompute = {Recompute::kNone},
                         .microbatch_size = 2,
                         .dtype = "float32",
                         .timing = kQuick};
  Result<pb::CostTable> table = ProfileLayers(request, nullptr);
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->microbatch_size(), 2u);
  std::set<std::tuple<std::string, double, double>> attention;
  int others = 0;
  for (const pb::CostSample& s : table->samples()) {
    if (s.pass() == "input" || s.pass() == "weight") {  // the split backward's
      EXPECT_GE(s.median_s(), 0) << s.layer_kind();
      continue;
    }
    EXPECT_GT(s.median_s(), 0) << s.layer_kind();
    if (s.layer_kind() == "attention") {
      attention.insert({s.pass(), s.tokens(), s.prefix()});
    } else {
      EXPECT_EQ(s.prefix(), 0) << s.layer_kind();
      ++others;
    }
  }
  EXPECT_EQ(attention.size(), 2u * 3u);  // forward and backward at each chunk
  EXPECT_EQ(others, 3 * 2 * 2);          // embedding, recurrence, head x passes x lengths
  int split = 0;  // the split backward's input and weight, every kind and point
  for (const pb::CostSample& s : table->samples()) split += s.pass() == "input" || s.pass() == "weight";
  EXPECT_EQ(split, 2 * (3 + 3 * 2));
  EXPECT_FALSE(sim::CheckCostTableModel(*table, hybrid, "profiled", 1).ok());
  ASSERT_TRUE(sim::CheckCostTableModel(*table, hybrid, "profiled", 2).ok());
  table->mutable_link()->set_latency_s(1e-6);
  table->mutable_link()->set_bandwidth_bytes_per_s(1e9);
  Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(*table, "profiled");
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_TRUE(index->Time(LayerKind::kAttention, "forward", Recompute::kNone, 8, 8).ok());
  EXPECT_FALSE(index->Time(LayerKind::kAttention, "forward", Recompute::kNone, 8, 4).ok());
  // Without attention chunks a hybrid cannot be profiled.
  request.attention_chunks.clear();
  EXPECT_FALSE(ProfileLayers(request, nullptr).ok());
}

TEST(Profiler, BadRequests) {
  ProfileRequest request{
      .model = Tiny(), .tokens = {}, .attention_chunks = {}, .recompute = {Recompute::kNone}, .dtype = "float32", .timing = kQuick};
  EXPECT_FALSE(ProfileLayers(request, nullptr).ok());
  request.tokens = {4};
  request.dtype = "float16";
  Result<pb::CostTable> dtype = ProfileLayers(request, nullptr);
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("--dtype"), std::string::npos);
  request.dtype = "float32";
  request.recompute = {};
  EXPECT_FALSE(ProfileLayers(request, nullptr).ok());
}

}  // namespace
}  // namespace stateflow::backend

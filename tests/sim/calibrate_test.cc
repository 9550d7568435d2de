// Calibration (sim/calibrate.h): the runs CSV's columns and its one-line
// errors, a run the model cannot express, the efficiency curve's two-parameter
// form, and the requirement: parameters recovered within 1 % from
// runs synthesised by the simulator with known parameters.
#include "sim/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/model.h"
#include "scenario/load.h"
#include "sim/cost_source.h"
#include "sim/engine.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {
namespace {

using ::stateflow::testing::MustResolve;

// The tiny GDN (2 heads, so TP 1 or 2) on a cluster of 2 devices per node.
pb::Scenario TinyScenario(const pb::ClusterSpec& cluster) {
  pb::Scenario s;
  s.set_name("calibrate-test");
  s.set_model_preset("gdn-tiny");
  *s.mutable_cluster() = cluster;
  s.mutable_parallel()->set_pipeline_size(2);
  s.mutable_parallel()->set_microbatches(4);
  s.set_seq_len(1024);
  s.mutable_schedule()->set_policy("stateflow");
  s.mutable_schedule()->set_chunks(4);
  s.mutable_schedule()->set_granularity(16);
  return s;
}

// The "true" cluster of the synthesised runs: slow links, so that every link
// parameter moves the step time, and an efficiency knee inside the runs'
// tokens per chunk.
// In CalibParam order; the memory bandwidth is never the limit.
constexpr CalibValues kTruth = {0.6, 200, 1e13, 2e8, 200e-6, 5e8, 100e-6, 1e8, 300e-6, 1, 1};

pb::ClusterSpec TrueCluster() {
  pb::ClusterSpec c = *models::ClusterPreset("cpu");
  c.set_name("true");
  // kTruth's efficiency 0.6 of a 10 GFLOP/s peak: the runs' balance of
  // compute and links that these tests were written for.
  c.mutable_device()->set_peak_flops(10e9);
  return WithCalibValues(c, kTruth);
}

// Parameters no synthesised run depends on: the memory bandwidth (never the
// limit) and the kernel-cost scales (the cluster has no kernel costs).
bool Unconstrained(int k) {
  return k == static_cast<int>(CalibParam::kMemoryBandwidth) ||
         k == static_cast<int>(CalibParam::kKernelComputeScale) ||
         k == static_cast<int>(CalibParam::kKernelAllReduceScale);
}

// The per-action overhead: the true cluster has none, so the default fit
// leaves it out (fitted only when asked for).
constexpr int kOverhead = static_cast<int>(CalibParam::kActionOverhead);

bool Bandwidth(int k) {
  return k == static_cast<int>(CalibParam::kPipelineBandwidth) ||
         k == static_cast<int>(CalibParam::kIntraBandwidth) ||
         k == static_cast<int>(CalibParam::kInterBandwidth);
}

// Where StartCluster puts each constrained parameter, as a factor on its
// truth: +30 % or -30 % in turn, and every link's bandwidth +30 % (the start
// plays the datasheet, which a link's measured bandwidth stays below: the
// fit's physical range, sim/calibrate.h).
double StartFactor(int k) { return Bandwidth(k) || k % 2 == 0 ? 1.3 : 0.7; }

pb::ClusterSpec StartCluster() {
  CalibValues v = kTruth;
  for (int k = 0; k < kNumCalibParams; ++k) {
    if (!Unconstrained(k)) v[k] *= StartFactor(k);
  }
  return WithCalibValues(TrueCluster(), v);
}

// Runs over T, N, P, TP and DP (DP 2 in a node, DP 4 across two), their
// step times simulated on the true cluster, as a CSV.
std::string SynthesisedCsv(const pb::ClusterSpec& true_cluster = TrueCluster()) {
  const scenario::ResolvedScenario truth = MustResolve(TinyScenario(true_cluster));
  std::string csv = "name,policy,P,M,N,T,tp,dp,step_time_s\n";
  struct Config { const char* policy; int p, m, n, t, tp, dp; };
  const std::vector<Config> configs = {
      {"1f1b", 1, 2, 1, 256, 1, 1},       {"1f1b", 1, 2, 1, 4096, 1, 1},
      {"stateflow", 1, 2, 8, 1024, 1, 1}, {"stateflow", 1, 2, 16, 512, 1, 1},
      {"1f1b", 2, 4, 1, 512, 1, 1},       {"1f1b", 2, 4, 1, 2048, 1, 1},
      {"stateflow", 2, 4, 4, 512, 1, 1},  {"stateflow", 2, 4, 8, 4096, 1, 1},
      {"stateflow", 4, 8, 2, 1024, 1, 1}, {"stateflow", 4, 4, 16, 2048, 1, 1},
      {"stateflow", 2, 4, 4, 1024, 2, 1}, {"1f1b", 1, 2, 1, 2048, 2, 1},
      {"stateflow", 2, 4, 8, 256, 2, 1},  {"1f1b", 2, 2, 1, 512, 1, 2},
      {"stateflow", 2, 2, 4, 2048, 1, 2}, {"1f1b", 2, 2, 1, 512, 1, 4},
      {"stateflow", 1, 2, 2, 4096, 1, 4}, {"stateflow", 2, 4, 2, 256, 1, 4},
  };
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    pb::Scenario s = truth.proto();
    s.mutable_schedule()->set_policy(c.policy);
    s.mutable_schedule()->set_chunks(c.n);
    s.mutable_parallel()->set_pipeline_size(c.p);
    s.mutable_parallel()->set_microbatches(c.m);
    s.mutable_parallel()->set_tensor_size(c.tp);
    s.mutable_parallel()->set_data_size(c.dp);
    s.set_seq_len(c.t);
    const scenario::ResolvedScenario r = MustResolve(s);
    Result<Simulation> sim = Simulate(r, r.proto().schedule());
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    char line[256];
    std::snprintf(line, sizeof(line), "run%zu,%s,%d,%d,%d,%d,%d,%d,%.17g\n", i, c.policy, c.p,
                  c.m, c.n, c.t, c.tp, c.dp, sim->report.step_time_s());
    csv += line;
  }
  return csv;
}

std::vector<CalibrationRun> MustApply(const pb::ClusterSpec& start, const std::string& csv) {
  Result<std::vector<CalibrationRow>> rows = ParseCalibrationCsv(csv, "runs.csv");
  EXPECT_TRUE(rows.ok()) << rows.status().message();
  Result<std::vector<CalibrationRun>> runs =
      ApplyRows(MustResolve(TinyScenario(start)), *rows, "runs.csv");
  EXPECT_TRUE(runs.ok()) << runs.status().message();
  return std::move(runs).value();
}

TEST(Calibrate, RecoversSynthesisedParametersWithinOnePercent) {
  const std::vector<CalibrationRun> runs = MustApply(StartCluster(), SynthesisedCsv());
  Result<Calibration> c = Calibrate(runs, {});
  ASSERT_TRUE(c.ok()) << c.status().message();
  const CalibValues& truth = kTruth;
  int fitted = 0;
  for (int k = 0; k < kNumCalibParams; ++k) {
    const pb::CalibrationParameter& p = c->report.parameters(k);
    SCOPED_TRACE(p.name() + " status " + p.status());
    if (k == kOverhead) {
      EXPECT_EQ(p.status(), "held: the cluster has none (--fit device.action_overhead_s fits it)");
      EXPECT_EQ(c->cluster.device().action_overhead_s(), 0.0);  // none written either
      continue;
    }
    if (Unconstrained(k)) {
      // No run depends on it: not constrained, held at the start.
      EXPECT_EQ(p.status(), "held: not constrained by the runs");
      EXPECT_EQ(p.fitted(), p.initial());
      continue;
    }
    EXPECT_EQ(p.status(), "fitted");
    EXPECT_NEAR(p.initial() / truth[k], StartFactor(k), 1e-6);
    EXPECT_NEAR(p.fitted() / truth[k], 1.0, 0.01);
    ++fitted;
  }
  EXPECT_EQ(fitted, kNumCalibParams - 4);
  EXPECT_LT(c->report.rms_log_error(), 1e-4);
  // The report says how the fit ended and what the runs determine.
  bool stop = false, identifiability = false;
  for (const std::string& note : c->report.notes()) {
    stop |= note.rfind("fit: converged", 0) == 0;
    identifiability |= note.rfind("identifiability: singular values", 0) == 0;
    EXPECT_EQ(note.find("implausible"), std::string::npos) << note;
  }
  EXPECT_TRUE(stop);
  EXPECT_TRUE(identifiability);
  EXPECT_GT(c->report.initial_rms_log_error(), 0.05);
  for (const pb::CalibrationRunResult& r : c->report.runs()) {
    EXPECT_NEAR(r.step_time_rel_error(), 0.0, 1e-3) << "line " << r.line();
    // Each run predicted by a fit to the other 17: exact runs, so near 0.
    ASSERT_TRUE(r.has_loo_rel_error()) << "line " << r.line();
    EXPECT_NEAR(r.loo_rel_error(), 0.0, 1e-2) << "line " << r.line();
  }
  EXPECT_LT(c->report.loo_rms_log_error(), 1e-2);
}

TEST(Calibrate, FitsOnlyTheParametersAskedForAndPredictsHeldOutRuns) {
  // Only the efficiency is wrong at the start; the held-out runs (every
  // third) are predicted from the others.
  CalibValues v = kTruth;
  v[static_cast<int>(CalibParam::kEfficiencyPeak)] *= 0.5;
  const pb::ClusterSpec start = WithCalibValues(TrueCluster(), v);
  std::string csv = SynthesisedCsv();
  // Append ",set" to the header and fit/holdout to each row.
  std::string marked;
  int line = 0;
  std::size_t pos = 0;
  while (pos < csv.size()) {
    const std::size_t end = csv.find('\n', pos);
    std::string l = csv.substr(pos, end - pos);
    pos = end + 1;
    l += line == 0 ? ",set" : (line % 3 == 0 ? ",holdout" : ",fit");
    marked += l + "\n";
    ++line;
  }
  const std::vector<CalibrationRun> runs = MustApply(start, marked);
  Result<Calibration> c = Calibrate(runs, {.fit = {CalibParam::kEfficiencyPeak}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->report.parameters(0).status(), "fitted");
  EXPECT_NEAR(c->report.parameters(0).fitted() / 0.6, 1.0, 1e-4);
  for (int k = 1; k < kNumCalibParams; ++k) {
    EXPECT_EQ(c->report.parameters(k).status(),
              k == kOverhead ? "held: the cluster has none (--fit device.action_overhead_s fits it)"
                             : "held: not asked for");
  }
  EXPECT_LT(c->report.holdout_rms_log_error(), 1e-4);
  int holdout = 0;
  for (const pb::CalibrationRunResult& r : c->report.runs()) {
    holdout += !r.fitted();
    EXPECT_EQ(r.has_loo_rel_error(), r.fitted()) << "line " << r.line();  // held out: no LOO
  }
  EXPECT_EQ(holdout, 6);
}

// --fit none: nothing fitted, every run (here all held out) predicted with
// the cluster as given: the true cluster predicts its own runs exactly, a
// cluster with half the efficiency predicts them twice as slow where
// compute dominates; every parameter is held and unchanged. Without it, all
// runs held out is an error that names the way out.
TEST(Calibrate, FitNoneEvaluatesTheClusterAsGiven) {
  std::string csv = SynthesisedCsv();
  std::string held;
  std::size_t pos = 0;
  for (int line = 0; pos < csv.size(); ++line) {
    const std::size_t end = csv.find('\n', pos);
    held += csv.substr(pos, end - pos) + (line == 0 ? ",set" : ",holdout") + "\n";
    pos = end + 1;
  }
  const std::vector<CalibrationRun> truth = MustApply(TrueCluster(), held);
  Result<Calibration> exact = Calibrate(truth, {.evaluate_only = true});
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  EXPECT_LT(exact->report.holdout_rms_log_error(), 1e-9);
  for (const pb::CalibrationParameter& p : exact->report.parameters()) {
    EXPECT_EQ(p.status(), "held: --fit none") << p.name();
    EXPECT_EQ(p.fitted(), p.initial()) << p.name();
  }
  CalibValues v = kTruth;
  v[static_cast<int>(CalibParam::kEfficiencyPeak)] *= 0.5;
  const std::vector<CalibrationRun> slow = MustApply(WithCalibValues(TrueCluster(), v), held);
  Result<Calibration> off = Calibrate(slow, {.evaluate_only = true});
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_GT(off->report.holdout_rms_log_error(), 0.1);
  for (const pb::CalibrationRunResult& r : off->report.runs()) {
    EXPECT_FALSE(r.fitted());
    EXPECT_EQ(r.predicted_step_time_s(), r.initial_step_time_s()) << "line " << r.line();
    EXPECT_GT(r.step_time_rel_error(), 0) << "line " << r.line();  // slower than measured
  }
  Result<Calibration> refused = Calibrate(truth, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--fit none"), std::string::npos)
      << refused.status().message();
}

// The prior: at the command's default weight the synthesised runs are
// still fitted within 1 % and the parameters they see well (a sensitivity
// of 0.05 or more) come back within 1 %; the weakly seen latencies may stay
// nearer the start, which is what a prior is for. At a weight that dwarfs
// the runs, every parameter stays at the start.
TEST(Calibrate, ThePriorHoldsOnlyWhatTheRunsBarelySee) {
  const std::vector<CalibrationRun> runs = MustApply(StartCluster(), SynthesisedCsv());
  Result<Calibration> c = Calibrate(runs, {.prior_weight = kDefaultPriorWeight});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_LT(c->report.rms_log_error(), 1e-2);
  int well_seen = 0;
  for (int k = 0; k < kNumCalibParams; ++k) {
    const pb::CalibrationParameter& p = c->report.parameters(k);
    if (Unconstrained(k) || k == kOverhead || p.max_sensitivity() < 0.05) continue;
    EXPECT_NEAR(p.fitted() / kTruth[k], 1.0, 0.01) << p.name();
    ++well_seen;
  }
  EXPECT_GE(well_seen, 3);  // the efficiency peak and two bandwidths
  Result<Calibration> stiff = Calibrate(runs, {.prior_weight = 1e8});
  ASSERT_TRUE(stiff.ok()) << stiff.status().message();
  for (int k = 0; k < kNumCalibParams; ++k) {
    const pb::CalibrationParameter& p = stiff->report.parameters(k);
    EXPECT_NEAR(p.fitted() / p.initial(), 1.0, 1e-3) << p.name();
  }
}

// Runs that all call the kernels at one size (T / N the same) see the
// efficiency's peak and knee only through their product: the direction
// along which they trade off is not determined, so one of them is held at
// the start and named, instead of the two wandering along it.
TEST(Calibrate, HoldsWhatTheRunsDoNotDetermine) {
  const scenario::ResolvedScenario truth = MustResolve(TinyScenario(TrueCluster()));
  std::string csv = "name,policy,P,M,N,T,step_time_s\n";
  for (int m : {2, 4, 8, 16}) {
    pb::Scenario s = truth.proto();
    s.mutable_schedule()->set_policy("1f1b");
    s.mutable_schedule()->set_chunks(1);
    s.mutable_parallel()->set_pipeline_size(1);
    s.mutable_parallel()->set_microbatches(m);
    s.set_seq_len(1024);
    const scenario::ResolvedScenario r = MustResolve(s);
    Result<Simulation> sim = Simulate(r, r.proto().schedule());
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    csv += "m" + std::to_string(m) + ",1f1b,1," + std::to_string(m) + ",1,1024," +
           std::to_string(sim->report.step_time_s() * 1.5) + "\n";
  }
  const std::vector<CalibrationRun> runs = MustApply(TrueCluster(), csv);
  Result<Calibration> c = Calibrate(
      runs, {.fit = {CalibParam::kEfficiencyPeak, CalibParam::kEfficiencyKnee}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  const pb::CalibrationParameter& peak = c->report.parameters(0);
  const pb::CalibrationParameter& knee = c->report.parameters(1);
  const bool peak_held = peak.status().rfind("held: not identifiable", 0) == 0;
  const bool knee_held = knee.status().rfind("held: not identifiable", 0) == 0;
  EXPECT_NE(peak_held, knee_held) << peak.status() << " / " << knee.status();
  const pb::CalibrationParameter& held = peak_held ? peak : knee;
  EXPECT_EQ(held.fitted(), held.initial());
  EXPECT_NE(held.status().find("trades off with efficiency."), std::string::npos) << held.status();
  // The other alone fits the runs (all 1.5x slower).
  EXPECT_LT(c->report.rms_log_error(), 1e-4);
}

// A fit the model cannot follow says so: runs a billion times slower than
// any efficiency in range allows leave efficiency.peak at its bound and every
// run predicted faster; and a fit stopped by the iteration cap says it did
// not converge.
TEST(Calibrate, SaysWhenTheFitIsImplausibleOrUnfinished) {
  std::string csv = SynthesisedCsv();
  std::string slow;
  std::size_t pos = 0;
  bool header = true;
  while (pos < csv.size()) {
    const std::size_t end = csv.find('\n', pos);
    std::string line = csv.substr(pos, end - pos);
    pos = end + 1;
    if (!header) {
      const std::size_t comma = line.rfind(',');
      line = line.substr(0, comma + 1) +
             std::to_string(std::stod(line.substr(comma + 1)) * 1e9);
    }
    header = false;
    slow += line + "\n";
  }
  const std::vector<CalibrationRun> runs = MustApply(TrueCluster(), slow);
  Result<Calibration> c = Calibrate(runs, {.fit = {CalibParam::kEfficiencyPeak}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  bool at_bound = false, one_sign = false;
  for (const std::string& note : c->report.notes()) {
    at_bound |= note.rfind("implausible: efficiency.peak ended at its bound", 0) == 0;
    one_sign |= note.rfind("implausible: every fitted run is predicted faster", 0) == 0;
  }
  EXPECT_TRUE(at_bound);
  EXPECT_TRUE(one_sign);

  const std::vector<CalibrationRun> start = MustApply(StartCluster(), SynthesisedCsv());
  Result<Calibration> capped = Calibrate(start, {.max_iterations = 1});
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  bool not_converged = false;
  for (const std::string& note : capped->report.notes()) {
    not_converged |= note.rfind("fit: NOT converged: stopped at the iteration cap (1)", 0) == 0;
  }
  EXPECT_TRUE(not_converged);
}

// Runs that do NOT come from the model (issue 28): the true cluster's step
// times plus a fixed cost per action (20 us each, every stage's actions in
// sequence: a launch and framework overhead the analytic model has no term
// for) and a deterministic +-3 % noise. The fit must end honestly:
// converged, no parameter at a bound, no one-sign flag (the residuals
// straddle zero), errors that are not zero, each run within 10 %, and a
// leave-one-out error for every fitted run; and the fitted cluster,
// carried to another model (gdn-small) whose runs are perturbed alike, must
// predict them better than the start, with the error reported.
// `serial_overhead_s`: added per stage action to the step, outside the
// model; `model_overhead_s`: the true cluster's DeviceSpec.action_overhead_s
// (inside every action, as the model charges it).
std::string PerturbedCsv(const std::string& model, double* rms_start, const pb::ClusterSpec& start,
                         double serial_overhead_s = 20e-6, double model_overhead_s = 0,
                         double noise_share = 0.03) {
  pb::ClusterSpec true_cluster = TrueCluster();
  true_cluster.mutable_device()->set_action_overhead_s(model_overhead_s);
  pb::Scenario base = TinyScenario(true_cluster);
  base.set_model_preset(model);
  const scenario::ResolvedScenario truth = MustResolve(base);
  pb::Scenario from = base;
  *from.mutable_cluster() = start;
  std::string csv = "name,policy,P,M,N,T,step_time_s\n";
  struct Config { const char* policy; int p, m, n, t; };
  const std::vector<Config> configs = {
      {"1f1b", 1, 2, 1, 256},      {"1f1b", 1, 2, 1, 4096},     {"stateflow", 1, 2, 8, 1024},
      {"stateflow", 1, 2, 16, 512}, {"1f1b", 2, 4, 1, 512},      {"1f1b", 2, 4, 1, 2048},
      {"stateflow", 2, 4, 4, 512}, {"stateflow", 2, 4, 8, 4096}, {"stateflow", 4, 8, 2, 1024},
      {"stateflow", 4, 4, 16, 2048}, {"stateflow", 2, 8, 4, 1024}, {"1f1b", 4, 8, 1, 2048}};
  double sum = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    pb::Scenario s = truth.proto();
    s.mutable_schedule()->set_policy(c.policy);
    s.mutable_schedule()->set_chunks(c.n);
    s.mutable_parallel()->set_pipeline_size(c.p);
    s.mutable_parallel()->set_microbatches(c.m);
    s.set_seq_len(c.t);
    const scenario::ResolvedScenario r = MustResolve(s);
    Result<Simulation> sim = Simulate(r, r.proto().schedule());
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    const double per_stage_actions = static_cast<double>(sim->report.num_tasks()) / c.p;
    const double noise = 1 + noise_share * std::sin(12.9898 * static_cast<double>(i + 1));
    const double measured = (sim->report.step_time_s() + serial_overhead_s * per_stage_actions) * noise;
    pb::Scenario at_start = s;
    *at_start.mutable_cluster() = start;
    const scenario::ResolvedScenario rs = MustResolve(at_start);
    Result<Simulation> predicted = Simulate(rs, rs.proto().schedule());
    EXPECT_TRUE(predicted.ok());
    sum += std::pow(std::log(predicted->report.step_time_s() / measured), 2);
    char line[256];
    std::snprintf(line, sizeof(line), "run%zu,%s,%d,%d,%d,%d,%.17g\n", i, c.policy, c.p, c.m, c.n,
                  c.t, measured);
    csv += line;
  }
  *rms_start = std::sqrt(sum / static_cast<double>(configs.size()));
  return csv;
}

TEST(Calibrate, RunsFromAPerturbedModelEndHonestlyAndTransfer) {
  double rms_start_tiny = 0;
  const std::string tiny = PerturbedCsv("gdn-tiny", &rms_start_tiny, StartCluster());
  const std::vector<CalibrationRun> runs = MustApply(StartCluster(), tiny);
  Result<Calibration> c = Calibrate(runs, {.prior_weight = kDefaultPriorWeight});
  ASSERT_TRUE(c.ok()) << c.status().message();
  bool converged = false;
  for (const std::string& note : c->report.notes()) {

    converged |= note.rfind("fit: converged", 0) == 0;
    EXPECT_EQ(note.find("implausible"), std::string::npos) << note;
  }
  EXPECT_TRUE(converged);
  EXPECT_LT(c->report.rms_log_error(), c->report.initial_rms_log_error());
  EXPECT_GT(c->report.rms_log_error(), 1e-3);  // not the model's own runs: not exact
  for (const pb::CalibrationRunResult& r : c->report.runs()) {
    EXPECT_LT(std::abs(r.step_time_rel_error()), 0.06) << "line " << r.line();
    EXPECT_TRUE(r.has_loo_rel_error()) << "line " << r.line();
  }
  // Transfer: the cluster fitted on gdn-tiny predicts gdn-small's runs.
  double rms_start_small = 0;
  const std::string small = PerturbedCsv("gdn-small", &rms_start_small, StartCluster());
  pb::Scenario small_base = TinyScenario(c->cluster);
  small_base.set_model_preset("gdn-small");
  Result<std::vector<CalibrationRow>> rows = ParseCalibrationCsv(small, "small.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  Result<std::vector<CalibrationRun>> small_runs =
      ApplyRows(MustResolve(small_base), *rows, "small.csv");
  ASSERT_TRUE(small_runs.ok()) << small_runs.status().message();
  double sum = 0;
  for (const CalibrationRun& run : *small_runs) {
    Result<Simulation> sim = Simulate(run.scenario, run.scenario.proto().schedule());
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    sum += std::pow(std::log(sim->report.step_time_s() / run.row.step_time_s), 2);
  }
  const double rms_transfer = std::sqrt(sum / static_cast<double>(small_runs->size()));
  std::printf("perturbed runs: gdn-tiny rms log error %.4f at the start, %.4f fitted (%d "
              "iterations), %.4f leave-one-out; gdn-small (transfer) %.4f at the start, %.4f "
              "with the tiny fit\n",
              c->report.initial_rms_log_error(), c->report.rms_log_error(),
              static_cast<int>(c->report.iterations()),
              c->report.loo_rms_log_error(), rms_start_small, rms_transfer);
  EXPECT_LT(rms_transfer, rms_start_small);
  EXPECT_LT(rms_transfer, 0.05);

}

// Runs that carry a per-action overhead (issue 28 item 2): 5 ms in every
// action on actions of 17 to 550 ms (this cluster's gdn-tiny runs), a
// framework's per-action cost on the CPU. Without noise the term, asked for,
// is recovered from its seed within 1 % beside the efficiency curve (the
// links at their truth: with every link free too, these runs let the fit
// trade the overhead against the pipeline link's latency and end in a local
// minimum, 0.0018 rms, the bandwidth run off to 3e17). With the 3 % noise both fits end at the noise's level on
// the runs they fit, but without the term the fit bends another parameter
// to stand in for it (the pipeline link's latency, many times its truth),
// while with it the overhead lands within the noise's reach of 5 ms, the
// latency near its truth, and the cluster transfers to gdn-small better.
TEST(Calibrate, FitsThePerActionOverheadWhenAskedFor) {
  constexpr double kOverheadS = 5e-3;
  constexpr int kLatency = static_cast<int>(CalibParam::kPipelineLatency);
  std::vector<CalibParam> with_overhead;
  for (int k = 0; k < kNumCalibParams; ++k) {
    if (!Unconstrained(k)) with_overhead.push_back(static_cast<CalibParam>(k));
  }
  double rms_start = 0, rms_start_small = 0;
  {
    // The compute terms and the overhead 30 % off, the links at their truth.
    pb::ClusterSpec start = TrueCluster();
    CalibValues v = kTruth;
    v[0] *= 1.3;
    v[1] *= 0.7;
    start = WithCalibValues(start, v);
    const std::string exact = PerturbedCsv("gdn-tiny", &rms_start, start, 0, kOverheadS, 0);
    Result<Calibration> c =
        Calibrate(MustApply(start, exact),
                  {.fit = {CalibParam::kEfficiencyPeak, CalibParam::kEfficiencyKnee,
                           CalibParam::kActionOverhead}});
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_NEAR(c->report.parameters(kOverhead).fitted() / kOverheadS, 1.0, 0.01);
    EXPECT_NEAR(c->report.parameters(0).fitted() / kTruth[0], 1.0, 0.01);  // efficiency.peak
    EXPECT_LT(c->report.rms_log_error(), 1e-3);
  }
  const std::string tiny = PerturbedCsv("gdn-tiny", &rms_start, StartCluster(), 0, kOverheadS);
  const std::string small = PerturbedCsv("gdn-small", &rms_start_small, StartCluster(), 0, kOverheadS);
  const std::vector<CalibrationRun> runs = MustApply(StartCluster(), tiny);
  Result<Calibration> without = Calibrate(runs, {.prior_weight = kDefaultPriorWeight});
  Result<Calibration> with =
      Calibrate(runs, {.fit = with_overhead, .prior_weight = kDefaultPriorWeight});
  ASSERT_TRUE(without.ok()) << without.status().message();
  ASSERT_TRUE(with.ok()) << with.status().message();
  const pb::CalibrationParameter& term = with->report.parameters(kOverhead);
  EXPECT_EQ(term.status(), "fitted");
  EXPECT_GT(term.initial(), 0);
  EXPECT_LT(term.initial(), 0.1 * kOverheadS);  // 1 % of the shortest mean action
  EXPECT_NEAR(term.fitted() / kOverheadS, 1.0, 0.5) << term.fitted();
  EXPECT_NEAR(with->cluster.device().action_overhead_s(), term.fitted(), 1e-15);
  EXPECT_EQ(without->cluster.device().action_overhead_s(), 0.0);
  const double latency_with = with->report.parameters(kLatency).fitted() / kTruth[kLatency];
  const double latency_without = without->report.parameters(kLatency).fitted() / kTruth[kLatency];
  EXPECT_NEAR(latency_with, 1.0, 0.5);  // 1.35x, against 35.9x without the term
  EXPECT_GT(latency_without, 5.0);  // standing in for the missing term
  bool seeded = false;
  for (const std::string& note : with->report.notes()) {
    seeded |= note.rfind("device.action_overhead_s: the cluster has none; the fit starts at ", 0) == 0;
  }
  EXPECT_TRUE(seeded);
  // Both at the noise's level on the runs they fit (3 % noise: about 0.02).
  EXPECT_LT(with->report.rms_log_error(), 0.025);
  EXPECT_LT(without->report.rms_log_error(), 0.025);
  // Transfer to gdn-small, whose runs carry the same overhead.
  Result<std::vector<CalibrationRow>> rows = ParseCalibrationCsv(small, "small.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  auto transfer = [&](const pb::ClusterSpec& cluster) {
    pb::Scenario base = TinyScenario(cluster);
    base.set_model_preset("gdn-small");
    Result<std::vector<CalibrationRun>> small_runs = ApplyRows(MustResolve(base), *rows, "small.csv");
    EXPECT_TRUE(small_runs.ok()) << small_runs.status().message();
    double sum = 0;
    for (const CalibrationRun& run : *small_runs) {
      Result<Simulation> sim = Simulate(run.scenario, run.scenario.proto().schedule());
      EXPECT_TRUE(sim.ok()) << sim.status().message();
      sum += std::pow(std::log(sim->report.step_time_s() / run.row.step_time_s), 2);
    }
    return std::sqrt(sum / static_cast<double>(small_runs->size()));
  };
  const double transfer_without = transfer(without->cluster);
  const double transfer_with = transfer(with->cluster);
  std::printf("5 ms per action, 3 %% noise: gdn-tiny rms log error %.4f at the start; without "
              "the term %.4f fitted, %.4f leave-one-out, pipeline latency %.3gx its truth; with "
              "it (fitted %.4g s) %.4f fitted, %.4f leave-one-out, latency %.3gx; gdn-small "
              "(transfer) %.4f at the start, %.4f without, %.4f with\n",
              rms_start, without->report.rms_log_error(), without->report.loo_rms_log_error(),
              latency_without, term.fitted(), with->report.rms_log_error(),
              with->report.loo_rms_log_error(), latency_with, rms_start_small, transfer_without,
              transfer_with);
  EXPECT_LT(transfer_with, 0.75 * transfer_without);
}

// Runs from a model in which one layer kind is 30 % slower than the fitted
// model says (issue 28): softmax attention, in the tiny GDN hybrid, whose
// attention's share of a step grows with the tokens per chunk, so no
// parameter of the fitted model can express it exactly. Each action's
// "measured" duration is the true cluster's per-layer times, attention's
// times `factor`, summed over the stage's layers; transfers, syncs and
// memory are the model's. Returns the runs as a CSV and the start
// cluster's rms log error on them.
std::string KindSlowerCsv(const std::string& model, models::LayerKind kind, double factor,
                          const pb::ClusterSpec& start, double* rms_start) {
  pb::Scenario base = TinyScenario(TrueCluster());
  base.set_model_preset(model);
  const scenario::ResolvedScenario truth = MustResolve(base);
  std::string csv = "name,policy,P,M,N,T,step_time_s\n";
  struct Config { const char* policy; int p, m, n, t; };
  const std::vector<Config> configs = {
      {"1f1b", 1, 2, 1, 256},       {"1f1b", 1, 2, 1, 4096},      {"stateflow", 1, 2, 8, 1024},
      {"stateflow", 1, 2, 16, 512}, {"1f1b", 2, 4, 1, 512},       {"1f1b", 2, 4, 1, 2048},
      {"stateflow", 2, 4, 4, 512},  {"stateflow", 2, 4, 8, 4096}, {"stateflow", 4, 8, 2, 1024},
      {"stateflow", 4, 4, 16, 2048}, {"stateflow", 2, 8, 4, 1024}, {"1f1b", 4, 8, 1, 2048}};
  double sum = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    pb::Scenario s = truth.proto();
    s.mutable_schedule()->set_policy(c.policy);
    s.mutable_schedule()->set_chunks(c.n);
    s.mutable_parallel()->set_pipeline_size(c.p);
    s.mutable_parallel()->set_microbatches(c.m);
    s.set_seq_len(c.t);
    const scenario::ResolvedScenario r = MustResolve(s);
    Result<Simulation> sim = Simulate(r, r.proto().schedule());
    EXPECT_TRUE(sim.ok()) << sim.status().message();
    const models::CostModel& cm = sim->config.placement->cost_model;
    const std::vector<models::StageLayers>& layers = sim->config.placement->stage_layers;
    const schedule::Partition& part = sim->config.partition;
    MeasuredDurations measured;
    measured.optimizer_s.assign(static_cast<std::size_t>(c.p), 0.0);
    for (const std::vector<schedule::Action>& stage : sim->config.plan.per_stage()) {
      for (const schedule::Action& a : stage) {
        double d = 0;
        for (int l = layers[a.stage].first; l < layers[a.stage].last; ++l) {
          const double t = a.pass == schedule::Pass::kForward
                               ? cm.ForwardTime(l, part.start(a.chunk), part.length(a.chunk))
                               : cm.BackwardTime(l, part.start(a.chunk), part.length(a.chunk));
          d += cm.layers()[l] == kind ? factor * t : t;
        }
        measured.action_s[a] = d;
      }
    }
    SimSetup setup{&cm, layers, part, c.m};
    Result<std::unique_ptr<CostSource>> source =
        MakeMeasuredDurationSource(MakeAnalyticCostSource(setup), measured, sim->config.plan);
    EXPECT_TRUE(source.ok()) << source.status().message();
    Result<EngineResult> run = RunPlan(sim->config.plan, **source);
    EXPECT_TRUE(run.ok()) << run.status().message();
    const double step = run->step_time_s;
    pb::Scenario at_start = s;
    *at_start.mutable_cluster() = start;
    const scenario::ResolvedScenario rs = MustResolve(at_start);
    Result<Simulation> predicted = Simulate(rs, rs.proto().schedule());
    EXPECT_TRUE(predicted.ok());
    sum += std::pow(std::log(predicted->report.step_time_s() / step), 2);
    char line[256];
    std::snprintf(line, sizeof(line), "run%zu,%s,%d,%d,%d,%d,%.17g\n", i, c.policy, c.p, c.m, c.n,
                  c.t, step);
    csv += line;
  }
  *rms_start = std::sqrt(sum / static_cast<double>(configs.size()));
  return csv;
}

// The fit on runs whose attention is 30 % slower than the model's: it must
// end honestly (converged, every run's error and leave-one-out error
// reported, the error not hidden), and the cluster it writes, carried to a
// model without attention whose runs are exact (gdn-tiny), must predict
// them with the error reported beside the start's.
TEST(Calibrate, ALayerKindSlowerThanTheModelEndsHonestly) {
  double rms_start = 0;
  const std::string runs_csv =
      KindSlowerCsv("gdn-hybrid-tiny", models::LayerKind::kAttention, 1.3, StartCluster(), &rms_start);
  pb::Scenario base = TinyScenario(StartCluster());
  base.set_model_preset("gdn-hybrid-tiny");
  Result<std::vector<CalibrationRow>> rows = ParseCalibrationCsv(runs_csv, "runs.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  Result<std::vector<CalibrationRun>> runs = ApplyRows(MustResolve(base), *rows, "runs.csv");
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  Result<Calibration> c = Calibrate(*runs, {.prior_weight = kDefaultPriorWeight});
  ASSERT_TRUE(c.ok()) << c.status().message();
  std::string notes;
  for (const std::string& note : c->report.notes()) notes += note + "\n";
  double worst = 0;
  for (const pb::CalibrationRunResult& r : c->report.runs()) {
    worst = std::max(worst, std::abs(r.step_time_rel_error()));
    EXPECT_TRUE(r.has_loo_rel_error()) << "line " << r.line();
  }
  std::string fitted;
  for (int k = 0; k < c->report.parameters_size(); ++k) {
    const pb::CalibrationParameter& p = c->report.parameters(k);
    if (p.status() != "fitted") continue;
    char line[160];
    std::snprintf(line, sizeof(line), "  %s: %.4g -> %.4g (truth %.4g)\n", p.name().c_str(),
                  p.initial(), p.fitted(), kTruth[static_cast<std::size_t>(k)]);
    fitted += line;
  }
  // Transfer: gdn-tiny's runs (no attention) are the true cluster's exactly.
  double rms_start_tiny = 0;
  const std::string tiny_csv =
      KindSlowerCsv("gdn-tiny", models::LayerKind::kAttention, 1.0, StartCluster(), &rms_start_tiny);
  pb::Scenario tiny_base = TinyScenario(c->cluster);
  Result<std::vector<CalibrationRow>> tiny_rows = ParseCalibrationCsv(tiny_csv, "tiny.csv");
  ASSERT_TRUE(tiny_rows.ok()) << tiny_rows.status().message();
  Result<std::vector<CalibrationRun>> tiny_runs =
      ApplyRows(MustResolve(tiny_base), *tiny_rows, "tiny.csv");
  ASSERT_TRUE(tiny_runs.ok()) << tiny_runs.status().message();
  double sum = 0;
  for (const CalibrationRun& run : *tiny_runs) {
    Result<Simulation> sim = Simulate(run.scenario, run.scenario.proto().schedule());
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    sum += std::pow(std::log(sim->report.step_time_s() / run.row.step_time_s), 2);
  }
  const double rms_transfer = std::sqrt(sum / static_cast<double>(tiny_runs->size()));
  std::printf("attention 30 %% slower: gdn-hybrid-tiny rms log error %.4f at the start, %.4f "
              "fitted (%d iterations), %.4f leave-one-out, worst run %.3f; gdn-tiny (transfer, "
              "exact runs) %.4f at the start, %.4f with the fit\n%s%s",
              rms_start, c->report.rms_log_error(), static_cast<int>(c->report.iterations()),
              c->report.loo_rms_log_error(), worst, rms_start_tiny, rms_transfer, fitted.c_str(),
              notes.c_str());
  EXPECT_NE(notes.find("fit: converged"), std::string::npos) << notes;
  EXPECT_LT(c->report.rms_log_error(), c->report.initial_rms_log_error());
  EXPECT_GT(c->report.rms_log_error(), 0.02);  // no parameter expresses it: the error stays
  EXPECT_LT(worst, 0.15);
  EXPECT_GT(c->report.loo_rms_log_error(), c->report.rms_log_error());
  // The missing term is absorbed by the compute parameters (the peak falls
  // below its truth), which then mispredicts a model without attention: the
  // fit improves on the start there too, but its error is not the fit's.
  const double peak = c->report.parameters(static_cast<int>(CalibParam::kEfficiencyPeak)).fitted();
  EXPECT_LT(peak, 0.95 * kTruth[0]);
  EXPECT_LT(rms_transfer, rms_start_tiny);
  EXPECT_GT(rms_transfer, c->report.rms_log_error());
}

// Runs whose TP and DP all-reduces are slower for small messages than a
// link's latency and bandwidth say (issue 28): the true cluster's
// intra-node all-reduces follow a measured-style bus bandwidth curve,
// busbw(b) = B b / (b + h), h = 256 KiB (NCCL's curve has this shape:
// latency-bound below a few hundred KiB), while the fitted model has the
// link's alpha-beta form. A ring of n ranks then takes 2 (n - 1) / n (b + h)
// / B: at n = 2 (these runs' TP and DP groups in a node) alpha-beta with
// bandwidth B and latency h / (2 B), up to the curve's log-log
// interpolation between its points. What the fit does with it: the step
// times within 1 %, converged, and the small-message cost in the link's
// latency (well above the link's own); but these runs' messages (64 KiB to
// about 1 MiB, a small share of each step) pin the pair only along one
// direction, the weakest the identifiability line reports (0.05 of the
// largest singular value), so bandwidth and latency are not each within
// 5 % of B and h / (2 B): the fitted pair trades one against the other.
TEST(Calibrate, SlowSmallMessagesLandInTheLinksLatency) {
  constexpr double kHalfBytes = 256.0 * 1024;
  constexpr int kIntraBw = static_cast<int>(CalibParam::kIntraBandwidth);
  constexpr int kIntraLat = static_cast<int>(CalibParam::kIntraLatency);
  pb::ClusterSpec truth = TrueCluster();
  pb::KernelCosts* costs = truth.mutable_kernel_costs();
  costs->set_name("small messages slower");
  costs->add_sources("synthetic: busbw = B b / (b + 256 KiB)");
  const double bus = kTruth[kIntraBw];
  for (double bytes = 1024; bytes <= 1024.0 * 1024 * 1024; bytes *= 2) {
    pb::CollectivePoint* p = costs->add_all_reduce();
    p->set_ranks(2);
    p->set_bytes(bytes);
    p->set_bus_bandwidth_bytes_per_s(bus * bytes / (bytes + kHalfBytes));
  }
  const std::vector<CalibrationRun> runs = MustApply(StartCluster(), SynthesisedCsv(truth));
  Result<Calibration> c = Calibrate(runs, {.prior_weight = kDefaultPriorWeight});
  ASSERT_TRUE(c.ok()) << c.status().message();
  bool converged = false;
  for (const std::string& note : c->report.notes()) converged |= note.rfind("fit: converged", 0) == 0;
  EXPECT_TRUE(converged);
  const double bw = c->report.parameters(kIntraBw).fitted();
  const double lat = c->report.parameters(kIntraLat).fitted();
  const double lat_equiv = kHalfBytes / (2 * bus);
  const pb::CalibrationParameter& bw_param = c->report.parameters(kIntraBw);
  const pb::CalibrationParameter& lat_param = c->report.parameters(kIntraLat);
  ASSERT_TRUE(bw_param.has_log_std_error());
  ASSERT_TRUE(lat_param.has_log_std_error());
  std::printf("small messages slower: rms log error %.4f at the start, %.5f fitted (%d "
              "iterations); intra-node bandwidth %.4g +/-%.1f%% (B = %.4g), latency %.4g s "
              "+/-%.1f%% (h / 2B = %.4g s, the link's own %.4g s)\n",
              c->report.initial_rms_log_error(), c->report.rms_log_error(),
              static_cast<int>(c->report.iterations()), bw,
              100 * std::expm1(bw_param.log_std_error()), bus, lat,
              100 * std::expm1(lat_param.log_std_error()), lat_equiv, kTruth[kIntraLat]);
  EXPECT_LT(c->report.rms_log_error(), 0.01);
  EXPECT_GT(lat, 1.5 * kTruth[kIntraLat]);  // the small messages' cost is in the latency
  // The pair is right where the runs' messages are: a 64 KiB ring of two
  // within 10 % of the curve.
  const double b = 64.0 * 1024;
  EXPECT_NEAR((b / bw + 2 * lat) / ((b + kHalfBytes) / bus), 1.0, 0.10);
  // And the weakest direction is reported.
  bool reported = false;
  for (const std::string& note : c->report.notes()) {
    reported |= note.rfind("identifiability: singular values", 0) == 0;
  }
  EXPECT_TRUE(reported);
}

// The CSV's step times, each multiplied by `factor` and by 1 + noise_share
// sin(12.9898 i) (run i from 1: a deterministic noise of that amplitude).
std::string ScaledCsv(const std::string& csv, double factor, double noise_share = 0) {
  std::string out;
  std::size_t pos = 0;
  int i = 0;
  while (pos < csv.size()) {
    const std::size_t end = csv.find('\n', pos);
    std::string line = csv.substr(pos, end - pos);
    pos = end + 1;
    if (i > 0) {
      const std::size_t comma = line.rfind(',');
      const double noise = 1 + noise_share * std::sin(12.9898 * i);
      char value[64];
      std::snprintf(value, sizeof(value), "%.17g",
                    std::stod(line.substr(comma + 1)) * factor * noise);
      line = line.substr(0, comma + 1) + value;
    }
    out += line + "\n";
    ++i;
  }
  return out;
}

// The physical ranges (sim/calibrate.h): runs faster than the device's peak
// FLOP/s allows leave efficiency.peak at 1, and runs whose pipeline link is
// three times its datasheet figure (the start) leave that bandwidth at 1.25
// times the figure; each is named implausible in one note and gets no
// standard error, and the fit does not run off to 1e6 or 3e17 as before.
TEST(Calibrate, ParametersStayInTheirPhysicalRanges) {
  // Every run twice as fast as efficiency 0.6 gives: efficiency 1.2 needed.
  const std::vector<CalibrationRun> fast = MustApply(TrueCluster(), ScaledCsv(SynthesisedCsv(), 0.5));
  Result<Calibration> c = Calibrate(fast, {.fit = {CalibParam::kEfficiencyPeak}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_DOUBLE_EQ(c->report.parameters(0).fitted(), 1.0);
  EXPECT_FALSE(c->report.parameters(0).has_log_std_error());
  bool named = false;
  for (const std::string& note : c->report.notes()) {
    named |= note.rfind("implausible: efficiency.peak ended at its bound 1 (physical range 0.01 "
                        "to 1)", 0) == 0;
  }
  EXPECT_TRUE(named);

  // The pipeline link three times faster than the start says.
  constexpr int kBw = static_cast<int>(CalibParam::kPipelineBandwidth);
  CalibValues fast_link = kTruth;
  fast_link[kBw] *= 3;
  const std::vector<CalibrationRun> runs =
      MustApply(TrueCluster(), SynthesisedCsv(WithCalibValues(TrueCluster(), fast_link)));
  Result<Calibration> link = Calibrate(runs, {.fit = {CalibParam::kPipelineBandwidth}});
  ASSERT_TRUE(link.ok()) << link.status().message();
  EXPECT_NEAR(link->report.parameters(kBw).fitted() / (kTruth[kBw] * kBandwidthCeilingFactor),
              1.0, 1e-9);
  EXPECT_FALSE(link->report.parameters(kBw).has_log_std_error());
  named = false;
  for (const std::string& note : link->report.notes()) {
    named |= note.rfind("implausible: pipeline_link.bandwidth_bytes_per_s ended at its bound", 0) == 0;
  }
  EXPECT_TRUE(named);
}

// Per-parameter uncertainty: exact runs give standard errors near zero;
// runs with a deterministic 3 % noise give each well-seen parameter a
// positive one that covers its truth (within 4 standard errors); a fit with
// no more runs than free parameters says it has none.
TEST(Calibrate, StandardErrorsMeasureWhatTheRunsDetermine) {
  const std::string exact = SynthesisedCsv();
  // Three that the runs see well (sensitivities 1, 0.8 and 0.17; the
  // pipeline link's, 0.002, a 3 % noise moves by more than its range).
  const std::vector<CalibParam> fit = {CalibParam::kEfficiencyPeak, CalibParam::kEfficiencyKnee,
                                       CalibParam::kIntraLatency};
  // The three started as StartCluster starts them, the rest at their truth.
  CalibValues v = kTruth;
  for (CalibParam p : fit) v[static_cast<int>(p)] *= StartFactor(static_cast<int>(p));
  const pb::ClusterSpec start = WithCalibValues(TrueCluster(), v);
  Result<Calibration> c = Calibrate(MustApply(start, exact), {.fit = fit});
  ASSERT_TRUE(c.ok()) << c.status().message();
  for (CalibParam p : fit) {
    const pb::CalibrationParameter& param = c->report.parameters(static_cast<int>(p));
    ASSERT_TRUE(param.has_log_std_error()) << param.name();
    EXPECT_LT(param.log_std_error(), 1e-3) << param.name();
  }
  Result<Calibration> noisy =
      Calibrate(MustApply(start, ScaledCsv(exact, 1, 0.03)), {.fit = fit});
  ASSERT_TRUE(noisy.ok()) << noisy.status().message();
  bool stated = false;
  for (const std::string& note : noisy->report.notes()) {
    stated |= note.rfind("uncertainty: one standard error per fitted parameter", 0) == 0 &&
              note.find(" 15 degrees of freedom") != std::string::npos;  // 18 runs, 3 free
  }
  EXPECT_TRUE(stated);
  for (CalibParam p : fit) {
    const int k = static_cast<int>(p);
    const pb::CalibrationParameter& param = noisy->report.parameters(k);
    ASSERT_TRUE(param.has_log_std_error()) << param.name();
    EXPECT_GT(param.log_std_error(), 1e-3) << param.name();
    EXPECT_LT(std::abs(std::log(param.fitted() / kTruth[k])), 4 * param.log_std_error())
        << param.name() << " fitted " << param.fitted() << ", truth " << kTruth[k] << ", se "
        << param.log_std_error();
  }
  // The pipeline link's bandwidth, which these runs barely see (0.002): the
  // noise pulls it onto its ceiling, within two standard errors of where the
  // runs put it, so the note says so and does not call the fit implausible.
  const std::vector<CalibParam> weak = {CalibParam::kEfficiencyPeak, CalibParam::kEfficiencyKnee,
                                        CalibParam::kPipelineBandwidth};
  CalibValues w = kTruth;
  for (CalibParam p : weak) w[static_cast<int>(p)] *= StartFactor(static_cast<int>(p));
  Result<Calibration> barely = Calibrate(
      MustApply(WithCalibValues(TrueCluster(), w), ScaledCsv(exact, 1, 0.03)), {.fit = weak});
  ASSERT_TRUE(barely.ok()) << barely.status().message();
  bool rests = false;
  for (const std::string& note : barely->report.notes()) {
    EXPECT_EQ(note.find("implausible"), std::string::npos) << note;
    rests |= note.rfind("pipeline_link.bandwidth_bytes_per_s ended at its bound 3.25e+08 "
                        "(physical range 1.3e+07 to 3.25e+08), within 2 standard errors", 0) == 0 &&
             note.find("the runs barely see it") != std::string::npos;
  }
  EXPECT_TRUE(rests);
  // Two runs, three free parameters: no degrees of freedom left.
  std::string two;
  std::size_t pos = 0;
  for (int line = 0; line < 3; ++line) {
    const std::size_t end = exact.find('\n', pos);
    two += exact.substr(pos, end - pos + 1);
    pos = end + 1;
  }
  Result<Calibration> under = Calibrate(MustApply(start, two), {.fit = fit});
  ASSERT_TRUE(under.ok()) << under.status().message();
  bool none = false;
  for (const std::string& note : under->report.notes()) {
    // Three asked for; the runs may determine fewer (the rest held).
    none |= note.rfind("uncertainty: not estimated: 2 fitted runs for ", 0) == 0;
  }
  EXPECT_TRUE(none);
  for (const pb::CalibrationParameter& param : under->report.parameters()) {
    EXPECT_FALSE(param.has_log_std_error()) << param.name();
  }
}

TEST(Calibrate, ReserveIsTheLargestMeasuredOverhead) {
  const pb::ClusterSpec cluster = TrueCluster();
  const std::string csv =
      "T,step_time_s,peak_bytes,used_bytes\n"
      "512,0.1,1000000,1500000\n"
      "1024,0.2,2000000,2700000\n"
      "2048,0.4,4000000,4600000\n";
  const std::vector<CalibrationRun> runs = MustApply(cluster, csv);
  Result<Calibration> c = Calibrate(runs, {.fit = {CalibParam::kEfficiencyPeak}});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->cluster.device().memory_reserve_bytes(), 700000);
  EXPECT_EQ(c->cluster.device().memory_reserve_fraction(), 0);
  EXPECT_EQ(c->report.memory_reserve_bytes(), 700000);
  EXPECT_NEAR(c->report.runs(1).peak_rel_error(),
              c->report.runs(1).predicted_peak_bytes() / 2000000 - 1, 1e-12);
}

// A reserve that would take the whole device is refused in one line, its
// bytes printed whatever their size (1e308 is no 64-bit integer: the
// message once cast it to one, undefined behaviour that clang's sanitizer
// caught in the calibration fuzzer).
TEST(Calibrate, ReserveOfTheWholeDeviceIsRefusedWhateverItsSize) {
  const pb::ClusterSpec cluster = TrueCluster();
  struct Case {
    const char* used;
    const char* bytes;  // used - peak as the message prints it
  };
  for (const Case& k : {Case{"1e308", "1e+308"}, Case{"1000001000000", "1000000000000"}}) {
    const std::string csv = std::string("T,step_time_s,peak_bytes,used_bytes\n") +
                            "512,0.1,1000000," + k.used + "\n" + "1024,0.2,2000000,2700000\n";
    const std::vector<CalibrationRun> runs = MustApply(cluster, csv);
    Result<Calibration> c = Calibrate(runs, {.fit = {CalibParam::kEfficiencyPeak}});
    ASSERT_FALSE(c.ok()) << k.used;
    const std::string want = std::string("used_bytes - peak_bytes = ") + k.bytes + " bytes";
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("line 2 (run "), std::string::npos)
        << c.status().message();
  }
}

TEST(Calibrate, KneeFormRoundTripsThroughTheCurvePoints) {
  pb::ClusterSpec c = *models::ClusterPreset("cpu");
  SetKneeEfficiency({0.45, 300}, c.mutable_device());
  const KneeEfficiency back = KneeFromCurve(c.device());
  EXPECT_NEAR(back.peak_efficiency / 0.45, 1.0, 1e-7);
  EXPECT_NEAR(back.knee_tokens / 300, 1.0, 1e-7);
  // The A100 preset's assumed curve is not of the form: the least-squares
  // knee lies between its points.
  const KneeEfficiency a100 = KneeFromCurve(models::ClusterPreset("a100-80gb-nvlink")->device());
  EXPECT_GT(a100.knee_tokens, 128);
  EXPECT_LT(a100.knee_tokens, 16384);
  EXPECT_GT(a100.peak_efficiency, 0.6);
  EXPECT_LT(a100.peak_efficiency, 0.9);
  // A flat curve: its value, knee 1 token.
  const KneeEfficiency flat = KneeFromCurve(models::ClusterPreset("cpu")->device());
  EXPECT_EQ(flat.peak_efficiency, 0.04);
  EXPECT_EQ(flat.knee_tokens, 1.0);
  // Above 1 the peak FLOP/s grows instead, the points stay in (0, 1].
  pb::ClusterSpec fast = *models::ClusterPreset("cpu");
  SetKneeEfficiency({2.0, 1}, fast.mutable_device());
  EXPECT_EQ(fast.device().peak_flops(), 2 * 2.5e11);
  for (const pb::EfficiencyPoint& p : fast.device().efficiency()) EXPECT_LE(p.efficiency(), 1.0);
  EXPECT_TRUE(models::ValidateCluster(fast).ok());
}

TEST(Calibrate, PresetTextParsesBackToTheCluster) {
  const pb::ClusterSpec c = TrueCluster();
  const std::string text = ClusterPresetText(c, {"a comment", "another"});
  EXPECT_EQ(text.rfind("# a comment\n# another\n", 0), 0u);
  pb::ClusterSpec back;
  ASSERT_TRUE(scenario::ParseTextProto(text, "preset", &back).ok());
  EXPECT_EQ(back.SerializeAsString(), c.SerializeAsString());
}

// ------------------------------------------------------------ bad input ----

std::string CsvError(const std::string& csv) {
  Result<std::vector<CalibrationRow>> rows = ParseCalibrationCsv(csv, "runs.csv");
  return rows.ok() ? "" : rows.status().message();
}

TEST(CalibrateCsv, ParsesColumnsInAnyOrderWithCommentsAndEmptyCells) {
  Result<std::vector<CalibrationRow>> rows = ParseCalibrationCsv(
      "# measured on 2 nodes\n\nstep_time_s, N ,policy,alpha,peak_bytes,set,name\n"
      "0.5,8,stateflow,0.5,,holdout,a\n"
      "# between\n1.25,,1f1b,,3e9,fit,b\n",
      "runs.csv");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  const CalibrationRow& a = (*rows)[0];
  EXPECT_EQ(a.line, 4);
  EXPECT_EQ(a.step_time_s, 0.5);
  EXPECT_EQ(a.chunks, 8);
  EXPECT_EQ(a.policy, "stateflow");
  EXPECT_EQ(a.alpha, 0.5);
  EXPECT_FALSE(a.peak_bytes.has_value());
  EXPECT_TRUE(a.holdout);
  EXPECT_EQ(a.name, "a");
  const CalibrationRow& b = (*rows)[1];
  EXPECT_EQ(b.line, 6);
  EXPECT_FALSE(b.chunks.has_value());
  EXPECT_EQ(b.peak_bytes, 3e9);
  EXPECT_FALSE(b.holdout);
}

TEST(CalibrateCsv, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(CsvError("T,N,step_time_s\n1024,4x,0.5\n"),
            "runs.csv:2:2: N: '4x' is not an integer in [1, 1048576]");
  EXPECT_EQ(CsvError("T,step_time_s\n1024,-1\n"), "runs.csv:2:2: step_time_s: '-1' is not a number > 0.0");
  EXPECT_EQ(CsvError("T,step_time_s\n1024,\n"), "runs.csv:2:2: step_time_s: empty (required)");
  EXPECT_EQ(CsvError("# c\nT,steptime\n"),
            "runs.csv:2:2: header: unknown column 'steptime' (known: name, policy, P, M, N, T, "
            "alpha, B, tp, dp, recompute, system, step_time_s, peak_bytes, used_bytes, set)");
  EXPECT_EQ(CsvError("T,N\n"), "runs.csv:1: header: no step_time_s column (the measured step time)");
  EXPECT_EQ(CsvError("T,step_time_s\n1,2,3\n"), "runs.csv:2: 3 cells, the header has 2");
  EXPECT_EQ(CsvError("step_time_s,set\n1,train\n"), "runs.csv:2:2: set: 'train' is not fit or holdout");
  EXPECT_EQ(CsvError("step_time_s,T,T\n"), "runs.csv:1:3: header: column 'T' twice");
  EXPECT_EQ(CsvError("# only comments\n"), "runs.csv: no header line");
  EXPECT_EQ(CsvError("step_time_s\n"), "runs.csv: no runs after the header");
  EXPECT_EQ(CsvError("step_time_s,alpha\n1,101\n"),
            "runs.csv:2:2: alpha: alpha must be in [0, 100] (got 101)");
}

TEST(CalibrateCsv, ARunTheModelCannotExpressNamesItsLine) {
  // gdn-tiny has 2 heads: TP 3 cannot split them.
  Result<std::vector<CalibrationRow>> rows =
      ParseCalibrationCsv("tp,step_time_s\n1,0.5\n3,0.5\n", "runs.csv");
  ASSERT_TRUE(rows.ok());
  Result<std::vector<CalibrationRun>> runs =
      ApplyRows(MustResolve(TinyScenario(TrueCluster())), *rows, "runs.csv");
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().message().rfind("runs.csv:3: the model cannot express this run: ", 0), 0u)
      << runs.status().message();
  EXPECT_NE(runs.status().message().find("tensor_size"), std::string::npos)
      << runs.status().message();
  // A T that N chunks at granularity 16 cannot cut.
  rows = ParseCalibrationCsv("N,T,step_time_s\n64,512,0.5\n", "runs.csv");
  ASSERT_TRUE(rows.ok());
  runs = ApplyRows(MustResolve(TinyScenario(TrueCluster())), *rows, "runs.csv");
  ASSERT_FALSE(runs.ok());
  EXPECT_EQ(runs.status().message().rfind("runs.csv:2: the model cannot express this run: ", 0), 0u)
      << runs.status().message();
}

TEST(CalibrateCsv, UnknownFitParameterListsTheKnown) {
  Result<std::vector<CalibParam>> p = ParseCalibParams("efficiency.peak,link.speed");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message().rfind("--fit: unknown parameter 'link.speed' (known: efficiency.peak, ", 0),
            0u);
  p = ParseCalibParams("pipeline_link.latency_s, efficiency.peak");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 2u);
}

}  // namespace
}  // namespace stateflow::sim

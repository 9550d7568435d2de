// The sweep against the simplest reference: simulate every candidate by hand
// with sim::Simulate and pick the best with the documented rule; capacities
// placed between two candidates' peaks; the grid's shape and its errors; and
// the capacity plan's legality rules and choice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "models/model.h"
#include "sim/capacity_plan.h"
#include "sim/search.h"
#include "sim/simulation.h"
#include "tests/scenario_testing.h"

namespace stateflow::sim {

using ::stateflow::testing::MustResolve;
namespace {

// A hybrid at a length where every N below cuts into distinct chunks.
pb::Scenario HybridScenario() {
  pb::Scenario s;
  s.set_name("search-test");
  *s.mutable_model() = *models::ModelPreset("gdn-hybrid-3b");
  *s.mutable_cluster() = *models::ClusterPreset("a100-80gb-nvlink");
  s.mutable_parallel()->set_pipeline_size(4);
  s.mutable_parallel()->set_tensor_size(1);
  s.mutable_parallel()->set_data_size(1);
  s.mutable_parallel()->set_microbatch_size(1);
  s.mutable_parallel()->set_microbatches(4);
  s.set_seq_len(16384);
  s.set_cost_model("analytic");
  pb::ScheduleSpec* spec = s.mutable_schedule();
  spec->set_policy("stateflow");
  spec->set_chunks(4);
  spec->set_granularity(128);
  spec->set_recompute("full");
  pb::ScheduleSpec* base = s.add_baselines();
  base->set_policy("1f1b");
  base->set_chunks(1);
  base->set_granularity(128);
  base->set_recompute("full");
  return s;
}

pb::SweepSpec Ranges() {
  pb::SweepSpec sweep;
  for (int n : {2, 4, 8}) sweep.add_chunks(n);
  for (double a : {0.0, 0.5, 1.0, 1.25}) sweep.add_alpha(a);
  for (int gb : {2, 4}) sweep.add_global_batch(gb);
  for (int t : {8192, 16384}) sweep.add_seq_len(t);
  for (const char* p : {"1f1b", "gpipe", "stateflow"}) sweep.add_policies(p);
  return sweep;
}

struct Candidate {
  SweepConfig config;
  pb::Report report;
};

// Every configuration of `sweep` simulated independently with Simulate.
std::vector<Candidate> ByHand(const pb::Scenario& scenario, const pb::SweepSpec& sweep) {
  std::vector<Candidate> out;
  for (const std::string& policy : sweep.policies()) {
    const bool one = policy == "1f1b";
    for (std::uint64_t t : sweep.seq_len()) {
      for (std::uint32_t gb : sweep.global_batch()) {
        for (std::uint32_t n : one ? std::vector<std::uint32_t>{1}
                                   : std::vector<std::uint32_t>(sweep.chunks().begin(),
                                                                sweep.chunks().end())) {
          for (double a : one ? std::vector<double>{0}
                              : std::vector<double>(sweep.alpha().begin(), sweep.alpha().end())) {
            pb::Scenario s = scenario;
            s.set_seq_len(t);
            s.mutable_parallel()->set_microbatches(gb);  // microbatch size 1, DP 1
            pb::ScheduleSpec spec = scenario.schedule();
            spec.set_policy(policy);
            spec.set_chunks(n);
            spec.set_alpha(a);
            Result<Simulation> sim = Simulate(MustResolve(s), spec);
            EXPECT_TRUE(sim.ok()) << sim.status().message();
            Candidate c;
            c.config.policy = policy;
            c.config.seq_len = static_cast<std::int64_t>(t);
            c.config.global_batch = c.config.microbatches = static_cast<int>(gb);
            c.config.chunks = static_cast<int>(n);
            c.config.alpha = a;
            c.report = sim->report;
            out.push_back(std::move(c));
          }
        }
      }
    }
  }
  return out;
}

// The documented rule, written out independently of BetterRun.
const Candidate* BestByHand(const std::vector<Candidate>& all, const std::string& policy,
                            std::int64_t t, int gb, double capacity) {
  const Candidate* best = nullptr;
  for (const Candidate& c : all) {
    if (c.config.policy != policy || c.config.seq_len != t || c.config.global_batch != gb) continue;
    if (c.report.peak_memory_bytes() > capacity) continue;
    auto key = [](const Candidate& x) {
      return std::make_tuple(-x.report.tokens_per_s(), x.report.peak_memory_bytes(),
                             x.config.chunks, x.config.alpha);
    };
    if (best == nullptr || key(c) < key(*best)) best = &c;
  }
  return best;
}

void ExpectSweepMatches(const pb::SweepReport& report, const std::vector<Candidate>& hand,
                        double capacity) {
  ASSERT_EQ(report.runs_size(), static_cast<int>(hand.size()));
  for (int i = 0; i < report.runs_size(); ++i) {
    const pb::SweepRun& run = report.runs(i);
    const Candidate& c = hand[i];
    SCOPED_TRACE(ConfigLabel(c.config));
    EXPECT_EQ(run.policy(), c.config.policy);
    EXPECT_EQ(run.chunks(), static_cast<std::uint32_t>(c.config.chunks));
    EXPECT_EQ(run.alpha(), c.config.alpha);
    EXPECT_EQ(run.step_time_s(), c.report.step_time_s());
    EXPECT_EQ(run.peak_memory_bytes(), c.report.peak_memory_bytes());
    EXPECT_EQ(run.oom(), c.report.peak_memory_bytes() > capacity);
  }
  for (const pb::SweepCell& cell : report.cells()) {
    const Candidate* best = BestByHand(hand, cell.policy(), static_cast<std::int64_t>(cell.seq_len()),
                                       static_cast<int>(cell.global_batch()), capacity);
    SCOPED_TRACE(cell.policy() + " T=" + std::to_string(cell.seq_len()));
    if (best == nullptr) {
      EXPECT_EQ(cell.best_run(), -1);
      continue;
    }
    ASSERT_GE(cell.best_run(), 0);
    const pb::SweepRun& run = report.runs(cell.best_run());
    EXPECT_TRUE(run.best());
    EXPECT_FALSE(run.oom());
    EXPECT_EQ(run.chunks(), static_cast<std::uint32_t>(best->config.chunks));
    EXPECT_EQ(run.alpha(), best->config.alpha);
  }
  int marked = 0;
  for (const pb::SweepRun& run : report.runs()) marked += run.best();
  int feasible_cells = 0;
  for (const pb::SweepCell& cell : report.cells()) feasible_cells += cell.best_run() >= 0;
  EXPECT_EQ(marked, feasible_cells);
}

TEST(Sweep, PicksTheSameBestAsSimulatingEachCandidateByHand) {
  const pb::Scenario s = HybridScenario();
  const pb::SweepSpec sweep = Ranges();
  Result<pb::SweepReport> report = RunSweep(MustResolve(s), sweep);
  ASSERT_TRUE(report.ok()) << report.status().message();
  // 2 lengths x 2 batches x (1 + 2 policies x 3 N x 4 alpha).
  EXPECT_EQ(report->runs_size(), 2 * 2 * (1 + 2 * 3 * 4));
  EXPECT_EQ(report->cells_size(), 3 * 2 * 2);
  ExpectSweepMatches(*report, ByHand(s, sweep), s.cluster().device().memory_capacity_bytes());
}

// A capacity between the fastest configuration's peak and the next lower
// peak: the fastest becomes OOM and is never picked.
TEST(Sweep, OomCandidatesAreNeverPicked) {
  pb::Scenario s = HybridScenario();
  // No reserve: the capacity itself is the OOM threshold (the reserve's rule
  // is tested in system_test.cc).
  s.mutable_cluster()->mutable_device()->set_memory_reserve_bytes(0);
  s.mutable_cluster()->mutable_device()->set_memory_reserve_fraction(0);
  pb::SweepSpec sweep = Ranges();
  sweep.clear_policies();
  sweep.add_policies("stateflow");
  sweep.clear_seq_len();
  sweep.add_seq_len(16384);
  sweep.clear_global_batch();
  sweep.add_global_batch(4);
  const std::vector<Candidate> hand = ByHand(s, sweep);
  const Candidate* fastest =
      BestByHand(hand, "stateflow", 16384, 4, std::numeric_limits<double>::infinity());
  ASSERT_NE(fastest, nullptr);
  const double top = fastest->report.peak_memory_bytes();
  double below = 0;
  for (const Candidate& c : hand) {
    if (c.report.peak_memory_bytes() < top) below = std::max(below, c.report.peak_memory_bytes());
  }
  ASSERT_GT(below, 0) << "the fastest candidate has the smallest peak: no capacity in between";
  const double capacity = (top + below) / 2;
  s.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(capacity);
  Result<pb::SweepReport> report = RunSweep(MustResolve(s), sweep);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ExpectSweepMatches(*report, hand, capacity);
  const pb::SweepRun& picked = report->runs(report->cells(0).best_run());
  EXPECT_LT(picked.peak_memory_bytes(), capacity);
  EXPECT_LT(picked.tokens_per_s(), fastest->report.tokens_per_s());

  // Below every peak: the cell has no best.
  double least = std::numeric_limits<double>::infinity();
  for (const Candidate& c : hand) least = std::min(least, c.report.peak_memory_bytes());
  s.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(least / 2);
  report = RunSweep(MustResolve(s), sweep);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->cells(0).best_run(), -1);
  for (const pb::SweepRun& run : report->runs()) EXPECT_TRUE(run.oom() && !run.best());
}

TEST(Sweep, TiesGoToLowerPeakThenFewerChunksThenSmallerAlpha) {
  pb::SweepRun a, b;
  a.set_tokens_per_s(10);
  b.set_tokens_per_s(10);
  a.set_peak_memory_bytes(5);
  b.set_peak_memory_bytes(6);
  EXPECT_TRUE(BetterRun(a, b));
  b.set_peak_memory_bytes(5);
  a.set_chunks(8);
  b.set_chunks(4);
  EXPECT_TRUE(BetterRun(b, a));
  b.set_chunks(8);
  a.set_alpha(0.5);
  b.set_alpha(0.25);
  EXPECT_TRUE(BetterRun(b, a));
  b.set_tokens_per_s(9);
  EXPECT_TRUE(BetterRun(a, b));
  // Then overlap off, then the smaller ST tile.
  b.set_tokens_per_s(10);
  b.set_alpha(0.5);
  a.set_st_overlap(true);
  EXPECT_TRUE(BetterRun(b, a));
  b.set_st_overlap(true);
  a.set_st_tile(64);
  b.set_st_tile(16);
  EXPECT_TRUE(BetterRun(b, a));
}

// The ST dimensions against Simulate with each schedule set by hand, on a
// device with compute units (the ST model on), at TP 4 where few heads per
// device leave the ST's latency exposed.
TEST(Sweep, StOverlapAndTileMatchSimulatingEachCandidateByHand) {
  pb::Scenario s = HybridScenario();
  *s.mutable_model() = *models::ModelPreset("gdn-3b");
  s.mutable_parallel()->set_tensor_size(4);
  s.mutable_cluster()->mutable_device()->set_compute_units(108);
  s.clear_baselines();
  pb::SweepSpec sweep;
  for (int n : {2, 4}) sweep.add_chunks(n);
  for (bool on : {false, true}) sweep.add_st_overlap(on);
  for (int tile : {16, 64}) sweep.add_st_tile(tile);
  Result<pb::SweepReport> report = RunSweep(MustResolve(s), sweep);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->runs_size(), 2 * 2 * 2);
  ASSERT_EQ(report->cells_size(), 1);
  const pb::SweepRun* best = nullptr;
  int k = 0;
  for (int n : {2, 4}) {
    for (bool on : {false, true}) {
      for (int tile : {16, 64}) {
        pb::ScheduleSpec spec = s.schedule();
        spec.set_chunks(n);
        spec.set_st_overlap(on);
        spec.set_st_tile(tile);
        Result<Simulation> sim = Simulate(MustResolve(s), spec);
        ASSERT_TRUE(sim.ok()) << sim.status().message();
        const pb::SweepRun& run = report->runs(k++);
        SweepConfig config;
        config.policy = "stateflow";
        config.seq_len = 16384;
        config.chunks = n;
        config.st_overlap = on;
        config.st_tile = tile;
        SCOPED_TRACE(ConfigLabel(config));
        EXPECT_EQ(run.chunks(), static_cast<std::uint32_t>(n));
        EXPECT_EQ(run.st_overlap(), on);
        EXPECT_EQ(run.st_tile(), static_cast<std::uint32_t>(tile));
        EXPECT_EQ(run.step_time_s(), sim->report.step_time_s());
        EXPECT_FALSE(run.reused());
        auto key = [](const pb::SweepRun& r) {
          return std::make_tuple(-r.tokens_per_s(), r.peak_memory_bytes(), r.chunks(),
                                 r.st_overlap(), r.st_tile());
        };
        if (!run.oom() && (best == nullptr || key(run) < key(*best))) best = &run;
      }
    }
  }
  // The dimension is not ignored: overlap on changes the step time.
  EXPECT_NE(report->runs(0).step_time_s(), report->runs(2).step_time_s());
  ASSERT_NE(best, nullptr);
  ASSERT_GE(report->cells(0).best_run(), 0);
  EXPECT_EQ(&report->runs(report->cells(0).best_run()), best);
}

// v as a swept dimension: interleaved runs each v of the range (v = 1 is
// StateFlow's order), shapes with M N not a multiple of P are skipped with a
// note, the other policies run at their own v (zbv 2), each run equals
// simulating it by hand, and the best of the interleaved cell is over v too.
TEST(Sweep, VirtualStagesAreSweptForTheInterleavedPoliciesOnly) {
  pb::Scenario s = HybridScenario();
  *s.mutable_model() = *models::ModelPreset("gdn-3b");
  s.clear_baselines();
  pb::SweepSpec sweep;
  for (const char* p : {"stateflow", "interleaved", "zbv", "zb-interleaved"}) sweep.add_policies(p);
  for (int v : {1, 2, 4}) sweep.add_virtual_stages(v);
  for (int n : {1, 2}) sweep.add_chunks(n);
  sweep.add_microbatches(2);  // M N = 2: P = 4 divides it at N = 2 only
  const scenario::ResolvedScenario resolved = MustResolve(s);
  Result<SweepGrid> grid = ExpandSweep(resolved, sweep);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  std::vector<std::string> got;
  for (const SweepConfig& c : grid->configs) {
    got.push_back(c.policy + " v=" + std::to_string(c.virtual_stages) + " N=" +
                  std::to_string(c.chunks));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"stateflow v=1 N=1", "stateflow v=1 N=2",
                                           "interleaved v=1 N=1", "interleaved v=1 N=2",
                                           "interleaved v=2 N=2", "interleaved v=4 N=2",
                                           "zbv v=2 N=1", "zbv v=2 N=2",
                                           // any M N: nothing skipped
                                           "zb-interleaved v=1 N=1", "zb-interleaved v=1 N=2",
                                           "zb-interleaved v=2 N=1", "zb-interleaved v=2 N=2",
                                           "zb-interleaved v=4 N=1", "zb-interleaved v=4 N=2"}));
  ASSERT_EQ(grid->notes.size(), 1u);
  EXPECT_NE(grid->notes[0].find("2 interleaved configurations were skipped"), std::string::npos)
      << grid->notes[0];
  Result<pb::SweepReport> report = RunSweep(resolved, sweep);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->runs_size(), 14);
  for (int k = 0; k < report->runs_size(); ++k) {
    const pb::SweepRun& run = report->runs(k);
    const SweepConfig& c = grid->configs[static_cast<std::size_t>(k)];
    SCOPED_TRACE(ConfigLabel(c));
    EXPECT_EQ(run.virtual_stages(), static_cast<std::uint32_t>(c.virtual_stages));
    Result<scenario::ResolvedScenario> at_m = resolved.WithMicrobatches(c.microbatches);
    ASSERT_TRUE(at_m.ok());
    Result<Simulation> sim = Simulate(*at_m, ScheduleFor(*at_m, c));
    ASSERT_TRUE(sim.ok()) << sim.status().message();
    EXPECT_EQ(run.step_time_s(), sim->report.step_time_s());
    EXPECT_EQ(run.peak_memory_bytes(), sim->report.peak_memory_bytes());
  }
  // v = 2 and 4 are not StateFlow's order: the dimension is not ignored.
  EXPECT_NE(report->runs(3).step_time_s(), report->runs(4).step_time_s());
  // Interleaved at v = 1 is StateFlow's plan.
  EXPECT_EQ(report->runs(2).step_time_s(), report->runs(0).step_time_s());
  ASSERT_EQ(report->cells_size(), 4);
  const pb::SweepCell& interleaved = report->cells(1);
  EXPECT_EQ(interleaved.policy(), "interleaved");
  int best = -1;
  for (int k = 2; k < 6; ++k) {
    if (!report->runs(k).oom() && (best < 0 || BetterRun(report->runs(k), report->runs(best)))) {
      best = k;
    }
  }
  EXPECT_EQ(interleaved.best_run(), best);
  // A range that no policy of the sweep takes is noted, not an error.
  pb::SweepSpec alone;
  alone.add_policies("stateflow");
  alone.add_virtual_stages(2);
  grid = ExpandSweep(resolved, alone);
  ASSERT_TRUE(grid.ok());
  ASSERT_EQ(grid->configs.size(), 1u);
  EXPECT_EQ(grid->configs[0].virtual_stages, 1);
  ASSERT_EQ(grid->notes.size(), 1u);
  EXPECT_NE(grid->notes[0].find("interleaved and zb-interleaved only"), std::string::npos)
      << grid->notes[0];
  // A v whose model stages cannot be placed (4 x 16 > the 3B's 32 blocks) is
  // skipped, noted, and the sweep goes on.
  pb::SweepSpec deep;
  deep.add_policies("interleaved");
  deep.add_virtual_stages(2);
  deep.add_virtual_stages(16);
  deep.add_chunks(2);
  grid = ExpandSweep(resolved, deep);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  ASSERT_EQ(grid->configs.size(), 1u);
  EXPECT_EQ(grid->configs[0].virtual_stages, 2);
  ASSERT_EQ(grid->notes.size(), 1u);
  EXPECT_NE(grid->notes[0].find("interleaved at v = 16 skipped: parallel.pipeline_size * "
                                "schedule.virtual_stages = 64 model stages exceed"),
            std::string::npos)
      << grid->notes[0];
  alone.add_virtual_stages(0);
  EXPECT_NE(ExpandSweep(resolved, alone).status().message().find("sweep.virtual_stages[1]"),
            std::string::npos)
      << ExpandSweep(resolved, alone).status().message();
}

// Without compute units the ST model is off: one value of each range, a note.
TEST(Sweep, StRangesCollapseWithoutComputeUnits) {
  pb::Scenario s = HybridScenario();
  s.clear_baselines();
  ASSERT_EQ(s.cluster().device().compute_units(), 0u);
  pb::SweepSpec sweep;
  for (bool on : {true, false}) sweep.add_st_overlap(on);
  for (int tile : {16, 32, 64}) sweep.add_st_tile(tile);
  Result<SweepGrid> grid = ExpandSweep(MustResolve(s), sweep);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  ASSERT_EQ(grid->configs.size(), 1u);
  EXPECT_TRUE(grid->configs[0].st_overlap);
  EXPECT_EQ(grid->configs[0].st_tile, 16);
  ASSERT_EQ(grid->notes.size(), 1u);
  EXPECT_NE(grid->notes[0].find("compute_units"), std::string::npos) << grid->notes[0];
}

TEST(Sweep, GridShape) {
  pb::Scenario s = HybridScenario();
  // Empty ranges keep the scenario's values: its schedule and baseline.
  Result<SweepGrid> own = ExpandSweep(MustResolve(s), {});
  ASSERT_TRUE(own.ok()) << own.status().message();
  ASSERT_EQ(own->configs.size(), 2u);
  EXPECT_EQ(own->configs[0].policy, "stateflow");
  EXPECT_EQ(own->configs[0].chunks, 4);
  EXPECT_EQ(own->configs[1].policy, "1f1b");
  EXPECT_EQ(own->configs[1].chunks, 1);
  EXPECT_EQ(own->configs[1].global_batch, 4);

  // Microbatches and global batch: M = GBS / (microbatch size x DP).
  s.mutable_parallel()->set_microbatch_size(2);
  s.mutable_parallel()->set_data_size(3);
  pb::SweepSpec sweep;
  sweep.add_global_batch(12);
  sweep.add_global_batch(24);
  Result<SweepGrid> grid = ExpandSweep(MustResolve(s), sweep);
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  EXPECT_EQ(grid->configs[0].microbatches, 2);
  EXPECT_EQ(grid->configs[1].microbatches, 4);
  sweep.clear_global_batch();
  sweep.add_microbatches(5);
  grid = ExpandSweep(MustResolve(s), sweep);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->configs[0].global_batch, 30);

  // 1f1b never sweeps N or alpha; a recurrent model sweeps one alpha, noted.
  pb::SweepSpec ranges = Ranges();
  s = HybridScenario();
  grid = ExpandSweep(MustResolve(s), ranges);
  ASSERT_TRUE(grid.ok());
  for (const SweepConfig& c : grid->configs) {
    if (c.policy == "1f1b") {
      EXPECT_TRUE(c.chunks == 1 && c.alpha == 0);
    }
  }
  EXPECT_TRUE(grid->notes.empty());
  *s.mutable_model() = *models::ModelPreset("gdn-3b");
  grid = ExpandSweep(MustResolve(s), ranges);
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(grid->configs.size(), 2u * 2 * (1 + 2 * 3));
  ASSERT_EQ(grid->notes.size(), 1u);
  EXPECT_NE(grid->notes[0].find("alpha"), std::string::npos);
  // Runs are contiguous per cell and chunks per cell in the listed order.
  std::set<std::tuple<std::string, std::int64_t, int>> seen;
  for (std::size_t k = 0; k < grid->configs.size(); ++k) {
    const SweepConfig& c = grid->configs[k];
    const auto cell = std::make_tuple(c.policy, c.seq_len, c.global_batch);
    if (k == 0 || cell != std::make_tuple(grid->configs[k - 1].policy,
                                          grid->configs[k - 1].seq_len,
                                          grid->configs[k - 1].global_batch)) {
      EXPECT_TRUE(seen.insert(cell).second) << "cell split: " << ConfigLabel(c);
    }
  }
}

// Alphas that round to the same chunks are simulated once and copied.
TEST(Sweep, SaturatedAlphasReuseTheResult) {
  pb::Scenario s = HybridScenario();
  s.set_seq_len(512);  // 3 inner multiples of 128: N = 4 has one partition
  pb::SweepSpec sweep;
  sweep.add_policies("stateflow");
  sweep.add_chunks(4);
  for (double a : {0.0, 0.5, 1.0}) sweep.add_alpha(a);
  Result<pb::SweepReport> report = RunSweep(MustResolve(s), sweep);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(report->runs_size(), 3);
  EXPECT_EQ(report->num_simulated(), 1u);
  EXPECT_FALSE(report->runs(0).reused());
  EXPECT_TRUE(report->runs(1).reused() && report->runs(2).reused());
  EXPECT_EQ(report->runs(2).alpha(), 1.0);
  EXPECT_EQ(report->runs(2).step_time_s(), report->runs(0).step_time_s());
}

TEST(Sweep, ProgressCountsEveryConfiguration) {
  std::vector<std::size_t> calls;
  std::size_t total_seen = 0;
  Result<pb::SweepReport> report =
      RunSweep(MustResolve(HybridScenario()), Ranges(), {.progress = [&](std::size_t done, std::size_t total) {
                 calls.push_back(done);
                 total_seen = total;
               }});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(calls.size(), static_cast<std::size_t>(report->runs_size()));
  for (std::size_t k = 0; k < calls.size(); ++k) EXPECT_EQ(calls[k], k + 1);
  EXPECT_EQ(total_seen, calls.size());
}

void ExpectSweepError(const pb::SweepSpec& sweep, const std::string& needle,
                      pb::Scenario s = HybridScenario()) {
  Result<pb::SweepReport> r = RunSweep(MustResolve(s), sweep);
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidInput);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
}

TEST(Sweep, BadRangesNameTheFieldAndIndex) {
  pb::SweepSpec sweep;
  for (double a : {0.0, 0.5, 1.0, -0.5}) sweep.add_alpha(a);
  ExpectSweepError(sweep, "sweep.alpha[3] must be in [0, 100]");
  sweep.Clear();
  sweep.add_chunks(2);
  sweep.add_chunks(0);
  ExpectSweepError(sweep, "sweep.chunks[1] must be in [1, 1048576]");
  sweep.Clear();
  sweep.add_chunks(8);
  sweep.add_chunks(8);
  ExpectSweepError(sweep, "sweep.chunks[1] repeats 8");
  sweep.Clear();
  sweep.add_policies("stateflow");
  sweep.add_policies("zigzag");
  ExpectSweepError(sweep, "sweep.policies[1]: unknown 'zigzag'");
  sweep.Clear();
  sweep.add_global_batch(4);
  sweep.add_microbatches(4);
  ExpectSweepError(sweep, "not both");
  sweep.Clear();
  sweep.add_global_batch(8);
  sweep.add_global_batch(6);
  pb::Scenario dp2 = HybridScenario();
  dp2.mutable_parallel()->set_data_size(4);
  ExpectSweepError(sweep, "sweep.global_batch[1] (6) must be divisible", dp2);
  sweep.Clear();
  sweep.add_seq_len(0);
  ExpectSweepError(sweep, "sweep.seq_len[0] must be in [1, ");
  sweep.Clear();
  sweep.add_seq_len(300);
  sweep.add_chunks(4);
  ExpectSweepError(sweep, "sweep run stateflow T=300");
  sweep.Clear();
  sweep.add_st_tile(32);
  sweep.add_st_tile(0);
  ExpectSweepError(sweep, "sweep.st_tile[1] must be in [1, 4096]");
  sweep.Clear();
  sweep.add_st_overlap(true);
  sweep.add_st_overlap(true);
  ExpectSweepError(sweep, "sweep.st_overlap[1] repeats");
}

// ---- capacity plan ----

// gdn-tiny: 4 layers, 2 recurrence heads; the CPU preset has 2 devices per node.
pb::Scenario TinyScenario(const std::string& model = "gdn-hybrid-tiny") {
  pb::Scenario s;
  s.set_name("plan-test");
  *s.mutable_model() = *models::ModelPreset(model);
  *s.mutable_cluster() = *models::ClusterPreset("cpu");
  s.mutable_parallel()->set_pipeline_size(1);
  s.mutable_parallel()->set_microbatch_size(1);
  s.mutable_parallel()->set_microbatches(1);
  s.set_seq_len(4096);
  s.set_cost_model("analytic");
  s.mutable_schedule()->set_policy("stateflow");
  s.mutable_schedule()->set_chunks(1);
  s.mutable_schedule()->set_granularity(128);
  s.mutable_schedule()->set_recompute("full");
  return s;
}

CapacityPlanRequest TinyRequest(int devices, int global_batch) {
  CapacityPlanRequest req;
  req.devices = devices;
  req.seq_len = 4096;
  req.global_batch = global_batch;
  for (int n : {1, 2, 4}) req.sweep.add_chunks(n);
  for (double a : {0.0, 1.0}) req.sweep.add_alpha(a);
  req.sweep.add_policies("stateflow");
  return req;
}

const pb::PlanCandidate* Find(const pb::CapacityPlanReport& r, int p, int tp, int dp) {
  for (const pb::PlanCandidate& c : r.candidates()) {
    if (static_cast<int>(c.pipeline_size()) == p && static_cast<int>(c.tensor_size()) == tp &&
        static_cast<int>(c.data_size()) == dp) {
      return &c;
    }
  }
  return nullptr;
}

TEST(CapacityPlan, RejectsIllegalSplitsWithTheRule) {
  const pb::Scenario s = TinyScenario("gdn-tiny");
  Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(s), TinyRequest(8, 2));
  ASSERT_TRUE(r.ok()) << r.status().message();
  int splits = 0;
  for (int p = 1; p <= 8; ++p) {
    for (int tp = 1; p * tp <= 8; ++tp) splits += (8 % (p * tp) == 0);
  }
  EXPECT_EQ(r->candidates_size(), splits);
  auto reason = [&](int p, int tp, int dp) {
    const pb::PlanCandidate* c = Find(*r, p, tp, dp);
    EXPECT_NE(c, nullptr);
    return c == nullptr ? std::string() : c->verdict() + ": " + c->reason();
  };
  EXPECT_NE(reason(1, 4, 2).find("illegal: TP 4 > cluster.devices_per_node 2"), std::string::npos);
  EXPECT_NE(reason(8, 1, 1).find("illegal: P 8 > model.num_layers 4"), std::string::npos);
  EXPECT_NE(reason(1, 1, 8).find("illegal: global batch 2 is not divisible by DP 8"),
            std::string::npos);
  EXPECT_EQ(reason(4, 2, 1), "feasible: ");
  EXPECT_EQ(reason(2, 2, 2), "feasible: ");
  // Heads: 2 recurrence heads, so a model with 3 would reject TP 2.
  pb::Scenario three = s;
  three.mutable_model()->set_num_heads(3);
  EXPECT_NE(SplitRejection(three, 4, 2, 1, 2).find("model.num_heads (3) must be divisible by "
                                                   "parallel.tensor_size (2)"),
            std::string::npos);
  EXPECT_EQ(SplitRejection(s, 4, 2, 1, 2), "");
  // A framework's schedule (or baseline) splits the layers evenly: P 4
  // does not divide 6 layers, P 3 does.
  pb::Scenario six = s;
  six.mutable_model()->set_num_layers(6);
  EXPECT_EQ(SplitRejection(six, 4, 1, 1, 2), "");
  six.add_baselines()->set_system("ms-swift");
  EXPECT_EQ(SplitRejection(six, 4, 1, 1, 2),
            "P 4 does not divide model.num_layers 6 (ms-swift splits the layers evenly over the "
            "stages)");
  EXPECT_EQ(SplitRejection(six, 3, 1, 1, 2), "");
}

// The capacity between the smallest and the second smallest of the legal
// splits' least peaks (found by simulating every split and (N, alpha) by
// hand): exactly that one split fits, and the plan finds it.
TEST(CapacityPlan, FindsTheOnlySplitThatFits) {
  pb::Scenario s = TinyScenario();
  const CapacityPlanRequest req = TinyRequest(4, 4);
  struct Split {
    int p, tp, dp;
    double least_peak;
  };
  std::vector<Split> legal;
  for (int p : {1, 2, 4}) {
    for (int tp : {1, 2, 4}) {
      if (4 % (p * tp) != 0) continue;
      const int dp = 4 / (p * tp);
      if (!SplitRejection(s, p, tp, dp, 4).empty()) continue;
      pb::Scenario split = s;
      split.mutable_parallel()->set_pipeline_size(p);
      split.mutable_parallel()->set_tensor_size(tp);
      split.mutable_parallel()->set_data_size(dp);
      split.mutable_parallel()->set_microbatches(4 / dp);
      double least = std::numeric_limits<double>::infinity();
      for (int n : req.sweep.chunks()) {
        for (double a : req.sweep.alpha()) {
          pb::ScheduleSpec spec = s.schedule();
          spec.set_chunks(n);
          spec.set_alpha(a);
          Result<Simulation> sim = Simulate(MustResolve(split), spec);
          ASSERT_TRUE(sim.ok()) << sim.status().message();
          least = std::min(least, sim->report.peak_memory_bytes());
        }
      }
      legal.push_back({p, tp, dp, least});
    }
  }
  ASSERT_GE(legal.size(), 3u);
  std::sort(legal.begin(), legal.end(),
            [](const Split& a, const Split& b) { return a.least_peak < b.least_peak; });
  ASSERT_LT(legal[0].least_peak, legal[1].least_peak);
  s.mutable_cluster()->mutable_device()->set_memory_capacity_bytes(
      (legal[0].least_peak + legal[1].least_peak) / 2);
  s.mutable_cluster()->mutable_device()->set_memory_reserve_bytes(0);  // capacity = threshold
  s.mutable_cluster()->mutable_device()->set_memory_reserve_fraction(0);

  Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(s), req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  int feasible = 0;
  for (const pb::PlanCandidate& c : r->candidates()) feasible += c.verdict() == "feasible";
  ASSERT_EQ(feasible, 1);
  const pb::PlanCandidate& only = r->candidates(0);
  EXPECT_EQ(only.rank(), 1u);
  EXPECT_EQ(static_cast<int>(only.pipeline_size()), legal[0].p);
  EXPECT_EQ(static_cast<int>(only.tensor_size()), legal[0].tp);
  EXPECT_EQ(static_cast<int>(only.data_size()), legal[0].dp);
  // The others are OOM and say at which stage and buffer class.
  const pb::PlanCandidate* second = Find(*r, legal[1].p, legal[1].tp, legal[1].dp);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->verdict(), "oom");
  EXPECT_EQ(second->best().peak_memory_bytes(), legal[1].least_peak);
  EXPECT_NE(second->reason().find("on stage " + std::to_string(second->best().peak_stage())),
            std::string::npos);
  EXPECT_NE(second->reason().find(second->best().peak_class()), std::string::npos);
}

// With CP degrees to try, every P x TP x CP x DP = devices is a candidate;
// a CP split's best run is the sweep of that split with
// parallel.context_size set; CP beyond the chunks' granularity is illegal.
TEST(CapacityPlan, ContextParallelSplitsAreSearchedBesideTheOthers) {
  pb::Scenario s = TinyScenario("gdn-tiny");
  s.mutable_schedule()->set_granularity(4);
  CapacityPlanRequest req = TinyRequest(8, 2);
  req.context_sizes = {1, 2, 8};
  Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(s), req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  int expected = 0;
  for (int cp : {1, 2, 8}) {
    for (int p = 1; p <= 8 / cp; ++p) {
      for (int tp = 1; p * tp <= 8 / cp; ++tp) expected += ((8 / cp) % (p * tp) == 0);
    }
  }
  EXPECT_EQ(r->candidates_size(), expected);
  bool cp2 = false;
  for (const pb::PlanCandidate& c : r->candidates()) {
    const int cp = std::max(1u, c.context_size());
    EXPECT_EQ(static_cast<int>(c.pipeline_size() * c.tensor_size() * c.data_size()) * cp, 8);
    if (cp == 8) {
      EXPECT_EQ(c.verdict(), "illegal");
      EXPECT_NE(c.reason().find("CP 8 > the chunks' granularity 4"), std::string::npos)
          << c.reason();
    }
    if (cp == 2 && c.pipeline_size() == 2 && c.tensor_size() == 2 && c.verdict() == "feasible") {
      cp2 = true;
      // The same split simulated directly.
      pb::Scenario split = s;
      split.mutable_parallel()->set_pipeline_size(2);
      split.mutable_parallel()->set_tensor_size(2);
      split.mutable_parallel()->set_data_size(1);
      split.mutable_parallel()->set_context_size(2);
      split.mutable_parallel()->set_microbatches(2);
      split.set_seq_len(4096);
      pb::ScheduleSpec spec = split.schedule();
      spec.set_policy("stateflow");
      spec.set_chunks(c.best().chunks());
      spec.set_alpha(c.best().alpha());
      Result<Simulation> sim = Simulate(MustResolve(split), spec);
      ASSERT_TRUE(sim.ok()) << sim.status().message();
      EXPECT_DOUBLE_EQ(sim->report.step_time_s(), c.best().step_time_s());
    }
  }
  EXPECT_TRUE(cp2);
}

TEST(CapacityPlan, FeasibleSplitsAreRankedByThroughput) {
  Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(TinyScenario()), TinyRequest(4, 4));
  ASSERT_TRUE(r.ok()) << r.status().message();
  double last = std::numeric_limits<double>::infinity();
  std::uint32_t rank = 0;
  for (const pb::PlanCandidate& c : r->candidates()) {
    if (c.verdict() != "feasible") break;
    EXPECT_EQ(c.rank(), ++rank);
    EXPECT_LE(c.best().tokens_per_s(), last);
    last = c.best().tokens_per_s();
  }
  EXPECT_GE(rank, 2u);
}

std::string SplitName(const pb::PlanCandidate& c) {
  return std::to_string(c.pipeline_size()) + " x " + std::to_string(c.tensor_size()) + " x " +
         std::to_string(c.data_size());
}

// The capacity plan takes the sweep's v for interleaved (and its ST ranges)
// to every split: each legal split's interleaved runs are at each v that
// places, the best named with its v, and the unplaceable v noted, once.
TEST(CapacityPlan, VirtualStagesReachEverySplit) {
  CapacityPlanRequest req = TinyRequest(4, 4);
  req.sweep.clear_policies();
  req.sweep.add_policies("interleaved");
  req.sweep.add_virtual_stages(2);
  req.sweep.add_virtual_stages(64);  // more model stages than any split can place
  Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(TinyScenario()), req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  int feasible = 0;
  for (const pb::PlanCandidate& c : r->candidates()) {
    if (c.verdict() != "feasible") continue;
    ++feasible;
    EXPECT_EQ(c.best().virtual_stages(), 2u) << c.pipeline_size();
  }
  EXPECT_GE(feasible, 1);
  int noted = 0;
  for (const std::string& note : r->notes()) {
    noted += note.find("interleaved at v = 64 skipped") != std::string::npos;
  }
  EXPECT_GE(noted, 1);
  // A split where no v places is illegal, saying why, not OOM.
  req.sweep.clear_virtual_stages();
  req.sweep.add_virtual_stages(64);
  r = PlanCapacity(MustResolve(TinyScenario()), req);
  ASSERT_TRUE(r.ok()) << r.status().message();
  int nothing = 0;
  for (const pb::PlanCandidate& c : r->candidates()) {
    EXPECT_EQ(c.verdict(), "illegal") << SplitName(c) << ": " << c.reason();
    nothing += c.reason().find("nothing to simulate: interleaved at v = 64 skipped") == 0;
  }
  EXPECT_GE(nothing, 1);
}

TEST(CapacityPlan, BadRequestsNameTheField) {
  const pb::Scenario s = TinyScenario();
  auto error = [&](const CapacityPlanRequest& req) {
    Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(s), req);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(error(TinyRequest(0, 4)).find("devices must be >= 1"), std::string::npos);
  EXPECT_NE(error(TinyRequest(3, 4)).find("devices (3) must be a multiple of "
                                          "cluster.devices_per_node (2)"),
            std::string::npos);
  CapacityPlanRequest bad = TinyRequest(4, 4);
  bad.sweep.add_alpha(-1);
  EXPECT_NE(error(bad).find("sweep.alpha[2] must be in [0, "), std::string::npos);
  bad = TinyRequest(4, 4);
  bad.seq_len = 128;  // no N > 1 fits; N = 1 stays
  Result<pb::CapacityPlanReport> r = PlanCapacity(MustResolve(s), bad);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->notes_size(), 1);
  EXPECT_NE(r->notes(0).find("N = 2, 4 dropped"), std::string::npos);
}

}  // namespace
}  // namespace stateflow::sim

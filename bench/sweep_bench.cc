// Sweep speed: the whole paper grid (scenarios/paper/*.textproto: GDN and
// Mamba-3, recurrent and hybrid, 3B/15B/32B, three lengths, three global
// batches, every N and alpha, and the 1F1B baselines), loaded once and swept
// in one process; configurations per second. BM_PaperGridAndKdaHybrids adds
// the same grid for the KDA hybrids (scenarios/families/*.textproto).
//
//   ./build/bench/bench_sweep --benchmark_min_time=3
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "scenario/load.h"
#include "scenario/resolve.h"
#include "sim/search.h"

namespace stateflow {
namespace {

// The scenarios of scenarios/<dir> for every dir of `dirs`, sorted by path.
std::vector<scenario::ResolvedScenario> Grid(const std::vector<std::string>& dirs) {
  std::vector<std::string> paths;
  for (const std::string& d : dirs) {
    const std::filesystem::path dir = std::filesystem::path(SF_SOURCE_DIR) / "scenarios" / d;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() == ".textproto") paths.push_back(entry.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<scenario::ResolvedScenario> out;
  for (const std::string& path : paths) {
    Result<pb::Scenario> s = scenario::LoadScenarioFile(path);
    Result<scenario::ResolvedScenario> r =
        s.ok() ? scenario::Resolve(*s) : Result<scenario::ResolvedScenario>(s.status());
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

void SweepAll(benchmark::State& state, const std::vector<scenario::ResolvedScenario>& grid) {
  std::uint64_t configurations = 0, simulated = 0, tasks = 0;
  for (auto _ : state) {
    for (const scenario::ResolvedScenario& s : grid) {
      Result<pb::SweepReport> r = sim::RunSweep(s, s.proto().sweep());
      if (!r.ok()) {
        state.SkipWithError(r.status().message().c_str());
        return;
      }
      configurations += r->runs_size();
      simulated += r->num_simulated();
      for (const pb::SweepRun& run : r->runs()) tasks += static_cast<std::uint64_t>(run.num_tasks());
    }
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["configurations"] = static_cast<double>(configurations) / n;
  state.counters["simulated"] = static_cast<double>(simulated) / n;
  state.counters["tasks"] = static_cast<double>(tasks) / n;
  state.counters["configurations/s"] =
      benchmark::Counter(static_cast<double>(configurations), benchmark::Counter::kIsRate);
}
void BM_PaperGrid(benchmark::State& state) {
  const std::vector<scenario::ResolvedScenario> grid = Grid({"paper"});
  if (grid.size() != 12) state.SkipWithError("expected 12 scenarios in scenarios/paper");
  SweepAll(state, grid);
}
BENCHMARK(BM_PaperGrid)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

void BM_PaperGridAndKdaHybrids(benchmark::State& state) {
  const std::vector<scenario::ResolvedScenario> grid = Grid({"paper", "families"});
  if (grid.size() != 15) state.SkipWithError("expected 12 + 3 scenarios");
  SweepAll(state, grid);
}
BENCHMARK(BM_PaperGridAndKdaHybrids)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace
}  // namespace stateflow

BENCHMARK_MAIN();

// Every scenario in scenarios/ (recursively) must keep loading, resolving and,
// when it has a sweep block, expanding into a valid grid, so that the ready
// experiments never rot. (Running one through `stateflow sweep` is in
// sweep_cli_test.cc.)
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <google/protobuf/text_format.h>

#include <fstream>
#include <sstream>

#include "models/model.h"
#include "scenario/load.h"
#include "sim/cost_table.h"
#include "scenario/resolve.h"
#include "sim/search.h"

namespace stateflow::tools {
namespace {

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> out;
  const std::filesystem::path root = std::filesystem::path(SF_SOURCE_DIR) / "scenarios";
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    // scenarios/measured/ holds measured CostTables and scenarios/clusters/
    // cluster files (--cluster), not scenarios (below).
    if (entry.is_regular_file() && entry.path().extension() == ".textproto" &&
        entry.path().string().find("/scenarios/measured/") == std::string::npos &&
        entry.path().string().find("/scenarios/clusters/") == std::string::npos) {
      out.push_back(entry.path().string());
    }
  }
  return out;
}

// The .textproto files under `folder` of the repository, recursively.
std::vector<std::filesystem::path> TextprotosUnder(const std::string& folder) {
  std::vector<std::filesystem::path> out;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::filesystem::path(SF_SOURCE_DIR) / folder)) {
    if (entry.is_regular_file() && entry.path().extension() == ".textproto") {
      out.push_back(entry.path());
    }
  }
  return out;
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Scenarios, EveryFileResolvesAndItsSweepExpands) {
  const std::vector<std::string> files = ScenarioFiles();
  int paper = 0;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    Result<pb::Scenario> loaded = scenario::LoadScenarioFile(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    Result<scenario::ResolvedScenario> resolved = scenario::Resolve(*loaded);
    ASSERT_TRUE(resolved.ok()) << resolved.status().message();
    if (resolved->proto().has_sweep()) {
      Result<sim::SweepGrid> grid = sim::ExpandSweep(*resolved, resolved->proto().sweep());
      ASSERT_TRUE(grid.ok()) << grid.status().message();
      EXPECT_FALSE(grid->configs.empty());
    }
    paper += path.find("/scenarios/paper/") != std::string::npos;
  }
  // The paper's grid: {gdn, mamba3} x {recurrent, hybrid} x {3b, 15b, 32b}.
  EXPECT_EQ(paper, 12);
}

// Every cost table measured on a GPU (scenarios/measured/<gpu>-<date>/, the
// GPU kit's output, issue 29) loads for replay and names the device it ran
// on; its folder's env.txt names the GPU and the driver.
TEST(Scenarios, MeasuredCostTablesLoadAndNameTheirDevice) {
  int tables = 0;
  for (const std::filesystem::path& path : TextprotosUnder("scenarios/measured")) {
    SCOPED_TRACE(path.string());
    pb::CostTable table;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(ReadText(path), &table));
    Result<sim::CostTableIndex> index = sim::CostTableIndex::Make(table, path.string());
    EXPECT_TRUE(index.ok()) << index.status().message();
    EXPECT_EQ(table.device().rfind("cuda:", 0), 0u) << table.device();
    EXPECT_FALSE(table.provenance().git_commit().empty());
    EXPECT_NE(ReadText(path.parent_path() / "env.txt").find("NVIDIA"), std::string::npos)
        << "env.txt names no GPU";
    ++tables;
  }
  EXPECT_GT(tables, 0);
}

// Every cluster file (scenarios/clusters/: measured kernel-cost tables,
// profile --kernel-costs) is a valid cluster whose tables name their source.
TEST(Scenarios, ClusterFilesAreValidClustersWithSourcedTables) {
  int clusters = 0;
  for (const std::filesystem::path& path : TextprotosUnder("scenarios/clusters")) {
    SCOPED_TRACE(path.string());
    pb::ClusterSpec cluster;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(ReadText(path), &cluster));
    EXPECT_TRUE(models::ValidateCluster(cluster).ok()) << models::ValidateCluster(cluster).message();
    EXPECT_GT(cluster.kernel_costs().gemm_size(), 0);
    ASSERT_GT(cluster.kernel_costs().sources_size(), 0);
    EXPECT_NE(cluster.kernel_costs().sources(0).find("stateflow profile --kernel-costs"),
              std::string::npos);
    ++clusters;
  }
  EXPECT_GT(clusters, 0);
}

TEST(Scenarios, TheEmbeddedDefaultHasASweepBlock) {
  Result<pb::Scenario> s = scenario::ParseScenarioText(scenario::DefaultScenarioText(), "<default>");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_TRUE(s->has_sweep());
  EXPECT_EQ(s->sweep().chunks_size(), 5);
  ASSERT_EQ(s->sweep().policies_size(), 2);
  EXPECT_EQ(s->sweep().policies(0), "1f1b");
  EXPECT_EQ(s->sweep().policies(1), "stateflow");
}

}  // namespace
}  // namespace stateflow::tools

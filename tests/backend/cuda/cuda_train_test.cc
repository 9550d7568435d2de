// GPU test (label gpu): training end to end on a CUDA device with the
// stateflow-cuda program, float64 (every family's tiny presets,
// tests/family_presets.h): the GPU's
// losses against the CPU device's
// (< 1e-9 relative: reduction orders differ), chunked (N = 4) against
// unchunked (N = 1) on the GPU, and P = 2 ranks over NCCL against one
// process when two GPUs are visible; and bf16 on the GPU against bf16 on the
// host-grid device (the same arithmetic, cuBLAS's products in another order:
// within bf16's precision, 1e-2 relative). With no CUDA device every case is
// SKIPPED with the reason (never passed). Written and compiled on a machine
// without a GPU: it has not run on one.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "tests/family_presets.h"

namespace {

using stateflow::testing::TinyFamilyPresets;

// Where stateflow-cuda and mpirun are: the build's, unless SF_BINARY_DIR and
// SF_MPIEXEC name others (scripts/gpu-kit.sh runs these tests from a kit
// folder on another machine).
std::string BinaryDir() {
  const char* dir = std::getenv("SF_BINARY_DIR");
  return dir != nullptr ? dir : SF_BINARY_DIR;
}
std::string Mpiexec() {
  const char* mpiexec = std::getenv("SF_MPIEXEC");
  return mpiexec != nullptr ? mpiexec : MPIEXEC_EXECUTABLE;
}

int VisibleGpus() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// The losses of `stateflow-cuda train ... --json`, from the report's
// "losses" array (a small parser: the array of numbers after the key).
std::vector<double> Losses(const std::string& args, const std::string& model = "gdn-tiny",
                          const std::string& dtype = "float64") {
  const std::string command = BinaryDir() + "/stateflow-cuda train --model " +
                              model + " --dtype " + dtype + " --steps 4 --json " + args;
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  std::string out;
  char buf[4096];
  while (pipe != nullptr && fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  EXPECT_EQ(pipe != nullptr ? pclose(pipe) : -1, 0) << command;
  std::vector<double> losses;
  const size_t key = out.find("\"losses\"");
  if (key == std::string::npos) return losses;
  std::istringstream in(out.substr(out.find('[', key) + 1));
  double v = 0;
  char sep = 0;
  while (in >> v) {
    losses.push_back(v);
    if (!(in >> sep) || sep == ']') break;
  }
  return losses;
}

void ExpectClose(const std::vector<double>& a, const std::vector<double>& b, const std::string& what,
                 double tol = 1e-9) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(std::abs(a[i] - b[i]), tol * std::abs(b[i])) << what << ", step " << i;
  }
}

// bf16 (every family) on the GPU against bf16 on host-grid.
TEST(CudaTrain, Bf16TracksTheHostGridDevice) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "no CUDA device visible";
  for (const std::string& model : TinyFamilyPresets()) {
    ExpectClose(Losses("--device cuda", model, "bf16"), Losses("--device host-grid", model, "bf16"),
                model, 1e-2);
  }
}

TEST(CudaTrain, MatchesTheCpuDevice) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "no CUDA device visible";
  ExpectClose(Losses("--device cuda"), Losses("--device cpu"), "GPU vs CPU");
}

// Every family and its attention hybrid: every layer on the device seam.
TEST(CudaTrain, EveryFamilyMatchesTheCpuDevice) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "no CUDA device visible";
  for (const std::string& model : TinyFamilyPresets()) {
    ExpectClose(Losses("--device cuda", model), Losses("--device cpu", model), model);
  }
}

TEST(CudaTrain, ChunkedEqualsUnchunked) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "no CUDA device visible";
  ExpectClose(Losses("--device cuda -N 4"), Losses("--device cuda -N 1"), "N = 4 vs N = 1");
}

// The losses of `mpirun -n 2 stateflow-cuda train ... -P 2 <args>`.
std::vector<double> TwoRankLosses(const std::string& args) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  const std::string command = Mpiexec() + " -n 2 --oversubscribe " + BinaryDir() +
                              "/stateflow-cuda train --model gdn-tiny --dtype float64 --steps 4 "
                              "--json -P 2 " + args;
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr) << command;
  std::string out;
  char buf[4096];
  while (pipe != nullptr && fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  EXPECT_EQ(pipe != nullptr ? pclose(pipe) : -1, 0) << command;
  std::vector<double> ranks;
  const size_t key = out.find("\"losses\"");
  if (key == std::string::npos) return ranks;
  std::istringstream in(out.substr(out.find('[', key) + 1));
  double v = 0;
  char sep = 0;
  while (in >> v) {
    ranks.push_back(v);
    if (!(in >> sep) || sep == ']') break;
  }
  return ranks;
}

TEST(CudaTrain, TwoRanksOverNcclEqualOneProcess) {
  if (VisibleGpus() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices visible";
  ExpectClose(TwoRankLosses("--device cuda --device-link nccl"), Losses("--device cuda -P 2"),
              "P = 2 ranks (NCCL) vs one process");
}

// Two ranks on one GPU (NCCL refuses that): messages through host memory
// over MPI.
TEST(CudaTrain, TwoRanksThroughHostMemoryEqualOneProcess) {
  if (VisibleGpus() < 1) GTEST_SKIP() << "no CUDA device visible";
  ExpectClose(TwoRankLosses("--device cuda --device-link host"), Losses("--device cuda -P 2"),
              "P = 2 ranks (host staging) vs one process");
}

}  // namespace

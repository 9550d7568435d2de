// Whole stage modules on the host-grid device (the CUDA kernels' arithmetic
// on the host: backend/device/host_grid_device.h) against the same modules
// on the CPU device: a training step of the small GDN and Mamba-3 models and
// of their attention hybrids, chunked (N = 3, M = 2, the stateflow plan), with and
// without recompute, in float64: the loss and every parameter gradient
// within 1e-12 relative; the memory ledger the same bytes, buffer class by
// buffer class, except kWorkspace (the grid's GDN and Mamba-3 cores need
// more scratch, grid_kernels/gdn_common.h, mamba3_core.h). The overlapped
// GDN and Mamba-3 cores and the ST tile give the sequential cores' bits. Nothing above
// the seam knows which device it runs on.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/device/host_grid_device.h"
#include "backend/model/model_stage_module.h"
#include "schedule/partition.h"
#include "schedule/plan.h"
#include "schedule/policies.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::backend {
namespace {

using models::Recompute;

struct StepRun {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads;
  std::vector<int64_t> peak_bytes;  // per BufferClass
};

// One training step of one stage holding the whole model, on `device`
// (nullptr: the CPU device): M microbatches of T tokens in N chunks.
StepRun RunStep(Device* device, const pb::ModelSpec& model, Recompute recompute, int M,
                int64_t T, int N, bool st_overlap = false, int64_t st_tile = 0) {
  StepRun run;
  TrackingAllocator alloc(0, {}, device);
  Batch batch;
  batch.microbatches = M;
  batch.microbatch_size = 1;
  batch.seq_len = T;
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.vocab_size() - 1));
  batch.tokens.resize(static_cast<size_t>(M) * (T + 1));
  for (int32_t& t : batch.tokens) t = token(rng);
  Result<schedule::Partition> partition = schedule::MakePartition(T, N, 0.0, {1.0, 0.0}, 1);
  Result<schedule::Plan> plan = schedule::MakePlan("stateflow", 1, M, N);
  auto module = MakeStageModule<double>(
      model, {0, static_cast<int>(model.num_layers()) + 2},
      {.recompute = recompute,
       .seed = 1234,
       .microbatch_size = 1,
       .st_overlap = st_overlap,
       .st_tile = st_tile},
      &alloc);
  if (!partition.ok() || !plan.ok() || !module.ok()) {
    ADD_FAILURE() << "setup failed: " << module.status().message();
    return run;
  }
  StageModule<double>& m = **module;
  testing::PerturbParams(&m, 0.3);
  Status st = m.BeginStep(&batch, &*partition, 1.0 / (static_cast<double>(M) * T));
  EXPECT_TRUE(st.ok()) << st.message();
  for (const schedule::Action& act : plan->stage(0)) {
    Result<Tensor<double>> out = act.pass == schedule::Pass::kForward
                                     ? m.Forward(act.microbatch, act.chunk, nullptr)
                                     : m.Backward(act.microbatch, act.chunk, nullptr);
    EXPECT_TRUE(out.ok()) << out.status().message();
  }
  run.loss = m.loss();
  for (ParamRef<double>& p : m.Parameters()) run.grads[p.name] = testing::ToVector(*p.grad);
  for (int c = 0; c < kNumBufferClasses; ++c) {
    run.peak_bytes.push_back(alloc.PeakBytes(static_cast<BufferClass>(c)));
  }
  return run;
}

void ExpectSameStep(const pb::ModelSpec& model, Recompute recompute) {
  SCOPED_TRACE(model.name() + " recompute " + std::string(models::RecomputeName(recompute)));
  const StepRun cpu = RunStep(nullptr, model, recompute, 2, 70, 3);
  const StepRun grid = RunStep(&HostGridDevice(), model, recompute, 2, 70, 3);
  EXPECT_NEAR(grid.loss, cpu.loss, 1e-12 * std::abs(cpu.loss));
  ASSERT_EQ(grid.grads.size(), cpu.grads.size());
  for (const auto& [name, g] : cpu.grads) {
    EXPECT_LT(testing::RelError(grid.grads.at(name), g), 1e-12) << name;
  }
  for (int c = 0; c < kNumBufferClasses; ++c) {
    const auto cls = static_cast<BufferClass>(c);
    if (cls == BufferClass::kWorkspace) {
      EXPECT_GE(grid.peak_bytes[c], cpu.peak_bytes[c]) << BufferClassName(cls);
    } else {
      EXPECT_EQ(grid.peak_bytes[c], cpu.peak_bytes[c]) << BufferClassName(cls);
    }
  }
}

TEST(GridModel, GdnStepEqualsCpu) {
  ExpectSameStep(testing::SmallModel("gdn", 2), Recompute::kNone);
  ExpectSameStep(testing::SmallModel("gdn", 2), Recompute::kFull);
}

// schedule.st_overlap and st_tile on the host-grid device: the GDN cores
// on two streams (grid_ops.h; chunks of 150 tokens, 3 kernel blocks in 3
// segments) with an ST tile of 4 rows (not a divisor of d_v = 6): the same
// loss, gradients and bytes per class, bit for bit, as the sequential cores.
TEST(GridModel, OverlapAndTileGiveTheSameStep) {
  const pb::ModelSpec model = testing::SmallModel("gdn", 2);
  for (Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    const StepRun seq = RunStep(&HostGridDevice(), model, recompute, 2, 300, 2);
    const StepRun ovl = RunStep(&HostGridDevice(), model, recompute, 2, 300, 2, true, 4);
    EXPECT_EQ(ovl.loss, seq.loss);
    EXPECT_EQ(ovl.grads, seq.grads);
    EXPECT_EQ(ovl.peak_bytes, seq.peak_bytes);
  }
}

TEST(GridModel, GdnHybridStepEqualsCpu) {
  ExpectSameStep(testing::SmallModel("gdn-hybrid", 4), Recompute::kNone);
}

TEST(GridModel, Mamba3StepEqualsCpu) {
  ExpectSameStep(testing::SmallModel("mamba3", 2), Recompute::kNone);
  ExpectSameStep(testing::SmallModel("mamba3", 2), Recompute::kFull);
}

// schedule.st_overlap for Mamba-3 on the host-grid device: the core on two
// streams (grid_ops.h; chunks of 150 tokens, 3 kernel blocks of T_C = 64 in
// 3 segments, the last block short), and with schedule.st_tile: the same
// loss, gradients and bytes per class, bit for bit, as the sequential core.
TEST(GridModel, Mamba3OverlapGivesTheSameStep) {
  const pb::ModelSpec model = testing::SmallModel("mamba3", 2);
  for (Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    const StepRun seq = RunStep(&HostGridDevice(), model, recompute, 2, 300, 2);
    const StepRun ovl = RunStep(&HostGridDevice(), model, recompute, 2, 300, 2, true);
    EXPECT_EQ(ovl.loss, seq.loss);
    EXPECT_EQ(ovl.grads, seq.grads);
    EXPECT_EQ(ovl.peak_bytes, seq.peak_bytes);
    // schedule.st_tile: ST tiles of 4 state rows (not a divisor of the head
    // dim 6), sequential and on two streams: the same bits again.
    for (bool overlap : {false, true}) {
      const StepRun tiled = RunStep(&HostGridDevice(), model, recompute, 2, 300, 2, overlap, 4);
      EXPECT_EQ(tiled.loss, seq.loss) << (overlap ? "overlapped" : "sequential");
      EXPECT_EQ(tiled.grads, seq.grads) << (overlap ? "overlapped" : "sequential");
      EXPECT_EQ(tiled.peak_bytes, seq.peak_bytes);
    }
  }
}

TEST(GridModel, Mamba3HybridStepEqualsCpu) {
  ExpectSameStep(testing::SmallModel("mamba3-hybrid", 4), Recompute::kNone);
}

}  // namespace
}  // namespace stateflow::backend

// Memory exactness of every recurrent family's layer: the allocations its
// Forward and Backward really make on a TrackingAllocator equal the
// simulator's memory events (models/layer_formulas.h:
// RecurrenceLayerForwardMemory / RecurrenceLayerBackwardMemory, the family's
// one list, after the boundary state the layer allocates first), per buffer
// class (peak and final) and in total peak, for recompute none and full,
// batch 1 and 2, float32 and float64 on the CPU (and float64 and bf16 on the
// host-grid device, whose core scratch differs), chunk lengths around T_C;
// and the boundary state's bytes equal BoundaryStateBytesPerSequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <type_traits>
#include <string>
#include <vector>

#include "backend/device/host_grid_device.h"
#include "backend/layers/gdn_layer.h"
#include "backend/layers/kda_layer.h"
#include "backend/layers/mamba3_layer.h"
#include "models/family.h"
#include "models/layer_formulas.h"
#include "models/model.h"
#include "tests/backend/layer_test_util.h"

namespace stateflow::backend {
namespace {

using models::MemorySegment;
using models::Recompute;

// Live bytes per class (and in total) before a pass, and the checks after.
class LedgerProbe {
 public:
  explicit LedgerProbe(TrackingAllocator* alloc) : alloc_(alloc) {
    for (int c = 0; c < kNumBufferClasses; ++c) {
      before_[c] = alloc->LiveBytes(static_cast<BufferClass>(c));
    }
    total_before_ = alloc->LiveTotalBytes();
    alloc->ResetPeaks();
  }
  void ExpectEquals(const MemorySegment& seg, const std::string& what) const {
    for (int c = 0; c < kNumBufferClasses; ++c) {
      const BufferClass cls = static_cast<BufferClass>(c);
      const std::string name = what + " " + std::string(kBufferClassNames[c]);
      EXPECT_EQ(static_cast<double>(alloc_->PeakBytes(cls) - before_[c]),
                seg.class_peak(cls)) << name << " peak";
      EXPECT_EQ(static_cast<double>(alloc_->LiveBytes(cls) - before_[c]), seg.net(cls))
          << name << " final";
    }
    EXPECT_EQ(static_cast<double>(alloc_->PeakTotalBytes() - total_before_),
              seg.peak_total()) << what << " total peak";
  }

 private:
  TrackingAllocator* alloc_;
  int64_t before_[kNumBufferClasses] = {};
  int64_t total_before_ = 0;
};

template <class Family, typename T>
void CheckLayerMemory(const pb::ModelSpec& model, int64_t B, int64_t s, Recompute mode,
                      Device* device) {
  using Layer = typename Family::template Layer<T>;
  using State = typename Layer::State;
  const std::string what = std::string(Family::kName) + " B=" + std::to_string(B) +
                           " s=" + std::to_string(s) + " recompute " +
                           std::string(models::RecomputeName(mode)) + " " + device->name() +
                           (sizeof(T) == 2 ? " bf16" : sizeof(T) == 4 ? " float32" : " float64");
  SCOPED_TRACE(what);
  const typename Family::Dims d = Family::DimsOf(model);
  const bool full = mode == Recompute::kFull;
  TrackingAllocator alloc(0, std::nullopt, device);
  auto m = Layer::Make(alloc, d, 0, 1, 9);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::mt19937_64 rng(3);
  Tensor<T> x = testing::FromVector<T>(alloc, BufferClass::kWorkspace, {B * s, d.C},
                                       testing::Uniform(rng, B * s * d.C, -1, 1));
  auto state_in = State::Zeros(alloc, d, B, BufferClass::kBoundaryStates);
  ASSERT_TRUE(state_in.ok());
  models::TensorBytes bytes;
  bytes.tokens = static_cast<double>(B * s);
  bytes.seq_tokens = static_cast<double>(s);
  bytes.act = sizeof(T);
  bytes.tensor_size = 1;
  bytes.core_workspace = device->kind() == DeviceKind::kCpu ? models::CoreWorkspace::kCpu
                                                            : models::CoreWorkspace::kGrid;
  const double state_bytes = static_cast<double>(B) *
      models::BoundaryStateBytesPerSequence(model, models::LayerKind::kRecurrence, sizeof(T), 1);
  if constexpr (!std::is_same_v<T, bf16>) {  // one element size for the whole state
    EXPECT_EQ(state_bytes, static_cast<double>(B * State::Numel(d) * int64_t{sizeof(T)}));
  }

  Tensor<T> y;
  State state_out;
  typename Layer::Saved saved;
  {
    const LedgerProbe probe(&alloc);
    ASSERT_TRUE(m->Forward(&y, &state_out, &saved, x, B, *state_in, mode).ok());
    MemorySegment expected;
    expected.Add(BufferClass::kBoundaryStates, state_bytes);  // state_out, first
    expected.Append(models::RecurrenceLayerForwardMemory(model, bytes, full));
    probe.ExpectEquals(expected, "forward");
  }
  Tensor<T> dy = testing::FromVector<T>(alloc, BufferClass::kWorkspace, {B * s, d.C},
                                        testing::Uniform(rng, B * s * d.C, -1, 1));
  {
    const LedgerProbe probe(&alloc);
    Tensor<T> dx;
    State dstate_in;
    ASSERT_TRUE(m->Backward(&dx, &dstate_in, &saved, dy, B, &state_out, *state_in).ok());
    MemorySegment expected;
    expected.Add(BufferClass::kBoundaryStates, state_bytes);  // dstate_in, first
    expected.Append(models::RecurrenceLayerBackwardMemory(model, bytes, full));
    probe.ExpectEquals(expected, "backward");
  }
}

// preset: the family's tiny one by default.
template <class Family>
void CheckFamily(std::string preset = "") {
  if (preset.empty()) preset = std::string(Family::kName) + "-tiny";
  auto model = models::ModelPreset(preset);
  ASSERT_TRUE(model.ok()) << model.status().message();
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    for (int64_t B : {1, 2}) {
      for (int64_t s : {1, 64, 100}) {
        CheckLayerMemory<Family, float>(*model, B, s, mode, &CpuDevice());
        CheckLayerMemory<Family, double>(*model, B, s, mode, &CpuDevice());
      }
      CheckLayerMemory<Family, double>(*model, B, 100, mode, &HostGridDevice());
      CheckLayerMemory<Family, bf16>(*model, B, 100, mode, &HostGridDevice());
    }
  }
}

TEST(RecurrentLayerMemory, GdnAllocationsEqualTheSimulatorsEvents) { CheckFamily<GdnFamilyTraits>(); }
TEST(RecurrentLayerMemory, Mamba3AllocationsEqualTheSimulatorsEvents) {
  CheckFamily<Mamba3FamilyTraits>();
}
TEST(RecurrentLayerMemory, KdaAllocationsEqualTheSimulatorsEvents) { CheckFamily<KdaFamilyTraits>(); }

// DeltaNet: the gdn family without decay, with LayerNorm, a GELU MLP and
// biases (its saved and transient tensors differ from GDN's).
TEST(RecurrentLayerMemory, DeltaNetAllocationsEqualTheSimulatorsEvents) {
  CheckFamily<GdnFamilyTraits>("deltanet-tiny");
}

// Every registered family is checked above.
TEST(RecurrentLayerMemory, EveryFamilyIsChecked) {
  std::vector<std::string> checked = {GdnFamilyTraits::kName, Mamba3FamilyTraits::kName,
                                      KdaFamilyTraits::kName};
  for (const models::Family* f : models::Families()) {
    EXPECT_NE(std::find(checked.begin(), checked.end(), std::string(f->name())), checked.end())
        << "family " << f->name() << " has no layer memory test";
  }
}

}  // namespace
}  // namespace stateflow::backend

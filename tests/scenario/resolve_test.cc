// scenario/resolve.h: presets merged, defaults filled, fields checked; the
// With* copies stay resolved; resolving a resolved scenario changes nothing.
#include "scenario/resolve.h"

#include <gtest/gtest.h>

#include <string>

#include "models/limits.h"
#include "models/model.h"
#include "scenario/load.h"

namespace stateflow::scenario {
namespace {

pb::Scenario Tiny() {
  pb::Scenario s;
  s.set_model_preset("gdn-hybrid-tiny");
  s.set_cluster_preset("cpu");
  s.mutable_parallel()->set_pipeline_size(2);
  s.mutable_parallel()->set_microbatches(3);
  s.set_seq_len(512);
  return s;
}

void ExpectInvalid(const Result<ResolvedScenario>& r, const std::string& field) {
  ASSERT_FALSE(r.ok()) << "expected an error naming " << field;
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidInput);
  EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
}

TEST(Resolve, FillsDefaultsAndMergesPresetsWithTheScenarioWinning) {
  pb::Scenario raw = Tiny();
  raw.mutable_model()->set_num_layers(8);  // overrides the preset's
  Result<ResolvedScenario> r = Resolve(raw);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const pb::Scenario& s = r->proto();
  const pb::ModelSpec preset = *models::ModelPreset("gdn-hybrid-tiny");
  EXPECT_EQ(s.model().num_layers(), 8u);
  EXPECT_EQ(s.model().hidden_size(), preset.hidden_size());
  EXPECT_EQ(s.parallel().tensor_size(), 1u);
  EXPECT_EQ(s.parallel().data_size(), 1u);
  EXPECT_EQ(s.parallel().microbatch_size(), 1u);
  EXPECT_EQ(s.schedule().policy(), "stateflow");
  EXPECT_EQ(s.schedule().chunks(), 1u);
  EXPECT_EQ(s.schedule().granularity(), 128u);
  EXPECT_EQ(s.schedule().recompute(), "none");
  EXPECT_EQ(s.cost_model(), "analytic");
  EXPECT_EQ(r->stages(), 2);
  EXPECT_EQ(r->microbatches(), 3);
  EXPECT_EQ(r->seq_len(), 512);
}

TEST(Resolve, IsIdempotent) {
  // Every embedded and shipped scenario, and a hand-made one: resolving the
  // resolved fields again gives the same bytes (validate and profile narrow
  // a resolved scenario and resolve it again).
  std::vector<pb::Scenario> raws = {Tiny(), *ParseScenarioText(DefaultScenarioText(), "default"),
                                    *ParseScenarioText(TinyTrainScenarioText(), "tiny-train")};
  for (const pb::Scenario& raw : raws) {
    Result<ResolvedScenario> once = Resolve(raw);
    ASSERT_TRUE(once.ok()) << once.status().message();
    Result<ResolvedScenario> twice = Resolve(once->proto());
    ASSERT_TRUE(twice.ok()) << twice.status().message();
    EXPECT_EQ(once->proto().SerializeAsString(), twice->proto().SerializeAsString())
        << raw.name();
  }
}

TEST(Resolve, NamesTheFieldAtFault) {
  pb::Scenario s = Tiny();
  s.mutable_parallel()->set_pipeline_size(0);
  ExpectInvalid(Resolve(s), "parallel.pipeline_size");
  s = Tiny();
  s.mutable_parallel()->set_pipeline_size(99);
  ExpectInvalid(Resolve(s), "exceeds model.num_layers");
  s = Tiny();
  s.set_seq_len(0);
  ExpectInvalid(Resolve(s), "seq_len");
  s = Tiny();
  s.set_cost_model("guess");
  ExpectInvalid(Resolve(s), "cost_model");
  s = Tiny();
  s.mutable_schedule()->set_policy("zigzag");
  ExpectInvalid(Resolve(s), "schedule.policy");
  s = Tiny();
  s.add_baselines()->set_recompute("half");
  ExpectInvalid(Resolve(s), "baselines[0].recompute");
  s = Tiny();
  s.clear_model_preset();
  ExpectInvalid(Resolve(s), "model_preset");
}

// Integers that used to wrap when narrowed to int (issue 14): each is now
// reported as given, with the field's limits (models/limits.h).
TEST(Resolve, IntegersOutOfRangeAreReportedUnwrapped) {
  const auto expect = [](const Result<ResolvedScenario>& r, const std::string& field,
                         const models::IntRange& range, const std::string& got) {
    ExpectInvalid(r, field + " must be in " + models::RangeText(range) + " (got " + got + ")");
  };
  pb::Scenario s = Tiny();
  s.mutable_schedule()->set_chunks(4294967295u);  // was "got -1"
  expect(Resolve(s), "schedule.chunks", models::kChunks, "4294967295");
  s = Tiny();
  s.mutable_parallel()->set_data_size(2147483648u);  // was "must be >= 1"
  expect(Resolve(s), "parallel.data_size", models::kDataSize, "2147483648");
  s = Tiny();
  s.set_seq_len(std::uint64_t{1} << 63);  // was a non-finite cost
  expect(Resolve(s), "seq_len", models::kSeqLen, std::to_string(std::uint64_t{1} << 63));
  s = Tiny();
  s.mutable_parallel()->set_microbatches(4294967295u);
  expect(Resolve(s), "parallel.microbatches", models::kMicrobatches, "4294967295");
  s = Tiny();
  s.mutable_schedule()->set_granularity(0);
  expect(Resolve(s), "schedule.granularity", models::kGranularity, "0");
}

TEST(Resolve, GlobalBatchIsCheckedInSixtyFourBits) {
  // Each factor in range, their product (2^60) beyond an int32 global batch.
  pb::Scenario s = Tiny();
  s.mutable_parallel()->set_microbatches(1u << 20);
  s.mutable_parallel()->set_microbatch_size(1u << 20);
  s.mutable_parallel()->set_data_size(1u << 20);
  ExpectInvalid(Resolve(s), "global batch");
  s.mutable_parallel()->set_data_size(1);
  s.mutable_parallel()->set_microbatch_size(1);
  EXPECT_TRUE(Resolve(s).ok());
}

TEST(ResolvedScenario, WithCopiesChangeOneThingAndCheckIt) {
  const ResolvedScenario base = *Resolve(Tiny());
  Result<ResolvedScenario> longer = base.WithSeqLen(4096);
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(longer->seq_len(), 4096);
  EXPECT_EQ(base.seq_len(), 512);  // a copy
  ExpectInvalid(base.WithSeqLen(0), "seq_len");

  Result<ResolvedScenario> more = base.WithMicrobatches(8);
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(more->microbatches(), 8);
  ExpectInvalid(base.WithMicrobatches(0), "parallel.microbatches");

  pb::ScheduleSpec gpipe;
  gpipe.set_policy("gpipe");
  gpipe.set_chunks(4);
  Result<ResolvedScenario> other = base.WithSchedule(gpipe);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->proto().schedule().policy(), "gpipe");
  EXPECT_EQ(other->proto().schedule().granularity(), 128u);  // default filled
  gpipe.set_chunks(0);
  ExpectInvalid(base.WithSchedule(gpipe), "schedule.chunks");

  pb::ParallelSpec parallel = base.proto().parallel();
  parallel.set_pipeline_size(4);
  Result<ResolvedScenario> deeper = base.WithParallel(parallel);
  ASSERT_TRUE(deeper.ok()) << deeper.status().message();
  EXPECT_EQ(deeper->stages(), 4);
  parallel.set_pipeline_size(99);
  ExpectInvalid(base.WithParallel(parallel), "exceeds model.num_layers");
  parallel.set_pipeline_size(2);
  parallel.set_tensor_size(3);  // the tiny model's heads do not divide by 3
  EXPECT_FALSE(base.WithParallel(parallel).ok());
  // What WithParallel accepts, Resolve accepts too, with the same fields.
  parallel.set_tensor_size(2);
  Result<ResolvedScenario> split = base.WithParallel(parallel);
  pb::Scenario raw = base.proto();
  *raw.mutable_parallel() = parallel;
  Result<ResolvedScenario> resolved = Resolve(raw);
  ASSERT_EQ(split.ok(), resolved.ok());
  if (split.ok()) {
    EXPECT_EQ(split->proto().SerializeAsString(), resolved->proto().SerializeAsString());
  }
}

}  // namespace
}  // namespace stateflow::scenario

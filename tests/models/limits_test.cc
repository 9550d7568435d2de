// models/limits.h: the range checks at and beyond each end, and the inputs
// that crashed or overflowed before every field was range-checked (issue 14):
// each must now be a one-line error naming the field and its limits.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "models/cost_model.h"
#include "models/limits.h"
#include "models/model.h"

namespace stateflow::models {
namespace {

void ExpectOutOfRange(const Status& s, const std::string& field, const std::string& range) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kInvalidInput);
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("must be in " + range), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

TEST(CheckRange, IntegerEndsAreIncluded) {
  const IntRange r{1, 4096};
  EXPECT_TRUE(CheckRange("f", std::int64_t{1}, r).ok());
  EXPECT_TRUE(CheckRange("f", std::int64_t{4096}, r).ok());
  ExpectOutOfRange(CheckRange("f", std::int64_t{0}, r), "f", "[1, 4096] (got 0)");
  ExpectOutOfRange(CheckRange("f", std::int64_t{4097}, r), "f", "[1, 4096] (got 4097)");
}

TEST(CheckRange, UnsignedValuesNeverWrap) {
  const IntRange r{1, 4096};
  // An unsigned value above INT64_MAX is reported as itself, not negative.
  const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max();
  ExpectOutOfRange(CheckRange("f", huge, r), "f", "[1, 4096] (got " + std::to_string(huge) + ")");
  const std::uint32_t u32 = std::numeric_limits<std::uint32_t>::max();
  ExpectOutOfRange(CheckRange("f", u32, r), "f", "[1, 4096] (got " + std::to_string(u32) + ")");
}

TEST(CheckRange, RealRejectsNanInfinityAndOpenEnd) {
  const RealRange closed{1.0, 1e18};
  EXPECT_TRUE(CheckRange("f", 1.0, closed).ok());
  EXPECT_TRUE(CheckRange("f", 1e18, closed).ok());
  ExpectOutOfRange(CheckRange("f", 1e-300, closed), "f", "[1, 1e+18] (got 1e-300)");
  ExpectOutOfRange(CheckRange("f", std::nan(""), closed), "f", "[1, 1e+18]");
  ExpectOutOfRange(CheckRange("f", INFINITY, closed), "f", "[1, 1e+18]");
  const RealRange open{0.0, 64.0, true};
  ExpectOutOfRange(CheckRange("f", 0.0, open), "f", "(0, 64] (got 0)");
  EXPECT_TRUE(CheckRange("f", 64.0, open).ok());
}

// Each issue-14 crash input, on the preset it was found with.
TEST(ValidateModel, HybridPeriodThatWrappedToZeroIsRejected) {
  pb::ModelSpec m = *ModelPreset("gdn-hybrid-3b");
  m.set_hybrid_period(4294967295u);  // + 1 wrapped to 0: a modulo by zero (SIGFPE)
  ExpectOutOfRange(ValidateModel(m, 1), "model.hybrid_period",
                   RangeText(kHybridPeriod) + " (got 4294967295)");
  m.set_hybrid_period(2147483647u);  // + 1 overflowed an int (UBSan)
  ExpectOutOfRange(ValidateModel(m, 1), "model.hybrid_period",
                   RangeText(kHybridPeriod) + " (got 2147483647)");
}

TEST(ValidateModel, NumLayersBeyondAnIntIsRejected) {
  pb::ModelSpec m = *ModelPreset("gdn-hybrid-3b");
  m.set_num_layers(2147483648u);  // was a negative reserve(): std::length_error
  ExpectOutOfRange(ValidateModel(m, 1), "model.num_layers",
                   RangeText(kNumLayers) + " (got 2147483648)");
}

TEST(IsAttentionLayer, LargestPeriodComputesInSixtyFourBits) {
  pb::ModelSpec m = *ModelPreset("gdn-hybrid-3b");
  m.set_hybrid_period(4294967295u);
  // Period 2^32: no layer index below it is an attention layer, and no trap.
  EXPECT_FALSE(IsAttentionLayer(m, 0));
  EXPECT_FALSE(IsAttentionLayer(m, 2147483646));
  m.set_hybrid_period(3);
  EXPECT_TRUE(IsAttentionLayer(m, 3));
  EXPECT_FALSE(IsAttentionLayer(m, 4));
}

TEST(ValidateCluster, AbsurdFiniteBandwidthIsRejected) {
  pb::ClusterSpec c = *ClusterPreset("a100-80gb-nvlink");
  c.mutable_pipeline_link()->set_bandwidth_bytes_per_s(1e-300);  // printed "inf s"
  ExpectOutOfRange(ValidateCluster(c), "cluster.pipeline_link.bandwidth_bytes_per_s",
                   RangeText(kBandwidthBytesPerS));
}

TEST(CostModel, AbsurdPrecisionIsRejected) {
  const pb::ModelSpec m = *ModelPreset("gdn-3b");
  const pb::ClusterSpec c = *ClusterPreset("a100-80gb-nvlink");
  pb::PrecisionSpec p;
  p.set_activation_bytes(1e308);  // gave an infinite duration
  Result<CostModel> cm = CostModel::Make(m, p, c, CostModelOptions{});
  ASSERT_FALSE(cm.ok());
  ExpectOutOfRange(cm.status(), "precision.activation_bytes", RangeText(kPrecisionBytes));
}

}  // namespace
}  // namespace stateflow::models

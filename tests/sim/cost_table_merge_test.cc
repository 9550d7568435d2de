// Merging CostTables (profile --concurrent: a mean over processes; validate
// --rounds: a median over rounds), their sample keys, order and text form,
// on hand-made tables. Expected numbers are computed here from the inputs.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/cost_table.h"

namespace stateflow::sim {
namespace {

pb::CostSample Sample(const std::string& kind, const std::string& pass, double tokens,
                      double median_s, double p10_s, double p90_s, int reps = 10) {
  pb::CostSample s;
  s.set_layer_kind(kind);
  s.set_pass(pass);
  s.set_recompute("none");
  s.set_tokens(tokens);
  s.set_median_s(median_s);
  s.set_p10_s(p10_s);
  s.set_p90_s(p90_s);
  s.set_repetitions(static_cast<std::uint32_t>(reps));
  return s;
}

pb::CostTable Table(double scale, double optimizer_s, const std::string& note) {
  pb::CostTable t;
  t.set_dtype("float32");
  t.set_optimizer_s_per_param(optimizer_s);
  t.mutable_link()->set_latency_s(1e-6 * scale);
  t.add_notes(note);
  *t.add_samples() = Sample("recurrence", "forward", 64, 1.0 * scale, 0.9 * scale, 1.2 * scale);
  *t.add_samples() = Sample("embedding", "backward", 32, 2.0 * scale, 1.5 * scale, 2.5 * scale);
  return t;
}

TEST(CostTableMergeTest, SampleKeyNamesTheMeasurement) {
  pb::CostSample s = Sample("attention", "backward", 128, 1, 1, 1);
  s.set_recompute("full");
  s.set_prefix(256);
  EXPECT_EQ(CostSampleKey(s), "attention/backward/full/128/256");
  pb::CostSample other = s;
  other.set_median_s(5);  // the time is not part of what was measured
  EXPECT_EQ(CostSampleKey(other), CostSampleKey(s));
  other.set_tokens(64);
  EXPECT_NE(CostSampleKey(other), CostSampleKey(s));
}

TEST(CostTableMergeTest, MeanOverConcurrentProcesses) {
  const std::vector<double> scales = {1.0, 1.5, 1.1};
  const std::vector<double> optimizer = {3e-9, 5e-9, 4e-9};
  std::vector<pb::CostTable> tables;
  for (std::size_t k = 0; k < scales.size(); ++k) {
    tables.push_back(Table(scales[k], optimizer[k], "process " + std::to_string(k)));
  }
  double spread = -1;
  const pb::CostTable merged =
      MergeCostTables(tables, MergeStatistic::kMeanOverConcurrentProcesses, &spread);
  const double mean_scale = (scales[0] + scales[1] + scales[2]) / 3;
  ASSERT_EQ(merged.samples_size(), 2);
  // First appearance order: the first table's.
  EXPECT_EQ(merged.samples(0).layer_kind(), "recurrence");
  EXPECT_DOUBLE_EQ(merged.samples(0).median_s(), 1.0 * mean_scale);
  EXPECT_DOUBLE_EQ(merged.samples(1).median_s(), 2.0 * mean_scale);
  EXPECT_DOUBLE_EQ(merged.samples(0).p10_s(), 0.9 * 1.0);  // the lowest
  EXPECT_DOUBLE_EQ(merged.samples(0).p90_s(), 1.2 * 1.5);  // the highest
  EXPECT_EQ(merged.samples(0).repetitions(), 30u);
  EXPECT_DOUBLE_EQ(merged.optimizer_s_per_param(), (3e-9 + 5e-9 + 4e-9) / 3);
  EXPECT_DOUBLE_EQ(spread, 1.5 / 1.0 - 1);
  // Everything else from the first table.
  EXPECT_DOUBLE_EQ(merged.link().latency_s(), 1e-6);
  ASSERT_EQ(merged.notes_size(), 1);
  EXPECT_EQ(merged.notes(0), "process 0");
}

TEST(CostTableMergeTest, MedianOverRoundsAndSamplesOnlySomeRoundsMeasured) {
  std::vector<pb::CostTable> tables = {Table(1.0, 3e-9, "a"), Table(4.0, 9e-9, "b"),
                                       Table(2.0, 5e-9, "c")};
  // Only the last round measured this chunk length.
  *tables[2].add_samples() = Sample("recurrence", "forward", 128, 7.0, 6.0, 8.0, 5);
  const pb::CostTable merged = MergeCostTables(tables, MergeStatistic::kMedianOverRounds);
  ASSERT_EQ(merged.samples_size(), 3);
  EXPECT_DOUBLE_EQ(merged.samples(0).median_s(), 1.0 * 2.0);  // median of 1, 4, 2
  EXPECT_DOUBLE_EQ(merged.samples(1).median_s(), 2.0 * 2.0);
  EXPECT_DOUBLE_EQ(merged.samples(2).median_s(), 7.0);
  EXPECT_EQ(merged.samples(2).repetitions(), 5u);
  EXPECT_DOUBLE_EQ(merged.optimizer_s_per_param(), 5e-9);  // median of 3, 9, 5

  // Two rounds: the median of an even count is the mean of the middle two.
  tables.pop_back();
  EXPECT_DOUBLE_EQ(MergeCostTables(tables, MergeStatistic::kMedianOverRounds).samples(0).median_s(),
                   (1.0 + 4.0) / 2);
}

TEST(CostTableMergeTest, OneTableMergesToItself) {
  const pb::CostTable t = Table(1.0, 3e-9, "only");
  double spread = -1;
  for (MergeStatistic statistic :
       {MergeStatistic::kMeanOverConcurrentProcesses, MergeStatistic::kMedianOverRounds}) {
    EXPECT_EQ(MergeCostTables({t}, statistic, &spread).SerializeAsString(), t.SerializeAsString());
    EXPECT_EQ(spread, 0.0);
  }
}

TEST(CostTableMergeTest, SortOrdersByKindRecomputePassTokensPrefix) {
  pb::CostTable t;
  *t.add_samples() = Sample("recurrence", "forward", 64, 1, 1, 1);
  *t.add_samples() = Sample("recurrence", "backward", 128, 1, 1, 1);
  *t.add_samples() = Sample("recurrence", "backward", 64, 1, 1, 1);
  *t.add_samples() = Sample("embedding", "forward", 64, 1, 1, 1);
  SortCostSamples(&t);
  std::vector<std::string> keys;
  for (const pb::CostSample& s : t.samples()) keys.push_back(CostSampleKey(s));
  EXPECT_EQ(keys, (std::vector<std::string>{"embedding/forward/none/64/0",
                                            "recurrence/backward/none/64/0",
                                            "recurrence/backward/none/128/0",
                                            "recurrence/forward/none/64/0"}));
}

TEST(CostTableMergeTest, TextFormReadsBack) {
  const pb::CostTable t = Table(1.0, 3e-9, "note");
  const std::string text = CostTableText(t);
  EXPECT_EQ(text.rfind("# A CostTable", 0), 0u);
  pb::CostTable back;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &back));
  EXPECT_EQ(back.SerializeAsString(), t.SerializeAsString());
}

}  // namespace
}  // namespace stateflow::sim

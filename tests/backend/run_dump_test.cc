// The run dump (backend/train/run_dump.h) read back as an outside reader
// would: every parameter's bytes at its offset equal the trainer's tensor,
// every step's tokens equal the batch MakeBatch makes for that step, the
// index is valid JSON with the options, and a bad path is an error naming it.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "backend/train/run_dump.h"
#include "tests/backend/train_test_util.h"

namespace stateflow::backend::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const Value& Field(const Struct& s, const std::string& name) {
  static const Value kMissing;
  auto it = s.fields().find(name);
  EXPECT_TRUE(it != s.fields().end()) << "index has no field " << name;
  return it == s.fields().end() ? kMissing : it->second;
}

TEST(RunDump, ParametersAndTokensReadBackExactly) {
  const TrainSetup setup = ToySetup({.stages = 2, .microbatches = 3, .chunks = 2, .seq_len = 10});
  const TextData text = *TextData::Load(kDefaultTextPath);
  TrainOptions options;
  options.seed = 7;
  options.steps = 3;
  options.adamw.weight_decay = 0.25;
  auto trainer = Take(Trainer<float>::Make(setup, options, text, ToyFactory<float>(setup, 5),
                                           Take(MakeSingleProcessTransport<float>(2))));
  const std::string path = std::string(SF_BINARY_DIR) + "/test-tmp-run-dump.bin";
  ASSERT_TRUE(WriteRunDump<float>(path, *trainer, options, text, {{"norm_eps", 1e-6}}).ok());

  const std::string blob = ReadAll(path);
  Struct index;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ReadAll(path + ".json"), &index).ok());
  EXPECT_EQ(Field(index, "format").string_value(), "stateflow-run-dump 1");
  EXPECT_EQ(Field(index, "dtype").string_value(), "float32");
  EXPECT_EQ(Field(index, "microbatches").number_value(), 3);
  EXPECT_EQ(Field(index, "seq_len").number_value(), 10);
  EXPECT_EQ(Field(Field(index, "adamw").struct_value(), "weight_decay").number_value(), 0.25);
  EXPECT_EQ(Field(Field(index, "constants").struct_value(), "norm_eps").number_value(), 1e-6);
  EXPECT_EQ(Field(Field(index, "model").struct_value(), "name").string_value(), "gdn-tiny");

  // The expected tensors in order: every local stage's parameters, then the tokens.
  std::vector<std::pair<std::string, std::string>> expected;  // name, bytes
  for (int k = 0; k < trainer->num_local_stages(); ++k) {
    for (const ParamRef<float>& p : trainer->module(k).Parameters()) {
      expected.emplace_back(p.name, std::string(reinterpret_cast<const char*>(p.value->data()),
                                                p.value->numel() * sizeof(float)));
    }
  }
  for (int step = 0; step < options.steps; ++step) {
    const Batch batch = *text.MakeBatch(options.seed, step, 3, 10);
    expected.emplace_back("tokens.step" + std::to_string(step),
                          std::string(reinterpret_cast<const char*>(batch.tokens.data()),
                                      batch.tokens.size() * sizeof(std::int32_t)));
  }
  const auto& tensors = Field(index, "tensors").list_value().values();
  ASSERT_EQ(tensors.size(), static_cast<int>(expected.size()));
  double end = 0;
  for (int k = 0; k < tensors.size(); ++k) {
    const Struct& t = tensors[k].struct_value();
    const double offset = Field(t, "offset").number_value(), bytes = Field(t, "bytes").number_value();
    EXPECT_EQ(Field(t, "name").string_value(), expected[k].first);
    EXPECT_EQ(static_cast<std::int64_t>(offset) % 8, 0) << expected[k].first;
    EXPECT_GE(offset, end) << expected[k].first << " overlaps the tensor before it";
    ASSERT_EQ(bytes, static_cast<double>(expected[k].second.size())) << expected[k].first;
    ASSERT_LE(offset + bytes, static_cast<double>(blob.size()));
    EXPECT_EQ(blob.compare(static_cast<std::size_t>(offset), expected[k].second.size(),
                           expected[k].second), 0) << expected[k].first;
    double numel = 1;
    for (const Value& d : Field(t, "shape").list_value().values()) numel *= d.number_value();
    const bool tokens = expected[k].first.rfind("tokens.", 0) == 0;
    EXPECT_EQ(Field(t, "dtype").string_value(), tokens ? "int32" : "float32");
    EXPECT_EQ(numel * 4, bytes) << expected[k].first;
    end = offset + bytes;
  }
  EXPECT_EQ(end, static_cast<double>(blob.size()));
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".json");
}

TEST(RunDump, UnwritablePathNamesTheFile) {
  const TrainSetup setup = ToySetup({});
  const TextData text = *TextData::Load(kDefaultTextPath);
  auto trainer = Take(Trainer<double>::Make(setup, TrainOptions{}, text,
                                            ToyFactory<double>(setup, 5),
                                            Take(MakeSingleProcessTransport<double>(1))));
  const std::string path = std::string(SF_BINARY_DIR) + "/no-such-dir/run.bin";
  const Status s = WriteRunDump<double>(path, *trainer, TrainOptions{}, text, {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

// A write that fails after the open (a full disk) is a resource error with
// the system's reason, as for every file the project writes (before issue
// 31 an unchecked stream made it an input error with no reason: exit 2).
TEST(RunDump, AFullDiskIsAResourceErrorWithTheSystemsReason) {
  const TrainSetup setup = ToySetup({});
  const TextData text = *TextData::Load(kDefaultTextPath);
  auto trainer = Take(Trainer<double>::Make(setup, TrainOptions{}, text,
                                            ToyFactory<double>(setup, 5),
                                            Take(MakeSingleProcessTransport<double>(1))));
  const Status s = WriteRunDump<double>("/dev/full", *trainer, TrainOptions{}, text, {});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kResource) << s.message();
  EXPECT_NE(s.message().find("/dev/full: write failed: No space left on device"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace stateflow::backend::testing

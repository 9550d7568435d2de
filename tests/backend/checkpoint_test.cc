// Checkpoints (backend/train/checkpoint.h) in one process with the toy
// module: a run resumed from a checkpoint gives the losses and parameters of
// the uninterrupted run bit for bit; a kill in the middle of a checkpoint
// leaves the previous one usable; a corrupt, truncated or mismatched
// checkpoint is a one-line error naming the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "backend/train/checkpoint.h"
#include "backend/model/model_stage_module.h"
#include "tests/backend/train_test_util.h"

namespace stateflow::backend::testing {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the build's temporary directory, removed at the end.
class CheckpointDir {
 public:
  explicit CheckpointDir(const std::string& name)
      : path_((fs::temp_directory_path() / ("sf-checkpoint-test-" + name)).string()) {
    fs::remove_all(path_);
  }
  ~CheckpointDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RunResult {
  std::vector<double> losses;
  Named params;
};

const TextData& Text() {
  static const TextData text = *TextData::Load(kDefaultTextPath);
  return text;
}

template <typename T>
std::unique_ptr<Trainer<T>> MakeTrainer(const TrainSetup& setup, std::uint64_t init_seed) {
  TrainOptions options;
  options.seed = 9;  // the batches
  return Take(Trainer<T>::Make(setup, options, Text(), ToyFactory<T>(setup, init_seed),
                               Take(MakeSingleProcessTransport<T>(setup.stages))));
}

template <typename T>
RunResult Finish(Trainer<T>& trainer, int steps, const TrainLoop& loop) {
  const TrainRun r = Train(trainer, steps, nullptr, loop);
  EXPECT_TRUE(r.status.ok()) << r.status.message();
  RunResult run;
  for (const StepResult& s : r.steps) run.losses.push_back(s.loss);
  run.params = CollectAll(trainer, /*grads=*/false);
  return run;
}

TrainLoop Loop(int first_step, std::string dir = "", int every = 1) {
  TrainLoop loop;
  loop.first_step = first_step;
  loop.checkpoint_dir = std::move(dir);
  loop.checkpoint_every = every;
  return loop;
}

TrainSetup CheckpointSetup(int microbatches = 3) {
  return ToySetup({.stages = 2, .microbatches = microbatches, .chunks = 3, .seq_len = 18});
}

template <typename T>
void ExpectResumeIsBitIdentical() {
  const TrainSetup setup = CheckpointSetup();
  auto straight = MakeTrainer<T>(setup, 5);
  const RunResult full = Finish(*straight, 6, {});
  ASSERT_EQ(full.losses.size(), 6u);

  CheckpointDir dir(DtypeName<T>());
  auto first = MakeTrainer<T>(setup, 5);
  Finish(*first, 3, Loop(0, dir.path(), 2));
  // Different initial weights: everything must come from the checkpoint.
  auto second = MakeTrainer<T>(setup, 77);
  const int step = Take(second->LoadCheckpoint(dir.path()));
  ASSERT_EQ(step, 3);  // the last step, not only every second
  const RunResult resumed = Finish(*second, 6, Loop(step));
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(resumed.losses[k], full.losses[3 + k]) << "step " << 3 + k;
  ASSERT_EQ(resumed.params.size(), full.params.size());
  for (const auto& [name, values] : full.params) {
    EXPECT_EQ(resumed.params.at(name), values) << name;  // bit for bit
  }
}

// A zero-bubble plan (a split backward: the W stores never outlive a step)
// on the real GDN stage module, and plans with virtual stages (each model
// stage its own file, stage-<s>, s the model stage): resuming is
// bit-identical too.
class CheckpointPolicy : public ::testing::TestWithParam<const char*> {};

TEST_P(CheckpointPolicy, ResumedRunIsBitIdentical) {
  const std::string policy = GetParam();
  const TrainSetup setup = ToySetup(
      {.stages = 2, .microbatches = policy == "zb-h1" ? 3 : 2, .chunks = 3, .seq_len = 18,
       .policy = policy, .virtual_stages = policy == "zb-h1" ? 0 : 2});
  ASSERT_EQ(schedule::SplitsBackward(setup.plan), policy != "interleaved");
  ASSERT_EQ(setup.plan.virtual_stages(), policy == "zb-h1" ? 1 : 2);
  const auto make = [&setup](std::uint64_t seed) {
    TrainOptions options;
    options.seed = 9;
    StageModuleFactory<double> factory = [&setup, seed](int, const models::StageLayers& layers,
                                                        TrackingAllocator* alloc) {
      return MakeStageModule<double>(
          setup.model, layers,
          {.seed = seed, .split_backward = schedule::SplitsBackward(setup.plan)}, alloc);
    };
    return Take(Trainer<double>::Make(setup, options, Text(), factory,
                                      Take(MakeSingleProcessTransport<double>(setup.stages))));
  };
  auto straight = make(5);
  const RunResult full = Finish(*straight, 4, {});
  CheckpointDir dir(policy);
  auto first = make(5);
  Finish(*first, 2, Loop(0, dir.path(), 1));
  auto second = make(77);
  const int step = Take(second->LoadCheckpoint(dir.path()));
  ASSERT_EQ(step, 2);
  const RunResult resumed = Finish(*second, 4, Loop(step));
  ASSERT_EQ(resumed.losses.size(), 2u);
  for (int k = 0; k < 2; ++k) EXPECT_EQ(resumed.losses[k], full.losses[2 + k]) << "step " << 2 + k;
  for (const auto& [name, values] : full.params) {
    EXPECT_EQ(resumed.params.at(name), values) << name;  // bit for bit
  }
}
INSTANTIATE_TEST_SUITE_P(Policies, CheckpointPolicy,
                         ::testing::Values("zb-h1", "interleaved", "zbv", "zb-interleaved"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(Checkpoint, ResumedRunIsBitIdenticalFloat64) { ExpectResumeIsBitIdentical<double>(); }
TEST(Checkpoint, ResumedRunIsBitIdenticalFloat32) { ExpectResumeIsBitIdentical<float>(); }

TEST(Checkpoint, OnlyTheLatestStageFilesRemain) {
  CheckpointDir dir("latest");
  auto trainer = MakeTrainer<double>(CheckpointSetup(), 5);
  Finish(*trainer, 4, Loop(0, dir.path(), 1));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"MANIFEST", "stage-0.step-4.ckpt",
                                             "stage-1.step-4.ckpt"}));
}

// A kill after some stage files of the next checkpoint were written (and a
// temporary file left behind) but before its manifest: the manifest still
// names the previous checkpoint, whose files are intact.
TEST(Checkpoint, AKillDuringTheWriteLeavesThePreviousCheckpointUsable) {
  const TrainSetup setup = CheckpointSetup();
  CheckpointDir dir("killed");
  auto straight = MakeTrainer<double>(setup, 5);
  const RunResult full = Finish(*straight, 4, {});
  auto first = MakeTrainer<double>(setup, 5);
  Finish(*first, 2, Loop(0, dir.path()));
  Finish(*first, 3, Loop(2));  // one more step, not checkpointed
  ASSERT_TRUE(first->SaveCheckpoint(dir.path() + "/unused", 3).ok());  // elsewhere: untouched
  // Stage 0's file of step 3 in place, stage 1's only as a partial temporary.
  fs::copy_file(StageCheckpointPath(dir.path() + "/unused", 0, 3),
                StageCheckpointPath(dir.path(), 0, 3));
  std::ofstream(StageCheckpointPath(dir.path(), 1, 3) + ".tmp") << "partial";
  auto second = MakeTrainer<double>(setup, 77);
  ASSERT_EQ(Take(second->LoadCheckpoint(dir.path())), 2);
  const RunResult resumed = Finish(*second, 4, Loop(2));
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], full.losses[2]);
  EXPECT_EQ(resumed.losses[1], full.losses[3]);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The error of loading `dir` into a fresh trainer of `setup`: one line.
std::string LoadError(const TrainSetup& setup, const std::string& dir) {
  auto trainer = MakeTrainer<double>(setup, 5);
  Result<int> step = trainer->LoadCheckpoint(dir);
  EXPECT_FALSE(step.ok());
  if (step.ok()) return "";
  const std::string message = step.status().message();
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(step.status().code(), Status::Code::kInvalidInput) << message;
  return message;
}

TEST(Checkpoint, CorruptTruncatedAndMismatchedCheckpointsAreOneLineErrors) {
  const TrainSetup setup = CheckpointSetup();
  CheckpointDir dir("bad");
  auto trainer = MakeTrainer<double>(setup, 5);
  Finish(*trainer, 1, Loop(0, dir.path()));
  const std::string stage1 = StageCheckpointPath(dir.path(), 1, 1);
  const std::string good = Slurp(stage1);
  ASSERT_GT(good.size(), 100u);

  EXPECT_NE(LoadError(CheckpointSetup(/*microbatches=*/2), dir.path())
                .find("MANIFEST: the checkpoint has parallel.microbatches 3, this run 2"),
            std::string::npos);

  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  Spit(stage1, flipped);
  EXPECT_NE(LoadError(setup, dir.path()).find(stage1 + ": truncated or corrupt checkpoint"),
            std::string::npos);

  for (std::size_t size : {std::size_t{0}, std::size_t{5}, good.size() / 3, good.size() - 1}) {
    Spit(stage1, good.substr(0, size));
    EXPECT_NE(LoadError(setup, dir.path()).find(stage1 + ": truncated"), std::string::npos)
        << size << " bytes";
  }

  fs::remove(stage1);
  EXPECT_NE(LoadError(setup, dir.path()).find(stage1 + ": cannot open"), std::string::npos);
  Spit(stage1, good);

  // Another stage's file in its place: the header names the stage.
  Spit(stage1, Slurp(StageCheckpointPath(dir.path(), 0, 1)));
  const std::string swapped = LoadError(setup, dir.path());
  EXPECT_NE(swapped.find("the checkpoint has stage 0, this run 1"), std::string::npos) << swapped;
  Spit(stage1, good);

  Spit(CheckpointManifestPath(dir.path()), "stateflow-checkpoint 1\nstep x\n");
  EXPECT_NE(LoadError(setup, dir.path()).find("MANIFEST: not a stateflow checkpoint or corrupt"),
            std::string::npos);
  fs::remove(CheckpointManifestPath(dir.path()));
  EXPECT_NE(LoadError(setup, dir.path()).find(": no checkpoint (no MANIFEST)"),
            std::string::npos);
}

// Resume integrity (issue 31): every field of the key -- each input that
// determines the run -- that differs between the checkpoint and the run is
// refused in one line naming it; the fields a resume may change are
// accepted only when the run names them (may_differ), and each change is
// reported.
TEST(Checkpoint, EveryKeyFieldThatDiffersIsNamed) {
  CheckpointDir dir("key");
  const CheckpointKey base = MakeCheckpointKey(CheckpointSetup(), TrainOptions{}, Text(), "float64");
  fs::create_directories(dir.path());
  ASSERT_TRUE(WriteCheckpointManifest(dir.path(), base, 4).ok());
  EXPECT_EQ(Take(ReadCheckpointManifest(dir.path(), base)), 4);
  using Change = std::function<void(CheckpointKey*)>;
  const std::vector<std::pair<std::string, Change>> changes = {
      {"model.name", [](CheckpointKey* k) { k->model += "x"; }},
      {"model.hash", [](CheckpointKey* k) { ++k->model_hash; }},
      {"parallel.pipeline_size", [](CheckpointKey* k) { ++k->stages; }},
      {"parallel.microbatches", [](CheckpointKey* k) { ++k->microbatches; }},
      {"parallel.data_size", [](CheckpointKey* k) { ++k->data_size; }},
      {"schedule.chunks", [](CheckpointKey* k) { ++k->chunks; }},
      {"parallel.microbatch_size", [](CheckpointKey* k) { ++k->microbatch_size; }},
      {"seq_len", [](CheckpointKey* k) { ++k->seq_len; }},
      {"train.dtype", [](CheckpointKey* k) { k->dtype = "float32"; }},
      {"train.seed", [](CheckpointKey* k) { ++k->seed; }},
      {"schedule.partition", [](CheckpointKey* k) { k->partition += ",1"; }},
      {"schedule.plan_hash", [](CheckpointKey* k) { ++k->plan_hash; }},
      {"schedule.st_overlap", [](CheckpointKey* k) { k->st_overlap = !k->st_overlap; }},
      {"schedule.st_tile", [](CheckpointKey* k) { k->st_tile = 16; }},
      {"train.text_hash", [](CheckpointKey* k) { ++k->text_hash; }},
      {"train.text_bytes", [](CheckpointKey* k) { ++k->text_bytes; }},
      {"train.device", [](CheckpointKey* k) { k->device = "host-grid"; }},
      {"train.learning_rate", [](CheckpointKey* k) { k->adamw.learning_rate = 1e-3; }},
      {"train.adamw_beta1", [](CheckpointKey* k) { k->adamw.beta1 = 0.8; }},
      {"train.adamw_beta2", [](CheckpointKey* k) { k->adamw.beta2 = 0.99; }},
      {"train.adamw_epsilon", [](CheckpointKey* k) { k->adamw.epsilon = 1e-6; }},
      {"train.weight_decay", [](CheckpointKey* k) { k->adamw.weight_decay = 0.1; }}};
  for (const auto& [field, change] : changes) {
    SCOPED_TRACE(field);
    CheckpointKey run = base;
    change(&run);
    Result<int> r = ReadCheckpointManifest(dir.path(), run);
    ASSERT_FALSE(r.ok());
    const std::string m = r.status().message();
    EXPECT_NE(m.find("MANIFEST: the checkpoint has " + field + " "), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    const bool changeable = field == "train.learning_rate" || field == "train.weight_decay";
    EXPECT_EQ(m.find("--resume-change " + field) != std::string::npos, changeable) << m;
    // Named as a change the run means: accepted (a changeable field) and
    // reported; another field stays refused.
    run.may_differ = {field};
    std::vector<std::string> changed;
    r = ReadCheckpointManifest(dir.path(), run, &changed);
    if (changeable) {
      ASSERT_TRUE(r.ok()) << r.status().message();
      ASSERT_EQ(changed.size(), 1u);
      EXPECT_EQ(changed[0].rfind(field + " ", 0), 0u) << changed[0];
    }
  }
}

// A model named with a newline (and a line that looks like a key field)
// writes a manifest that reads back (issue 31): the name is escaped to one
// line. Before, the rest of the name became a line of its own and every
// resume of that run was refused as corrupt.
TEST(Checkpoint, AModelNameWithANewlineReadsBack) {
  CheckpointDir dir("newline");
  CheckpointKey key = MakeCheckpointKey(CheckpointSetup(), TrainOptions{}, Text(), "float64");
  key.model = "tiny\ntrain.seed 7\nend";
  fs::create_directories(dir.path());
  ASSERT_TRUE(WriteCheckpointManifest(dir.path(), key, 3).ok());
  EXPECT_EQ(Take(ReadCheckpointManifest(dir.path(), key)), 3);
  CheckpointKey other = key;
  other.model = "tiny";
  const Result<int> refused = ReadCheckpointManifest(dir.path(), other);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the checkpoint has model.name tiny\\ntrain.seed "
                                            "7\\nend, this run tiny"),
            std::string::npos)
      << refused.status().message();
}

// The text's identity is its content: one byte changed, the same length,
// another key; the same bytes under another name, the same key.
TEST(Checkpoint, TheKeyFollowsTheTextsContentNotItsName) {
  std::string bytes(1000, 'a');
  const TrainSetup setup = CheckpointSetup();
  const TextData a = TextData::FromBytes(bytes, "a.txt");
  const TextData renamed = TextData::FromBytes(bytes, "b.txt");
  bytes[500] = 'b';
  const TextData edited = TextData::FromBytes(bytes, "a.txt");
  const TrainOptions o;
  const CheckpointKey ka = MakeCheckpointKey(setup, o, a, "float64");
  EXPECT_EQ(ka.text_hash, MakeCheckpointKey(setup, o, renamed, "float64").text_hash);
  EXPECT_NE(ka.text_hash, MakeCheckpointKey(setup, o, edited, "float64").text_hash);
  EXPECT_EQ(ka.text_bytes, 1000);
}

}  // namespace
}  // namespace stateflow::backend::testing

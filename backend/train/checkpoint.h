// Training checkpoints: what a stage needs to continue a run bit for bit --
// its parameters, its AdamW moments and step counter -- and the step to
// continue from. The batch of step k is a pure function of (text, seed, k)
// (text_data.h), so the text, the seed and the step are the whole data and
// RNG position. The key records every input that determines the run (the
// model, the plan and its partition, the ST split, the text's content, the
// optimizer's settings, the dtype and the device), so a resume that would
// continue another run is refused in one line naming the field; a learning
// rate or weight decay the user means to change is accepted only when the
// run names it (CheckpointKey::may_differ, train --resume-change), and the
// change is reported.
//
// A checkpoint directory holds, per checkpoint step k, one file per stage
// part, `stage-<r>[.tp-<t>][.shard-<d>].step-<k>.ckpt` (CheckpointPart: under
// tensor parallelism each tensor rank's parameters; with the distributed
// optimizer each data-parallel replica's shard of the optimizer state and
// the parameter ranges it updates), and one `MANIFEST` naming the step. Every file is
// written durably (common/files.h WriteFileDurably: temporary file, fsync,
// rename); the manifest is written only after every stage file of step k is
// in place, and older stage files are removed only after that. A run killed
// at any moment thus leaves the manifest naming a complete checkpoint (or no
// manifest at all).
//
// Stage file: a text header of `key value` lines (the CheckpointKey, the
// stage, its layers, the part, the step, the parameter and piece counts)
// ending in `end`, then per piece (a range of one parameter: the whole
// parameter unless the optimizer is sharded) the parameter's name, index and
// element count, the range, its values (bf16: fp32 masters), first and second
// moments (raw, this machine's byte order), then AdamW's step counter, then
// an FNV-1a 64 checksum of all the bytes before it. Reading checks the
// checksum first (a truncated or corrupted file is one error), then that
// every key matches this run (an error naming the first that differs: a
// resume on another grid names parallel.tensor_size, data_size or
// distributed_optimizer), then every piece's parameter, size and range. A
// shard's resume reads every replica's file of its stage: its own whole, the
// others' parameter ranges (so each replica holds the whole parameters, as
// after a step's all-gather).
//
// Not a format for other programs and not portable across byte orders.
//
//   CheckpointKey key = MakeCheckpointKey(setup, options, text, "float32");
//   SF_RETURN_IF_ERROR(WriteStageCheckpoint<float>(dir, key, r, layers, /*step=*/6, opt));
//   SF_RETURN_IF_ERROR(WriteCheckpointManifest(dir, key, 6));   // after every stage
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/train/adamw.h"
#include "backend/train/text_data.h"
#include "backend/train/train_setup.h"
#include "common/status.h"
#include "models/model.h"

namespace stateflow::backend {

// What a checkpoint must match to be resumed by a run.
struct CheckpointKey {
  std::string model;               // model.name
  std::uint64_t model_hash = 0;    // of the whole ModelSpec
  int stages = 1;                  // P
  int microbatches = 1;            // M (per replica)
  int data_size = 1;               // D
  int tensor_size = 1;             // TP
  bool distributed_optimizer = false;  // at D > 1: shards, one file per replica
  int chunks = 1;                  // N
  int microbatch_size = 1;         // B
  std::int64_t seq_len = 1;        // T
  std::string dtype;               // "float32" or "float64"
  std::uint64_t seed = 0;          // of the batches
  std::string partition;           // the chunks' lengths, "96,160"
  std::uint64_t plan_hash = 0;     // of the plan's text (the policy's order)
  bool st_overlap = false;         // schedule.st_overlap
  std::int64_t st_tile = 0;        // schedule.st_tile
  std::uint64_t text_hash = 0;     // TextData::content_hash
  std::int64_t text_bytes = 0;     // its size
  std::string device;              // "cpu", "host-grid", "cuda"
  AdamWOptions adamw;              // learning rate, betas, epsilon, weight decay
  // Fields of the key this run lets differ from the checkpoint's (each one
  // of kResumeChangeable); the difference is reported, not refused.
  std::vector<std::string> may_differ;
};

// The fields a resume may change when the run names them: what a user
// means to change mid-run (the step count is not in the key: --steps counts
// all steps).
inline constexpr const char* kResumeChangeable[] = {"train.learning_rate",
                                                    "train.weight_decay"};

CheckpointKey MakeCheckpointKey(const TrainSetup& setup, const TrainOptions& options,
                                const TextData& text, std::string dtype);

// "float32" or "float64".
template <typename T>
std::string DtypeName();

// Which part of a stage a file holds (see the header comment).
struct CheckpointPart {
  int tensor_rank = -1;  // >= 0 under tensor parallelism
  int shard = -1;        // >= 0: the distributed optimizer's replica d
  std::string Suffix() const;  // "", ".tp-1", ".shard-0", ".tp-1.shard-0"
};

std::string CheckpointManifestPath(const std::string& dir);
std::string StageCheckpointPath(const std::string& dir, int stage, int step,
                                const CheckpointPart& part = {});

// The stage file's bytes (see the header comment); `step` is the step the
// run continues from (the number of steps done).
template <typename T>
std::string EncodeStageCheckpoint(const CheckpointKey& key, int stage,
                                  const models::StageLayers& layers, int step, AdamW<T>& opt,
                                  const CheckpointPart& part = {});

// Reads `bytes` (from `path`, for messages) into `opt`'s parameters, moments
// and step counter. Errors (kInvalidInput, one line starting with `path`):
// truncated or corrupt (size, checksum, header), a key, the stage, its layers
// or the step differing from this run's (naming the field and both values),
// a parameter's name or size differing. `opt` is untouched on error.
template <typename T>
Status DecodeStageCheckpoint(std::string_view bytes, const std::string& path,
                             const CheckpointKey& key, int stage,
                             const models::StageLayers& layers, int step, AdamW<T>* opt,
                             const CheckpointPart& part = {});

// Writes stage `stage`'s file of step `step` in `dir` durably, making `dir`
// if needed.
template <typename T>
Status WriteStageCheckpoint(const std::string& dir, const CheckpointKey& key, int stage,
                            const models::StageLayers& layers, int step, AdamW<T>& opt,
                            const CheckpointPart& part = {});

// Writes the manifest naming step `step`. REQUIRES: every stage's file of
// that step is written.
Status WriteCheckpointManifest(const std::string& dir, const CheckpointKey& key, int step);

// The step of the manifest in `dir`, after checking its key against `key`.
// Errors name the manifest: missing ("no checkpoint in DIR"), corrupt, a key
// that differs (a field of key.may_differ aside: each such difference is
// appended to `changed` as "train.learning_rate 0.003 -> 0.001").
Result<int> ReadCheckpointManifest(const std::string& dir, const CheckpointKey& key,
                                   std::vector<std::string>* changed = nullptr);

// Reads stage `stage`'s part `part` of step `step` into `opt` (a shard: every
// replica's file, see the header comment).
template <typename T>
Status ReadStageCheckpoint(const std::string& dir, const CheckpointKey& key, int stage,
                           const models::StageLayers& layers, int step, AdamW<T>* opt,
                           const CheckpointPart& part = {});

// Removes stage `stage`'s files of steps other than `keep_step` (and stale
// temporary files). Best effort: the files are no longer referenced.
void RemoveStaleStageCheckpoints(const std::string& dir, int stage, int keep_step,
                                 const CheckpointPart& part = {});

}  // namespace stateflow::backend

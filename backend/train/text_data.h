// The training text and its batches: a byte-level language model reads a
// file's bytes as tokens (vocabulary 256). Each step's batch is M windows of
// T + 1 consecutive bytes (inputs [0, T), targets [1, T + 1)) whose offsets
// are drawn from (seed, step, microbatch) by a fixed integer hash, so every
// rank builds the same batch without talking, on any machine and library.
//
// The default text is the GNU GPL version 3 at
// /usr/share/common-licenses/GPL-3 (35 KB of English), present on every
// Debian system through the base-files package, so training needs no
// download.
//
// Not a tokenizer and not a data loader with shuffling epochs.
//
//   SF_ASSIGN_OR_RETURN(TextData text, TextData::Load(kDefaultTextPath));
//   SF_ASSIGN_OR_RETURN(Batch batch, text.MakeBatch(/*seed=*/1, /*step=*/0, /*M=*/4, /*T=*/256));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/stage_module.h"
#include "common/hash.h"
#include "common/status.h"

namespace stateflow::backend {

inline constexpr char kDefaultTextPath[] = "/usr/share/common-licenses/GPL-3";

// SplitMix64's finaliser: a bijective 64-bit mix, for seeding by hashing.
std::uint64_t Mix64(std::uint64_t x);

class TextData {
 public:
  // Training text is read whole into memory: at most 1 GiB.
  static constexpr std::int64_t kMaxTextBytes = std::int64_t{1} << 30;

  // Reads the whole file (common/files.h ReadFile: a regular file of at most
  // kMaxTextBytes). Errors name the path (cannot open, not a regular file,
  // too large, empty).
  static Result<TextData> Load(const std::string& path);
  // Bytes given directly (tests).
  static TextData FromBytes(std::string bytes, std::string name);

  const std::string& name() const { return name_; }
  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
  // FNV-1a 64 of the bytes (common/hash.h), computed once when made: the
  // text's identity in a checkpoint, whatever its path.
  std::uint64_t content_hash() const { return hash_; }

  // The batch of step `step`: sequence j (= a B + b, sequence b of
  // microbatch a) is the window starting at Mix64(seed, step, j) mod
  // (size - T), so M microbatches of B sequences hold the same sequences as
  // M B microbatches of one. Error (naming the file and both numbers) if the
  // text is shorter than T + 1 bytes; microbatch_size < 1.
  Result<Batch> MakeBatch(std::uint64_t seed, int step, int microbatches,
                          std::int64_t seq_len, int microbatch_size = 1) const;

 private:
  TextData(std::string bytes, std::string name)
      : bytes_(std::move(bytes)), name_(std::move(name)), hash_(Fnv1a64(bytes_)) {}

  std::string bytes_;
  std::string name_;  // the path, for messages
  std::uint64_t hash_;
};

}  // namespace stateflow::backend

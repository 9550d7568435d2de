#include "backend/train/text_data.h"

#include "common/files.h"

namespace stateflow::backend {

std::uint64_t Mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Result<TextData> TextData::Load(const std::string& path) {
  Result<std::string> read = ReadFile(path, kMaxTextBytes);
  if (!read.ok()) return read.status().WithPrefix("text");
  std::string bytes = *std::move(read);
  if (bytes.empty()) return Status::Invalid("text " + path + ": the file is empty");
  return TextData(std::move(bytes), path);
}

TextData TextData::FromBytes(std::string bytes, std::string name) {
  return TextData(std::move(bytes), std::move(name));
}

Result<Batch> TextData::MakeBatch(std::uint64_t seed, int step, int microbatches,
                                  std::int64_t seq_len, int microbatch_size) const {
  if (size() < seq_len + 1) {
    return Status::Invalid("text " + name_ + " has " + std::to_string(size()) +
                           " bytes, fewer than seq_len + 1 = " + std::to_string(seq_len + 1));
  }
  if (microbatch_size < 1) {
    return Status::Invalid("microbatch_size must be >= 1, got " + std::to_string(microbatch_size));
  }
  Batch batch;
  batch.microbatches = microbatches;
  batch.microbatch_size = microbatch_size;
  batch.seq_len = seq_len;
  const int sequences = microbatches * microbatch_size;
  batch.tokens.resize(static_cast<std::size_t>(sequences) * (seq_len + 1));
  const auto windows = static_cast<std::uint64_t>(size() - seq_len);  // starts 0..size-T-1
  // Sequence a (counting all sequences of the step in order) is drawn as
  // microbatch a of a microbatch_size-1 batch: M microbatches of B sequences
  // hold the sequences of M B microbatches of one.
  for (int a = 0; a < sequences; ++a) {
    const std::uint64_t h = Mix64(Mix64(Mix64(seed) ^ static_cast<std::uint64_t>(step)) ^
                                  static_cast<std::uint64_t>(a));
    const std::int64_t offset = static_cast<std::int64_t>(h % windows);
    std::int32_t* out = batch.tokens.data() + a * (seq_len + 1);
    for (std::int64_t t = 0; t <= seq_len; ++t) {
      out[t] = static_cast<unsigned char>(bytes_[static_cast<std::size_t>(offset + t)]);
    }
  }
  return batch;
}

}  // namespace stateflow::backend

// Files the programs read and write: a temporary file that removes itself, a
// whole-file write whose every step is checked, and the one whole-file reader
// (scenarios, plans, cost tables, training text), bounded in size and
// refusing anything but a regular file. One place for what the commands and
// the profiler used to do with mkstemp and unchecked std::fstream.
//
// Not parsing (scenario/load.h parses scenarios and cost tables).
//
//   SF_ASSIGN_OR_RETURN(TempFile scenario, TempFile::Create("validate-scenario"));
//   SF_RETURN_IF_ERROR(WriteFile(scenario.path(), text));
//   // ... the file is removed when `scenario` goes out of scope.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace stateflow {

class TempFile {
 public:
  // An empty file of this user's only (mkstemp) in $TMPDIR, else /tmp,
  // named "stateflow-<what>-XXXXXX". Errors name `what` and the directory.
  static Result<TempFile> Create(std::string_view what);

  TempFile(TempFile&& other) noexcept;
  TempFile& operator=(TempFile&& other) noexcept;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  // Removes the file (and nothing else).
  ~TempFile();

  const std::string& path() const { return path_; }

 private:
  explicit TempFile(std::string path) : path_(std::move(path)) {}

  std::string path_;  // empty once moved from
};

// Writes `text` to `path` (created or truncated), checking the open, the
// write and the close: a full disk or a missing directory is an error that
// names the path, never a silently short file.
Status WriteFile(const std::string& path, std::string_view text);

// Writes `data` to `path` so that a crash at any moment leaves either the
// old file or the whole new one, never a part: the bytes go to
// `path`.tmp, are fsynced, renamed over `path`, and the directory is
// fsynced. Errors (kResource, naming the path): as WriteFile, and a failed
// fsync or rename; the temporary file is removed on error.
Status WriteFileDurably(const std::string& path, std::string_view data);

// The size limit of text-format inputs (scenario, plan, cost table): 64 MiB.
inline constexpr std::int64_t kMaxTextFileBytes = std::int64_t{64} << 20;

// Reads the whole of `path`, which must be a regular file of at most
// `max_bytes`. Errors (kInvalidInput, one line, naming the path): missing or
// unreadable; a directory, FIFO, device or socket ("not a regular file");
// larger than `max_bytes` (also when it grows while being read). A FIFO is
// opened without blocking, so it is refused, never waited on.
Result<std::string> ReadFile(const std::string& path,
                             std::int64_t max_bytes = kMaxTextFileBytes);

// ReadFile for a text input (a scenario, plan, cost table, cluster preset,
// CSV): a leading UTF-8 byte-order mark (what editors and spreadsheets
// write as "UTF-8 with BOM", "CSV UTF-8") is dropped and Windows line ends
// (CRLF) become LF, so such a file reads as its text; line numbers in
// errors are unchanged. Not for data whose bytes are the content (training
// text, checkpoints).
Result<std::string> ReadTextFile(const std::string& path,
                                 std::int64_t max_bytes = kMaxTextFileBytes);

// "64 MiB", "1 GiB", "512 KiB", "100 bytes": a limit as --help states it.
std::string LimitText(std::int64_t bytes);

}  // namespace stateflow

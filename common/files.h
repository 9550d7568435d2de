// Files the programs write: a temporary file that removes itself, and a
// whole-file write whose every step is checked. One place for what the
// commands and the profiler used to do with mkstemp and unchecked
// std::ofstream.
//
// Not reading (scenario/load.h reads scenarios and cost tables).
//
//   SF_ASSIGN_OR_RETURN(TempFile scenario, TempFile::Create("validate-scenario"));
//   SF_RETURN_IF_ERROR(WriteFile(scenario.path(), text));
//   // ... the file is removed when `scenario` goes out of scope.
#pragma once

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

}  // namespace stateflow

#include "common/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace stateflow {

Result<TempFile> TempFile::Create(std::string_view what) {
  const char* dir = std::getenv("TMPDIR");
  const std::string directory = dir != nullptr && *dir != '\0' ? dir : "/tmp";
  std::string pattern = directory + "/stateflow-" + std::string(what) + "-XXXXXX";
  const int fd = mkstemp(pattern.data());
  if (fd < 0) {
    return Status::Resource("cannot make a temporary " + std::string(what) + " file in " +
                            directory + ": " + std::strerror(errno));
  }
  close(fd);
  return TempFile(std::move(pattern));
}

TempFile::TempFile(TempFile&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

TempFile& TempFile::operator=(TempFile&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) unlink(path_.c_str());
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

TempFile::~TempFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

Status WriteFile(const std::string& path, std::string_view text) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return Status::Invalid(path + ": cannot write: " + std::strerror(errno));
  }
  const std::size_t written = std::fwrite(text.data(), 1, text.size(), file);
  const int write_errno = errno;
  const bool flushed = std::fflush(file) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(file) == 0;
  if (written != text.size() || !flushed || !closed) {
    const int e = written != text.size() ? write_errno : (!flushed ? flush_errno : errno);
    return Status::Resource(path + ": write failed: " + std::strerror(e));
  }
  return Status::Ok();
}

}  // namespace stateflow

#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace stateflow {
namespace {

std::string KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

// Closes the descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string TooLarge(const std::string& path, std::int64_t max_bytes) {
  return path + ": larger than the limit of " + LimitText(max_bytes) + " for this input";
}

}  // namespace

std::string LimitText(std::int64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + units[u];
}

Result<std::string> ReadFile(const std::string& path, std::int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const Fd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) return Status::Invalid(path + ": cannot open file: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    return Status::Invalid(path + ": cannot stat file: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::Invalid(path + ": not a regular file (" + KindOf(st.st_mode) + ")");
  }
  if (st.st_size > max_bytes) return Status::Invalid(TooLarge(path, max_bytes));
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const ssize_t n = read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Invalid(path + ": read failed: " + std::strerror(errno));
    if (n == 0) break;
    // A file that grows while read is held to the same limit.
    if (static_cast<std::int64_t>(text.size()) + n > max_bytes) {
      return Status::Invalid(TooLarge(path, max_bytes));
    }
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
  return text;
}

Result<std::string> ReadTextFile(const std::string& path, std::int64_t max_bytes) {
  SF_ASSIGN_OR_RETURN(std::string text, ReadFile(path, max_bytes));
  constexpr std::string_view kBom = "\xEF\xBB\xBF";
  std::size_t from = text.compare(0, kBom.size(), kBom) == 0 ? kBom.size() : 0;
  std::string out;
  out.reserve(text.size() - from);
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out.push_back(text[i]);
  }
  return out;
}

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

Status WriteFileDurably(const std::string& path, std::string_view data) {
  const std::string temp = path + ".tmp";
  auto fail = [&](const std::string& what) {
    const std::string reason = std::strerror(errno);
    unlink(temp.c_str());
    return Status::Resource(path + ": " + what + " failed: " + reason);
  };
  const Fd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Status::Resource(temp + ": cannot write: " + std::strerror(errno));
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write");
    done += static_cast<std::size_t>(n);
  }
  if (fsync(fd.get()) != 0) return fail("fsync");
  if (std::rename(temp.c_str(), path.c_str()) != 0) return fail("rename");
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const Fd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0 || fsync(dir_fd.get()) != 0) {
    return Status::Resource(dir + ": fsync of the directory failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace stateflow

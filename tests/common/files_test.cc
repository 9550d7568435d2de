// common/files.h: a temporary file removes itself; a write that cannot be
// completed is an error naming the path, never a silently short file.
#include "common/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace stateflow {
namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(TempFile, IsCreatedEmptyNamedAndRemovedWithItsOwner) {
  std::string path;
  {
    Result<TempFile> file = TempFile::Create("files-test");
    ASSERT_TRUE(file.ok()) << file.status().message();
    path = file->path();
    EXPECT_NE(path.find("stateflow-files-test-"), std::string::npos) << path;
    EXPECT_TRUE(Exists(path));
    EXPECT_EQ(Read(path), "");
    TempFile moved = std::move(file).value();  // ownership moves; nothing removed yet
    EXPECT_TRUE(Exists(path));
    EXPECT_EQ(moved.path(), path);
  }
  EXPECT_FALSE(Exists(path));
}

TEST(TempFile, NamesTheDirectoryWhenItCannotCreate) {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  setenv("TMPDIR", "/nonexistent-stateflow-dir", 1);
  Result<TempFile> file = TempFile::Create("files-test");
  if (old != nullptr) setenv("TMPDIR", saved.c_str(), 1); else unsetenv("TMPDIR");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("/nonexistent-stateflow-dir"), std::string::npos)
      << file.status().message();
}

TEST(WriteFile, WritesAndReportsEveryFailureWithThePath) {
  Result<TempFile> file = TempFile::Create("files-test");
  ASSERT_TRUE(file.ok());
  const std::string text(100000, 'x');
  ASSERT_TRUE(WriteFile(file->path(), text).ok());
  EXPECT_EQ(Read(file->path()), text);
  ASSERT_TRUE(WriteFile(file->path(), "short").ok());  // truncates
  EXPECT_EQ(Read(file->path()), "short");

  const Status missing = WriteFile("/nonexistent-stateflow-dir/out.txt", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent-stateflow-dir/out.txt"), std::string::npos);
  if (Exists("/dev/full")) {  // a full disk: the write or the flush fails
    const Status full = WriteFile("/dev/full", text);
    ASSERT_FALSE(full.ok());
    EXPECT_NE(full.message().find("/dev/full"), std::string::npos) << full.message();
  }
}

}  // namespace
}  // namespace stateflow

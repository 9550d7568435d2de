// common/files.h: a temporary file removes itself; a write that cannot be
// completed is an error naming the path, never a silently short file.
#include "common/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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

// ReadFile (issue 14): a regular file is read whole; a directory, a FIFO, an
// endless device and a file over the limit are one-line errors naming the
// path, never a hang or an unbounded allocation.
void ExpectReadError(const Result<std::string>& r, const std::string& path,
                     const std::string& part) {
  ASSERT_FALSE(r.ok()) << path;
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidInput);
  EXPECT_EQ(r.status().message().rfind(path + ": ", 0), 0u) << r.status().message();
  EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
}

TEST(WriteFileDurably, ReplacesWholeAndLeavesNoTemporaryFile) {
  Result<TempFile> file = TempFile::Create("durable-test");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(WriteFileDurably(file->path(), std::string(50000, 'y')).ok());
  EXPECT_EQ(Read(file->path()), std::string(50000, 'y'));
  ASSERT_TRUE(WriteFileDurably(file->path(), "new").ok());
  EXPECT_EQ(Read(file->path()), "new");
  EXPECT_FALSE(Exists(file->path() + ".tmp"));

  const Status missing = WriteFileDurably("/nonexistent-stateflow-dir/out.ckpt", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("/nonexistent-stateflow-dir/out.ckpt"), std::string::npos);
  // Renaming over a directory fails after the write: the old entry stays, no temporary remains.
  const std::string dir = file->path() + ".dir";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string entry = dir + "/sub";
  ASSERT_EQ(mkdir(entry.c_str(), 0700), 0);
  const Status over_dir = WriteFileDurably(entry, "x");
  EXPECT_FALSE(over_dir.ok());
  EXPECT_NE(over_dir.message().find(entry + ": rename failed"), std::string::npos)
      << over_dir.message();
  EXPECT_FALSE(Exists(entry + ".tmp"));
  rmdir(entry.c_str());
  rmdir(dir.c_str());
}

TEST(ReadFile, ReadsARegularFileWholeUpToTheLimit) {
  Result<TempFile> f = TempFile::Create("read-test");
  ASSERT_TRUE(f.ok());
  const std::string text(100, 'x');
  ASSERT_TRUE(WriteFile(f->path(), text).ok());
  Result<std::string> read = ReadFile(f->path(), 100);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, text);
  ExpectReadError(ReadFile(f->path(), 99), f->path(), "larger than the limit of 99 bytes");
  EXPECT_EQ(LimitText(kMaxTextFileBytes), "64 MiB");
}

// A text input as editors and spreadsheets write it: a UTF-8 byte-order
// mark first and CRLF line ends read as the plain text (the same lines); a
// BOM elsewhere, a lone CR and other bytes are kept; ReadFile keeps them all.
TEST(ReadTextFile, DropsALeadingBomAndWindowsLineEnds) {
  Result<TempFile> f = TempFile::Create("read-text-test");
  ASSERT_TRUE(f.ok());
  const std::string bom = "\xEF\xBB\xBF";
  for (const auto& [raw, text] : std::vector<std::pair<std::string, std::string>>{
           {bom + "a: 1\r\nb: 2\r\n", "a: 1\nb: 2\n"},
           {"a: 1\r\nb: 2", "a: 1\nb: 2"},
           {bom + "x", "x"},
           {bom, ""},
           {"a" + bom + "\rb\r\r\n", "a" + bom + "\rb\r\n"},
           {"plain\n", "plain\n"}}) {
    ASSERT_TRUE(WriteFile(f->path(), raw).ok());
    Result<std::string> read = ReadTextFile(f->path());
    ASSERT_TRUE(read.ok()) << read.status().message();
    EXPECT_EQ(*read, text);
    EXPECT_EQ(*ReadFile(f->path()), raw);
  }
  ExpectReadError(ReadTextFile(f->path(), 2), f->path(), "larger than the limit of 2 bytes");
}

TEST(ReadFile, RefusesWhatIsNotARegularFile) {
  ExpectReadError(ReadFile("/dev/zero"), "/dev/zero", "not a regular file (a character device)");
  ExpectReadError(ReadFile("/"), "/", "not a regular file (a directory)");
  ExpectReadError(ReadFile("/no/such/file"), "/no/such/file", "cannot open file");
  // A FIFO with no writer: refused at once, not waited on.
  Result<TempFile> f = TempFile::Create("fifo-test");
  ASSERT_TRUE(f.ok());
  const std::string fifo = f->path() + ".fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ExpectReadError(ReadFile(fifo), fifo, "not a regular file (a FIFO)");
  std::remove(fifo.c_str());
}

}  // namespace
}  // namespace stateflow

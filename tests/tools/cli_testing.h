// Helpers for tests that run the `stateflow` binary: run it with a time
// limit and capture stdout, stderr and the exit code; temporary files in the
// build directory; the one-line-error-and-exit-code-2 check.
//
//   CliRun run = Stateflow("sweep --json");
//   ExpectBadInput(Stateflow("capacity --devices 0"), "--devices");
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace stateflow::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string TempPath(const std::string& name) {
  return std::string(SF_BINARY_DIR) + "/test-tmp-" + name;
}

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path) << text;
  return path;
}

// Runs `stateflow <args>` with a 60 s limit; stderr goes through a file
// named by `tag`, the process id and a counter, so that tests running in
// parallel (ctest -j) never share one.
inline CliRun Stateflow(const std::string& args, const std::string& tag = "cli") {
  static int counter = 0;
  const std::string err_path = TempPath(tag + "-stderr-" + std::to_string(getpid()) + "-" +
                                        std::to_string(counter++));
  const std::string cmd = "timeout 60 " + std::string(SF_BINARY_DIR) + "/stateflow " + args +
                          " 2>" + err_path;
  CliRun run;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.err = Slurp(err_path);
  std::remove(err_path.c_str());
  return run;
}

inline int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += (c == '\n');
  return n;
}

// Exit code 2, one line on stderr containing `needle`, nothing on stdout.
inline void ExpectBadInput(const CliRun& run, const std::string& needle) {
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find(needle), std::string::npos) << "stderr: " << run.err;
  EXPECT_EQ(Lines(run.err), 1) << "stderr: " << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
}

}  // namespace stateflow::testing

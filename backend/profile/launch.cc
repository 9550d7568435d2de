#include "backend/profile/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/files.h"

extern char** environ;

namespace stateflow::backend {
namespace {

std::string ReadAll(const TempFile& file) {
  std::ifstream f(file.path());
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Waits for `pid` until `timeout_s` after `start`, then kills its group.
void WaitFor(pid_t pid, double timeout_s, std::chrono::steady_clock::time_point start,
             ChildResult* result) {
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    result->elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == pid) break;
    if (result->elapsed_s > timeout_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      result->timed_out = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) result->exit_code = WEXITSTATUS(status);
}

}  // namespace

Result<ChildResult> RunChild(const std::vector<std::string>& argv, double timeout_s) {
  if (argv.empty()) return Status::Internal("RunChild: no program");
  SF_ASSIGN_OR_RETURN(TempFile out, TempFile::Create("child-out"));
  SF_ASSIGN_OR_RETURN(TempFile err, TempFile::Create("child-err"));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.path().c_str(), O_WRONLY | O_TRUNC, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err.path().c_str(), O_WRONLY | O_TRUNC, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The parent ignores SIGPIPE (tools/main.cc); the child starts with the default.
  sigset_t default_signals;
  sigemptyset(&default_signals);
  sigaddset(&default_signals, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, cargv[0], &actions, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return Status::Resource("cannot start " + argv[0] + " (error " + std::to_string(rc) + ")");
  }
  ChildResult result;
  WaitFor(pid, timeout_s, start, &result);
  result.out = ReadAll(out);
  result.err = ReadAll(err);
  return result;
}

std::string SelfExecutable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string();
}

std::vector<std::string> MpirunArgv(const std::string& mpirun, int ranks,
                                    const std::vector<std::string>& program) {
  const unsigned threads = std::thread::hardware_concurrency();
  const bool bind = threads > 0 && static_cast<unsigned>(ranks) <= threads;
  std::vector<std::string> argv = {mpirun, "--oversubscribe", "--bind-to",
                                   bind ? "hwthread" : "none"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-n", std::to_string(ranks)});
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::string LastLine(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

}  // namespace stateflow::backend

#include "backend/profile/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/files.h"
#include "common/process.h"

extern char** environ;

namespace stateflow::backend {
namespace {

volatile std::sig_atomic_t g_interrupt = 0;

extern "C" void RecordInterrupt(int signal) {
  if (g_interrupt == 0) g_interrupt = signal;
}

Status Interrupted(const std::string& what) {
  return Status::Resource("interrupted by " + InterruptName(g_interrupt) + what);
}

std::string ReadAll(const TempFile& file) {
  std::ifstream f(file.path());
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The processes whose parent is `parent` (mpirun's ranks, which Open MPI
// puts in process groups of their own).
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    std::getline(in, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// Whether any of `pids` still runs (a zombie, waiting for its reaper, does not).
bool AnyAlive(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    std::ifstream in("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const std::size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z') {
      return true;
    }
  }
  return false;
}

// Forwards the interrupt to `pid`'s group, waits up to the grace period,
// then kills whatever is left of the group; then waits (a second, then
// SIGKILL) for the child's own children, which may outlive it briefly.
void StopOnInterrupt(pid_t pid) {
  const std::vector<pid_t> ranks = ChildrenOf(pid);
  // SIGINT and SIGTERM are passed on as they came; a hangup or SIGQUIT
  // becomes SIGTERM, the stop mpirun forwards to its ranks (SIGQUIT would
  // have them dump core).
  kill(-pid, g_interrupt == SIGINT ? SIGINT : SIGTERM);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [](std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
  };
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (elapsed(start) > kInterruptGrace_s) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid, SIGKILL);
  const auto after = std::chrono::steady_clock::now();
  while (AnyAlive(ranks) && elapsed(after) < 5) {
    if (elapsed(after) > 1) {
      for (pid_t r : ranks) kill(r, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Waits for `pid` until `timeout_s` after `start`, then kills its group.
// False if interrupted (the child is stopped then).
bool WaitFor(pid_t pid, double timeout_s, std::chrono::steady_clock::time_point start,
             ChildResult* result) {
  int status = 0;
  for (;;) {
    if (g_interrupt != 0) {
      StopOnInterrupt(pid);
      return false;
    }
    const pid_t done = waitpid(pid, &status, WNOHANG);
    result->elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == pid) break;
    if (result->elapsed_s > timeout_s) {
      result->stopped = ProcessIsStopped(pid);  // a stopped child is not a slow one
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      result->timed_out = true;
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) result->exit_code = WEXITSTATUS(status);
  return true;
}

}  // namespace

Result<ChildResult> RunChild(const std::vector<std::string>& argv, double timeout_s) {
  if (argv.empty()) return Status::Internal("RunChild: no program");
  if (g_interrupt != 0) return Interrupted(" before starting " + argv[0]);
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
  if (!WaitFor(pid, timeout_s, start, &result)) {
    return Interrupted(": stopped its child " + argv[0] + " (and its process group)");
  }
  result.out = ReadAll(out);
  result.err = ReadAll(err);
  return result;
}

void InstallInterruptForwarding() {
  struct sigaction action {};
  action.sa_handler = RecordInterrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(signal, &action, nullptr);
}

int PendingInterrupt() { return g_interrupt; }

std::string InterruptName(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "signal " + std::to_string(signal);
  }
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
  std::vector<std::string> argv = {mpirun, "--quiet", "--oversubscribe", "--bind-to",
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

// Starting programs from tests with a time limit: mpirun jobs of the backend
// and the `stateflow` binary. Every run is bounded twice: `timeout -k 5` around
// the command and a deadline here (after which the process group is killed),
// so a hung job fails its test instead of hanging CI.
//
// Not a general process library: POSIX only, output to files.
//
//   Process p = Process::Start({"mpirun", "-n", "2", "./worker"}, "/tmp/out");
//   Finished f = p.Wait(/*deadline_s=*/60);   // f.exit_code, f.elapsed_s, f.out, f.err
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace stateflow::backend::testing {

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Finished {
  int exit_code = -1;     // -1 if killed by a signal or the deadline
  bool timed_out = false;
  double elapsed_s = 0;
  std::string out, err;
};

class Process {
 public:
  // Starts `argv` (argv[0] looked up in PATH) under `timeout -k 5 <limit_s>`
  // in its own process group, stdout and stderr to <prefix>.out / .err.
  static Process Start(std::vector<std::string> argv, const std::string& prefix,
                       int limit_s = 120) {
    std::vector<std::string> full = {"timeout", "-k", "5", std::to_string(limit_s)};
    full.insert(full.end(), argv.begin(), argv.end());
    Process p;
    p.out_path_ = prefix + ".out";
    p.err_path_ = prefix + ".err";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, p.out_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, p.err_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> cargv;
    for (std::string& a : full) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    p.start_ = std::chrono::steady_clock::now();
    if (posix_spawnp(&p.pid_, cargv[0], &actions, &attr, cargv.data(), environ) != 0) {
      p.pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    return p;
  }

  // Waits until the process ends or `deadline_s` after its start (then kills
  // its process group).
  Finished Wait(double deadline_s) {
    Finished f;
    int status = 0;
    while (pid_ > 0) {
      const pid_t done = waitpid(pid_, &status, WNOHANG);
      f.elapsed_s = Elapsed();
      if (done == pid_) break;
      if (f.elapsed_s > deadline_s) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        f.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid_ > 0 && !f.timed_out && WIFEXITED(status)) f.exit_code = WEXITSTATUS(status);
    pid_ = -1;
    f.out = Slurp(out_path_);
    f.err = Slurp(err_path_);
    return f;
  }

  pid_t pid() const { return pid_; }

  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  std::chrono::steady_clock::time_point start_;
};

// `mpirun --oversubscribe --allow-run-as-root -n <ranks> <program> <args>`.
inline std::vector<std::string> Mpirun(int ranks, std::vector<std::string> program) {
  std::vector<std::string> argv = {MPIEXEC_EXECUTABLE, "--oversubscribe", "--allow-run-as-root",
                                   "-n", std::to_string(ranks)};
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

// Starts and waits; `deadline_s` also sets the timeout around the command.
inline Finished RunFor(std::vector<std::string> argv, const std::string& prefix,
                       int deadline_s = 90) {
  return Process::Start(std::move(argv), prefix, deadline_s).Wait(deadline_s + 10);
}

}  // namespace stateflow::backend::testing

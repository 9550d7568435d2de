// Facts about other processes, from /proc (Linux).
//
//   if (ProcessIsStopped(launcher)) ...   // SIGSTOP, Ctrl-Z, a debugger
#pragma once

#include <sys/types.h>

#include <fstream>
#include <string>

namespace stateflow {

// Whether process `pid` is stopped: state T (SIGSTOP, SIGTSTP), or t when
// traced, in /proc/<pid>/stat. False when it does not exist or /proc cannot
// be read.
inline bool ProcessIsStopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  // The state follows the command name, which is in parentheses and may
  // itself hold spaces and parentheses: look after the last ')'.
  const std::size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'T' || line[close + 2] == 't');
}

}  // namespace stateflow

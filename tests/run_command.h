// Runs a shell command from a test and returns its standard output, for tests
// that drive the real `latte` binary or a node reference script.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace latte::testing_process {

// stdout of `/bin/sh -c cmd`; *exit_code is its exit status, or -1 if it did not exit.
inline std::string RunCommand(const std::string& cmd, int* exit_code) {
  std::string out;
  *exit_code = -1;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace latte::testing_process

// A progress bar on stderr for the commands that wait on a server (bench serve, eval):
// redrawn in place on a terminal; on anything else (a log file, a test's pipe) one line
// per tenth of the work, so a log stays short.
#pragma once

#include <cstdint>
#include <string>

namespace latte::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string title);
  // `failed` of `done` went wrong (shown when non-zero).
  void Update(int64_t done, int64_t failed, int64_t total);

 private:
  std::string title_;
  bool tty_;
};

}  // namespace latte::cli

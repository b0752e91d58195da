#include "cli/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace latte::cli {

ProgressBar::ProgressBar(std::string title) : title_(std::move(title)), tty_(::isatty(2) == 1) {}

void ProgressBar::Update(int64_t done, int64_t failed, int64_t total) {
  if (total <= 0) return;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld", title_.c_str(), std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(), static_cast<long long>(done),
                 static_cast<long long>(total));
    if (failed > 0) std::fprintf(stderr, " (%lld failed)", static_cast<long long>(failed));
    if (done == total) std::fprintf(stderr, "\n");
  } else if (done * 10 / total != (done - 1) * 10 / total || done == total) {
    std::fprintf(stderr, "%s: %lld/%lld done, %lld failed\n", title_.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), static_cast<long long>(failed));
  }
  std::fflush(stderr);
}

}  // namespace latte::cli

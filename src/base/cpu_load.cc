#include "base/cpu_load.h"

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

namespace latte {

std::optional<CpuTimes> ParseProcStatCpu(std::string_view text) {
  if (!text.starts_with("cpu ")) return std::nullopt;
  text.remove_prefix(4);
  uint64_t f[8] = {};  // user nice system idle iowait irq softirq steal
  int n = 0;
  while (n < 8) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    if (text.empty() || text.front() < '0' || text.front() > '9') break;
    uint64_t v = 0;
    while (!text.empty() && text.front() >= '0' && text.front() <= '9') {
      v = v * 10 + static_cast<uint64_t>(text.front() - '0');
      text.remove_prefix(1);
    }
    f[n++] = v;
  }
  if (n < 4) return std::nullopt;
  CpuTimes t;
  t.busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
  t.total = t.busy + f[3] + f[4];
  return t;
}

std::optional<CpuTimes> ReadCpuTimes() {
  const int fd = ::open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];  // the first line is well under this
  const ssize_t got = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (got <= 0) return std::nullopt;
  std::string_view text(buf, static_cast<size_t>(got));
  const size_t eol = text.find('\n');
  if (eol == std::string_view::npos) return std::nullopt;
  return ParseProcStatCpu(text.substr(0, eol));
}

double BusyCpus(const CpuTimes& before, const CpuTimes& after, int cpus) {
  if (after.total <= before.total || after.busy < before.busy) return 0.0;
  return static_cast<double>(after.busy - before.busy) / static_cast<double>(after.total - before.total) * cpus;
}

std::optional<double> OtherBusyCpus(int window_ms) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const std::optional<CpuTimes> before = ReadCpuTimes();
  if (!before || cpus < 1) return std::nullopt;
  timespec wait{window_ms / 1000, static_cast<long>(window_ms % 1000) * 1000000};
  while (::nanosleep(&wait, &wait) != 0 && errno == EINTR) {  // a signal: sleep the rest
  }
  const std::optional<CpuTimes> after = ReadCpuTimes();
  if (!after) return std::nullopt;
  return BusyCpus(*before, *after, static_cast<int>(cpus));
}

}  // namespace latte

// How busy the machine's CPUs are, from /proc/stat: what latte's start-up reads to choose
// how its OpenMP threads wait (src/cli/main.cc). Plain C calls only, no allocation: it
// runs from the executable's .preinit_array, before any library initializer.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace latte {

// Jiffies of /proc/stat's first line ("cpu  user nice system idle iowait irq softirq
// steal ..."), all CPUs together: busy = user + nice + system + irq + softirq + steal,
// total = busy + idle + iowait (guest time is inside user already).
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};

// The first line of /proc/stat's text; nullopt when it is not a "cpu " line of at least
// the four first fields.
std::optional<CpuTimes> ParseProcStatCpu(std::string_view text);

// /proc/stat read now; nullopt when it cannot be read or parsed.
std::optional<CpuTimes> ReadCpuTimes();

// CPUs' worth of busy time between two readings on a machine of `cpus` CPUs (0 when no
// time passed): 1.0 is one CPU kept busy throughout.
double BusyCpus(const CpuTimes& before, const CpuTimes& after, int cpus);

// Busy CPUs over a window of `window_ms` milliseconds while this thread sleeps (so the
// time is other processes'); nullopt when /proc/stat cannot be read.
std::optional<double> OtherBusyCpus(int window_ms);

}  // namespace latte

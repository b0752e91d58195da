#include "dist/link_model.h"

#include <cmath>

namespace latte {

std::span<const LinkModel> LinkPresets() {
  static const LinkModel presets[] = {
      {"shm", "shared memory (one host)", 1e-6, 20e9},
      {"25gbe", "25 Gb Ethernet (TCP)", 20e-6, 3.125e9},
      {"100gbe", "100 Gb Ethernet (TCP)", 10e-6, 12.5e9},
      {"ib200", "InfiniBand 200 Gb/s", 2e-6, 25e9},
  };
  return presets;
}

double CollectiveSeconds(const LinkModel& link, int64_t calls, int64_t bytes_sent, int ranks) {
  if (ranks <= 1 || calls == 0) return 0;
  const double rounds = std::ceil(std::log2(static_cast<double>(ranks)));
  return static_cast<double>(calls) * rounds * link.latency_s + static_cast<double>(bytes_sent) / link.bytes_per_s;
}

}  // namespace latte

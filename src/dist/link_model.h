// How long collectives take on a link, for projections (`latte calc`, docs/scaleout.md):
// each call costs ceil(log2 ranks) latencies (the rounds of a recursive-doubling or
// tree algorithm) plus the bytes this rank sends at the link's rate. A model, not a
// measurement: the figures are the study's (../shared/docs/scaleout.md §3).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace latte {

struct LinkModel {
  std::string_view name;      // "shm", "25gbe", "100gbe", "ib200"
  std::string_view describe;  // "shared memory (one host)", ...
  double latency_s = 0;       // one round
  double bytes_per_s = 0;     // one rank's send rate
};

// Shared memory on one host, 25 and 100 Gb Ethernet (TCP), 200 Gb/s InfiniBand.
std::span<const LinkModel> LinkPresets();

double CollectiveSeconds(const LinkModel& link, int64_t calls, int64_t bytes_sent, int ranks);

}  // namespace latte

// A small probe of the machine's memory read bandwidth, so every speed figure can
// be printed beside the bandwidth measured in the same run (on shared hosts it
// moves from minute to minute).
#pragma once

#include <cstddef>

namespace latte {

// Reads a `bytes` buffer `repeats` times with every OpenMP thread and returns the
// best GB/s (1e9 bytes/s). The buffer is allocated and touched once beforehand.
double MeasureReadBandwidthGBps(size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace latte

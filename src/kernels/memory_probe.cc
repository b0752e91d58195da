#include "kernels/memory_probe.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "base/aligned_buffer.h"

namespace latte {

double MeasureReadBandwidthGBps(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float);
  AlignedBuffer buffer(n * sizeof(float));  // zero-filled: every page touched
  const float* data = buffer.as<float>();
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel for simd reduction(+ : total) schedule(static)
    for (size_t i = 0; i < n; ++i) total += data[i];
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds / 1e9);
  }
  return best;
}

}  // namespace latte

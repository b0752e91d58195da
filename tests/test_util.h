// Small helpers the kernel tests share.
#pragma once

#include <omp.h>

#include <random>
#include <vector>

#include "base/cpu_features.h"

namespace latte::testing_util {

// n values uniform in [lo, hi).
inline std::vector<float> RandomVector(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Forces the portable kernels (or not) for a scope, then restores the detected CPU features.
class ScopedPortableKernels {
 public:
  explicit ScopedPortableKernels(bool portable) { SetPortableKernelsForTesting(portable); }
  ~ScopedPortableKernels() { SetPortableKernelsForTesting(false); }
  ScopedPortableKernels(const ScopedPortableKernels&) = delete;
  ScopedPortableKernels& operator=(const ScopedPortableKernels&) = delete;
};

// Sets the OpenMP thread count for a scope, then restores it.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_;
};

}  // namespace latte::testing_util

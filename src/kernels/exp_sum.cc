#include "kernels/exp_sum.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/cpu_features.h"

namespace latte {

float MaxValue(const float* x, int64_t n) {
  if (GetCpuFeatures().avx512f) return exp_internal::MaxValueAvx512(x, n);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return x[i];
    m = std::max(m, x[i]);
  }
  return m;
}

double ExpShiftedSum(const float* x, int64_t n, float shift, float* out) {
  if (GetCpuFeatures().avx512f) return exp_internal::ExpShiftedSumAvx512(x, n, shift, out);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - shift);
    if (out != nullptr) out[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace latte

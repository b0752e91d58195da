#include "kernels/silu_mul.h"

#include <cmath>

#include "base/check.h"
#include "base/cpu_features.h"
#include "base/parallel.h"

namespace latte {

void SiluMul(const float* gate, const float* up, int64_t count, float* out) {
  LATTE_CHECK(count >= 0, "SiluMul: count ", count);
  if (count == 0) return;
  LATTE_CHECK(gate != nullptr && up != nullptr && out != nullptr, "SiluMul: null gate, up or out");
  if (GetCpuFeatures().avx512f) {
    silu_internal::SiluMulAvx512(gate, up, count, out);
    return;
  }
  if (GetCpuFeatures().avx2) {
    silu_internal::SiluMulAvx2(gate, up, count, out);
    return;
  }
#pragma omp parallel for schedule(static) if (WorthParallel(count))
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace latte

#include "kernels/silu_mul.h"

#include <cmath>

namespace latte {

void SiluMul(const float* gate, const float* up, int64_t count, float* out) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace latte

#include "kernels/rmsnorm.h"

#include <cmath>

namespace latte {

void RmsNorm(const float* x, int64_t ldx, const float* weight, int64_t rows, int64_t dim,
             float eps, float* y, int64_t ldy) {
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    double sum_sq = 0;
    for (int64_t i = 0; i < dim; ++i) sum_sq += double(xr[i]) * xr[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv_rms * weight[i];
  }
}

}  // namespace latte

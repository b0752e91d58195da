#include "kernels/rmsnorm.h"

#include <cmath>

#include "base/check.h"

namespace latte {

void RmsNorm(const float* x, int64_t ldx, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
             int64_t ldy) {
  LATTE_CHECK(rows >= 0 && dim >= 1 && ldx >= dim && ldy >= dim, "RmsNorm: [", rows, ", ", dim, "] with row strides ",
              ldx, " (x), ", ldy, " (y)");
  LATTE_CHECK(eps >= 0, "RmsNorm: eps ", eps);
  if (rows == 0) return;
  LATTE_CHECK(x != nullptr && weight != nullptr && y != nullptr, "RmsNorm: null x, weight or y");
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

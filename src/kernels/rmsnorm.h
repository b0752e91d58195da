// RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ weight, row by row.
#pragma once

#include <cstdint>

namespace latte {

// x: [rows, dim] with row stride ldx; y: [rows, dim] with row stride ldy (may alias x).
void RmsNorm(const float* x, int64_t ldx, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
             int64_t ldy);

inline void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) {
  RmsNorm(x, dim, weight, rows, dim, eps, y, dim);
}

}  // namespace latte

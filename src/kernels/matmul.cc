#include "kernels/matmul.h"

#include <vector>

namespace latte {

WeightView WeightView::RowBlock(int64_t first, int64_t count) const {
  WeightView v = *this;
  v.rows = count;
  v.data = static_cast<const uint8_t*>(data) + static_cast<size_t>(first * ld) * DTypeSize(dtype);
  return v;
}

namespace {
inline float WeightAt(const WeightView& w, int64_t r, int64_t c) {
  const size_t i = static_cast<size_t>(r * w.ld + c);
  return w.dtype == DType::kBF16 ? Bf16ToF32(static_cast<const bf16*>(w.data)[i])
                                 : static_cast<const float*>(w.data)[i];
}
}  // namespace

void MatmulReference(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
                     int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) acc += double(x[i * ldx + k]) * WeightAt(w, n, k);
      y[i * ldy + n] = static_cast<float>(acc);
    }
  }
}

void Matmul(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y, int64_t ldy) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < w.rows; ++n) {
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) acc += x[i * ldx + k] * WeightAt(w, n, k);
      y[i * ldy + n] = acc;
    }
  }
}

void MatmulBatched(const float* x, int64_t x_stride, int64_t m, const WeightView* w,
                   int64_t batch, float* y, int64_t y_stride) {
  for (int64_t b = 0; b < batch; ++b) {
    Matmul(x + b * x_stride, m, w[b].cols, w[b], y + b * y_stride, w[b].rows);
  }
}

}  // namespace latte

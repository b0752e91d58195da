#include "kernels/fp8_quantize.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/parallel.h"

namespace latte {
namespace {

// Row r of src as f32: out [cols].
void WidenRow(const Fp8QuantizeParams& p, int64_t r, float* out) {
  const size_t first = static_cast<size_t>(r * p.cols);
  switch (p.src_dtype) {
    case DType::kF32: std::memcpy(out, static_cast<const float*>(p.src) + first, p.cols * sizeof(float)); return;
    case DType::kBF16: {
      const bf16* row = static_cast<const bf16*>(p.src) + first;
      for (int64_t c = 0; c < p.cols; ++c) out[c] = Bf16ToF32(row[c]);
      return;
    }
    case DType::kF16: {
      const uint16_t* row = static_cast<const uint16_t*>(p.src) + first;
      for (int64_t c = 0; c < p.cols; ++c) out[c] = F16ToF32(row[c]);
      return;
    }
    default: break;  // fp8 and the block formats: refused by QuantizeToFp8
  }
}

}  // namespace

void Fp8BlockRowScales(const float* values, int64_t rows, int64_t cols, int64_t ld, int64_t block_cols,
                       float* scale_inv) {
  for (int64_t c0 = 0, b = 0; c0 < cols; c0 += block_cols, ++b) {
    const int64_t c1 = std::min(cols, c0 + block_cols);
    float amax = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = values + r * ld;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
    }
    scale_inv[b] = amax > 0 ? amax / kFp8E4M3Max : 1.0f;
  }
}

void QuantizeFp8BlockRow(const float* values, int64_t rows, int64_t cols, int64_t ld, int64_t block_cols,
                         const float* scale_inv, uint8_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = values + r * ld;
    uint8_t* q = out + r * cols;
    for (int64_t c0 = 0, b = 0; c0 < cols; c0 += block_cols, ++b) {
      const int64_t c1 = std::min(cols, c0 + block_cols);
      const float scale = scale_inv[b];
      // Divided, not multiplied by a reciprocal: w / scale_inv rounded once, as
      // DeepSeek's weight quantization (and train/export.py) computes it.
      for (int64_t c = c0; c < c1; ++c) q[c] = F32ToFp8E4M3(row[c] / scale);
    }
  }
}

void QuantizeToFp8(const Fp8QuantizeParams& p) {
  LATTE_CHECK(p.src_dtype == DType::kF32 || p.src_dtype == DType::kBF16 || p.src_dtype == DType::kF16,
              "QuantizeToFp8: source dtype ", DTypeName(p.src_dtype));
  LATTE_CHECK(p.rows >= 0 && p.cols >= 0 && p.block_rows > 0 && p.block_cols > 0, "QuantizeToFp8: shape [", p.rows,
              ", ", p.cols, "] in blocks of ", p.block_rows, "x", p.block_cols);
  if (p.rows == 0 || p.cols == 0) return;
  LATTE_CHECK(p.src != nullptr && p.out != nullptr && p.scale_inv != nullptr, "QuantizeToFp8: null pointer");
  const int64_t block_row_count = (p.rows + p.block_rows - 1) / p.block_rows;
  const int64_t col_blocks = (p.cols + p.block_cols - 1) / p.block_cols;
#pragma omp parallel if (WorthParallel(p.rows * p.cols) && !omp_in_parallel())
  {
    std::vector<float> values;  // values: [block_rows, cols], one block row widened to f32
#pragma omp for schedule(dynamic)
    for (int64_t br = 0; br < block_row_count; ++br) {
      const int64_t r0 = br * p.block_rows;
      const int64_t rows = std::min(p.block_rows, p.rows - r0);
      values.resize(static_cast<size_t>(rows * p.cols));
      for (int64_t r = 0; r < rows; ++r) WidenRow(p, r0 + r, values.data() + r * p.cols);
      float* scales = p.scale_inv + br * col_blocks;
      Fp8BlockRowScales(values.data(), rows, p.cols, p.cols, p.block_cols, scales);
      QuantizeFp8BlockRow(values.data(), rows, p.cols, p.cols, p.block_cols, scales, p.out + r0 * p.cols);
    }
  }
}

}  // namespace latte

// fp8 e4m3 weights with block scales (WeightView::dtype kF8E4M3), the parts that
// need no AVX-512: the portable GEMV, the dequantization to bf16 (its dispatch and
// portable loop), and the large-m path that runs oneDNN's bf16 GEMM on bounded
// chunks of dequantized rows. The AVX-512 GEMV and dequantization are in
// gemv_fp8_avx512.cc.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/cpu_features.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/bf16_round.h"
#include "kernels/matmul_internal.h"

namespace latte {
namespace matmul_internal {
namespace {

// Output rows per parallel work item of the portable GEMV.
constexpr int64_t kPortableRowBlock = 16;
// Independent partial sums per dot product, so GCC vectorises the loop (SSE2)
// without -ffast-math.
constexpr int kLanes = 8;

// Row r of w as f32 (e4m3 value × its block's scale, one rounding): out [w.cols].
void DequantizeRowF32(const WeightView& w, int64_t r, float* out) {
  const uint8_t* wr = static_cast<const uint8_t*>(w.data) + r * w.ld;
  const float* scales = w.ScaleRow(r);
  for (int64_t c0 = 0; c0 < w.cols; c0 += w.block_cols) {
    const int64_t c1 = std::min(w.cols, c0 + w.block_cols);
    const float s = scales[c0 / w.block_cols];
    for (int64_t c = c0; c < c1; ++c) out[c] = Fp8E4M3ToF32(wr[c]) * s;
  }
}

float Dot(const float* x, const float* w, int64_t k) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j] * w[i + j];
  }
  for (; i < k; ++i) acc[0] += x[i] * w[i];
  float s = 0;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// Each weight row is dequantized once into an L1-resident f32 row, then dotted
// with every row of x.
void PortableRows(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1, float* y,
                  int64_t ldy, std::vector<float>& row) {
  if (row.size() < static_cast<size_t>(w.cols)) row.resize(static_cast<size_t>(w.cols));
  for (int64_t n = n0; n < n1; ++n) {
    DequantizeRowF32(w, n, row.data());
    for (int64_t i = 0; i < m; ++i) y[i * ldy + n] = Dot(x + i * ldx, row.data(), w.cols);
  }
}

}  // namespace

void MatmulFp8Portable(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  const int64_t blocks = (w.rows + kPortableRowBlock - 1) / kPortableRowBlock;
  const bool parallel = threaded && blocks > 1 && WorthParallel(p.m * w.rows * w.cols);
#pragma omp parallel if (parallel)
  {
    // [w.cols] per thread, grown once: a decode step allocates nothing.
    thread_local std::vector<float> row;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      PortableRows(p.x, p.m, p.ldx, w, b * kPortableRowBlock, std::min(w.rows, (b + 1) * kPortableRowBlock), p.y, p.ldy,
                   row);
    }
  }
}

void DequantizeFp8ToBf16Portable(const WeightView& w, int64_t first, int64_t count, bf16* out) {
  const int64_t k = w.cols;
#pragma omp parallel if (WorthParallel(count * k) && !omp_in_parallel())
  {
    thread_local std::vector<float> row;  // [k], grown once per thread
    if (row.size() < static_cast<size_t>(k)) row.resize(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      DequantizeRowF32(w, first + i, row.data());
      for (int64_t c = 0; c < k; ++c) out[i * k + c] = F32ToBf16(row[c]);
    }
  }
}

bool MatmulFp8OneDnn(const MatmulProblem& p) {
  return MatmulConvertedBf16(
      p, [&](int64_t first, int64_t count, bf16* out) { DequantizeFp8ToBf16(p.w, first, count, out); });
}

bool MatmulFp8SgemmAvx2(const MatmulProblem& p) {
  return MatmulConvertedF32(
      p.x, p.ldx, p, [&](int64_t first, int64_t count, float* out) { DequantizeFp8ToF32Avx2(p.w, first, count, out); });
}

}  // namespace matmul_internal

void DequantizeFp8ToBf16(const WeightView& w, int64_t first, int64_t count, bf16* out) {
  LATTE_CHECK(w.dtype == DType::kF8E4M3, "DequantizeFp8ToBf16: dtype ", DTypeName(w.dtype));
  LATTE_CHECK(first >= 0 && count >= 0 && first + count <= w.rows, "DequantizeFp8ToBf16: rows [", first, ", ",
              first + count, ") of ", w.rows);
  LATTE_CHECK(w.ld >= w.cols && w.block_rows > 0 && w.block_cols > 0 && w.scale_row0 >= 0 &&
                  w.scale_ld >= (w.cols + w.block_cols - 1) / w.block_cols,
              "DequantizeFp8ToBf16: bad view geometry");
  if (count == 0 || w.cols == 0) return;
  LATTE_CHECK(w.data != nullptr && w.scale != nullptr && out != nullptr,
              "DequantizeFp8ToBf16: null data, scales or out");
  const CpuFeatures& cpu = GetCpuFeatures();
  if (cpu.avx512f) {
    matmul_internal::DequantizeFp8ToBf16Avx512(w, first, count, out, cpu.avx512_bf16);
  } else if (cpu.avx2 && cpu.fma) {
    matmul_internal::DequantizeFp8ToBf16Avx2(w, first, count, out);
  } else {
    matmul_internal::DequantizeFp8ToBf16Portable(w, first, count, out);
  }
}

}  // namespace latte

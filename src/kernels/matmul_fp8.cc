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

// Per-thread bf16 scratch, grown once and reused (never shrinks).
bf16* Scratch(AlignedBuffer& buffer, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(bf16);
  return GrowAligned<bf16>(buffer, bytes);
}

// Rows of w dequantized per oneDNN call: 8 MiB of bf16, so matrices up to
// 2048 x 2048 (or 1408 x 2900) are one chunk and one GEMM (splitting 1408 x 2048
// ones in two cost ~25% more GEMM time in a 64-token V2-Lite-shaped prefill),
// while a 129280 x 7168 matrix goes 576 rows at a time (8 MiB of scratch per
// thread instead of 1.85 GB). With m = 512 a chunk is still ~4 GFLOP of GEMM
// against ~4M values converted.
constexpr int64_t kFp8GemmChunkBytes = int64_t{8} << 20;

int64_t ChunkRows(const WeightView& w) {
  int64_t rows = kFp8GemmChunkBytes / (std::max<int64_t>(w.cols, 1) * int64_t{sizeof(bf16)});
  rows = std::max<int64_t>(16, rows / 16 * 16);  // whole 16-row GEMM tiles
  return std::min(rows, w.rows);
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
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return true;
  const int64_t k = w.cols;
  thread_local AlignedBuffer x_scratch, w_scratch;
  bf16* xb = Scratch(x_scratch, p.m * k);  // [m, k]: x rounded to bf16 once for every chunk
  RoundToBf16(p.x, p.m, p.ldx, k, xb);
  const int64_t chunk = ChunkRows(w);
  bf16* wb = Scratch(w_scratch, chunk * k);  // [chunk, k]
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t n = std::min(chunk, w.rows - r0);
    DequantizeFp8ToBf16(w, r0, n, wb);
    const WeightView block{DType::kBF16, n, k, k, wb};
    if (!MatmulOneDnnBf16X({xb, p.m, k, block, p.y + r0, p.ldy})) return false;
  }
  return true;
}

bool MatmulFp8SgemmAvx2(const MatmulProblem& p) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return true;
  const int64_t k = w.cols;
  thread_local AlignedBuffer w_scratch;
  // Rows per chunk: the same 8 MiB as the bf16 chunks, of f32.
  const int64_t chunk = std::max<int64_t>(1, ChunkRows(w) / 2);
  float* wf = GrowAligned<float>(w_scratch, static_cast<size_t>(chunk * k) * sizeof(float));  // [chunk, k]
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t n = std::min(chunk, w.rows - r0);
    DequantizeFp8ToF32Avx2(w, r0, n, wf);
    if (!MatmulOneDnn({p.x, p.m, p.ldx, WeightView{DType::kF32, n, k, k, wf}, p.y + r0, p.ldy})) return false;
  }
  return true;
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

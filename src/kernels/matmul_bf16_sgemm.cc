// Large-m product with a bf16 weight on CPUs without AVX-512 (matmul_internal.h,
// MatmulBf16Sgemm): oneDNN 2.6 has only a slow reference bf16 matmul there, but a
// fast sgemm, so x is rounded to bf16 (as on every bf16 path) and widened back to f32
// once, and a bounded chunk of weight rows at a time is widened to f32 (exact: a bf16
// is the top half of an f32) into per-thread scratch for the sgemm. The products are
// then exactly those of the bf16 GEMV (bf16 x bf16 is exact in f32); only the order
// of the f32 sums differs.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "base/aligned_buffer.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/bf16_round.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// Rows of f32 per sgemm call: as the fp8 and block-format paths size their chunks
// (matmul_fp8.cc, matmul_block.cc), 8 MiB of converted values in whole 16-row tiles.
constexpr int64_t kChunkBytes = int64_t{8} << 20;

int64_t ChunkRows(const WeightView& w) {
  int64_t rows = kChunkBytes / (std::max<int64_t>(w.cols, 1) * int64_t{sizeof(float)});
  rows = std::max<int64_t>(16, rows / 16 * 16);
  return std::min(rows, w.rows);
}

float* Scratch(AlignedBuffer& buffer, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  return GrowAligned<float>(buffer, bytes);
}

// out[i * cols + c] = in[i * ld + c] as f32, for i < rows. Plain shifts: GCC vectorises
// the loop at the x86-64 baseline, and it is bound by memory anyway.
void Widen(const bf16* in, int64_t rows, int64_t ld, int64_t cols, float* out) {
#pragma omp parallel for schedule(static) if (WorthParallel(rows * cols) && !omp_in_parallel())
  for (int64_t i = 0; i < rows; ++i) {
    const bf16* src = in + i * ld;
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + i * cols);
    for (int64_t c = 0; c < cols; ++c) dst[c] = uint32_t{src[c]} << 16;
  }
}

}  // namespace

bool MatmulBf16Sgemm(const MatmulProblem& p) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return true;
  const int64_t k = w.cols;
  thread_local AlignedBuffer xb_scratch, x_scratch, w_scratch;
  // x: [m, k] rounded to bf16, then widened back to f32.
  bf16* xb = reinterpret_cast<bf16*>(Scratch(xb_scratch, (p.m * k + 1) / 2));
  RoundToBf16(p.x, p.m, p.ldx, k, xb);
  float* xf = Scratch(x_scratch, p.m * k);
  Widen(xb, p.m, k, k, xf);
  const int64_t chunk = ChunkRows(w);
  float* wf = Scratch(w_scratch, chunk * k);  // [chunk, k]
  const bf16* wb = static_cast<const bf16*>(w.data);
  for (int64_t r0 = 0; r0 < w.rows; r0 += chunk) {
    const int64_t n = std::min(chunk, w.rows - r0);
    Widen(wb + r0 * w.ld, n, w.ld, k, wf);
    if (!MatmulOneDnn({xf, p.m, k, WeightView{DType::kF32, n, k, k, wf}, p.y + r0, p.ldy})) return false;
  }
  return true;
}

}  // namespace latte::matmul_internal

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
  thread_local AlignedBuffer xb_scratch, x_scratch;
  // x: [m, k] rounded to bf16, then widened back to f32.
  bf16* xb = reinterpret_cast<bf16*>(Scratch(xb_scratch, (p.m * k + 1) / 2));
  RoundToBf16(p.x, p.m, p.ldx, k, xb);
  float* xf = Scratch(x_scratch, p.m * k);
  Widen(xb, p.m, k, k, xf);
  const bf16* wb = static_cast<const bf16*>(w.data);
  return MatmulConvertedF32(
      xf, k, p, [&](int64_t first, int64_t count, float* out) { Widen(wb + first * w.ld, count, w.ld, k, out); });
}

}  // namespace latte::matmul_internal

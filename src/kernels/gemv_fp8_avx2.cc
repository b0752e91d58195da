// AVX2 GEMV for fp8 e4m3 weights with block scales on CPUs without AVX-512: the f32
// path of gemv_fp8_avx512.cc (GemvFp8Avx512F32) with 8-float registers. An e4m3 byte,
// sign-extended to 32 bits, shifted left by 20 and masked, is the f32 bit pattern of
// its value × 2^-120, subnormals included (Fp8E4M3x8AsF32Bits): 3 instructions per 8
// weights, plus an FMA per x row. x stays f32, scaled by 2^64 (exact) once per call.
//
// Each tile accumulates x·w over one block_cols-wide column block in f32, then adds
// that partial sum × (the block's scale × 2^56) to the total when the block ends, so
// the scale costs one FMA per row and block. Tiles keep 2·M·R accumulators (block
// partial + total) of M x rows by R weight rows within the 16 ymm registers; output
// rows go in groups of kRows, split into contiguous per-thread ranges, with a software
// prefetch two groups ahead.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (see CMakeLists.txt); reached only
// through matmul.cc's dispatch after GetCpuFeatures().avx2 and .fma.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/avx2_inl.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

constexpr int kRows = 4;
constexpr int kMaxM = 3;
// 8 e4m3 bytes -> 8 f32 values × 2^-120, exactly, in three integer instructions: the
// byte sign-extended to 32 bits, shifted left by 20 (exponent and mantissa land on the
// low end of f32's, the sign on bit 31), masked. F16C's route (e4m3 -> f16 pattern ->
// vcvtph2ps) bounded this GEMV: Zen 2 runs vcvtph2ps ymm as two uops, one a cycle. e4m3
// subnormals land on f32 subnormals; x is scaled by kXScale first so that the products
// are normal f32 (|x| >= 2^-61 for the smallest subnormal), and the block scale takes
// back kWeightScale = 2^120 / 2^64. Both are powers of two: every sum is the f16 route's
// times 2^-48, so y has the same bits.
constexpr float kXScale = 18446744073709551616.0f;    // 2^64
constexpr float kWeightScale = 72057594037927936.0f;  // 2^56
inline __m256 Fp8E4M3x8AsF32Bits(__m128i bytes) {
  const __m256i v = _mm256_slli_epi32(_mm256_cvtepi8_epi32(bytes), 20);
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0x87F00000u))));
}

// Weight rows per tile for M x rows: 2·M·R accumulators + R weights + 1 x <= 16.
template <int M> constexpr int TileRows() { return M == 1 ? 4 : 2; }

// y[i][r] = x[i] · w[r] for i < M, r < R. w: row 0 of the tile (row stride ld);
// scale_rows[r]: the scale row (one f32 per column block) of tile row r; prefetch:
// the kRows rows to prefetch (null: none).
template <int M, int R> void Tile(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
                                  const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy,
                                  const uint8_t* const* prefetch) {
  __m256 total[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) total[i][r] = _mm256_setzero_ps();
  }
  for (int64_t k0 = 0, block = 0; k0 < k; k0 += block_cols, ++block) {
    const int64_t k1 = std::min(k, k0 + block_cols);
    __m256 acc[M][R];
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
    }
    int64_t kk = k0;
    for (; kk + 8 <= k1; kk += 8) {
      if (prefetch != nullptr && kk % 64 == 0) {
        for (int r = 0; r < kRows; ++r) _mm_prefetch(reinterpret_cast<const char*>(prefetch[r] + kk), _MM_HINT_T0);
      }
      __m256 wv[R];
      for (int r = 0; r < R; ++r)
        wv[r] = Fp8E4M3x8AsF32Bits(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + r * ld + kk)));
      for (int i = 0; i < M; ++i) {
        const __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
        for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    }
    if (kk < k1) {  // only in the last block, when k is not a multiple of 8
      const __m256i mask = TailMask8(k1 - kk);
      __m256 wv[R];
      for (int r = 0; r < R; ++r) {
        alignas(16) uint8_t buf[16] = {};
        std::memcpy(buf, w + r * ld + kk, static_cast<size_t>(k1 - kk));
        wv[r] = Fp8E4M3x8AsF32Bits(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
      }
      for (int i = 0; i < M; ++i) {
        const __m256 xv = _mm256_maskload_ps(x + i * ldx + kk, mask);
        for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_set1_ps(scale_rows[r][block] * kWeightScale);
      for (int i = 0; i < M; ++i) total[i][r] = _mm256_fmadd_ps(acc[i][r], s, total[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(total[i][r]);
  }
}

// G weight rows (kRows or 1) against x rows [i, i + M), in tiles of TileRows<M>().
template <int M, int G> void GroupTiles(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
                                        const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy,
                                        const uint8_t* const* prefetch) {
  constexpr int R = TileRows<M>() < G ? TileRows<M>() : G;
  static_assert(G % R == 0, "tiles must cover the group exactly");
  for (int r = 0; r < G; r += R) {
    Tile<M, R>(x, ldx, w + r * ld, ld, k, scale_rows + r, block_cols, y + r, ldy, r == 0 ? prefetch : nullptr);
  }
}

template <int G> void Group(const float* x, int64_t m, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
                            const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy,
                            const uint8_t* const* prefetch) {
  for (int64_t i = 0; i < m; i += kMaxM) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    const uint8_t* const* p = i == 0 ? prefetch : nullptr;
    switch (std::min<int64_t>(kMaxM, m - i)) {
      case 1: GroupTiles<1, G>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy, p); break;
      case 2: GroupTiles<2, G>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy, p); break;
      default: GroupTiles<3, G>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy, p); break;
    }
  }
}

// Output rows [n0, n1).
void Rows(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) {
    const float* scales[kRows];
    const uint8_t* ahead[kRows];
    for (int r = 0; r < kRows; ++r) {
      scales[r] = w.ScaleRow(n + r);
      ahead[r] = base + (n + 2 * kRows + r) * w.ld;
    }
    Group<kRows>(x, m, ldx, base + n * w.ld, w.ld, w.cols, scales, w.block_cols, y + n, ldy,
                 n + 3 * kRows <= n1 ? ahead : nullptr);
  }
  for (; n < n1; ++n) {
    const float* scales[1] = {w.ScaleRow(n)};
    Group<1>(x, m, ldx, base + n * w.ld, w.ld, w.cols, scales, w.block_cols, y + n, ldy, nullptr);
  }
}

}  // namespace

void GemvFp8Avx2(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  if (w.block_cols % 8 != 0) {  // the 8-wide steps would straddle blocks
    MatmulPortable(p, threaded);
    return;
  }
  // x × kXScale, [m, k]: per-thread, grown only (a decode step allocates nothing once
  // warm); filled by the calling thread before the team reads it.
  const int64_t k = w.cols;
  thread_local std::vector<float> scaled;
  float* xs = Grow(scaled, p.m * k);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t c = 0; c < k; ++c) xs[i * k + c] = p.x[i * p.ldx + c] * kXScale;
  }
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  // A contiguous, kRows-aligned share per thread: one sequential region each.
  SplitRowsOverThreads(parallel, w.rows, kRows,
                       [&](RowRange rows) { Rows(xs, p.m, k, w, rows.begin, rows.end, p.y, p.ldy); });
}

}  // namespace latte::matmul_internal

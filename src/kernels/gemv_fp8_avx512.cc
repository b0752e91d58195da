// AVX-512 GEMV for fp8 e4m3 weights with block scales (the DeepSeek-V3 release
// format), small m: y = x · wᵀ with w(r, c) = e4m3(r, c) × scale(block of r, c).
//
// Memory-bound: the kernel reads each weight byte once (1 byte per weight, half
// the bf16 traffic) and converts in registers, exactly:
//   For an e4m3 byte b, the f16 bit pattern ((b & 0x7F) << 7) | ((b & 0x80) << 8)
//   is the e4m3 value × 2^-8, subnormals included: e4m3's 4-bit exponent (bias 7)
//   lands in the low bits of f16's 5-bit exponent (bias 15) and its 3 mantissa
//   bits on top of f16's 10, so every code maps to value × 2^(7-15).
// With a sign-extending widen (vpmovsxbw) that pattern is (w << 7) & 0xBF80: bit
// 8 of the widened byte is the sign again and lands on bit 15, bit 7 lands on bit
// 14 and is masked off. Then vcvtph2ps gives 16 exact f32 values: 4 instructions
// per 16 weights. (Not via bf16 + vdpbf16ps: that flushes bf16 subnormals.)
//
// Each output accumulates x·w over one block_cols-wide column block in f32, then
// adds that partial sum × (scale × 2^8) to its total when the block ends: the
// scale costs one FMA per row and block (128 weights), not one multiply per weight.
// The NaN codes (0x7F, 0xFF) decode to 480 instead of NaN; checkpoints hold none.
//
// Measured on the project's 2-vCPU Zen 4 VM (shared, so rough): one core
// converts and FMAs ~17-19 G weights/s from cache but streams a 102400 x 2048
// matrix from DRAM at ~13 GB/s against a 19-28 GB/s single-core read peak, so
// there the kernel is bound by instructions per weight, not yet by bytes.
//
// Tiles keep 2·M·R accumulators (block partial + total): M x rows by R weight
// rows, R = 8 / 4 / 2 / 2 for M = 1 / 2 / 3 / 4, so at most 16 of the 32
// registers. Output rows are split into contiguous per-thread ranges, as in the
// bf16 GEMV (gemv_avx512.cc), so each core streams its own part of the matrix.
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt); reached only
// through matmul.cc's dispatch after GetCpuFeatures().avx512f.
// GCC 12's AVX-512 headers build some intrinsics (reduce_add, maskz loads) from
// _mm512_undefined_*, which trips -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per row group (split into tiles by TileRows), and x rows per tile.
constexpr int kRows = 8;
constexpr int kMaxM = 4;
// The f16 pattern is the e4m3 value × 2^-8; the block scale takes the 2^8 back
// (a power of two: the product is exact, so results match value × scale).
constexpr float kFp8ViaF16 = 256.0f;

// 16 e4m3 bytes -> 16 f32 values × 2^-8 (exact).
inline __m512 Fp8x16(__m128i bytes) {
  const __m256i w = _mm256_cvtepi8_epi16(bytes);
  const __m256i h =
      _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  return _mm512_cvtph_ps(h);
}

inline __mmask16 TailMask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

// y[i][r] = x[i] · w[r] for i < M, r < R. w: row 0 of the tile (row stride ld);
// scale_rows[r]: the scale row (one f32 per column block) of tile row r.
template <int M, int R>
void Tile(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
          const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy) {
  __m512 total[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) total[i][r] = _mm512_setzero_ps();
  }
  for (int64_t k0 = 0, block = 0; k0 < k; k0 += block_cols, ++block) {
    const int64_t k1 = std::min(k, k0 + block_cols);
    __m512 acc[M][R];
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
    }
    auto step16 = [&](int64_t c) {
      __m512 wv[R];
      for (int r = 0; r < R; ++r) {
        wv[r] = Fp8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + r * ld + c)));
      }
      for (int i = 0; i < M; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
        for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    };
    int64_t kk = k0;
    // A whole cache line of every row per iteration, and a software prefetch of
    // the same line two row groups further on (16 rows, 32 KiB ahead for
    // 2048-wide rows): the hardware prefetchers lose track of 8-16 interleaved
    // row streams of only 2 KiB each. Measured on one Zen 4 core (2-vCPU VM,
    // shared): a 102400 x 2048 matrix from DRAM 7-9 GB/s without, 13 GB/s with.
    for (; kk + 64 <= k1; kk += 64) {
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(w + (r + 2 * kRows) * ld + kk), _MM_HINT_T0);
      }
      for (int j = 0; j < 4; ++j) step16(kk + 16 * j);
    }
    for (; kk + 16 <= k1; kk += 16) step16(kk);
    if (kk < k1) {  // only in the last block, when k is not a multiple of 16
      const __mmask16 mask = TailMask(k1 - kk);
      __m512 wv[R];
      for (int r = 0; r < R; ++r) wv[r] = Fp8x16(_mm_maskz_loadu_epi8(mask, w + r * ld + kk));
      for (int i = 0; i < M; ++i) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + kk);
        for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(scale_rows[r][block] * kFp8ViaF16);
      for (int i = 0; i < M; ++i) total[i][r] = _mm512_fmadd_ps(acc[i][r], s, total[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(total[i][r]);
  }
}

// Weight rows per tile for M rows of x: 2·M·R accumulators stay within 16
// registers, and M = 1 (batch-1 decode) streams 8 rows at once (measured ~1.4x
// the DRAM throughput of 4 rows on one loaded Zen 4 core: more loads in flight).
template <int M>
constexpr int TileRows() {
  return M == 1 ? 8 : M == 2 ? 4 : 2;
}

template <int M, int R>
void TileSplit(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
               const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy) {
  constexpr int kSub = TileRows<M>() < R ? TileRows<M>() : R;
  for (int r = 0; r < R; r += kSub) {
    Tile<M, kSub>(x, ldx, w + r * ld, ld, k, scale_rows + r, block_cols, y + r, ldy);
  }
}

// R weight rows (kRows, 4 or 1) against every row of x.
template <int R>
void RowGroup(const float* x, int64_t m, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
              const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; i += kMaxM) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    switch (std::min<int64_t>(kMaxM, m - i)) {
      case 1: TileSplit<1, R>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy); break;
      case 2: TileSplit<2, R>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy); break;
      case 3: TileSplit<3, R>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy); break;
      default: TileSplit<4, R>(xi, ldx, w, ld, k, scale_rows, block_cols, yi, ldy); break;
    }
  }
}

// Output rows [n0, n1).
void Rows(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1,
          float* y, int64_t ldy) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  auto scale_row = [&](int64_t n) {
    return w.scale + ((w.scale_row0 + n) / w.block_rows) * w.scale_ld;
  };
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) {
    const float* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = scale_row(n + r);
    RowGroup<kRows>(x, m, ldx, base + n * w.ld, w.ld, w.cols, rows, w.block_cols, y + n, ldy);
  }
  if (n + 4 <= n1) {  // a tail of 4..7 rows: one 4-row group, then single rows
    const float* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = scale_row(n + r);
    RowGroup<4>(x, m, ldx, base + n * w.ld, w.ld, w.cols, rows, w.block_cols, y + n, ldy);
    n += 4;
  }
  for (; n < n1; ++n) {
    const float* rows[1] = {scale_row(n)};
    RowGroup<1>(x, m, ldx, base + n * w.ld, w.ld, w.cols, rows, w.block_cols, y + n, ldy);
  }
}

}  // namespace

void GemvFp8Avx512(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
                   int64_t ldy, bool threaded) {
  if (m <= 0 || w.rows <= 0) return;
  if (w.block_cols % 16 != 0) {  // the 16-wide steps would straddle blocks
    MatmulPortable(x, m, ldx, w, y, ldy, threaded);
    return;
  }
  // Below ~64K weights (64 KiB fp8) a fork/join (~1-2 us) costs more than it saves.
  const bool parallel = threaded && w.rows >= 2 * kRows && w.rows * w.cols >= (int64_t{1} << 16);
  if (!parallel) {
    Rows(x, m, ldx, w, 0, w.rows, y, ldy);
    return;
  }
#pragma omp parallel
  {
    // A contiguous, kRows-aligned share per thread: one sequential region each.
    const int64_t nt = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    const int64_t groups = (w.rows + kRows - 1) / kRows;
    const int64_t g0 = groups * t / nt;
    const int64_t g1 = groups * (t + 1) / nt;
    Rows(x, m, ldx, w, std::min(w.rows, g0 * kRows), std::min(w.rows, g1 * kRows), y, ldy);
  }
}

void DequantizeFp8RowsAvx512(const WeightView& w, int64_t r0, int64_t r1, bf16* out,
                             bool has_bf16) {
  if (w.block_cols % 16 != 0) {  // the 16-wide steps would straddle blocks
    DequantizeFp8Rows(w, r0, r1, out);
    return;
  }
  const int64_t k = w.cols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  // 4 MiB of bf16 output per call at most (the GEMM chunk): worth both cores.
#pragma omp parallel if ((r1 - r0) * k >= (int64_t{1} << 16) && !omp_in_parallel())
  {
    // f32 staging when the CPU lacks vcvtneps2bf16: [k] per thread, grown once.
    thread_local std::vector<float> row;
    if (!has_bf16 && row.size() < static_cast<size_t>(k)) row.resize(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = base + r * w.ld;
      const float* scales = w.scale + ((w.scale_row0 + r) / w.block_rows) * w.scale_ld;
      bf16* out_row = out + (r - r0) * k;
      for (int64_t c = 0; c < k; c += 16) {
        const __mmask16 mask = TailMask(std::min<int64_t>(16, k - c));
        // Exact: (value × 2^-8) × (scale × 2^8) rounds once, like value × scale.
        const __m512 v = _mm512_mul_ps(Fp8x16(_mm_maskz_loadu_epi8(mask, wr + c)),
                                       _mm512_set1_ps(scales[c / w.block_cols] * kFp8ViaF16));
        if (has_bf16) {  // round to nearest even, in registers
          _mm256_mask_storeu_epi16(out_row + c, mask,
                                   reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
        } else {
          _mm512_mask_storeu_ps(row.data() + c, mask, v);
        }
      }
      if (!has_bf16) ConvertToBf16Avx512(row.data(), k, out_row, /*has_bf16=*/false);
    }
  }
}

}  // namespace latte::matmul_internal

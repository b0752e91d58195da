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
// Up to kMaxStreamM x rows (a decode's m = 1; a batched decode's routed experts, 1-3
// rows each) take StreamRow instead: one weight row at a time, front to back, with an L2
// prefetch kStreamPrefetchBytes along that one stream, and 32 weights a step
// (Fp8E4M3x32AsF32Bits) against a copy of x in that step's column order. Rows read
// together in 4-row tiles are four streams the hardware prefetcher follows less well:
// from memory, the tiles read ~22.5 GB/s in a decode where Q8_0's streaming GEMV
// (gemv_block_avx2.cc) reads ~28 (1408 x 2048, 2 threads: m = 1 22.6 -> 24-27 GB/s, m = 2
// 15.6 -> 19.8, m = 3 14.5 -> 15.1). A row's sum runs in another order there than in
// the tiles (and at m = 1 than at 2-3), so its last bits depend on the rows beside it.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (see CMakeLists.txt); reached only
// through matmul.cc's dispatch after GetCpuFeatures().avx2 and .fma.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/avx2_inl.h"
#include "kernels/matmul_internal.h"
#include "kernels/row_prefetch_inl.h"

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
// The bits of a 32-bit lane that hold an e4m3 value once its byte sits at the lane's top,
// shifted right by 4 (arithmetic): the sign on bit 31, exponent and mantissa on bits 26..20.
alignas(32) constexpr uint32_t kFieldMaskBits[8] = {0x87F00000u, 0x87F00000u, 0x87F00000u, 0x87F00000u,
                                                    0x87F00000u, 0x87F00000u, 0x87F00000u, 0x87F00000u};
inline __m256i Fp8FieldMask() { return _mm256_load_si256(reinterpret_cast<const __m256i*>(kFieldMaskBits)); }
inline __m256 Fp8E4M3x8AsF32Bits(__m128i bytes) {
  const __m256i v = _mm256_slli_epi32(_mm256_cvtepi8_epi32(bytes), 20);
  return _mm256_castsi256_ps(_mm256_and_si256(v, Fp8FieldMask()));
}

// 32 bytes -> 4 vectors of 8 weights each, the same bit patterns as Fp8E4M3x8AsF32Bits
// makes: w[0] / w[1] the even / odd 16-bit words of the low interleave with zeros
// (bytes 0..7 and 16..23), w[2] / w[3] those of the high one (bytes 8..15, 24..31). The
// byte on a word's top, shifted right by 4 (arithmetic), holds the sign on bits 15..11
// and bits 6..0 on 10..4: at a 32-bit lane's top (the odd word, or the even word << 16)
// that is the f32 pattern once masked. 10 integer ops and one load per 32 weights, where
// four 8-byte steps take 12 ops (their vpmovsxbd crosses lanes) and 4 loads.
inline void Fp8E4M3x32AsF32Bits(const uint8_t* p, __m256 w[4]) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i mask = Fp8FieldMask();
  const __m256i lo = _mm256_srai_epi16(_mm256_unpacklo_epi8(zero, bytes), 4);
  const __m256i hi = _mm256_srai_epi16(_mm256_unpackhi_epi8(zero, bytes), 4);
  w[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(lo, 16), mask));
  w[1] = _mm256_castsi256_ps(_mm256_and_si256(lo, mask));
  w[2] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(hi, 16), mask));
  w[3] = _mm256_castsi256_ps(_mm256_and_si256(hi, mask));
}
constexpr int64_t kWide = 32;  // columns a step of Fp8E4M3x32AsF32Bits takes

// out[8v + d] = x[c] · kXScale for the 32 columns at x, where c is the column (of its 32)
// that lane d of Fp8E4M3x32AsF32Bits's vector v holds:
//   c = (d < 4 ? 2d : 2d + 8) + v % 2 + 8 · (v / 2).
inline void PermuteChunk(const float* x, float* out) {
  const __m256 s = _mm256_set1_ps(kXScale);
  const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
  // vshufps takes columns {0, 2, 16, 18 | 4, 6, 20, 22} of x0, x2 (or the odd ones); the
  // 64-bit permute puts them in lane order.
  auto order = [](__m256 v) { return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xD8)); };
  _mm256_storeu_ps(out, _mm256_mul_ps(order(_mm256_shuffle_ps(x0, x2, 0x88)), s));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(order(_mm256_shuffle_ps(x0, x2, 0xDD)), s));
  _mm256_storeu_ps(out + 16, _mm256_mul_ps(order(_mm256_shuffle_ps(x1, x3, 0x88)), s));
  _mm256_storeu_ps(out + 24, _mm256_mul_ps(order(_mm256_shuffle_ps(x1, x3, 0xDD)), s));
}

// x rows up to which StreamRow takes the product (a batched decode's routed experts see
// 1-3 each); more take the tiles.
constexpr int64_t kMaxStreamM = 3;

// y[i · ldy] = x row i · w for i < M: one weight row w (k columns, scale_row: one f32 per
// column block), x rows xs (row stride k) × kXScale, each whole 32 columns below wide_cols
// in PermuteChunk's order, the rest as they are. wide_cols is a multiple of 32 that no
// column block boundary splits. Each step's four vectors go to kBanks accumulators per x
// row in turn (4 for one x row, 2 for two or three: 2·M + M + 4 + 1 registers), so the
// chains of FMAs do not wait on their latency.
template <int M> inline void StreamRow(const float* xs, const uint8_t* w, int64_t k, int64_t wide_cols,
                                       const float* scale_row, int64_t block_cols, float* y, int64_t ldy) {
  constexpr int kBanks = M == 1 ? 4 : 2;
  __m256 total[M];
  for (int i = 0; i < M; ++i) total[i] = _mm256_setzero_ps();
  for (int64_t k0 = 0, block = 0; k0 < k; k0 += block_cols, ++block) {
    const int64_t k1 = std::min(k, k0 + block_cols);
    __m256 acc[kBanks][M];
    for (int b = 0; b < kBanks; ++b) {
      for (int i = 0; i < M; ++i) acc[b][i] = _mm256_setzero_ps();
    }
    int64_t kk = k0;
    for (; kk + kWide <= std::min(k1, wide_cols); kk += kWide) {
      if (kk % 64 == 0) _mm_prefetch(reinterpret_cast<const char*>(w + kk + kStreamPrefetchBytes), _MM_HINT_T1);
      __m256 wv[4];
      Fp8E4M3x32AsF32Bits(w + kk, wv);
      for (int v = 0; v < 4; ++v) {
        for (int i = 0; i < M; ++i) {
          acc[v % kBanks][i] = _mm256_fmadd_ps(_mm256_loadu_ps(xs + i * k + kk + 8 * v), wv[v], acc[v % kBanks][i]);
        }
      }
    }
    for (; kk + 8 <= k1; kk += 8) {
      const __m256 wv = Fp8E4M3x8AsF32Bits(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + kk)));
      for (int i = 0; i < M; ++i) acc[0][i] = _mm256_fmadd_ps(_mm256_loadu_ps(xs + i * k + kk), wv, acc[0][i]);
    }
    if (kk < k1) {  // only in the last block, when k is not a multiple of 8
      alignas(16) uint8_t buf[16] = {};
      std::memcpy(buf, w + kk, static_cast<size_t>(k1 - kk));
      const __m256 wv = Fp8E4M3x8AsF32Bits(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
      const __m256i mask = TailMask8(k1 - kk);
      for (int i = 0; i < M; ++i) {
        acc[0][i] = _mm256_fmadd_ps(_mm256_maskload_ps(xs + i * k + kk, mask), wv, acc[0][i]);
      }
    }
    const __m256 s = _mm256_set1_ps(scale_row[block] * kWeightScale);
    for (int i = 0; i < M; ++i) {
      __m256 sum = _mm256_add_ps(acc[0][i], acc[1][i]);
      if constexpr (kBanks == 4) sum = _mm256_add_ps(sum, _mm256_add_ps(acc[2][i], acc[3][i]));
      total[i] = _mm256_fmadd_ps(sum, s, total[i]);
    }
  }
  for (int i = 0; i < M; ++i) y[i * ldy] = HorizontalSum(total[i]);
}

// The last step of a row whose k is not a multiple of 8: `cols` (< 8) columns, x read
// through a mask, the weights through a zeroed copy.
template <int M, int R>
inline void TailStep(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t cols, __m256 (&acc)[M][R]) {
  const __m256i mask = TailMask8(cols);
  __m256 wv[R];
  for (int r = 0; r < R; ++r) {
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, w + r * ld, static_cast<size_t>(cols));
    wv[r] = Fp8E4M3x8AsF32Bits(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
  }
  for (int i = 0; i < M; ++i) {
    const __m256 xv = _mm256_maskload_ps(x + i * ldx, mask);
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
  }
}

// total[i · R + r] += a block's 8-lane sums acc[i][r] × the block's scale of weight row r.
template <int M, int R>
inline void CloseBlock(const __m256 (&acc)[M][R], const float* const* scale_rows, int64_t block, __m256* total) {
  for (int r = 0; r < R; ++r) {
    const __m256 s = _mm256_set1_ps(scale_rows[r][block] * kWeightScale);
    for (int i = 0; i < M; ++i) total[i * R + r] = _mm256_fmadd_ps(acc[i][r], s, total[i * R + r]);
  }
}

// Weight rows per tile for M x rows: 2·M·R accumulators + R weights + 1 x <= 16.
template <int M> constexpr int TileRows() { return M == 1 ? 4 : 2; }

// y[i][r] = x[i] · w[r] for i < M, r < R. w: row 0 of the tile (row stride ld);
// scale_rows[r]: the scale row (one f32 per column block) of tile row r; prefetch:
// the kRows rows to prefetch (null: none).
template <int M, int R> void Tile(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
                                  const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy,
                                  const uint8_t* const* prefetch) {
  __m256 total[M * R];
  for (int j = 0; j < M * R; ++j) total[j] = _mm256_setzero_ps();
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
    if (kk < k1) TailStep<M, R>(x + kk, ldx, w + kk, ld, k1 - kk, acc);  // the last block, k % 8 != 0
    CloseBlock<M, R>(acc, scale_rows, block, total);
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(total[i * R + r]);
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

// ---- Blocked for cache: from kFp8Avx2BlockedMinRows rows of x (a prefill's experts) ----
// Tile runs each x tile of up to 3 rows over whole weight rows, so every 8 weights are
// widened again for each 3 x rows and the x tiles stream from L2 at every weight row pair.
// Here a block of kBlockedRows weight rows stays in L2 while each 6-row x tile's slice of
// columns, in L1, meets every row pair of it, as gemm_bf16_avx2.cc does for bf16. Per
// (x row, weight row) the 8-lane block sums, their order, the close by the block scale and
// the horizontal sum are Tile's, so y is the tiles' to the bit, whatever m.
constexpr int kBlockedTileM = 6;
constexpr int kBlockedTileR = 2;
constexpr int64_t kBlockedRows = 32;       // 32 x 2048 e4m3 = 64 KiB in L2
constexpr int64_t kBlockedSpanCols = 512;  // a 6-row x slice of 512 f32: 12 KiB in L1

// `steps` 8-column steps of Tile<6, 2>'s inner loop from x (row stride ldx) and w (row
// stride ld), in assembly: GCC keeps the intrinsics version's 12 sums in memory. The same
// FMAs on the same values in the same order per sum, so the same bits.
inline void Fp8Steps6x2(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t steps, __m256 (&acc)[6][2]) {
  __m256 a00 = acc[0][0], a01 = acc[0][1], a10 = acc[1][0], a11 = acc[1][1], a20 = acc[2][0], a21 = acc[2][1];
  __m256 a30 = acc[3][0], a31 = acc[3][1], a40 = acc[4][0], a41 = acc[4][1], a50 = acc[5][0], a51 = acc[5][1];
  const float* x3 = x + 3 * ldx;
  const int64_t ldx4 = ldx * 4;
  for (int64_t s = 0; s < steps; ++s, x += 8, x3 += 8, w += 8) {
    asm("vpmovsxbd (%[w]), %%ymm12\n\t"
        "vpmovsxbd (%[w],%[ld]), %%ymm13\n\t"
        "vpslld $20, %%ymm12, %%ymm12\n\t"
        "vpslld $20, %%ymm13, %%ymm13\n\t"
        "vpand %[mask], %%ymm12, %%ymm12\n\t"
        "vpand %[mask], %%ymm13, %%ymm13\n\t"
        "vmovups (%[x]), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a00]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a01]\n\t"
        "vmovups (%[x],%[ldx4]), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a10]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a11]\n\t"
        "vmovups (%[x],%[ldx4],2), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a20]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a21]\n\t"
        "vmovups (%[x3]), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a30]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a31]\n\t"
        "vmovups (%[x3],%[ldx4]), %%ymm14\n\t"
        "vfmadd231ps %%ymm12, %%ymm14, %t[a40]\n\t"
        "vfmadd231ps %%ymm13, %%ymm14, %t[a41]\n\t"
        "vmovups (%[x3],%[ldx4],2), %%ymm15\n\t"
        "vfmadd231ps %%ymm12, %%ymm15, %t[a50]\n\t"
        "vfmadd231ps %%ymm13, %%ymm15, %t[a51]\n\t"
        : [a00] "+x"(a00), [a01] "+x"(a01), [a10] "+x"(a10), [a11] "+x"(a11), [a20] "+x"(a20), [a21] "+x"(a21),
          [a30] "+x"(a30), [a31] "+x"(a31), [a40] "+x"(a40), [a41] "+x"(a41), [a50] "+x"(a50), [a51] "+x"(a51)
        : [x] "r"(x), [x3] "r"(x3), [ldx4] "r"(ldx4), [w] "r"(w), [ld] "r"(ld), [mask] "m"(kFieldMaskBits)
        : "xmm12", "xmm13", "xmm14", "xmm15", "memory");
  }
  acc[0][0] = a00, acc[0][1] = a01, acc[1][0] = a10, acc[1][1] = a11, acc[2][0] = a20, acc[2][1] = a21;
  acc[3][0] = a30, acc[3][1] = a31, acc[4][0] = a40, acc[4][1] = a41, acc[5][0] = a50, acc[5][1] = a51;
}

// Tile's inner loop for other tile shapes (the last x tile, an odd last weight row).
template <int M, int R>
inline void Fp8Steps(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t steps, __m256 (&acc)[M][R]) {
  for (int64_t s = 0; s < steps; ++s, x += 8, w += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r)
      wv[r] = Fp8E4M3x8AsF32Bits(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + r * ld)));
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
}

// Column blocks [b0, b1) of x rows [0, M) (row stride ldx) against weight rows [0, R) of w
// (row stride ld; scale_rows[r]: row r's scales), each block's sums closed into `total`
// ([M][R], zero before block 0) as Tile closes them; after the last block, y.
template <int M, int R> void BlockedTile(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
                                         int64_t block_cols, int64_t b0, int64_t b1, const float* const* scale_rows,
                                         __m256* total, float* y, int64_t ldy) {
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t k0 = b * block_cols, k1 = std::min(k, k0 + block_cols);
    __m256 acc[M][R];
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
    }
    const int64_t steps = (k1 - k0) / 8;
    if constexpr (M == kBlockedTileM && R == kBlockedTileR) {
      if (steps > 0) Fp8Steps6x2(x + k0, ldx, w + k0, ld, steps, acc);
    } else {
      Fp8Steps<M, R>(x + k0, ldx, w + k0, ld, steps, acc);
    }
    const int64_t kk = k0 + steps * 8;
    if (kk < k1) TailStep<M, R>(x + kk, ldx, w + kk, ld, k1 - kk, acc);  // the last block, k % 8 != 0
    CloseBlock<M, R>(acc, scale_rows, b, total);
  }
  if (b1 * block_cols < k) return;
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(total[i * R + r]);
  }
}

struct BlockedOperands {
  const float* xs;  // x × kXScale: [m, k]
  int64_t m;
  const WeightView& w;
  float* y;
  int64_t ldy;
};

// x rows [i, i + M) against weight rows [n0, n1) (one block), column blocks [b0, b1);
// totals: [n1 - n0][M] sums of this x tile and block, zeroed by the caller before block 0.
template <int M> void BlockedXTile(const BlockedOperands& o, int64_t i, int64_t n0, int64_t n1, int64_t b0, int64_t b1,
                                   __m256* totals, RowPrefetch& prefetch) {
  const WeightView& w = o.w;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t k = w.cols;
  const float* xi = o.xs + i * k;
  float* yi = o.y + i * o.ldy;
  int64_t n = n0;
  for (; n + kBlockedTileR <= n1; n += kBlockedTileR) {
    prefetch.Next();
    const float* scales[kBlockedTileR] = {w.ScaleRow(n), w.ScaleRow(n + 1)};
    BlockedTile<M, kBlockedTileR>(xi, k, base + n * w.ld, w.ld, k, w.block_cols, b0, b1, scales, totals + (n - n0) * M,
                                  yi + n, o.ldy);
  }
  for (; n < n1; ++n) {
    const float* scales[1] = {w.ScaleRow(n)};
    BlockedTile<M, 1>(xi, k, base + n * w.ld, w.ld, k, w.block_cols, b0, b1, scales, totals + (n - n0) * M, yi + n,
                      o.ldy);
  }
}

// Weight rows [n0, n1): block by block, span by span (whole column blocks), every x tile
// over each.
void BlockedRows(const BlockedOperands& o, int64_t n0, int64_t n1) {
  const WeightView& w = o.w;
  const int64_t k = w.cols;
  const int64_t blocks = (k + w.block_cols - 1) / w.block_cols;
  const int64_t span_blocks = std::max<int64_t>(1, kBlockedSpanCols / w.block_cols);
  thread_local AlignedBuffer storage;  // [m][kBlockedRows] sums; grown only
  __m256* totals = GrowAligned<__m256>(storage, static_cast<size_t>(o.m * kBlockedRows) * sizeof(__m256));
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r0 = n0; r0 < n1; r0 += kBlockedRows) {
    const int64_t r1 = std::min(n1, r0 + kBlockedRows);
    std::fill(totals, totals + o.m * kBlockedRows, _mm256_setzero_ps());
    // The next block of weight rows into L2 over this one's calls of Next.
    const int64_t next1 = std::min(n1, r1 + kBlockedRows);
    const int64_t calls = (o.m + kBlockedTileM - 1) / kBlockedTileM * ((r1 - r0) / kBlockedTileR) *
                          ((blocks + span_blocks - 1) / span_blocks);
    RowPrefetch prefetch;
    if (next1 > r1) prefetch = RowPrefetch(base + r1 * w.ld, w.ld, next1 - r1, k, calls);
    for (int64_t b0 = 0; b0 < blocks; b0 += span_blocks) {
      const int64_t b1 = std::min(blocks, b0 + span_blocks);
      int64_t i = 0;
      for (; i + kBlockedTileM <= o.m; i += kBlockedTileM) {
        BlockedXTile<kBlockedTileM>(o, i, r0, r1, b0, b1, totals + i * kBlockedRows, prefetch);
      }
      WithTileRows<kBlockedTileM - 1>(
          o.m - i, [&]<int M>() { BlockedXTile<M>(o, i, r0, r1, b0, b1, totals + i * kBlockedRows, prefetch); });
    }
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
  // warm); filled by the calling thread before the team reads it. One x row streams
  // (StreamRow) where whole 32-column steps fit the column blocks.
  const int64_t k = w.cols;
  const bool stream = p.m <= kMaxStreamM && w.block_cols % kWide == 0;
  const int64_t wide_cols = stream ? k / kWide * kWide : 0;
  thread_local std::vector<float> scaled;
  float* xs = Grow(scaled, p.m * k);
  for (int64_t i = 0; i < p.m; ++i) {
    int64_t c = 0;
    for (; c < wide_cols; c += kWide) PermuteChunk(p.x + i * p.ldx + c, xs + i * k + c);
    for (; c < k; ++c) xs[i * k + c] = p.x[i * p.ldx + c] * kXScale;
  }
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  const BlockedOperands blocked{xs, p.m, w, p.y, p.ldy};
  // A contiguous, kRows-aligned share per thread: one sequential region each.
  SplitRowsOverThreads(parallel, w.rows, kRows, [&](RowRange rows) {
    // (k = 0: the tiles write the empty sums; the blocked run has no column block to close.)
    if (!stream && p.m >= kFp8Avx2BlockedMinRows && k > 0) return BlockedRows(blocked, rows.begin, rows.end);
    if (!stream) return Rows(xs, p.m, k, w, rows.begin, rows.end, p.y, p.ldy);
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    for (int64_t n = rows.begin; n < rows.end; ++n) {
      const uint8_t* row = base + n * w.ld;
      switch (p.m) {
        case 1: StreamRow<1>(xs, row, k, wide_cols, w.ScaleRow(n), w.block_cols, p.y + n, p.ldy); break;
        case 2: StreamRow<2>(xs, row, k, wide_cols, w.ScaleRow(n), w.block_cols, p.y + n, p.ldy); break;
        default: StreamRow<3>(xs, row, k, wide_cols, w.ScaleRow(n), w.block_cols, p.y + n, p.ldy); break;
      }
    }
  });
}

// 8 f32 values rounded to nearest even as bf16, in order: F32ToBf16 for every finite
// value (an e4m3 value times a scale is never NaN or infinite here).
inline __m128i RoundToBf16x8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  // 32-bit lanes holding 0 .. 0xffff: packus keeps them, 128-bit lane by lane.
  return _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
}

namespace {

// Rows [first, first + count) of w, each weight as e4m3 value × its block scale in f32
// (value × 2^-120, the bit pattern, × 2^120 is the value exactly; × the scale rounds
// once, as the portable loop's value × scale does), 8 at a time to store(out_row, c, v)
// and the last k % 8 through a buffer to store_tail(out_row, c, v, count).
template <class Out, class Store, class StoreTail>
void DequantizeFp8Rows(const WeightView& w, int64_t first, int64_t count, Out* out, Store store, StoreTail store_tail) {
  const int64_t k = w.cols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const __m256 unbias = _mm256_set1_ps(kXScale * kWeightScale);  // 2^120
#pragma omp parallel for schedule(static) if (WorthParallel(count * k) && !omp_in_parallel())
  for (int64_t i = 0; i < count; ++i) {
    const int64_t r = first + i;
    const uint8_t* wr = base + r * w.ld;
    const float* scales = w.ScaleRow(r);
    Out* out_row = out + i * k;
    auto value = [&](__m128i bytes, int64_t c) {
      return _mm256_mul_ps(_mm256_mul_ps(Fp8E4M3x8AsF32Bits(bytes), unbias), _mm256_set1_ps(scales[c / w.block_cols]));
    };
    int64_t c = 0;
    for (; c + 8 <= k; c += 8) {
      store(out_row + c, value(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + c)), c));
    }
    if (c < k) {
      alignas(16) uint8_t in[16] = {};
      std::memcpy(in, wr + c, static_cast<size_t>(k - c));
      store_tail(out_row + c, value(_mm_load_si128(reinterpret_cast<const __m128i*>(in)), c), k - c);
    }
  }
}

}  // namespace

void DequantizeFp8ToBf16Avx2(const WeightView& w, int64_t first, int64_t count, bf16* out) {
  if (w.block_cols % 8 != 0) {  // the 8-wide steps would straddle blocks
    DequantizeFp8ToBf16Portable(w, first, count, out);
    return;
  }
  DequantizeFp8Rows(
      w, first, count, out,
      [](bf16* o, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(o), RoundToBf16x8(v)); },
      [](bf16* o, __m256 v, int64_t n) {
        alignas(16) bf16 b[8];
        _mm_store_si128(reinterpret_cast<__m128i*>(b), RoundToBf16x8(v));
        std::memcpy(o, b, static_cast<size_t>(n) * sizeof(bf16));
      });
}

void DequantizeFp8ToF32Avx2(const WeightView& w, int64_t first, int64_t count, float* out) {
  LATTE_CHECK(w.block_cols % 8 == 0, "DequantizeFp8ToF32Avx2: block_cols ", w.block_cols, " not a multiple of 8");
  DequantizeFp8Rows(
      w, first, count, out, [](float* o, __m256 v) { _mm256_storeu_ps(o, v); },
      [](float* o, __m256 v, int64_t n) { _mm256_maskstore_ps(o, TailMask8(n), v); });
}

}  // namespace latte::matmul_internal

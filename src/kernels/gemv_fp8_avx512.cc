// AVX-512 GEMV for fp8 e4m3 weights with block scales (the DeepSeek-V3 release
// format), small m: y = x · wᵀ with w(r, c) = e4m3(r, c) × scale(block of r, c).
//
// Two kernels, picked at run time:
//
// bf16 path (CPUs with AVX512_BF16 and AVX512_VBMI, e.g. Zen 4, Sapphire Rapids):
// every e4m3 value is exactly a bf16 number, and a NORMAL one (bf16 has f32's
// 8-bit exponent, e4m3's smallest subnormal is 2^-9), so vdpbf16ps's flushing of
// bf16 subnormal inputs never touches a weight. 64 e4m3 bytes become 64 bf16
// weights with two 128-entry byte lookups (vpermi2b reads the low 7 bits of each
// byte: the magnitude) giving the high and low byte of each bf16, the sign bit
// OR'ed into the high byte (vpternlog), and two byte unpacks: 6 instructions per
// 64 weights, then one vdpbf16ps (32 multiply-adds) per 32 weights and x row.
// The unpacks work within 128-bit lanes, so the 64 weights come out permuted
// (unpacklo: bytes 0-7, 16-23, 32-39, 48-55; unpackhi: 8-15, 24-31, ...); x is
// rounded to bf16 (round to nearest even, vcvtneps2bf16) once per call into a
// per-thread buffer laid out in that same order, so products pair up right. The
// products are exact in f32 (8 x 8 significant bits) and accumulate in f32; the
// only error beyond the f32 kernel's is x's rounding, |x_bf16 - x| <= 2^-8 |x|,
// so |y - exact| <= 2^-8 sum|x w| plus the f32 accumulation error (the same
// rounding the oneDNN path does for m >= kGemmMinRows).
//
// f32 path (AVX-512 CPUs without them): exact weights and f32 x. For an e4m3
// byte b, the f16 bit pattern ((b & 0x7F) << 7) | ((b & 0x80) << 8) is the e4m3
// value × 2^-8, subnormals included: e4m3's 4-bit exponent (bias 7) lands in the
// low bits of f16's 5-bit exponent (bias 15) and its 3 mantissa bits on top of
// f16's 10, so every code maps to value × 2^(7-15). With a sign-extending widen
// (vpmovsxbw) that pattern is (w << 7) & 0xBF80: bit 8 of the widened byte is
// the sign again and lands on bit 15, bit 7 lands on bit 14 and is masked off.
// Then vcvtph2ps gives 16 exact f32 values: 4 instructions per 16 weights, plus
// an FMA per x row. The NaN codes (0x7F, 0xFF) decode to 480 there (NaN on the
// bf16 path); checkpoints hold none.
//
// Both accumulate x·w over one block_cols-wide column block in f32, then add
// that partial sum × the block's scale to the total when the block ends: the
// scale costs one FMA per row and block (128 weights), not one multiply per weight.
//
// Measured on the project's 2-vCPU Zen 4 VM (shared and loaded, so rough), one
// thread, GB/s of e4m3 bytes: 102400 x 2048 (from DRAM) f32 path ~13, bound by
// instructions per weight (~5 per 16 weights plus the FMAs); bf16 path 23-27
// with its L2 prefetch (kPrefetchBytes), ~14 without it. 10944 x 2048 and
// 2048 x 10944: f32 path ~18, bf16 path ~30-35. (bf16 GEMV, 102400 x 2048: ~18.)
//
// Tiles keep 2·M·R accumulators (block partial + total): M x rows by R weight
// rows, R = 8 / 4 / 2 / 2 for M = 1 / 2 / 3 / 4, so at most 16 of the 32
// registers. Output rows are split into contiguous per-thread ranges, as in the
// bf16 GEMV (gemv_avx512.cc), so each core streams its own part of the matrix; with 1-2
// x rows the bf16 path reads a thread's range as 2 spans side by side (SpanRowsBf16).
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt), the bf16 path's
// functions also with avx512vbmi (a target pragma, checked by cpuid before use);
// reached only through matmul.cc's dispatch after GetCpuFeatures().avx512f.
// GCC 12's AVX-512 headers build some intrinsics (reduce_add, maskz loads) from
// _mm512_undefined_*, which trips -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "base/aligned_buffer.h"
#include "base/cpu_features.h"
#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/avx512_inl.h"
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
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(static_cast<short>(0xBF80)));
  return _mm512_cvtph_ps(h);
}

// y[i][r] = x[i] · w[r] for i < M, r < R. w: row 0 of the tile (row stride ld);
// scale_rows[r]: the scale row (one f32 per column block) of tile row r.
template <int M, int R> void Tile(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
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
      const __mmask16 mask = TailMask16(k1 - kk);
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
template <int M> constexpr int TileRows() { return M == 1 ? 8 : M == 2 ? 4 : 2; }

template <int M, int R> void TileSplit(const float* x, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
                                       const float* const* scale_rows, int64_t block_cols, float* y, int64_t ldy) {
  constexpr int kSub = TileRows<M>() < R ? TileRows<M>() : R;
  for (int r = 0; r < R; r += kSub) {
    Tile<M, kSub>(x, ldx, w + r * ld, ld, k, scale_rows + r, block_cols, y + r, ldy);
  }
}

// R weight rows (kRows, 4 or 1) against every row of x.
template <int R> void RowGroup(const float* x, int64_t m, int64_t ldx, const uint8_t* w, int64_t ld, int64_t k,
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

// Calls group.template operator()<R>(n, scale_rows) over output rows [n0, n1): groups
// of kRows rows, then one group of 4 (a tail of 4..7 rows), then single rows;
// scale_rows[r] is row n + r's block scales.
template <typename Group> void ForEachRowGroup(const WeightView& w, int64_t n0, int64_t n1, Group&& group) {
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) {
    const float* rows[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = w.ScaleRow(n + r);
    group.template operator()<kRows>(n, rows);
  }
  if (n + 4 <= n1) {
    const float* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = w.ScaleRow(n + r);
    group.template operator()<4>(n, rows);
    n += 4;
  }
  for (; n < n1; ++n) {
    const float* rows[1] = {w.ScaleRow(n)};
    group.template operator()<1>(n, rows);
  }
}

// Output rows [n0, n1).
void Rows(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  ForEachRowGroup(w, n0, n1, [&]<int R>(int64_t n, const float* const* scale_rows) {
    RowGroup<R>(x, m, ldx, base + n * w.ld, w.ld, w.cols, scale_rows, w.block_cols, y + n, ldy);
  });
}

// ---- bf16 path: e4m3 -> bf16 by byte lookups, vdpbf16ps ---------------------

// Every function down to the pop below may use AVX512_VBMI (vpermi2b); the
// dispatcher calls them only where the CPU has it. clang (the fuzz build) spells
// the region its own way.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512vbmi"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512vbmi")
#endif

// Weights per step: one 64-byte load of e4m3 bytes per row.
constexpr int64_t kStep = 64;
// Software prefetch distance: each row's current line is prefetched ~32 KiB of
// weights ahead (row r + prefetch_rows, at least one row group on), into L2
// (T1). Measured on one loaded Zen 4 core, 102400 x 2048 from DRAM: T0 at 16
// rows (the f32 path's choice) ~14 GB/s, the fast kernel there being bound by
// the loads' L1 misses; T1 at 32-64 KiB ahead 23-29 GB/s; 128-512 KiB 22-28.
constexpr int64_t kPrefetchBytes = int64_t{32} << 10;

// bf16(e4m3 magnitude b) for b = 0..127, split into its high byte (sign clear)
// and low byte: the two vpermi2b tables. Exact: every e4m3 value has at most 4
// significant bits and an exponent in [-9, 8], so its f32 bits end in 16 zeros.
struct Lut {
  alignas(64) uint8_t high[128];
  alignas(64) uint8_t low[128];
};

const Lut& Fp8Bf16Lut() {
  static const Lut lut = [] {
    Lut t{};
    for (int b = 0; b < 128; ++b) {
      const float f = Fp8E4M3ToF32(static_cast<uint8_t>(b));
      uint32_t u;
      std::memcpy(&u, &f, sizeof(u));
      t.high[b] = static_cast<uint8_t>(u >> 24);
      t.low[b] = static_cast<uint8_t>(u >> 16);
    }
    return t;
  }();
  return lut;
}

struct LutRegs {
  __m512i h0, h1, l0, l1;
  explicit LutRegs(const Lut& t)
      : h0(_mm512_load_si512(t.high)),
        h1(_mm512_load_si512(t.high + 64)),
        l0(_mm512_load_si512(t.low)),
        l1(_mm512_load_si512(t.low + 64)) {}
};

inline __m512bh AsBh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// 64 e4m3 bytes -> 64 exact bf16 values, in the lane-permuted order above:
// lo = bytes 0-7, 16-23, 32-39, 48-55; hi = bytes 8-15, 24-31, 40-47, 56-63.
inline void Fp8x64ToBf16(__m512i bytes, const LutRegs& t, __m512i& lo, __m512i& hi) {
  __m512i h = _mm512_permutex2var_epi8(t.h0, bytes, t.h1);
  // h | (bytes & 0x80): the sign bit.
  h = _mm512_ternarylogic_epi32(h, bytes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  const __m512i l = _mm512_permutex2var_epi8(t.l0, bytes, t.l1);
  lo = _mm512_unpacklo_epi8(l, h);
  hi = _mm512_unpackhi_epi8(l, h);
}

// x rows rounded to bf16 in the weights' order: for every column block, its
// 64-column steps (the last one zero-padded) of 64 bf16 each, the 32 that pair
// with `lo` first, then the 32 for `hi`. A block takes BlockStride() values.
int64_t BlockStride(int64_t block_cols) { return (block_cols + kStep - 1) / kStep * kStep; }

void RoundX(const float* x, int64_t m, int64_t ldx, int64_t k, int64_t block_cols, bf16* out, int64_t ldo) {
  const int64_t stride = BlockStride(block_cols);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    bf16* oi = out + i * ldo;
    for (int64_t k0 = 0, block = 0; k0 < k; k0 += block_cols, ++block) {
      const int64_t k1 = std::min(k, k0 + block_cols);
      bf16* o = oi + block * stride;
      for (int64_t c = k0; c < k1; c += kStep, o += kStep) {
        for (int g = 0; g < 4; ++g) {
          const int64_t n = std::clamp<int64_t>(k1 - c - 16 * g, 0, 16);
          const __m512 v = _mm512_maskz_loadu_ps(TailMask16(n), xi + c + 16 * g);
          const __m256i b = RoundToBf16x16(v, /*has_bf16=*/true);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 8 * g), _mm256_castsi256_si128(b));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32 + 8 * g), _mm256_extracti128_si256(b, 1));
        }
      }
    }
  }
}

// What every bf16 tile reads besides its rows: x in bf16 ([m, ldxb], RoundX's
// layout), the block geometry and the lookup tables.
struct Bf16Ctx {
  const bf16* x;
  int64_t ldxb;
  int64_t k;
  int64_t block_cols;
  int64_t block_stride;
  const Lut* lut;
  int64_t prefetch_rows;
};

// y[i][r] = x[i] · w[r] for i < M, r < R, as Tile() but on the bf16 path. kPrefetch: each
// row's line ctx.prefetch_rows rows on is prefetched (row groups of adjacent rows).
template <int M, int R, bool kPrefetch = true> void TileBf16(const Bf16Ctx& ctx, const bf16* x, const uint8_t* w,
                                                             int64_t ld, const float* const* scale_rows, float* y,
                                                             int64_t ldy) {
  const LutRegs t(*ctx.lut);
  __m512 total[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) total[i][r] = _mm512_setzero_ps();
  }
  const int64_t k = ctx.k;
  for (int64_t k0 = 0, block = 0; k0 < k; k0 += ctx.block_cols, ++block) {
    const int64_t k1 = std::min(k, k0 + ctx.block_cols);
    const bf16* xb = x + block * ctx.block_stride;
    __m512 acc[M][R];
    for (int i = 0; i < M; ++i) {
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
    }
    // One step: 64 weights of each row (bytes[r]) against x's 64 at xs.
    auto step = [&](const __m512i* bytes, const bf16* xs) {
      __m512i xl[M], xh[M];
      for (int i = 0; i < M; ++i) {
        xl[i] = _mm512_loadu_si512(xs + i * ctx.ldxb);
        xh[i] = _mm512_loadu_si512(xs + i * ctx.ldxb + 32);
      }
      for (int r = 0; r < R; ++r) {
        __m512i lo, hi;
        Fp8x64ToBf16(bytes[r], t, lo, hi);
        for (int i = 0; i < M; ++i) {
          acc[i][r] = _mm512_dpbf16_ps(acc[i][r], AsBh(xl[i]), AsBh(lo));
          acc[i][r] = _mm512_dpbf16_ps(acc[i][r], AsBh(xh[i]), AsBh(hi));
        }
      }
    };
    int64_t kk = k0;
    const bf16* xs = xb;
    for (; kk + kStep <= k1; kk += kStep, xs += kStep) {
      __m512i bytes[R];
      for (int r = 0; r < R; ++r) {
        if constexpr (kPrefetch) {  // the same line prefetch_rows on (see kPrefetchBytes)
          _mm_prefetch(reinterpret_cast<const char*>(w + (r + ctx.prefetch_rows) * ld + kk), _MM_HINT_T1);
        }
        bytes[r] = _mm512_loadu_si512(w + r * ld + kk);
      }
      step(bytes, xs);
    }
    if (kk < k1) {  // a block's last, partial step: zero bytes decode to +0
      const __mmask64 mask = _cvtu64_mask64((uint64_t{1} << (k1 - kk)) - 1);
      __m512i bytes[R];
      for (int r = 0; r < R; ++r) bytes[r] = _mm512_maskz_loadu_epi8(mask, w + r * ld + kk);
      step(bytes, xs);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(scale_rows[r][block]);
      for (int i = 0; i < M; ++i) total[i][r] = _mm512_fmadd_ps(acc[i][r], s, total[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(total[i][r]);
  }
}

template <int M, int R> void TileSplitBf16(const Bf16Ctx& ctx, const bf16* x, const uint8_t* w, int64_t ld,
                                           const float* const* scale_rows, float* y, int64_t ldy) {
  constexpr int kSub = TileRows<M>() < R ? TileRows<M>() : R;
  for (int r = 0; r < R; r += kSub) {
    TileBf16<M, kSub>(ctx, x, w + r * ld, ld, scale_rows + r, y + r, ldy);
  }
}

template <int R> void RowGroupBf16(const Bf16Ctx& ctx, int64_t m, const uint8_t* w, int64_t ld,
                                   const float* const* scale_rows, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; i += kMaxM) {
    const bf16* xi = ctx.x + i * ctx.ldxb;
    float* yi = y + i * ldy;
    switch (std::min<int64_t>(kMaxM, m - i)) {
      case 1: TileSplitBf16<1, R>(ctx, xi, w, ld, scale_rows, yi, ldy); break;
      case 2: TileSplitBf16<2, R>(ctx, xi, w, ld, scale_rows, yi, ldy); break;
      case 3: TileSplitBf16<3, R>(ctx, xi, w, ld, scale_rows, yi, ldy); break;
      default: TileSplitBf16<4, R>(ctx, xi, w, ld, scale_rows, yi, ldy); break;
    }
  }
}

// With 1-2 rows of x a thread reads its rows as kRowStreams spans side by side
// (ForSpanRows, matmul_internal.h), without the software prefetch, where the row groups
// read 8 adjacent rows: short streams that end every row. Measured on Zen 4 (2 threads,
// weights from memory, old and new alternating pass by pass, GB/s of e4m3 bytes, median),
// in the host's fast minutes: 128 experts of 1408 x 2048 44.3 -> 51.0 (3 spans 48.2, 5
// 48.8), the 102400 x 2048 lm_head 58.1 -> 62.0; m = 2 in slow minutes 36.9 -> 40.2; m = 3
// 0.90x (its arithmetic bounds it), so m = 3 keeps the groups.
constexpr int kRowStreams = 2;

// Rows [n0, n1) as kRowStreams spans against the M = m rows of x; returns the first row no
// span holds (fewer than kRowStreams are left).
template <int M>
int64_t SpanRowsBf16(const Bf16Ctx& ctx, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int S = kRowStreams;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  return ForSpanTiles<M, S>(n0, n1, y, ldy, [&](int64_t row, int64_t span, float* ys) {
    const float* scale_rows[S];
    for (int s = 0; s < S; ++s) scale_rows[s] = w.ScaleRow(row + s * span);
    TileBf16<M, S, /*kPrefetch=*/false>(ctx, ctx.x, base + row * w.ld, span * w.ld, scale_rows, ys, S);
  });
}

// Output rows [n0, n1), as Rows(); with 1-2 rows of x first as spans (SpanRowsBf16).
void RowsBf16(const Bf16Ctx& ctx, int64_t m, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  if (m == 1) n0 = SpanRowsBf16<1>(ctx, w, n0, n1, y, ldy);
  if (m == 2) n0 = SpanRowsBf16<2>(ctx, w, n0, n1, y, ldy);
  ForEachRowGroup(w, n0, n1, [&]<int R>(int64_t n, const float* const* scale_rows) {
    RowGroupBf16<R>(ctx, m, base + n * w.ld, w.ld, scale_rows, y + n, ldy);
  });
}

void GemvFp8Bf16(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  const int64_t blocks = (w.cols + w.block_cols - 1) / w.block_cols;
  const int64_t stride = BlockStride(w.block_cols);
  const int64_t ldxb = std::max<int64_t>(blocks, 1) * stride;
  // x in bf16, [m, ldxb] per thread, grown once: a decode step allocates nothing.
  // Shared with the team below (read-only there).
  thread_local AlignedBuffer x_scratch;
  const size_t bytes = static_cast<size_t>(p.m * ldxb) * sizeof(bf16);
  bf16* xb = GrowAligned<bf16>(x_scratch, bytes);
  RoundX(p.x, p.m, p.ldx, w.cols, w.block_cols, xb, ldxb);
  const int64_t pf_rows = std::max<int64_t>(kRows, (kPrefetchBytes + w.ld - 1) / std::max<int64_t>(w.ld, 1));
  const Bf16Ctx ctx{xb, ldxb, w.cols, w.block_cols, stride, &Fp8Bf16Lut(), pf_rows};
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  SplitRowsOverThreads(parallel, w.rows, kRows,
                       [&](RowRange rows) { RowsBf16(ctx, p.m, w, rows.begin, rows.end, p.y, p.ldy); });
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

}  // namespace

void GemvFp8Avx512(const MatmulProblem& p, bool threaded) {
  if (p.m <= 0 || p.w.rows <= 0) return;
  // AVX512_BF16 without VBMI (Cooper Lake) keeps the f32 path.
  static const bool has_vbmi = __builtin_cpu_supports("avx512vbmi");
  if (GetCpuFeatures().avx512_bf16 && has_vbmi) {
    GemvFp8Bf16(p, threaded);
    return;
  }
  GemvFp8Avx512F32(p, threaded);
}

void GemvFp8Avx512F32(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  if (p.m <= 0 || w.rows <= 0) return;
  if (w.block_cols % 16 != 0) {  // the 16-wide steps would straddle blocks
    MatmulPortable(p, threaded);
    return;
  }
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  // A contiguous, kRows-aligned share per thread: one sequential region each.
  SplitRowsOverThreads(parallel, w.rows, kRows,
                       [&](RowRange rows) { Rows(p.x, p.m, p.ldx, w, rows.begin, rows.end, p.y, p.ldy); });
}

void DequantizeFp8ToBf16Avx512(const WeightView& w, int64_t first, int64_t count, bf16* out, bool has_bf16) {
  if (w.block_cols % 16 != 0) {  // the 16-wide steps would straddle blocks
    DequantizeFp8ToBf16Portable(w, first, count, out);
    return;
  }
  const int64_t k = w.cols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
#pragma omp parallel for schedule(static) if (WorthParallel(count * k) && !omp_in_parallel())
  for (int64_t i = 0; i < count; ++i) {
    const int64_t r = first + i;
    const uint8_t* wr = base + r * w.ld;
    const float* scales = w.ScaleRow(r);
    bf16* out_row = out + i * k;
    for (int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask = TailMask16(std::min<int64_t>(16, k - c));
      // Exact: (value × 2^-8) × (scale × 2^8) rounds once, like value × scale.
      const __m512 v = _mm512_mul_ps(Fp8x16(_mm_maskz_loadu_epi8(mask, wr + c)),
                                     _mm512_set1_ps(scales[c / w.block_cols] * kFp8ViaF16));
      _mm256_mask_storeu_epi16(out_row + c, mask, RoundToBf16x16(v, has_bf16));
    }
  }
}

}  // namespace latte::matmul_internal

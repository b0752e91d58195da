// AVX512_BF16 product for bf16 weights and few rows of x (decode: m = 1 up to
// kBf16DotMaxRows): y = x · wᵀ with x already rounded to bf16.
//
// The weight stays in its checkpoint layout ([n, k] row-major, k contiguous) and
// needs no packing: 32 consecutive bf16 of a weight row and 32 of an x row are one
// register each, and vdpbf16ps multiplies them pairwise and adds each pair into one
// of 16 f32 lanes, so a 64-byte line of a weight row costs one load and one
// instruction per x row (the f32 GEMV, gemv_avx512.cc, widens it in two halves and
// runs two FMAs per x row). That halves the instructions of the memory-bound
// GEMVs (m = 1-4: the routed experts of a batched step) and doubles the arithmetic
// rate of the m = 5-16 products (a batch-16 step's projections, shared experts and
// lm_head), which sit at this machine's ridge point (16 FLOP per weight byte at m =
// 16): oneDNN's GEMM repacks every weight block into its own layout first and kept
// those products compute-bound. Products of bf16 values are exact in f32, so the
// only error beyond the f32 accumulation is x's rounding (the same rounding the
// oneDNN path does); vdpbf16ps flushes bf16 subnormal inputs to zero.
//
// A tile is M x rows (up to 4) by R weight rows (8 for M <= 2, else 4): at most 16
// accumulators, so loads and the 4-6 cycle latency of the dot product stay hidden.
// With 1-3 x rows a thread's rows go as 2 spans side by side (SpanRows). Otherwise rows
// go in groups of 8 (blocks of 16 groups where a tile of x fits in half of L1); the x
// rows in tiles of 4 sweep each group (block) in turn (the first from memory, the later
// ones from cache), every sweep issuing its share of the L2 prefetches of the lines
// ~32 KiB (a block) ahead (as gemv_avx512.cc). Output rows are split into contiguous
// per-thread ranges so each core streams its own part of the matrix.
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt); reached only through
// matmul.cc's dispatch after GetCpuFeatures() reports AVX512F and AVX512_BF16.
// GCC 12's AVX-512 headers build some intrinsics (maskz loads) from
// _mm512_undefined_*, which trips -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <omp.h>

#include <algorithm>

#include "base/parallel.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per row group, x rows per tile.
constexpr int kRows = 8;
constexpr int kMaxM = 4;
// Weight rows per tile for M rows of x: M·R accumulators <= 16.
template <int M> constexpr int TileRows() { return M <= 2 ? 8 : 4; }
// How far ahead the first sweep prefetches (into L2): ~32 KiB of weights.
constexpr int64_t kPrefetchBytes = int64_t{32} << 10;
// With 4 or more x rows and an x tile of at most kXTileCachedBytes (half of L1: rows up
// to 2048 wide), the x tiles sweep blocks of kBlockGroups row groups (128 rows, 512 KiB
// at 2048 wide, prefetched a block ahead) instead of one group: each x tile then stays
// in L1 across 32 weight tiles where with one group all 4 tiles of x cycled through it
// every 8 rows. Zen 4, 2 threads, m = 16, 2048 wide: the 102400 x 2048 lm_head from
// memory 325 -> 340 GFLOP/s (x rows 128 bf16 apart), 2560 x 2048 from L3 354 -> 362 (32);
// with wider rows the x tile no longer fits and blocks ran slower (2816: 0.95x, 4096:
// 0.91x), so those keep one group. Each output is the same tile's, in the same order.
constexpr int64_t kXTileCachedBytes = int64_t{16} << 10;
constexpr int64_t kBlockGroups = 16;

inline __m512bh AsBh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// The sums of a, b, c, d (16 lanes each) as the 4 lanes of one __m128.
inline __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // 128-bit lanes [a0+a2, a1+a3, b0+b2, b1+b3], the same for c, d.
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
  // Lane j holds 4 partial sums of vector j (a, b, c, d).
  __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4E));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xB1));
  // Every element of lane j is now vector j's sum: gather element 0 of each lane.
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// Which lines a sweep prefetches: with `rows` > 0, those of the rows `rows` further on,
// at every `every`-th 32-column step starting from step `phase`. The x tiles of a row
// group each take their share (phase = tile, every = tiles), so the next group's
// lines are requested evenly over the whole group's arithmetic, not all at once in
// the first sweep (at m = 16 the memory would idle through the other three).
struct Prefetch {
  int64_t rows = 0;
  int every = 1;
  int phase = 0;
};

// y[i][r] = x[i] · w[r] for i < M, r < R. `w` points at the tile's first row.
template <int M, int R>
void Tile(const bf16* x, int64_t ldx, const bf16* w, int64_t ld, int64_t k, float* y, int64_t ldy, const Prefetch& pf) {
  __m512 acc[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  auto step = [&](const __m512i* wv, const bf16* xs, __mmask32 mask, bool masked) {
    for (int i = 0; i < M; ++i) {
      const __m512i xv = masked ? _mm512_maskz_loadu_epi16(mask, xs + i * ldx) : _mm512_loadu_si512(xs + i * ldx);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], AsBh(xv), AsBh(wv[r]));
    }
  };
  int64_t kk = 0;
  if (pf.rows > 0) {
    const bf16* ahead = w + pf.rows * ld;
    for (int countdown = pf.phase; kk + 32 <= k; kk += 32, --countdown) {
      __m512i wv[R];
      if (countdown == 0) {
        countdown = pf.every;
        for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(ahead + r * ld + kk), _MM_HINT_T1);
      }
      for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * ld + kk);
      step(wv, x + kk, 0, false);
    }
  } else {
    for (; kk + 32 <= k; kk += 32) {
      __m512i wv[R];
      for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_si512(w + r * ld + kk);
      step(wv, x + kk, 0, false);
    }
  }
  if (kk < k) {  // the last k % 32 columns; masked-off lanes are +0 in both operands
    const __mmask32 mask = _cvtu32_mask32((uint32_t{1} << (k - kk)) - 1);
    __m512i wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_epi16(mask, w + r * ld + kk);
    step(wv, x + kk, mask, true);
  }
  for (int i = 0; i < M; ++i) {
    int r = 0;
    for (; r + 4 <= R; r += 4) {
      _mm_storeu_ps(y + i * ldy + r, Sum4(acc[i][r], acc[i][r + 1], acc[i][r + 2], acc[i][r + 3]));
    }
    // The same sum tree for a lone row, so a row's bits do not depend on which rows
    // (or thread share) it was computed with.
    for (; r < R; ++r) {
      const __m512 z = _mm512_setzero_ps();
      y[i * ldy + r] = _mm_cvtss_f32(Sum4(acc[i][r], z, z, z));
    }
  }
}

// R x `groups` weight rows (R = kRows, 4 or 1) against every row of x: x tiles of up to
// kMaxM rows in turn, each sweeping all the rows in tiles of TileRows<M>() weight rows;
// each x tile prefetches its share of the lines `prefetch_rows` on (none when 0).
template <int R> void RowGroup(const bf16* x, int64_t m, int64_t ldx, const bf16* w, int64_t ld, int64_t k, float* y,
                               int64_t ldy, int64_t prefetch_rows, int64_t groups = 1) {
  const int tiles = static_cast<int>((m + kMaxM - 1) / kMaxM);
  for (int64_t i = 0; i < m; i += kMaxM) {
    const bf16* xi = x + i * ldx;
    float* yi = y + i * ldy;
    const Prefetch pf{prefetch_rows, tiles, static_cast<int>(i / kMaxM)};
    auto split = [&]<int M>() {
      constexpr int kSub = TileRows<M>() < R ? TileRows<M>() : R;
      for (int64_t r = 0; r < R * groups; r += kSub) Tile<M, kSub>(xi, ldx, w + r * ld, ld, k, yi + r, ldy, pf);
    };
    switch (std::min<int64_t>(kMaxM, m - i)) {
      case 1: split.template operator()<1>(); break;
      case 2: split.template operator()<2>(); break;
      case 3: split.template operator()<3>(); break;
      default: split.template operator()<4>(); break;
    }
  }
}

// With 1-3 rows of x (decode; a batched step's routed experts) a thread reads its rows as
// kRowStreams spans side by side (ForSpanRows, matmul_internal.h), without the software
// prefetch, where the row groups read 8 adjacent rows: short streams that end every row,
// which the hardware prefetcher does not follow (hence the groups' prefetch). Measured on
// Zen 4 (2 threads, 128 expert matrices of 1408 x 2048 from memory, old and new
// alternating pass by pass, GB/s median): in the host's fast minutes 46-47 as groups, 52.4
// as 2 spans, 50-51 as 3-6, 47 as 7-8, and 33 for 3 spans each with a prefetch 8 KiB ahead;
// in its slow minutes (~32 GB/s) 1.01-1.04x at m = 1, 1.03x at m = 2, 1.07x at m = 3.
constexpr int kRowStreams = 2;

// Rows [n0, n1) as kRowStreams spans against the M = p.m rows of x; returns the first row
// no span holds (fewer than kRowStreams are left).
template <int M> int64_t SpanRows(const Bf16XProblem& p, int64_t n0, int64_t n1) {
  constexpr int S = kRowStreams;
  const WeightView& w = p.w;
  const bf16* base = static_cast<const bf16*>(w.data);
  return ForSpanTiles<M, S>(n0, n1, p.y, p.ldy, [&](int64_t row, int64_t span, float* ys) {
    Tile<M, S>(p.x, p.ldx, base + row * w.ld, span * w.ld, w.cols, ys, S, Prefetch{});
  });
}

// Output rows [n0, n1): with 1-3 rows of x as spans (SpanRows), else blocks of
// kBlockGroups groups where they apply, groups of kRows, then one of 4; then single
// rows. A group (block) prefetches only rows inside [n0, n1) (the next ones of this
// thread's range).
void Rows(const Bf16XProblem& p, int64_t n0, int64_t n1) {
  const WeightView& w = p.w;
  const bf16* base = static_cast<const bf16*>(w.data);
  const int64_t row_bytes = std::max<int64_t>(w.ld * 2, 1);
  const int64_t ahead = std::max<int64_t>(kRows, (kPrefetchBytes + row_bytes - 1) / row_bytes);
  auto group = [&]<int R>(int64_t n) {
    const int64_t pf = n + ahead + R <= n1 ? ahead : 0;
    RowGroup<R>(p.x, p.m, p.ldx, base + n * w.ld, w.ld, w.cols, p.y + n, p.ldy, pf);
  };
  int64_t n = n0;
  switch (p.m) {
    case 1: n = SpanRows<1>(p, n0, n1); break;
    case 2: n = SpanRows<2>(p, n0, n1); break;
    case 3: n = SpanRows<3>(p, n0, n1); break;
    default: break;
  }
  if (p.m > 3 && kMaxM * w.cols * static_cast<int64_t>(sizeof(bf16)) <= kXTileCachedBytes) {
    const int64_t block = kRows * kBlockGroups;
    for (; n + block <= n1; n += block) {
      const int64_t pf = n + 2 * block <= n1 ? block : 0;
      RowGroup<kRows>(p.x, p.m, p.ldx, base + n * w.ld, w.ld, w.cols, p.y + n, p.ldy, pf, kBlockGroups);
    }
  }
  for (; n + kRows <= n1; n += kRows) group.template operator()<kRows>(n);
  if (n + 4 <= n1) {
    group.template operator()<4>(n);
    n += 4;
  }
  for (; n < n1; ++n) group.template operator()<1>(n);
}

}  // namespace

void MatmulBf16DotAvx512(const Bf16XProblem& p, bool threaded) {
  if (p.m <= 0 || p.w.rows <= 0) return;
  const WeightView& w = p.w;
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  SplitRowsOverThreads(parallel, w.rows, kRows, [&](RowRange rows) { Rows(p, rows.begin, rows.end); });
}

}  // namespace latte::matmul_internal

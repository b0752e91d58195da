// AVX2 GEMV for small m on CPUs without AVX-512 (Zen 2/3, Haswell .. Alder Lake):
// y = x · wᵀ for f32, bf16 and f16 weights. The AVX-512 GEMV (gemv_avx512.cc) with
// 8-float registers: output rows go in groups of kRows, each group against every row
// of x, in tiles of M x rows by R weight rows; every weight vector is loaded and
// converted once per tile and FMA'd into the accumulators of all M x rows. x stays
// f32, so the only rounding is the f32 accumulation. Output rows are split into
// contiguous per-thread ranges so each core streams its own part of the matrix, with
// an L2 prefetch kPrefetchRows rows ahead; bf16 weights against 1-3 x rows are read as
// several spans side by side instead (Bf16SpanRows).
//
// bf16 weights: 16 at a time in one 32-byte load, widened exactly with two integer
// ops (a bf16 is the top half of an f32): `<< 16` gives the even-numbered columns in
// the 8 lanes, `& 0xffff0000` the odd ones. x is copied once per call into the same
// order (per 16 columns, the 8 even then the 8 odd ones; zero-padded to whole groups),
// so two FMAs per x row take the 16 columns. That is 2 integer ops per 16 weights
// where zero-extending (vpmovzxwd + vpslld, as f16's vcvtph2ps) takes 4, which
// matters from a few rows of x on, when the FMAs, not memory, bound the GEMV.
//
// Each output's sum runs over its columns in the same order whatever the tile (its
// own 8-lane accumulator, one FMA per 8 columns in order, the tail last, the same
// horizontal sum), so a row's result does not depend on which rows, x rows or threads
// share its call (MatmulMany splits a problem's rows anywhere).
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
#include "kernels/bf16_avx2_inl.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// Weight rows per group (the unit of the thread split and of the prefetch), and x
// rows per tile. Tiles fit the 16 ymm registers: M x R accumulators plus the R
// converted weight vectors and one x vector; TileRows below.
constexpr int kRows = 4;
constexpr int kMaxM = 4;
// Rows ahead for the L2 prefetch (8 rows of a 2048-wide bf16 matrix: 32 KiB).
constexpr int64_t kPrefetchRows = 8;

// Weight rows per tile for M rows of x: M·R + R + 1 <= 16 registers (Bf16Step widens a
// bf16 row's even halves, then its odd ones, into the same R vectors). bf16 takes 4 rows
// up to 3 x rows (M = 3: 17 registers, one spilled) and 2 from 4 on. The routed experts of
// a batched decode see 1-3 x rows each, and there they read from memory: with 2-row tiles
// (1408 x 2048, 2 threads of a Zen 2) m = 2 read 23.7 GB/s and m = 3 22.7 where m = 1's
// 4-row tiles read 35; 4 rows took m = 2 to 33.6 and m = 3 to 25.5.
template <DType kW, int M> constexpr int TileRows() {
  if constexpr (M == 1) return 4;
  if constexpr (kW == DType::kBF16) return M <= 3 ? 4 : 2;
  return M == 2 ? 4 : 2;
}

template <DType kW> constexpr size_t kWSize = kW == DType::kF32 ? 4 : 2;

// ---- f32 and f16: 8 columns per step ----------------------------------------------

template <DType kW> inline __m256 LoadW(const void* base, int64_t off) {
  if constexpr (kW == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(base) + off);
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + off)));
  }
}

// The first `count` (< 8) weights at `off`, zero beyond; reads nothing past them.
template <DType kW> inline __m256 LoadWTail(const void* base, int64_t off, int64_t count, __m256i mask) {
  if constexpr (kW == DType::kF32) {
    return _mm256_maskload_ps(static_cast<const float*>(base) + off, mask);
  } else {
    alignas(16) uint16_t buf[8] = {};
    std::memcpy(buf, static_cast<const uint16_t*>(base) + off, static_cast<size_t>(count) * 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(buf)));
  }
}

// y[i][r] = x[i] · w[r] for i < M, r < R. `w` points at row 0 of the tile.
template <DType kW, int M, int R> void Tile(const float* x, int64_t ldx, const void* w, int64_t ld, int64_t k, float* y,
                                            int64_t ldy, const char* const* prefetch) {
  const size_t esize = kWSize<kW>;
  const char* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = static_cast<const char*>(w) + static_cast<size_t>(r * ld) * esize;
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    if (prefetch != nullptr && (kk * esize) % 64 == 0) {
      for (int r = 0; r < kRows; ++r) _mm_prefetch(prefetch[r] + kk * esize, _MM_HINT_T1);
    }
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = LoadW<kW>(wr[r], kk);
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (kk < k) {
    const __m256i mask = TailMask8(k - kk);
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = LoadWTail<kW>(wr[r], kk, k - kk, mask);
    for (int i = 0; i < M; ++i) {
      const __m256 xv = _mm256_maskload_ps(x + i * ldx + kk, mask);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(acc[i][r]);
  }
}

// ---- bf16: 16 columns per step, x in even/odd order ------------------------------

// y[i][r] = x[i] · w[r] for i < M, r < R; xp: x permuted (PermuteX), row stride ldp.
template <int M, int R> void TileBf16(const float* xp, int64_t ldp, const bf16* w, int64_t ld, int64_t k, float* y,
                                      int64_t ldy, const char* const* prefetch) {
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    if (prefetch != nullptr && kk % 32 == 0) {
      for (int r = 0; r < kRows; ++r) _mm_prefetch(prefetch[r] + kk * 2, _MM_HINT_T1);
    }
    Bf16Step<M, R>(xp + kk, ldp, w + kk, ld, acc);
  }
  if (kk < k) {
    Bf16TailStep<M, R>(xp + kk, ldp, w + kk, ld, k - kk, acc);
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = HorizontalSum(acc[i][r]);
  }
}

// ---- rows, groups, threads ---------------------------------------------------------

// x as the tiles read it: f32 / f16 the caller's rows; bf16 the permuted copy.
struct XRows {
  const float* x;
  int64_t m;
  int64_t ldx;
};

template <DType kW, int M, int R> void RunTile(const XRows& x, int64_t i, const WeightView& w, int64_t n, float* y,
                                               int64_t ldy, const char* const* prefetch) {
  const float* xi = x.x + i * x.ldx;
  float* yi = y + i * ldy + n;
  if constexpr (kW == DType::kBF16) {
    TileBf16<M, R>(xi, x.ldx, static_cast<const bf16*>(w.data) + n * w.ld, w.ld, w.cols, yi, ldy, prefetch);
  } else {
    Tile<kW, M, R>(xi, x.ldx, static_cast<const char*>(w.data) + static_cast<size_t>(n * w.ld) * kWSize<kW>, w.ld,
                   w.cols, yi, ldy, prefetch);
  }
}

// Weight rows [n, n + G) (G = kRows, or 1 for the last rows) against x rows [i, i + M),
// in tiles of TileRows<kW, M>() rows; the first tile prefetches the group's rows ahead.
template <DType kW, int M, int G> void GroupTiles(const XRows& x, int64_t i, const WeightView& w, int64_t n, float* y,
                                                  int64_t ldy, const char* const* prefetch) {
  constexpr int R = TileRows<kW, M>() < G ? TileRows<kW, M>() : G;
  static_assert(G % R == 0, "tiles must cover the group exactly");
  for (int r = 0; r < G; r += R) RunTile<kW, M, R>(x, i, w, n + r, y, ldy, r == 0 ? prefetch : nullptr);
}

template <DType kW, int G>
void Group(const XRows& x, const WeightView& w, int64_t n, float* y, int64_t ldy, const char* const* prefetch) {
  for (int64_t i = 0; i < x.m; i += kMaxM) {
    const char* const* p = i == 0 ? prefetch : nullptr;
    switch (std::min<int64_t>(kMaxM, x.m - i)) {
      case 1: GroupTiles<kW, 1, G>(x, i, w, n, y, ldy, p); break;
      case 2: GroupTiles<kW, 2, G>(x, i, w, n, y, ldy, p); break;
      case 3: GroupTiles<kW, 3, G>(x, i, w, n, y, ldy, p); break;
      default: GroupTiles<kW, 4, G>(x, i, w, n, y, ldy, p); break;
    }
  }
}

// Spans a bf16 GEMV with one x row reads side by side (ForSpanRows), with no software
// prefetch. tg128 on bf16 weights, Zen 2, 2 threads: 31 tok/s as 4-row tiles with the
// prefetch 8 rows ahead; as spans with a prefetch of each span's next row 35.5 (2), 40-43
// (3), 39-40 (4), 37-39 (5); without it 37-40 (3), 42 (4), 43-45 (5), 40-45 (7).
constexpr int kBf16RowStreams = 5;
// With 2 or 3 x rows (a batched decode's routed experts), 3 spans: M · 3 accumulators, 3
// weight vectors and x's fit the 16 registers. 16 sequences decoding on bf16 weights (Zen 2,
// 2 threads): 88-93 tok/s as 4-row tiles, 100-101 as 3 spans, 92-94 as 5 (M = 2) or 4 (M = 3).
constexpr int kBf16SmallMRowStreams = 3;

// bf16 weight rows [n0, n1) against the M rows of x, S spans side by side; returns the
// first row no span holds.
template <int M, int S>
int64_t Bf16SpanRows(const XRows& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const bf16* base = static_cast<const bf16*>(w.data);
  return ForSpanTiles<M, S>(n0, n1, y, ldy, [&](int64_t row, int64_t span, float* ys) {
    TileBf16<M, S>(x.x, x.ldx, base + row * w.ld, span * w.ld, w.cols, ys, S, /*prefetch=*/nullptr);
  });
}

// Output rows [n0, n1).
template <DType kW> void Rows(const XRows& x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t row_bytes = static_cast<size_t>(w.ld) * kWSize<kW>;
  const char* base = static_cast<const char*>(w.data);
  if constexpr (kW == DType::kBF16) {
    switch (x.m) {
      case 1: n0 = Bf16SpanRows<1, kBf16RowStreams>(x, w, n0, n1, y, ldy); break;
      case 2: n0 = Bf16SpanRows<2, kBf16SmallMRowStreams>(x, w, n0, n1, y, ldy); break;
      case 3: n0 = Bf16SpanRows<3, kBf16SmallMRowStreams>(x, w, n0, n1, y, ldy); break;
      default: break;
    }
  }
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) {
    const char* ahead[kRows];
    for (int r = 0; r < kRows; ++r) ahead[r] = base + (n + kPrefetchRows + r) * row_bytes;
    Group<kW, kRows>(x, w, n, y, ldy, n + kPrefetchRows + kRows <= n1 ? ahead : nullptr);
  }
  for (; n < n1; ++n) Group<kW, 1>(x, w, n, y, ldy, nullptr);
}

template <DType kW> void Gemv(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  XRows x{p.x, p.m, p.ldx};
  if constexpr (kW == DType::kBF16) {
    // Per-thread, grown only: a decode step allocates nothing once warm. Filled by the
    // calling thread before the team reads it.
    thread_local std::vector<float> permuted;
    const int64_t ldp = PermutedXStride(w.cols);
    float* xp = Grow(permuted, p.m * ldp);
    PermuteX(p.x, p.m, p.ldx, w.cols, xp, ldp);
    x = {xp, p.m, ldp};
  }
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  // A contiguous, kRows-aligned share per thread: one sequential region each.
  SplitRowsOverThreads(parallel, w.rows, kRows,
                       [&](RowRange rows) { Rows<kW>(x, w, rows.begin, rows.end, p.y, p.ldy); });
}

}  // namespace

void GemvAvx2(const MatmulProblem& p, bool threaded) {
  if (p.m <= 0 || p.w.rows <= 0) return;
  if (p.w.dtype == DType::kBF16) {
    Gemv<DType::kBF16>(p, threaded);
  } else if (p.w.dtype == DType::kF16) {
    Gemv<DType::kF16>(p, threaded);
  } else {
    Gemv<DType::kF32>(p, threaded);
  }
}

}  // namespace latte::matmul_internal

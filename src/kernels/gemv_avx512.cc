// AVX-512 GEMV for small m (batch-1 / few-token decode): y = x · wᵀ.
//
// Memory-bound: a bf16 weight byte feeds m/2 FMAs, so the kernel's job is to
// read each weight row exactly once at full bandwidth. A tile is kRows weight
// rows x up to kMaxM rows of x: every 16-wide weight vector is loaded (and, for
// bf16, widened to f32 with a zero-extend + shift: bf16 is the top half of an
// f32) once and FMA'd into the accumulators of all x rows of the tile. x stays
// f32 (read from L1: a 2048-wide row is 8 KiB), so the only rounding is the
// f32 accumulation itself. With one row of x a thread's rows go as 2 spans side by
// side instead (SpanRows). Output rows are split into contiguous per-thread ranges so
// each core streams its own part of the matrix.
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

#include "base/parallel.h"
#include "kernels/avx512_inl.h"
#include "kernels/matmul_internal.h"

namespace latte::matmul_internal {
namespace {

// 4 weight rows x 4 x rows = 16 accumulators + 4 weight + 4 x registers of 32.
// Four rows in flight also give the prefetchers four sequential streams per core.
constexpr int kRows = 4;
constexpr int kMaxM = 4;
// Rows ahead for the L2 prefetch (8 rows of a 2048-wide bf16 matrix: 32 KiB).
constexpr int64_t kPrefetchRows = 8;

// kW: the weight dtype, kF32, kBF16 or kF16.
template <DType kW> constexpr size_t kWSize = kW == DType::kF32 ? 4 : 2;

template <DType kW> inline __m512 LoadW(const void* base, int64_t off) {
  if constexpr (kW == DType::kBF16) {
    return WidenBf16x16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const bf16*>(base) + off)));
  } else if constexpr (kW == DType::kF16) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + off)));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(base) + off);
  }
}

template <DType kW> inline __m512 LoadWMasked(const void* base, int64_t off, __mmask16 mask) {
  if constexpr (kW == DType::kBF16) {
    return WidenBf16x16(_mm256_maskz_loadu_epi16(mask, static_cast<const bf16*>(base) + off));
  } else if constexpr (kW == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(base) + off));
  } else {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(base) + off);
  }
}

// y[i][n0 + r] = x[i] · w[n0 + r] for i < M, r < R. `w` points at row n0.
template <DType kW, int M, int R>
void Tile(const float* x, int64_t ldx, const void* w, int64_t ld, int64_t k, float* y, int64_t ldy, bool prefetch) {
  const size_t esize = kWSize<kW>;
  const void* wr[R];
  for (int r = 0; r < R; ++r) {
    wr[r] = static_cast<const char*>(w) + static_cast<size_t>(r * ld) * esize;
  }
  __m512 acc[M][R];
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  // L2 prefetch of the same columns kPrefetchRows rows further down: each row is a
  // separate stream, and 4 KiB rows (k = 2048 bf16) end before the hardware
  // prefetcher has ramped up on them.
  const char* ahead[R];
  for (int r = 0; r < R; ++r) {
    ahead[r] = static_cast<const char*>(wr[r]) + static_cast<size_t>(kPrefetchRows * ld) * esize;
  }
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    __m512 wv[R];
    if ((kk * esize) % 64 == 0 && prefetch) {
      for (int r = 0; r < R; ++r) _mm_prefetch(ahead[r] + kk * esize, _MM_HINT_T1);
    }
    for (int r = 0; r < R; ++r) wv[r] = LoadW<kW>(wr[r], kk);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + kk);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (kk < k) {
    const __mmask16 mask = TailMask16(k - kk);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = LoadWMasked<kW>(wr[r], kk, mask);
    for (int i = 0; i < M; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(mask, x + i * ldx + kk);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i) {
    for (int r = 0; r < R; ++r) y[i * ldy + r] = _mm512_reduce_add_ps(acc[i][r]);
  }
}

template <DType kW, int R> void TileAnyM(const float* x, int64_t m, int64_t ldx, const void* w, int64_t ld, int64_t k,
                                         float* y, int64_t ldy, bool prefetch) {
  for (int64_t i = 0; i < m; i += kMaxM) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    switch (std::min<int64_t>(kMaxM, m - i)) {
      case 1: Tile<kW, 1, R>(xi, ldx, w, ld, k, yi, ldy, prefetch && i == 0); break;
      case 2: Tile<kW, 2, R>(xi, ldx, w, ld, k, yi, ldy, prefetch && i == 0); break;
      case 3: Tile<kW, 3, R>(xi, ldx, w, ld, k, yi, ldy, prefetch && i == 0); break;
      default: Tile<kW, 4, R>(xi, ldx, w, ld, k, yi, ldy, prefetch && i == 0); break;
    }
  }
}

// With one row of x (decode) a thread reads its rows as kRowStreams spans side by side
// (ForSpanTiles, matmul_internal.h) without the software prefetch, where the 4-row tiles
// read 4 adjacent rows: short streams that end every row, which the hardware prefetcher
// does not follow (hence their prefetch). Measured on Zen 4 (this path forced there: 2
// threads, 128 matrices from memory, old and new alternating pass by pass, GB/s median
// ratio) in the host's slow minutes: bf16 1408 x 2048 1.07-1.12x, lm_head 102400 x 2048
// 1.07x, f16 1.04-1.09x, f32 704 x 2048 1.04-1.11x; in a faster minute f16 1.27x, bf16
// 1.09x. With 2 x rows spans were even (1.01), with 3 slower (0.76: 3 x 2 tiles spend
// more instructions per weight than 3 x 4), so those keep the tiles.
constexpr int kRowStreams = 2;

// Rows [n0, n1) as kRowStreams spans against one row of x; returns the first row no
// span holds (fewer than kRowStreams are left).
template <DType kW>
int64_t SpanRows(const float* x, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  constexpr int S = kRowStreams;
  const char* base = static_cast<const char*>(w.data);
  return ForSpanTiles<1, S>(n0, n1, y, ldy, [&](int64_t row, int64_t span, float* ys) {
    Tile<kW, 1, S>(x, 0, base + static_cast<size_t>(row * w.ld) * kWSize<kW>, span * w.ld, w.cols, ys, S, false);
  });
}

// Output rows [n0, n1): with one row of x as spans (SpanRows), else tiles of kRows; then
// single rows.
template <DType kW>
void Rows(const float* x, int64_t m, int64_t ldx, const WeightView& w, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const size_t esize = kWSize<kW>;
  const char* base = static_cast<const char*>(w.data);
  int64_t n = m == 1 ? SpanRows<kW>(x, w, n0, n1, y, ldy) : n0;
  for (; n + kRows <= n1; n += kRows) {
    TileAnyM<kW, kRows>(x, m, ldx, base + static_cast<size_t>(n * w.ld) * esize, w.ld, w.cols, y + n, ldy,
                        n + kPrefetchRows + kRows <= n1);
  }
  for (; n < n1; ++n) {
    TileAnyM<kW, 1>(x, m, ldx, base + static_cast<size_t>(n * w.ld) * esize, w.ld, w.cols, y + n, ldy, false);
  }
}

template <DType kW> void Gemv(const MatmulProblem& p, bool threaded) {
  const WeightView& w = p.w;
  const bool parallel = threaded && w.rows >= 2 * kRows && WorthParallel(w.rows * w.cols);
  // A contiguous, kRows-aligned share per thread: one sequential region each.
  SplitRowsOverThreads(parallel, w.rows, kRows,
                       [&](RowRange rows) { Rows<kW>(p.x, p.m, p.ldx, w, rows.begin, rows.end, p.y, p.ldy); });
}

}  // namespace

void GemvAvx512(const MatmulProblem& p, bool threaded) {
  if (p.w.dtype == DType::kBF16) {
    Gemv<DType::kBF16>(p, threaded);
  } else if (p.w.dtype == DType::kF16) {
    Gemv<DType::kF16>(p, threaded);
  } else {
    Gemv<DType::kF32>(p, threaded);
  }
}

}  // namespace latte::matmul_internal

// AVX512_BF16 block kernels of SharedKeyAttention over bf16 rows (the latent cache of
// a bf16 model): every dot product is vdpbf16ps, 32 bf16 products per instruction,
// twice the f32 FMA's, and the rows are half the bytes of f32 ones.
//
// Per block of n <= 64 cache rows, for all heads (q rounded to bf16 once per call):
//  - scores: register tiles of 4 heads x 4 rows (16 zmm accumulators), each step a
//    32-value slice of the row_dim-wide dots: 8 loads per 16 vdpbf16ps; the 16 sums
//    are reduced together by the transpose-add network of attention_avx512_inl.h;
//  - softmax: the f32 online-softmax step; the weights are rounded to bf16 (and their
//    rounded values summed) for the value side;
//  - values: vdpbf16ps multiplies pairs, and here the summed axis is the rows, so the
//    block's value columns are first interleaved two rows at a time
//    (SharedKeyPairRowsAvx512: one vpermt2w per 16 columns of a row pair, once per
//    block, shared by every head); then tiles of 4 heads x 64 columns (16 zmm
//    accumulators) take one pair of rows per step: 4 loads + 4 broadcast weight pairs
//    per 16 vdpbf16ps. Column tiles are the outer loop so the block's paired slice
//    (32 pairs x 64 columns x 4 B = 8 KiB) stays in L1 while every head tile reads it.
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt); reached only through
// attention.cc's dispatch after GetCpuFeatures().avx512_bf16.
// GCC 12's AVX-512 headers build some intrinsics (reduce_add, maskz loads) from
// _mm512_undefined_*, which trips -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/attention_avx512_inl.h"
#include "kernels/attention_internal.h"

namespace latte::attention_internal {
namespace {

inline __mmask32 TailMask32(int64_t count) {  // the low `count` 16-bit lanes, count in [0, 32]
  return count >= 32 ? static_cast<__mmask32>(0xFFFFFFFFu) : static_cast<__mmask32>((1u << count) - 1u);
}

inline __m512bh LoadBf16(const bf16* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh LoadBf16(__mmask32 m, const bf16* p) { return (__m512bh)_mm512_maskz_loadu_epi16(m, p); }

// scores[h * ld + r] = scale · q[h] · rows[r] for h < H, r < R. With `prefetch`, also
// prefetches rows prefetch[0 .. R) (same stride), one 64-byte line of each per step,
// into L2 (a whole 72 KiB block ahead would evict L1's q and scores: prefetching into
// L1 measured 10-15% slower at 16 heads over 32k rows from memory).
template <int H, int R> inline void ScoresTile(const bf16* q, const bf16* rows, int64_t row_dim, float scale,
                                               float* scores, int64_t ld, const bf16* prefetch) {
  __m512 acc[H][R];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[h][r] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= row_dim; k += 32) {
    if (prefetch != nullptr) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + r * row_dim + k), _MM_HINT_T1);
      }
    }
    __m512bh rv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) rv[r] = LoadBf16(rows + r * row_dim + k);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512bh qv = LoadBf16(q + h * row_dim + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[h][r] = _mm512_dpbf16_ps(acc[h][r], qv, rv[r]);
    }
  }
  if (k < row_dim) {
    const __mmask32 m = TailMask32(row_dim - k);
    __m512bh rv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) rv[r] = LoadBf16(m, rows + r * row_dim + k);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512bh qv = LoadBf16(m, q + h * row_dim + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[h][r] = _mm512_dpbf16_ps(acc[h][r], qv, rv[r]);
    }
  }
  StoreScoresTile<H, R>(acc, scale, scores, ld);
}

using ScoresTileFn = void (*)(const bf16*, const bf16*, int64_t, float, float*, int64_t, const bf16*);

// kScoresTiles[H - 1][R - 1] = ScoresTile<H, R>.
template <int H>
constexpr ScoresTileFn kScoresTileRow[4] = {ScoresTile<H, 1>, ScoresTile<H, 2>, ScoresTile<H, 3>, ScoresTile<H, 4>};
constexpr const ScoresTileFn* kScoresTiles[4] = {kScoresTileRow<1>, kScoresTileRow<2>, kScoresTileRow<3>,
                                                 kScoresTileRow<4>};

// Heads are taken in groups of 16 whose q (16 x 576 bf16 = 18 KiB) stays in L1 while
// every 4-row tile of the block is scored against all of them: each row is read into
// L1 once per group (once per step for V2-Lite's 16 heads) rather than once per 4
// heads, and the rows never need to fit in L1 (a 64-row block is 72 KiB).
constexpr int64_t kScoresHeadGroup = 16;

// acc[h * lda + v * 16 + i] = acc · rescale[h] + Σ_u p-pair(h, u) · pair(u, v * 16 + i) for
// h < H, v < V, u < num_pairs; `pairs` points at the tile's first column of pair 0 (pair
// stride ldp2 bf16 values); the last vector covers the columns in `last` (and `last32`
// of the pair values).
template <int H, int V> inline void AccumulateTile(const bf16* p, int64_t ldp, const bf16* pairs, int64_t ldp2,
                                                   int64_t num_pairs, const float* rescale, float* acc, int64_t lda,
                                                   __mmask16 last, __mmask32 last32) {
  __m512 a[H][V];
  LoadRescaledAccumulators<H, V>(acc, lda, rescale, last, a);
  for (int64_t u = 0; u < num_pairs; ++u) {
    const bf16* row = pairs + u * ldp2;
    __m512bh rv[V];
#pragma GCC unroll 16
    for (int v = 0; v < V - 1; ++v) rv[v] = LoadBf16(row + v * 32);
    rv[V - 1] = LoadBf16(last32, row + (V - 1) * 32);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      int32_t w2;  // the weights of rows 2u and 2u + 1, as one 32-bit lane
      std::memcpy(&w2, p + h * ldp + 2 * u, sizeof w2);
      const __m512bh w = (__m512bh)_mm512_set1_epi32(w2);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) a[h][v] = _mm512_dpbf16_ps(a[h][v], w, rv[v]);
    }
  }
  StoreAccumulators<H, V>(a, last, acc, lda);
}

template <int V> inline void AccumulateColumns(const bf16* p, int64_t ldp, int64_t heads, const bf16* pairs,
                                               int64_t ldp2, int64_t num_pairs, int64_t lda, const float* rescale,
                                               float* acc, __mmask16 last, __mmask32 last32) {
  ForEachHeadTile(heads, [&]<int H>(int64_t h) {
    AccumulateTile<H, V>(p + h * ldp, ldp, pairs, ldp2, num_pairs, rescale ? rescale + h : nullptr, acc + h * lda, lda,
                         last, last32);
  });
}

}  // namespace

void SharedKeyScoresBf16Dp(const bf16* q, int64_t heads, const bf16* rows, int64_t n, int64_t row_dim, float scale,
                           float* scores, int64_t ld, const bf16* next_rows, int64_t next_n) {
  for (int64_t g = 0; g < heads; g += kScoresHeadGroup) {
    const int64_t group_end = std::min(heads, g + kScoresHeadGroup);
    for (int64_t t = 0; t < n; t += 4) {
      const int64_t r = std::min<int64_t>(4, n - t);
      // The first group (the only one that reads the rows from memory rather than
      // cache) prefetches the next block's matching rows, so they arrive meanwhile.
      const bf16* pf = g == 0 && next_rows != nullptr && t + r <= next_n ? next_rows + t * row_dim : nullptr;
      for (int64_t h = g; h < group_end; h += 4) {
        const int64_t hn = std::min<int64_t>(4, group_end - h);
        kScoresTiles[hn - 1][r - 1](q + h * row_dim, rows + t * row_dim, row_dim, scale, scores + h * ld + t, ld,
                                    h == g ? pf : nullptr);
      }
    }
  }
}

void SharedKeySoftmaxBf16Avx512(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum,
                                float* rescale, bf16* p, int64_t ldp) {
  const int64_t n_even = (n + 1) / 2 * 2;
  for (int64_t h = 0; h < heads; ++h) {
    const float* sc = scores + h * ld;
    const float new_max = std::max(max[h], RowMax(sc, n));
    const float r = std::exp(max[h] - new_max);  // 0 on the first block
    const __m512 vnew = _mm512_set1_ps(new_max);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t t = 0; t < n_even; t += 16) {
      const __mmask16 m = TailMask16(std::min<int64_t>(16, n - t));           // the real weights
      const __mmask16 store = TailMask16(std::min<int64_t>(16, n_even - t));  // + the pad
      const __m512 e = _mm512_maskz_mov_ps(m, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + t), vnew)));
      const __m256i eb = RoundToBf16x16(e, /*has_bf16=*/true);
      _mm256_mask_storeu_epi16(p + h * ldp + t, store, eb);
      vsum = _mm512_add_ps(vsum, WidenBf16x16(eb));
    }
    sum[h] = sum[h] * r + _mm512_reduce_add_ps(vsum);
    max[h] = new_max;
    rescale[h] = r;
  }
}

void SharedKeyPairRowsAvx512(const bf16* rows, int64_t n, int64_t row_dim, int64_t value_dim, bf16* pairs) {
  // Lane 2i takes column i of the first row, lane 2i + 1 column i of the second (index
  // 32 + i selects from the second source), for columns [0, 16) and [16, 32) of a slice.
  alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                   8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                   24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLo), hi = _mm512_load_si512(kHi);
  for (int64_t u = 0; u < (n + 1) / 2; ++u) {
    const bf16* r0 = rows + 2 * u * row_dim;
    const bf16* r1 = r0 + row_dim;
    const bool has_second = 2 * u + 1 < n;
    bf16* out = pairs + u * 2 * value_dim;
    for (int64_t j = 0; j < value_dim; j += 32) {
      const int64_t cols = std::min<int64_t>(32, value_dim - j);
      const __mmask32 m = TailMask32(cols);
      const __m512i a = _mm512_maskz_loadu_epi16(m, r0 + j);
      const __m512i b = has_second ? _mm512_maskz_loadu_epi16(m, r1 + j) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi16(out + 2 * j, TailMask32(2 * std::min<int64_t>(16, cols)),
                               _mm512_permutex2var_epi16(a, lo, b));
      if (cols > 16) {
        _mm512_mask_storeu_epi16(out + 2 * j + 32, TailMask32(2 * (cols - 16)), _mm512_permutex2var_epi16(a, hi, b));
      }
    }
  }
}

void SharedKeyAccumulateBf16Dp(const bf16* p, int64_t ldp, int64_t heads, const bf16* pairs, int64_t n,
                               int64_t value_dim, const float* rescale, float* acc) {
  const int64_t num_pairs = (n + 1) / 2, ldp2 = 2 * value_dim;
  ForEachColumnTile(value_dim, [&]<int V>(int64_t c, __mmask16 last) {
    // The last vector's pair values: two per column it holds.
    const __mmask32 last32 = TailMask32(2 * std::popcount(static_cast<unsigned>(last)));
    AccumulateColumns<V>(p, ldp, heads, pairs + 2 * c, ldp2, num_pairs, value_dim, rescale, acc + c, last, last32);
  });
}

}  // namespace latte::attention_internal

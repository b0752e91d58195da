// AVX-512 block kernels of SharedKeyAttention (absorbed-MLA decode attention).
//
// Per block of n <= 64 cache rows, for all heads:
//  - scores: register tiles of 4 heads x 4 rows (16 zmm accumulators) over the
//    row_dim-wide dot products: 8 loads per 16 FMAs; the 16 sums are reduced
//    together by a transpose-add network (45 shuffles/adds per tile instead of
//    16 separate horizontal reductions);
//  - softmax: max, a vectorised exp and sums, 16 scores at a time;
//  - values: tiles of 4 heads x 64 value columns (16 zmm accumulators) stay in
//    registers over the block's rows, so acc is loaded (and rescaled) and stored
//    once per block rather than once per row.
// Widths that are not a multiple of 16 use masked loads/stores. The small loops over
// a tile's heads/rows/vectors are fully unrolled so GCC keeps the accumulator arrays
// in registers (otherwise it spills them to the stack every iteration).
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt); reached only through
// attention.cc's dispatch after GetCpuFeatures().avx512f.
// GCC 12's AVX-512 headers build some intrinsics (reduce_add, maskz loads) from
// _mm512_undefined_*, which trips -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_avx512_inl.h"
#include "kernels/attention_internal.h"

namespace latte::attention_internal {
namespace {

// scores[h * ld + r] = scale · q[h] · rows[r] for h < H, r < R.
template <int H, int R>
inline void ScoresTile(const float* q, const float* rows, int64_t row_dim, float scale, float* scores, int64_t ld) {
  __m512 acc[H][R];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[h][r] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= row_dim; k += 16) {
    __m512 rv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) rv[r] = _mm512_loadu_ps(rows + r * row_dim + k);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512 qv = _mm512_loadu_ps(q + h * row_dim + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[h][r] = _mm512_fmadd_ps(qv, rv[r], acc[h][r]);
    }
  }
  if (k < row_dim) {
    const __mmask16 m = TailMask16(row_dim - k);
    __m512 rv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) rv[r] = _mm512_maskz_loadu_ps(m, rows + r * row_dim + k);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512 qv = _mm512_maskz_loadu_ps(m, q + h * row_dim + k);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[h][r] = _mm512_fmadd_ps(qv, rv[r], acc[h][r]);
    }
  }
  StoreScoresTile<H, R>(acc, scale, scores, ld);
}

template <int H> inline void ScoresHeads(const float* q, const float* rows, int64_t n, int64_t row_dim, float scale,
                                         float* scores, int64_t ld) {
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) ScoresTile<H, 4>(q, rows + t * row_dim, row_dim, scale, scores + t, ld);
  switch (n - t) {
    case 3: ScoresTile<H, 3>(q, rows + t * row_dim, row_dim, scale, scores + t, ld); break;
    case 2: ScoresTile<H, 2>(q, rows + t * row_dim, row_dim, scale, scores + t, ld); break;
    case 1: ScoresTile<H, 1>(q, rows + t * row_dim, row_dim, scale, scores + t, ld); break;
    default: break;
  }
}

// acc[h * lda + v * 16 + i] = acc · rescale[h] + Σ_t p[h * ld + t] · rows[t * row_dim + v * 16 + i]
// for h < H, v < V; the last vector is masked by `last`.
template <int H, int V> inline void AccumulateTile(const float* p, int64_t ld, const float* rows, int64_t n,
                                                   int64_t row_dim, const float* rescale, float* acc, int64_t lda,
                                                   __mmask16 last) {
  __m512 a[H][V];
  LoadRescaledAccumulators<H, V>(acc, lda, rescale, last, a);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = rows + t * row_dim;
    __m512 rv[V];
#pragma GCC unroll 16
    for (int v = 0; v < V - 1; ++v) rv[v] = _mm512_loadu_ps(row + v * 16);
    rv[V - 1] = _mm512_maskz_loadu_ps(last, row + (V - 1) * 16);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * ld + t]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) a[h][v] = _mm512_fmadd_ps(w, rv[v], a[h][v]);
    }
  }
  StoreAccumulators<H, V>(a, last, acc, lda);
}

// One column range (V vectors, the last masked by `last`) of acc for all heads. Column
// ranges are the outer loop so the block's slice of rows (n x 64 floats, <= 16 KiB)
// stays in L1 while every head tile reads it.
template <int V> inline void AccumulateColumns(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n,
                                               int64_t row_dim, int64_t lda, const float* rescale, float* acc,
                                               __mmask16 last) {
  ForEachHeadTile(heads, [&]<int H>(int64_t h) {
    AccumulateTile<H, V>(p + h * ld, ld, rows, n, row_dim, rescale ? rescale + h : nullptr, acc + h * lda, lda, last);
  });
}

}  // namespace

void SharedKeyScoresAvx512(const float* q, int64_t heads, const float* rows, int64_t n, int64_t row_dim, float scale,
                           float* scores, int64_t ld) {
  ForEachHeadTile(
      heads, [&]<int H>(int64_t h) { ScoresHeads<H>(q + h * row_dim, rows, n, row_dim, scale, scores + h * ld, ld); });
}

void SharedKeySoftmaxAvx512(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum,
                            float* rescale) {
  for (int64_t h = 0; h < heads; ++h) {
    float* sc = scores + h * ld;
    const float new_max = std::max(max[h], RowMax(sc, n));
    const float r = std::exp(max[h] - new_max);  // 0 on the first block
    const __m512 vnew = _mm512_set1_ps(new_max);
    __m512 vsum = _mm512_setzero_ps();
    for (int64_t t = 0; t < n; t += 16) {
      const __mmask16 m = TailMask16(std::min<int64_t>(16, n - t));
      const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + t), vnew));
      _mm512_mask_storeu_ps(sc + t, m, e);
      vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
    }
    sum[h] = sum[h] * r + _mm512_reduce_add_ps(vsum);
    max[h] = new_max;
    rescale[h] = r;
  }
}

void SharedKeyAccumulateAvx512(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n, int64_t row_dim,
                               int64_t value_dim, const float* rescale, float* acc) {
  ForEachColumnTile(value_dim, [&]<int V>(int64_t c, __mmask16 last) {
    AccumulateColumns<V>(p, ld, heads, rows + c, n, row_dim, value_dim, rescale, acc + c, last);
  });
}

void Bf16ToF32Avx512(const bf16* rows, int64_t count, float* out) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(out + i, WidenBf16x16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + i))));
  }
  if (i < count) {
    const __mmask16 m = TailMask16(count - i);
    _mm512_mask_storeu_ps(out + i, m, WidenBf16x16(_mm256_maskz_loadu_epi16(m, rows + i)));
  }
}

}  // namespace latte::attention_internal

// AVX2 + FMA block kernels of SharedKeyAttention (absorbed-MLA decode attention) for
// CPUs without AVX-512: the same three steps as attention_avx512.cc on 8-float registers.
//
// Per block of n <= 64 cache rows (f32; bf16 rows widened per block), for all heads:
//  - scores: register tiles of 4 heads x 3 rows (12 ymm accumulators, 3 row vectors and
//    one q vector: the 16 registers AVX2 has) over the row_dim-wide dot products, 7
//    loads per 12 FMAs; 8 of the 12 sums reduced together by a transpose-add network;
//  - softmax: max, a vectorised exp and sums, 8 scores at a time;
//  - values: tiles of 3 heads x 32 value columns (12 accumulators) stay in registers
//    over the block's rows, so acc is loaded, rescaled and stored once per block.
// Widths that are not a multiple of 8 use masked loads and stores. The small loops over
// a tile's heads, rows and vectors are fully unrolled so GCC keeps the accumulator
// arrays in registers.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (see CMakeLists.txt); reached only through
// attention.cc's dispatch after GetCpuFeatures().avx2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_internal.h"
#include "kernels/avx2_inl.h"

namespace latte::attention_internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Lane k of the result = the sum of the 8 lanes of v[k], k < 8.
inline __m256 Reduce8(const __m256* v) {
  __m256 a[4];
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {  // per 128-bit half: [v2i: 0+1, 2+3 | v2i+1: 0+1, 2+3]
    a[i] = _mm256_hadd_ps(v[2 * i], v[2 * i + 1]);
  }
  // per half: [v0, v1, v2, v3] sums of that half (and v4..v7 in b1)
  const __m256 b0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 b1 = _mm256_hadd_ps(a[2], a[3]);
  // low halves of both plus high halves of both: [v0..v3 | v4..v7]
  return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
}

// scores[h * ld + r] = scale · (the sum of the 8 lanes of acc[h][r]).
template <int H, int R> inline void StoreScoresTile(const __m256 (&acc)[H][R], float scale, float* scores, int64_t ld) {
  if constexpr (H * R >= 8) {
    // The first 8 sums (row-major over h, r) together, the rest one by one.
    __m256 first[8];
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) first[i] = acc[i / R][i % R];
    alignas(32) float sums[8];
    _mm256_store_ps(sums, _mm256_mul_ps(Reduce8(first), _mm256_set1_ps(scale)));
#pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) scores[(i / R) * ld + i % R] = sums[i];
#pragma GCC unroll 16
    for (int i = 8; i < H * R; ++i) scores[(i / R) * ld + i % R] = scale * HorizontalSum(acc[i / R][i % R]);
  } else {
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) scores[h * ld + r] = scale * HorizontalSum(acc[h][r]);
    }
  }
}

// scores[h * ld + r] = scale · q[h] · rows[r] for h < H, r < R.
template <int H, int R>
inline void ScoresTile(const float* q, const float* rows, int64_t row_dim, float scale, float* scores, int64_t ld) {
  __m256 acc[H][R];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[h][r] = _mm256_setzero_ps();
  }
  auto step = [&](auto load) {
    __m256 rv[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) rv[r] = load(rows + r * row_dim);
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
      const __m256 qv = load(q + h * row_dim);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[h][r] = _mm256_fmadd_ps(qv, rv[r], acc[h][r]);
    }
  };
  int64_t k = 0;
  for (; k + 8 <= row_dim; k += 8) {
    step([k](const float* p) { return _mm256_loadu_ps(p + k); });
  }
  if (k < row_dim) {
    const __m256i m = TailMask8(row_dim - k);
    step([k, m](const float* p) { return _mm256_maskload_ps(p + k, m); });
  }
  StoreScoresTile<H, R>(acc, scale, scores, ld);
}

constexpr int kScoreHeads = 4, kScoreRows = 3;

template <int H> inline void ScoresHeads(const float* q, const float* rows, int64_t n, int64_t row_dim, float scale,
                                         float* scores, int64_t ld) {
  int64_t t = 0;
  for (; t + kScoreRows <= n; t += kScoreRows) {
    ScoresTile<H, kScoreRows>(q, rows + t * row_dim, row_dim, scale, scores + t, ld);
  }
  switch (n - t) {
    case 2: ScoresTile<H, 2>(q, rows + t * row_dim, row_dim, scale, scores + t, ld); break;
    case 1: ScoresTile<H, 1>(q, rows + t * row_dim, row_dim, scale, scores + t, ld); break;
    default: break;
  }
}

// Calls tile.template operator()<H>(h) over heads [0, heads): tiles of kHeads heads,
// then one tile of those left.
template <int kHeads, typename Tile> inline void ForEachHeadTile(int64_t heads, Tile&& tile) {
  int64_t h = 0;
  for (; h + kHeads <= heads; h += kHeads) tile.template operator()<kHeads>(h);
  if constexpr (kHeads > 3) {
    if (heads - h == 3) tile.template operator()<3>(h);
  }
  if constexpr (kHeads > 2) {
    if (heads - h == 2) tile.template operator()<2>(h);
  }
  if (heads - h == 1) tile.template operator()<1>(h);
}

// max(scores[0, n)), -inf for n = 0.
inline float RowMax(const float* scores, int64_t n) {
  __m256 vmax = _mm256_set1_ps(kNegInf);
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(scores + t));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  float result = _mm_cvtss_f32(m);
  for (; t < n; ++t) result = std::max(result, scores[t]);
  return result;
}

// acc[h * lda + 8v + i] = acc · rescale[h] + Σ_t p[h * ld + t] · rows[t * row_dim + 8v + i]
// for h < H, v < V; with kMasked the last vector only in the lanes `last` sets.
template <int H, int V, bool kMasked> inline void AccumulateTile(const float* p, int64_t ld, const float* rows,
                                                                 int64_t n, int64_t row_dim, const float* rescale,
                                                                 float* acc, int64_t lda, __m256i last) {
  __m256 a[H][V];
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
    const __m256 s = _mm256_set1_ps(rescale != nullptr ? rescale[h] : 1.0f);
#pragma GCC unroll 16
    for (int v = 0; v < V - 1; ++v) a[h][v] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * lda + v * 8), s);
    const float* end = acc + h * lda + (V - 1) * 8;
    a[h][V - 1] = _mm256_mul_ps(kMasked ? _mm256_maskload_ps(end, last) : _mm256_loadu_ps(end), s);
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* row = rows + t * row_dim;
    __m256 w[H];
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) w[h] = _mm256_broadcast_ss(p + h * ld + t);
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      const __m256 rv = kMasked && v == V - 1 ? _mm256_maskload_ps(row + v * 8, last) : _mm256_loadu_ps(row + v * 8);
#pragma GCC unroll 16
      for (int h = 0; h < H; ++h) a[h][v] = _mm256_fmadd_ps(w[h], rv, a[h][v]);
    }
  }
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int v = 0; v < V - 1; ++v) _mm256_storeu_ps(acc + h * lda + v * 8, a[h][v]);
    if constexpr (kMasked) {
      _mm256_maskstore_ps(acc + h * lda + (V - 1) * 8, last, a[h][V - 1]);
    } else {
      _mm256_storeu_ps(acc + h * lda + (V - 1) * 8, a[h][V - 1]);
    }
  }
}

constexpr int kValueHeads = 3, kValueVectors = 4;

// One column range (V vectors from column c, the last masked by `last`) of acc for all
// heads. Column ranges are the outer loop so the block's slice of rows (n x 32 floats,
// 8 KiB) stays in L1 while every head tile reads it.
template <int V, bool kMasked> inline void AccumulateColumns(const float* p, int64_t ld, int64_t heads,
                                                             const float* rows, int64_t n, int64_t row_dim, int64_t lda,
                                                             const float* rescale, float* acc, __m256i last) {
  ForEachHeadTile<kValueHeads>(heads, [&]<int H>(int64_t h) {
    AccumulateTile<H, V, kMasked>(p + h * ld, ld, rows, n, row_dim, rescale ? rescale + h : nullptr, acc + h * lda, lda,
                                  last);
  });
}

}  // namespace

void SharedKeyScoresAvx2(const float* q, int64_t heads, const float* rows, int64_t n, int64_t row_dim, float scale,
                         float* scores, int64_t ld) {
  ForEachHeadTile<kScoreHeads>(
      heads, [&]<int H>(int64_t h) { ScoresHeads<H>(q + h * row_dim, rows, n, row_dim, scale, scores + h * ld, ld); });
}

void SharedKeySoftmaxAvx2(float* scores, int64_t ld, int64_t heads, int64_t n, float* max, float* sum, float* rescale) {
  for (int64_t h = 0; h < heads; ++h) {
    float* sc = scores + h * ld;
    const float new_max = std::max(max[h], RowMax(sc, n));
    const float r = std::exp(max[h] - new_max);  // 0 on the first block
    const __m256 vnew = _mm256_set1_ps(new_max);
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t t = 0; t < n; t += 8) {
      const __m256i m = TailMask8(std::min<int64_t>(8, n - t));
      // Masked-off lanes load 0 and would add e^{-max}: zeroed before the sum.
      const __m256 e = _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(sc + t, m), vnew)), _mm256_castsi256_ps(m));
      _mm256_maskstore_ps(sc + t, m, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    sum[h] = sum[h] * r + HorizontalSum(vsum);
    max[h] = new_max;
    rescale[h] = r;
  }
}

void SharedKeyAccumulateAvx2(const float* p, int64_t ld, int64_t heads, const float* rows, int64_t n, int64_t row_dim,
                             int64_t value_dim, const float* rescale, float* acc) {
  constexpr int64_t kTileColumns = kValueVectors * 8;
  int64_t c = 0;
  for (; c + kTileColumns <= value_dim; c += kTileColumns) {
    AccumulateColumns<kValueVectors, false>(p, ld, heads, rows + c, n, row_dim, value_dim, rescale, acc + c,
                                            _mm256_setzero_si256());
  }
  const int64_t rest = value_dim - c;
  if (rest == 0) return;
  const __m256i last = TailMask8(rest - (rest - 1) / 8 * 8);
  auto tail = [&]<int V>() {
    AccumulateColumns<V, true>(p, ld, heads, rows + c, n, row_dim, value_dim, rescale, acc + c, last);
  };
  switch ((rest + 7) / 8) {
    case 1: tail.template operator()<1>(); break;
    case 2: tail.template operator()<2>(); break;
    case 3: tail.template operator()<3>(); break;
    default: break;
  }
}

void Fp8ToF32Avx2(const uint8_t* codes, int64_t count, float scale, float* out) {
  // The f16 route gives value × 2^-8; scale × 2^8 takes it back (powers of two: the
  // product rounds once, as value × scale does).
  const __m256 s = _mm256_set1_ps(scale * 256.0f);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(Fp8E4M3x8ViaF16(bytes), s));
  }
  for (; i < count; ++i) out[i] = Fp8E4M3ToF32(codes[i]) * scale;
}

void Bf16ToF32Avx2(const bf16* rows, int64_t count, float* out) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  for (; i < count; ++i) out[i] = Bf16ToF32(rows[i]);
}

}  // namespace latte::attention_internal

// Small AVX-512 helpers shared by the attention kernels' AVX-512 translation units
// (attention_avx512.cc, attention_avx512_bf16.cc). Include only from files compiled
// with the AVX-512 flags (*_avx512*.cc, see CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/avx512_inl.h"

namespace latte::attention_internal {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Lane k of the result = the sum of the 16 lanes of v[k].
inline __m512 Reduce16(const __m512* v) {
  __m512 a[8];
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [v2i, v2i+1, v2i, v2i+1]
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  __m512 c[4];
#pragma GCC unroll 16
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: [v4i .. v4i+3]
    const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  __m512 d[2];
#pragma GCC unroll 16
  for (int i = 0; i < 2; ++i) {  // 128-bit lanes: [c2i (L0+L1), c2i (L2+L3), c2i+1 .., ..]
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The epilogue of an H-head × R-row scores tile: scores[h * ld + r] = scale · (the sum of
// the 16 lanes of acc[h][r]). A full 4 × 4 tile reduces its 16 sums together (Reduce16:
// 45 shuffles/adds instead of 16 horizontal reductions).
template <int H, int R> inline void StoreScoresTile(const __m512 (&acc)[H][R], float scale, float* scores, int64_t ld) {
  if constexpr (H == 4 && R == 4) {
    const __m512 s = _mm512_mul_ps(Reduce16(&acc[0][0]), _mm512_set1_ps(scale));
    _mm_storeu_ps(scores + 0 * ld, _mm512_extractf32x4_ps(s, 0));
    _mm_storeu_ps(scores + 1 * ld, _mm512_extractf32x4_ps(s, 1));
    _mm_storeu_ps(scores + 2 * ld, _mm512_extractf32x4_ps(s, 2));
    _mm_storeu_ps(scores + 3 * ld, _mm512_extractf32x4_ps(s, 3));
  } else {
#pragma GCC unroll 16
    for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) scores[h * ld + r] = scale * _mm512_reduce_add_ps(acc[h][r]);
    }
  }
}

// Calls tile.template operator()<H>(h) over heads [0, heads): tiles of 4 heads, then
// one tile of the 1-3 left.
template <typename Tile> inline void ForEachHeadTile(int64_t heads, Tile&& tile) {
  int64_t h = 0;
  for (; h + 4 <= heads; h += 4) tile.template operator()<4>(h);
  switch (heads - h) {
    case 3: tile.template operator()<3>(h); break;
    case 2: tile.template operator()<2>(h); break;
    case 1: tile.template operator()<1>(h); break;
    default: break;
  }
}

// Calls tile.template operator()<V>(c, last) over columns [0, width) in tiles of V
// 16-column vectors starting at column c: tiles of 4 vectors, then one tile of the 1-4
// vectors left; `last` masks the columns the tile's last vector holds (all 16 but in
// the final tile).
template <typename Tile> inline void ForEachColumnTile(int64_t width, Tile&& tile) {
  int64_t c = 0;
  for (; c + 64 <= width; c += 64) tile.template operator()<4>(c, static_cast<__mmask16>(0xFFFF));
  const int64_t rest = width - c;
  if (rest == 0) return;
  const __mmask16 last = TailMask16(rest - (rest - 1) / 16 * 16);
  switch ((rest + 15) / 16) {
    case 1: tile.template operator()<1>(c, last); break;
    case 2: tile.template operator()<2>(c, last); break;
    case 3: tile.template operator()<3>(c, last); break;
    case 4: tile.template operator()<4>(c, last); break;
    default: break;
  }
}

// max(scores[0, n)), -inf for n = 0.
inline float RowMax(const float* scores, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(kNegInf);
  __m512 vmax = neg_inf;
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 m = TailMask16(std::min<int64_t>(16, n - t));
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, m, scores + t));
  }
  return _mm512_reduce_max_ps(vmax);
}

// The value accumulators of an H-head × V-vector tile: a[h][v] = acc[h·lda + 16v ..]
// times rescale[h] (rescale may be null: no rescale); the last vector masked by `last`.
template <int H, int V> inline void LoadRescaledAccumulators(const float* acc, int64_t lda, const float* rescale,
                                                             __mmask16 last, __m512 (&a)[H][V]) {
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) {
      const __mmask16 m = v == V - 1 ? last : static_cast<__mmask16>(0xFFFF);
      a[h][v] = _mm512_maskz_loadu_ps(m, acc + h * lda + v * 16);
    }
    if (rescale != nullptr) {
      const __m512 s = _mm512_set1_ps(rescale[h]);
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) a[h][v] = _mm512_mul_ps(a[h][v], s);
    }
  }
}

// Writes them back (the last vector masked by `last`).
template <int H, int V>
inline void StoreAccumulators(const __m512 (&a)[H][V], __mmask16 last, float* acc, int64_t lda) {
#pragma GCC unroll 16
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 16
    for (int v = 0; v < V - 1; ++v) _mm512_storeu_ps(acc + h * lda + v * 16, a[h][v]);
    _mm512_mask_storeu_ps(acc + h * lda + (V - 1) * 16, last, a[h][V - 1]);
  }
}

}  // namespace latte::attention_internal

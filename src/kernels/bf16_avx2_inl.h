// bf16 weights on AVX2, shared by the GEMV (gemv_avx2.cc) and the GEMM (gemm_bf16_avx2.cc):
// 16 weights at a time in one 32-byte load, widened exactly with two integer ops (a bf16
// is the top half of an f32): `<< 16` gives the even-numbered columns in the 8 lanes,
// `& 0xffff0000` the odd ones. x is copied once per call into the same order (per 16
// columns, the 8 even then the 8 odd ones; zero-padded to whole groups), so two FMAs
// per x row take the 16 columns.
// Include only from files compiled with the AVX2 flags (see CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/dtype.h"

namespace latte::matmul_internal {

// Row stride of the permuted x: whole groups of 16 columns.
inline int64_t PermutedXStride(int64_t k) { return (k + 15) / 16 * 16; }

// x rows [m, ldp] in the bf16 tiles' order: per 16 columns the 8 even then the 8 odd
// ones, zero-padded to PermutedXStride(k) (ldp: that or more; columns past it untouched).
inline void PermuteX(const float* x, int64_t m, int64_t ldx, int64_t k, float* out, int64_t ldp) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * ldx;
    float* o = out + i * ldp;
    int64_t c = 0;
    for (; c + 16 <= k; c += 16) {
      const __m256 a = _mm256_loadu_ps(xi + c), b = _mm256_loadu_ps(xi + c + 8);
      // Per 128-bit half: [a0 a2 b0 b2 | a4 a6 b4 b6], then the 64-bit pairs reordered.
      const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
      _mm256_storeu_ps(o + c, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), _MM_SHUFFLE(3, 1, 2, 0))));
      _mm256_storeu_ps(o + c + 8,
                       _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0))));
    }
    if (c < k) {
      for (int j = 0; j < 16; ++j) o[c + (j % 2) * 8 + j / 2] = c + j < k ? xi[c + j] : 0.0f;
    }
  }
}

// An empty asm that takes v in a register: the compiler cannot fold v's load into each
// FMA that uses it (GCC does when registers run short), which would load every x vector
// R times and make the loads, not the FMAs, the bound.
inline void KeepInRegister(__m256& v) { asm("" : "+x"(v)); }

// One step of 16 columns for M x rows (xp, row stride ldp) against R bf16 weight rows (w,
// row stride ld): the R rows' even columns widened (`<< 16`) into every x row's sums, then
// their odd ones (`& 0xffff0000`). Each sum takes its even columns, then its odd ones, in
// every tile, so an output's bits do not depend on the tile or kernel that computed it.
// Live registers: M·R sums, R weight vectors, one x vector.
template <int M, int R>
inline void Bf16Step(const float* xp, int64_t ldp, const bf16* w, int64_t ld, __m256 (&acc)[M][R]) {
  __m256 wv[R];
  for (int r = 0; r < R; ++r) {
    wv[r] =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * ld)), 16));
  }
  for (int i = 0; i < M; ++i) {
    __m256 xe = _mm256_loadu_ps(xp + i * ldp);
    KeepInRegister(xe);
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xe, wv[r], acc[i][r]);
  }
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int r = 0; r < R; ++r) {
    wv[r] =
        _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * ld)), high));
  }
  for (int i = 0; i < M; ++i) {
    __m256 xo = _mm256_loadu_ps(xp + i * ldp + 8);
    KeepInRegister(xo);
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(xo, wv[r], acc[i][r]);
  }
}

// The last, partial group of `count` (< 16) columns: the R rows' weights copied into a
// zeroed buffer (nothing read past them); x is zero-padded there by PermuteX.
template <int M, int R>
inline void Bf16TailStep(const float* xp, int64_t ldp, const bf16* w, int64_t ld, int64_t count, __m256 (&acc)[M][R]) {
  alignas(32) bf16 buf[R][16] = {};
  for (int r = 0; r < R; ++r) std::memcpy(buf[r], w + r * ld, static_cast<size_t>(count) * sizeof(bf16));
  Bf16Step<M, R>(xp, ldp, &buf[0][0], 16, acc);
}

}  // namespace latte::matmul_internal

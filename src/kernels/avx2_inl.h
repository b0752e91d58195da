// Small AVX2 helpers shared by the *_avx2*.cc kernels: tail masks and the horizontal sum.
// Include only from files compiled with the AVX2 flags (see CMakeLists.txt: -mavx2 -mfma
// -mf16c -mbmi2).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace latte {

// Lanes [0, count) of 8 int32 set, count in [0, 8].
inline __m256i TailMask8(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The sum of 8 f32 lanes: halves added, then pairs, then the last two.
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 e4m3 bytes (the low 8 of `bytes`) -> 8 f32 values × 2^-8, exactly: the byte's
// exponent and mantissa shifted into an f16's (bias 15 against e4m3's 7), sign kept,
// then F16C's conversion (e4m3 subnormals land on f16 subnormals).
inline __m256 Fp8E4M3x8ViaF16(__m128i bytes) {
  const __m128i w = _mm_cvtepi8_epi16(bytes);
  const __m128i h = _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16(static_cast<short>(0xBF80)));
  return _mm256_cvtph_ps(h);
}

}  // namespace latte

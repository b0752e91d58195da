// Small AVX2 helpers shared by the *_avx2*.cc kernels: tail masks, the horizontal sum, e^x
// and e4m3 widening.
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

// e^x for x <= 0: the Cephes expf of avx512_inl.h (range reduction by ln 2, degree-6
// polynomial), with 2^n built in the exponent bits. x is clamped at -87.3 so 2^n stays
// a normal float: below that e^x (< 1.2e-38) comes out as ~1e-38 instead of ~0, which no
// softmax weight can tell from 0 beside the block's maximum (e^0 = 1).
inline __m256 Exp(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n + 127 in the exponent field (n in [-126, 0] after the clamp).
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

}  // namespace latte

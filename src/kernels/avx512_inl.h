// Small AVX-512 helpers shared by the *_avx512*.cc kernels: tail masks, bf16 <-> f32
// in registers, and e^x. Include only from files compiled with the AVX-512 flags (see
// CMakeLists.txt: -mavx512f/bw/dq/vl/bf16).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace latte {

// The low `count` of 16 lanes, count in [0, 16].
inline __mmask16 TailMask16(int64_t count) { return static_cast<__mmask16>((1u << count) - 1u); }

// 16 bf16 -> 16 f32, exact: a bf16 is the top half of an f32.
inline __m512 WidenBf16x16(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }

// 16 f32 -> 16 bf16, round to nearest even; NaN stays NaN. With `has_bf16`
// (AVX512_BF16) one vcvtneps2bf16, which also flushes f32 subnormals to zero; without,
// integer arithmetic as F32ToBf16 does it (add 0x7fff + lsb, keep the top half; a NaN
// keeps its top half with the quiet bit set).
inline __m256i RoundToBf16x16(__m512 v, bool has_bf16) {
  if (has_bf16) return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

// e^x for x <= 0 (Cephes expf: range reduction by ln 2, degree-6 polynomial,
// scalef for 2^n, which also flushes very negative x to ~0). Max rel. error ~2 ulp.
inline __m512 Exp(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

}  // namespace latte

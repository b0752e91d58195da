// Small AVX-512 helpers shared by the *_avx512*.cc kernels: tail masks and bf16 <-> f32
// in registers. Include only from files compiled with the AVX-512 flags (see
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

}  // namespace latte

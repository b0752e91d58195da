// The AVX-512 loops of exp_sum.h. Compiled with the AVX-512 flags (see CMakeLists.txt);
// reached only after GetCpuFeatures().avx512f.
// GCC 12's AVX-512 headers build maskz loads from _mm512_undefined_*, which trips
// -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <limits>

#include "kernels/avx512_inl.h"
#include "kernels/exp_sum.h"

namespace latte::exp_internal {

float MaxValueAvx512(const float* x, int64_t n) {
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = minus_inf, m1 = minus_inf;
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);  // unordered: a or b is NaN
    m0 = _mm512_max_ps(m0, a);
    m1 = _mm512_max_ps(m1, b);
  }
  for (; i < n; i += 16) {
    const __mmask16 mask = TailMask16(n - i < 16 ? n - i : 16);
    const __m512 a = _mm512_mask_loadu_ps(minus_inf, mask, x + i);
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    m0 = _mm512_max_ps(m0, a);
  }
  if (nan != 0) return std::numeric_limits<float>::quiet_NaN();
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

namespace {

constexpr float kMinNormalExponent = -87.33f;  // ln(FLT_MIN)

// Adds the 16 f32 lanes of v to the 8 f64 lanes of acc.
inline __m512d AddWidened(__m512d acc, __m512 v) {
  acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  return _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

}  // namespace

double ExpShiftedSumAvx512(const float* x, int64_t n, float shift, float* out) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512d total = _mm512_setzero_pd();
  // f32 partial sums over chunks of 1024 values, then f64: the sum of 10^5 terms keeps
  // the precision a scalar f64 loop has, at the speed of an f32 one.
  constexpr int64_t kChunk = 1024;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t end = start + kChunk < n ? start + kChunk : n;
    __m512 part = _mm512_setzero_ps();
    for (int64_t i = start; i < end; i += 16) {
      const __mmask16 mask = TailMask16(end - i < 16 ? end - i : 16);
      // Masked-off lanes load shift itself (e^0 = 1), kept out of the sum below. Below
      // e^-87.3, the smallest normal f32, the result is 0, as e^-inf is exactly.
      const __m512 d = _mm512_sub_ps(_mm512_mask_loadu_ps(s, mask, x + i), s);
      const __m512 e =
          _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(d, _mm512_set1_ps(kMinNormalExponent), _CMP_GE_OQ), Exp(d));
      if (out != nullptr) _mm512_mask_storeu_ps(out + i, mask, e);
      part = _mm512_mask_add_ps(part, mask, part, e);
    }
    total = AddWidened(total, part);
  }
  return _mm512_reduce_add_pd(total);
}

}  // namespace latte::exp_internal

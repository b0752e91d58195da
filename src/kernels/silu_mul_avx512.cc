// SiluMul on AVX-512: 16 values at a time, e^x by the Cephes polynomial (avx512_inl.h).
// silu(g) = g · sigmoid(g), sigmoid(g) = 1 / (1 + e^-g) for g >= 0 and e^g / (1 + e^g)
// below, so the exponent is always -|g| <= 0 (the range Exp takes) and never overflows.
//
// Compiled with -mavx512f/bw/dq/vl/bf16 (see CMakeLists.txt); reached only through
// silu_mul.cc's dispatch after GetCpuFeatures().avx512f.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "base/parallel.h"
#include "kernels/avx512_inl.h"
#include "kernels/silu_mul.h"

namespace latte::silu_internal {

void SiluMulAvx512(const float* gate, const float* up, int64_t count, float* out) {
  const int64_t chunks = (count + 15) / 16;
#pragma omp parallel for schedule(static) if (WorthParallel(count))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = 16 * c;
    const __mmask16 mask = TailMask16(std::min<int64_t>(16, count - i));
    const __m512 g = _mm512_maskz_loadu_ps(mask, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(mask, up + i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));  // e^-|g|
    const __mmask16 negative = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 numerator = _mm512_mask_blend_ps(negative, _mm512_set1_ps(1.0f), e);
    const __m512 sigmoid = _mm512_div_ps(numerator, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    _mm512_mask_storeu_ps(out + i, mask, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), u));
  }
}

}  // namespace latte::silu_internal

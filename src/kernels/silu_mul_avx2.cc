// SiluMul on AVX2 + FMA: 8 values at a time, e^x by the Cephes polynomial (avx2_inl.h), the
// same formulation as silu_mul_avx512.cc: silu(g) = g · sigmoid(g) with sigmoid(g) =
// 1 / (1 + e^-g) for g >= 0 and e^g / (1 + e^g) below, so the exponent is -|g| <= 0.
//
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (see CMakeLists.txt); reached only through
// silu_mul.cc's dispatch after GetCpuFeatures().avx2.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "base/parallel.h"
#include "kernels/avx2_inl.h"
#include "kernels/silu_mul.h"

namespace latte::silu_internal {

void SiluMulAvx2(const float* gate, const float* up, int64_t count, float* out) {
  const int64_t chunks = (count + 7) / 8;
#pragma omp parallel for schedule(static) if (WorthParallel(count))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = 8 * c;
    const __m256i mask = TailMask8(std::min<int64_t>(8, count - i));
    const __m256 g = _mm256_maskload_ps(gate + i, mask);
    const __m256 u = _mm256_maskload_ps(up + i, mask);
    const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), g);
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), magnitude));  // e^-|g|
    const __m256 negative = _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 numerator = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e, negative);
    const __m256 sigmoid = _mm256_div_ps(numerator, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    _mm256_maskstore_ps(out + i, mask, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), u));
  }
}

}  // namespace latte::silu_internal

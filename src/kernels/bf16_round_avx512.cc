// The AVX-512 loop of RoundToBf16 (bf16_round.h). Compiled with the AVX-512 flags
// (see CMakeLists.txt); reached only after GetCpuFeatures().avx512f.
// GCC 12's AVX-512 headers build maskz loads from _mm512_undefined_*, which trips
// -Wuninitialized under -Werror: a false positive.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/avx512_inl.h"
#include "kernels/bf16_round.h"

namespace latte::bf16_internal {

void RoundToBf16Avx512(const float* x, int64_t n, bf16* out, bool has_bf16) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), RoundToBf16x16(_mm512_loadu_ps(x + i), has_bf16));
  }
  if (i < n) {
    const __mmask16 mask = TailMask16(n - i);
    _mm256_mask_storeu_epi16(out + i, mask, RoundToBf16x16(_mm512_maskz_loadu_ps(mask, x + i), has_bf16));
  }
}

}  // namespace latte::bf16_internal

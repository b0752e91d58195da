#include "kernels/bf16_round.h"

#include <omp.h>

#include "base/check.h"
#include "base/cpu_features.h"
#include "base/parallel.h"

namespace latte {

void RoundToBf16(const float* x, int64_t rows, int64_t ldx, int64_t cols, bf16* out) {
  LATTE_CHECK(rows >= 0 && cols >= 0 && ldx >= cols, "RoundToBf16: rows ", rows, ", cols ", cols, ", ldx ", ldx);
  LATTE_CHECK(rows * cols == 0 || (x != nullptr && out != nullptr), "RoundToBf16: null x or out");
  const CpuFeatures& cpu = GetCpuFeatures();
#pragma omp parallel for schedule(static) if (rows * cols >= kMinParallelConversion && !omp_in_parallel())
  for (int64_t i = 0; i < rows; ++i) {
    if (cpu.avx512f) {
      bf16_internal::RoundToBf16Avx512(x + i * ldx, cols, out + i * cols, cpu.avx512_bf16);
    } else {
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = F32ToBf16(x[i * ldx + j]);
    }
  }
}

}  // namespace latte

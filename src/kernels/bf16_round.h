// f32 -> bf16 rounding of activation rows (round to nearest even, NaN stays NaN): what
// x goes through before a bf16 GEMM, and q before the bf16 decode attention. AVX-512
// where the CPU has it (vcvtneps2bf16 with AVX512_BF16, which also flushes f32
// subnormals to zero; integer arithmetic without), F32ToBf16 per value elsewhere.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace latte {

// out: [rows, cols] (contiguous) = x: [rows, cols] (row stride ldx >= cols), rounded.
// Threads over rows from kMinParallelConversion values, unless already inside a
// parallel region.
void RoundToBf16(const float* x, int64_t rows, int64_t ldx, int64_t cols, bf16* out);

// out: [n] = x: [n], rounded.
inline void RoundToBf16(const float* x, int64_t n, bf16* out) { RoundToBf16(x, 1, n, n, out); }

namespace bf16_internal {
// The AVX-512 loop behind RoundToBf16, exposed for tests: vcvtneps2bf16 when
// `has_bf16`, else the integer rounding. Call only when GetCpuFeatures().avx512f.
void RoundToBf16Avx512(const float* x, int64_t n, bf16* out, bool has_bf16);
}  // namespace bf16_internal

}  // namespace latte

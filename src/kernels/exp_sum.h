// The two passes of a softmax over a long row (a sampler's ~10^5 logits): the maximum,
// and e^(x - shift) with its sum. AVX-512 where the CPU has it (the Cephes polynomial
// the attention kernels use, within ~2 ulp of std::exp), std::exp elsewhere.
#pragma once

#include <cstdint>

namespace latte {

// max(x[0, n)); NaN if any x is NaN; -inf for n = 0.
float MaxValue(const float* x, int64_t n);

// out[i] = e^(x[i] - shift) for i in [0, n) (out may be null), and their sum in f64.
// For shift >= max(x): every term is in [0, 1].
double ExpShiftedSum(const float* x, int64_t n, float shift, float* out);

namespace exp_internal {
// The AVX-512 loops behind the two, exposed for tests. Call only when
// GetCpuFeatures().avx512f.
float MaxValueAvx512(const float* x, int64_t n);
double ExpShiftedSumAvx512(const float* x, int64_t n, float shift, float* out);
}  // namespace exp_internal

}  // namespace latte

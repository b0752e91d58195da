// The gated MLP's activation: out = silu(gate) ⊙ up.
#pragma once

#include <cstdint>

namespace latte {

// gate, up, out: [count] (out may alias either). AVX-512 or AVX2 where the CPU has it (e^x
// by the Cephes polynomial, within ~2 ulp of std::exp), std::exp elsewhere.
void SiluMul(const float* gate, const float* up, int64_t count, float* out);

namespace silu_internal {
// The AVX-512 loop, exposed for tests. Call only when GetCpuFeatures().avx512f.
void SiluMulAvx512(const float* gate, const float* up, int64_t count, float* out);
// The AVX2 loop, likewise. Call only when GetCpuFeatures().avx2.
void SiluMulAvx2(const float* gate, const float* up, int64_t count, float* out);
}  // namespace silu_internal

}  // namespace latte

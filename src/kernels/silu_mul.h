// The gated MLP's activation: out = silu(gate) ⊙ up.
#pragma once

#include <cstdint>

namespace latte {

// gate, up, out: [count] (out may alias either).
void SiluMul(const float* gate, const float* up, int64_t count, float* out);

}  // namespace latte

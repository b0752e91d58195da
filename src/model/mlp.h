// The dense MLP of a block (and the shape of every expert), docs/mla.md "MoE and the
// rest of the block".
#pragma once

#include <cstdint>

#include "model/ffn_scratch.h"
#include "model/model_weights.h"

namespace latte {

// out: [n, d] = down(silu(gate · x) ⊙ (up · x)) for x: [n, d].
void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, FfnScratch& s);

}  // namespace latte

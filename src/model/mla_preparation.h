// The one place MLA weights are prepared at load (style rule: the step never
// dequantizes or reshapes): kv_b_proj is split into w_uk_t / w_uv, q_b_proj's rope
// rows become per-head views, and — materialized mode only — the absorbed products
// W_Q_UK and W_UV_O are formed.
#pragma once

#include <vector>

#include "base/aligned_buffer.h"
#include "model/config.h"
#include "model/mla_mode.h"
#include "model/model_weights.h"

namespace latte {

// a: the checkpoint matrices already set (q_b_proj, kv_b_proj, o_proj in `compute`
// precision). New buffers are appended to `owned`; their bytes counted in `memory`.
void PrepareMlaWeights(const ModelConfig& c, MlaMode mode, DType compute, MlaWeights& a,
                       std::vector<AlignedBuffer>& owned, WeightMemory& memory);

}  // namespace latte

// One row of a weight matrix as f32, whatever its storage: what gathering an
// embedding row (a token reads one row of embed_tokens, never the matrix) needs.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace latte {

// out: [w.cols] = row r of w, each value as WeightView::At gives it (fp8: × its block's
// scale; block formats: their dequantization).
void WeightRowToF32(const WeightView& w, int64_t r, float* out);

}  // namespace latte

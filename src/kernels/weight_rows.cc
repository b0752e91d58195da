#include "kernels/weight_rows.h"

#include <cstring>

#include "kernels/block_quant.h"

namespace latte {

void WeightRowToF32(const WeightView& w, int64_t r, float* out) {
  const auto* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * DTypeRowBytes(w.dtype, w.ld);
  switch (w.dtype) {
    case DType::kF32: std::memcpy(out, row, static_cast<size_t>(w.cols) * sizeof(float)); return;
    case DType::kBF16: {
      const auto* v = reinterpret_cast<const bf16*>(row);
      for (int64_t c = 0; c < w.cols; ++c) out[c] = Bf16ToF32(v[c]);
      return;
    }
    case DType::kF16: {
      const auto* v = reinterpret_cast<const uint16_t*>(row);
      for (int64_t c = 0; c < w.cols; ++c) out[c] = F16ToF32(v[c]);
      return;
    }
    case DType::kF8E4M3:
      for (int64_t c = 0; c < w.cols; ++c) out[c] = w.At(r, c);
      return;
    default: DequantizeToF32(w.dtype, row, w.cols, out); return;
  }
}

}  // namespace latte

// DeepSeek-V3's fp8 weight format, produced here: a matrix [rows, cols] becomes e4m3
// values with one f32 scale per block_rows x block_cols block (128 x 128 in the release),
//   scale_inv = max |w| over the block / 448   (1 for a block of zeros)
//   q         = e4m3(w / scale_inv)            (round to nearest even, saturating at +-448)
// so that w ≈ q · scale_inv: the `<name>_scale_inv` semantics of the V3/R1 checkpoints
// (DeepSeek-V3 inference/kernel.py: weight_dequant multiplies by it), which WeightView's
// fp8 views read (kernels/matmul.h). Each block's largest value maps to ±448 exactly, so
// no value saturates; the relative error of one value is at most 2^-4 (3 mantissa bits).
// One implementation for every producer: `latte make-model --dtype fp8` writes its
// checkpoints with it and `--quantize fp8` quantizes bf16 / f16 / f32 weights at load.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace latte {

inline constexpr float kFp8E4M3Max = 448.0f;  // largest finite e4m3 value

// One block row: `values` [rows, cols] f32 (row stride ld), rows <= the block's rows.
// scale_inv [ceil(cols / block_cols)]: each column block's max |w| / 448 (1 if all zero).
void Fp8BlockRowScales(const float* values, int64_t rows, int64_t cols, int64_t ld, int64_t block_cols,
                       float* scale_inv);
// out [rows, cols] (row stride cols) = e4m3(values / scale_inv of the value's column block).
void QuantizeFp8BlockRow(const float* values, int64_t rows, int64_t cols, int64_t ld, int64_t block_cols,
                         const float* scale_inv, uint8_t* out);

// A whole matrix. src: [rows, cols] row-major in src_dtype (kF32, kBF16 or kF16);
// out: [rows, cols] e4m3; scale_inv: [ceil(rows / block_rows), ceil(cols / block_cols)].
struct Fp8QuantizeParams {
  DType src_dtype = DType::kBF16;
  const void* src = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  uint8_t* out = nullptr;
  float* scale_inv = nullptr;
};
// Block rows split over the OpenMP threads (unless already in a parallel region); each
// thread widens one block row to f32 at a time (block_rows · cols floats of scratch).
// The result does not depend on the thread count.
void QuantizeToFp8(const Fp8QuantizeParams& p);

}  // namespace latte

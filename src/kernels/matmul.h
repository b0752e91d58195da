// y = x · wᵀ for f32 activations and f32 / bf16 / f16 / fp8-e4m3 / GGUF block-format
// (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1) weights: every projection in the model is one
// of these.
// Large m (prefill) goes to oneDNN's GEMM (its bf16 path uses AVX512_BF16 where the CPU
// has it; fp8 and block formats are dequantized to bf16 a bounded chunk of rows at a
// time, f16 to f32); small m (decode, memory-bound) to a GEMV that streams the weight
// once (fp8: one byte per weight, converted in registers; bf16 on AVX512_BF16 CPUs:
// vdpbf16ps up to 16 rows, a batched decode step; block formats: x quantized to int8
// once per call and integer dot products per block, vpdpbusd on AVX512_VNNI CPUs, up to
// 16 rows). A portable path serves CPUs without AVX-512. Threads: OpenMP, sized by the
// caller (omp_set_num_threads).
#pragma once

#include <cstdint>
#include <span>

#include "base/dtype.h"
#include "kernels/block_quant.h"

namespace latte {

// A weight matrix [rows, cols] = [out_features, in_features], row-major with row
// stride `ld` elements (ld >= cols), so a block of rows of a bigger matrix (one
// head of kv_b_proj) is a view without a copy. dtype: kF32, kBF16, kF16, kF8E4M3 or a
// GGUF block format.
//
// Block formats (kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K, kQ5_0, kQ5_1; kernels/block_quant.h): each row is
// whole blocks as a GGUF file stores them; cols and ld are whole numbers of blocks
// (DTypeBlockElements: 32 or 256), and row r starts at data + r·DTypeRowBytes(dtype, ld)
// (no alignment needed). The scales are inside the blocks: the fp8 fields stay unused.
//
// kF8E4M3 (the DeepSeek-V3 release format): `data` holds e4m3 bytes and `scale`
// one f32 per block_rows x block_cols block; the value of element (r, c) is
//   e4m3(r, c) × scale[((scale_row0 + r) / block_rows) · scale_ld + c / block_cols].
// scale_row0 (< block_rows) is where row 0 of this view sits inside its first
// block row, so a RowBlock that starts mid-block (rows 320..383 of a matrix in
// 128-row blocks) keeps reading the right scales. Views always start at column 0
// of the block grid. The fp8 fields are ignored for the other dtypes.
struct WeightView {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  const void* data = nullptr;
  // kF8E4M3 only:
  const float* scale = nullptr;  // [scale rows, scale_ld]: the block scales (scale_inv)
  int64_t scale_ld = 0;          // scales per row of blocks (ceil(cols / block_cols) or more)
  int64_t scale_row0 = 0;        // row 0's offset inside its block row, [0, block_rows)
  int64_t block_rows = 128;      // the checkpoint's weight_block_size
  int64_t block_cols = 128;

  // Rows [first, first + count) of this matrix.
  WeightView RowBlock(int64_t first, int64_t count) const;
  // The weight bytes the view covers (fp8: the e4m3 bytes only, see ScaleBytes; block
  // formats: whole blocks, their scales included).
  size_t Bytes() const { return static_cast<size_t>(rows) * DTypeRowBytes(dtype, cols); }
  // The f32 block scales the view reads (0 unless fp8).
  size_t ScaleBytes() const {
    if (dtype != DType::kF8E4M3 || rows <= 0) return 0;
    const int64_t block_rows_spanned = (scale_row0 + rows + block_rows - 1) / block_rows;
    return static_cast<size_t>(block_rows_spanned * ((cols + block_cols - 1) / block_cols)) * sizeof(float);
  }
  // The block scales of row r (fp8): one per block of block_cols columns.
  const float* ScaleRow(int64_t r) const { return scale + ((scale_row0 + r) / block_rows) * scale_ld; }
  // Scale of the block holding element (r, c) (fp8 only).
  float ScaleAt(int64_t r, int64_t c) const { return ScaleRow(r)[c / block_cols]; }
  // Element (r, c) as f32; for set-up code and references, not hot loops.
  float At(int64_t r, int64_t c) const {
    const size_t i = static_cast<size_t>(r * ld + c);
    switch (dtype) {
      case DType::kBF16: return Bf16ToF32(static_cast<const bf16*>(data)[i]);
      case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(data)[i]);
      case DType::kF8E4M3: return Fp8E4M3ToF32(static_cast<const uint8_t*>(data)[i]) * ScaleAt(r, c);
      case DType::kF32: return static_cast<const float*>(data)[i];
      default:
        return BlockValueAt(dtype,
                            static_cast<const uint8_t*>(data) + static_cast<size_t>(r) * DTypeRowBytes(dtype, ld), c);
    }
  }
};

// An fp8 view: `data` e4m3 [rows, ld], `scale` f32 [ceil(rows / block_rows), scale_ld].
inline WeightView Fp8WeightView(int64_t rows, int64_t cols, int64_t ld, const uint8_t* data, const float* scale,
                                int64_t scale_ld, int64_t block_rows = 128, int64_t block_cols = 128) {
  WeightView v{DType::kF8E4M3, rows, cols, ld, data};
  v.scale = scale;
  v.scale_ld = scale_ld;
  v.block_rows = block_rows;
  v.block_cols = block_cols;
  return v;
}

// Rows [first, first + count) of an fp8 view as bf16: out [count, w.cols] row-major,
// each value e4m3 × its block's scale in f32, rounded once to nearest even. The load
// dequantizes the weights it does not keep in fp8 with it, and the large-m matmul a
// bounded chunk of rows at a time. Threads over rows unless already in a parallel region.
void DequantizeFp8ToBf16(const WeightView& w, int64_t first, int64_t count, bf16* out);

// One product y = x · wᵀ. Strides let x and y be column ranges of wider rows (one
// head's slice of [rows, heads, width] activations) without a copy.
struct MatmulProblem {
  const float* x = nullptr;  // x: [m, w.cols], row stride ldx >= w.cols
  int64_t m = 0;
  int64_t ldx = 0;
  WeightView w;
  float* y = nullptr;  // y: [m, w.rows], row stride ldy >= w.rows
  int64_t ldy = 0;
};

void Matmul(const MatmulProblem& p);

// Contiguous shorthand: x [m, w.cols], y [m, w.rows].
inline void Matmul(const float* x, int64_t m, const WeightView& w, float* y) {
  Matmul(MatmulProblem{x, m, w.cols, w, y, w.rows});
}

// `w.size()` independent products of one shape (one per head), for f32, bf16 and fp8
// weights (the per-head matrices; f16 and block formats are refused):
//   problem b: y + b·y_stride = (x + b·x_stride) · w[b]ᵀ
// with x + b·x_stride: [m, w[b].cols] (row stride ldx) and y + b·y_stride: [m, w[b].rows]
// (row stride ldy). Per-head slices of [m, heads, width] activations are x_stride =
// width, ldx = heads · width; x_stride 0 gives every head the same x. All w[b] share
// rows, cols and dtype (fp8 views may differ in scale pointers and scale_row0).
struct BatchedMatmulParams {
  const float* x = nullptr;
  int64_t x_stride = 0;
  int64_t ldx = 0;
  int64_t m = 0;
  std::span<const WeightView> w;  // w: [batch]
  float* y = nullptr;
  int64_t y_stride = 0;
  int64_t ldy = 0;
};
void MatmulBatched(const BatchedMatmulParams& p);

// Independent products of any shapes, same results as Matmul() on each in turn.
// The GEMV-sized ones (below oneDNN's rows, matmul_internal.h) run in ONE parallel region: the rows of
// all of them are laid end to end and split by weight bytes into one contiguous
// range per thread, so a decode step's small projections (MoE experts' gate/up,
// then their down) cost one fork/join instead of one each. Larger m (oneDNN) run
// one at a time on all threads first. MoE decode uses it for its experts.
void MatmulMany(const MatmulProblem* p, int64_t count);

// The plain triple loop the fast paths are tested against (double accumulation).
void MatmulReference(const MatmulProblem& p);

}  // namespace latte

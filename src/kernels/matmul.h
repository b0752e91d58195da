// y = x · wᵀ for f32 activations and f32 / bf16 weights: every projection in the
// model is one of these. Large m (prefill, batched decode) goes to oneDNN's GEMM
// (its bf16 path uses AVX512_BF16 where the CPU has it); small m (batch-1 decode,
// memory-bound) to a GEMV that streams the weight once. A portable path serves
// CPUs without AVX-512. Threads: OpenMP, sized by the caller (omp_set_num_threads).
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace latte {

// A weight matrix [rows, cols] = [out_features, in_features], row-major with row
// stride `ld` elements (ld >= cols), so a block of rows of a bigger matrix (one
// head of kv_b_proj) is a view without a copy. dtype: kF32 or kBF16.
struct WeightView {
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
  const void* data = nullptr;

  // Rows [first, first + count) of this matrix.
  WeightView RowBlock(int64_t first, int64_t count) const;
  size_t Bytes() const { return static_cast<size_t>(rows * cols) * DTypeSize(dtype); }
  // Element (r, c) as f32; for set-up code and references, not hot loops.
  float At(int64_t r, int64_t c) const {
    const size_t i = static_cast<size_t>(r * ld + c);
    return dtype == DType::kBF16 ? Bf16ToF32(static_cast<const bf16*>(data)[i])
                                 : static_cast<const float*>(data)[i];
  }
};

// y: [m, w.rows] (row stride ldy) = x: [m, w.cols] (row stride ldx) · wᵀ.
void Matmul(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y, int64_t ldy);

// Contiguous shorthand: x [m, w.cols], y [m, w.rows].
inline void Matmul(const float* x, int64_t m, const WeightView& w, float* y) {
  Matmul(x, m, w.cols, w, y, w.rows);
}

// `batch` independent products, one per head:
//   y + b*y_stride: [m, w[b].rows] = (x + b*x_stride): [m, w[b].cols] · w[b]ᵀ
// x_stride may be 0 (every head reads the same x). Rows within one problem are
// contiguous (ldx = w[b].cols, ldy = w[b].rows). All w[b] share shape and dtype.
void MatmulBatched(const float* x, int64_t x_stride, int64_t m, const WeightView* w,
                   int64_t batch, float* y, int64_t y_stride);

// One product of a MatmulMany batch: y [m, w.rows] (row stride ldy) = x [m, w.cols]
// (row stride ldx) · wᵀ.
struct MatmulProblem {
  const float* x = nullptr;
  int64_t m = 0;
  int64_t ldx = 0;
  WeightView w;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Independent products of any shapes, same results as Matmul() on each in turn.
// The GEMV-sized ones (m < kGemmMinRows) run in ONE parallel region: the rows of
// all of them are laid end to end and split by weight bytes into one contiguous
// range per thread, so a decode step's small projections (MoE experts' gate/up,
// then their down) cost one fork/join instead of one each. Larger m (oneDNN) run
// one at a time on all threads first. MoE decode uses it for its experts.
void MatmulMany(const MatmulProblem* p, int64_t count);

// The plain triple loop the fast paths are tested against (double accumulation).
void MatmulReference(const float* x, int64_t m, int64_t ldx, const WeightView& w, float* y,
                     int64_t ldy);

}  // namespace latte

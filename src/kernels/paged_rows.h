// Rows of one sequence stored in fixed-size blocks of a shared pool (paged KV cache):
// row t lives in block block_table[t / block_rows] at slot t % block_rows. The
// attention kernels read rows through this view a block-run at a time, so a run of
// up to block_rows rows is contiguous in memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace latte {

struct PagedRows {
  const std::byte* data = nullptr;  // the pool: [num_blocks, block_rows, row_dim] of dtype
  DType dtype = DType::kF32;        // kF32, kBF16, or kF8E4M3 (with row_scales)
  int64_t row_dim = 0;
  int64_t block_rows = 0;                // rows per block
  const int32_t* block_table = nullptr;  // [ceil(rows / block_rows)]
  const float* row_scales = nullptr;     // kF8E4M3: [num_blocks, block_rows], value = e4m3 · scale

  // Where row t starts, and its scale (1 unless fp8).
  size_t RowIndex(int64_t t) const {
    return static_cast<size_t>(block_table[t / block_rows]) * static_cast<size_t>(block_rows) +
           static_cast<size_t>(t % block_rows);
  }
  const void* Row(int64_t t) const { return data + RowIndex(t) * static_cast<size_t>(row_dim) * DTypeSize(dtype); }
  float Scale(int64_t t) const { return row_scales ? row_scales[RowIndex(t)] : 1.0f; }
  // Rows t, t+1, ... that follow row t contiguously (to the end of its block).
  int64_t RunLength(int64_t t) const { return block_rows - t % block_rows; }
  // `rows` rows stored one after another ([rows, row_dim] of dtype): one block.
  static PagedRows Contiguous(const void* data, DType dtype, int64_t row_dim, int64_t rows) {
    static constexpr int32_t kFirstBlock = 0;
    PagedRows r;
    r.data = static_cast<const std::byte*>(data);
    r.dtype = dtype;
    r.row_dim = row_dim;
    r.block_rows = rows > 0 ? rows : 1;
    r.block_table = &kFirstBlock;
    return r;
  }
  // Row t, column j as f32 (for references and set-up code, not hot loops).
  float At(int64_t t, int64_t j) const {
    const size_t i = RowIndex(t) * static_cast<size_t>(row_dim) + static_cast<size_t>(j);
    switch (dtype) {
      case DType::kBF16: return Bf16ToF32(reinterpret_cast<const bf16*>(data)[i]);
      case DType::kF8E4M3: return Fp8E4M3ToF32(reinterpret_cast<const uint8_t*>(data)[i]) * Scale(t);
      default: return reinterpret_cast<const float*>(data)[i];
    }
  }
};

}  // namespace latte

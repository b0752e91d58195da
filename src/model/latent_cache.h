// One sequence's latent KV cache: for every layer, one row per token holding
// c_kv (d_c values) then k_r (d_r values) — 576 on V3 — and nothing else.
//
// Rows are stored in the model's compute precision: bf16 for bf16 (and fp8)
// checkpoints — 1,152 B per token per layer on V3, half of f32, and what decode
// attention streams every step — f32 for f32 checkpoints (so the f32 tests keep
// their 1e-5 mode agreement). A row is rounded once when written; every reader
// (absorbed / materialized latent attention, the decompress path) sees the same
// rounded values, so the modes agree and incremental decode equals a full forward.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/aligned_buffer.h"
#include "base/dtype.h"

namespace latte {

class LatentCache {
 public:
  // rows: [layers, capacity, row_dim] of `dtype`, kF32 or kBF16; any other dtype aborts.
  LatentCache(int64_t layers, int64_t row_dim, int64_t capacity, DType dtype = DType::kF32)
      : layers_(layers), row_dim_(row_dim), capacity_(capacity), dtype_(CheckedRowDType(dtype)),
        data_(static_cast<size_t>(layers * row_dim * capacity) * DTypeSize(dtype_)) {}

  // Stores values: [row_dim] as the row of (layer, position), rounded to dtype().
  void Write(int64_t layer, int64_t position, const float* values) {
    const int64_t first = (layer * capacity_ + position) * row_dim_;
    if (dtype_ == DType::kBF16) {
      bf16* dst = data_.as<bf16>() + first;
      for (int64_t i = 0; i < row_dim_; ++i) dst[i] = F32ToBf16(values[i]);
    } else {
      float* dst = data_.as<float>() + first;
      for (int64_t i = 0; i < row_dim_; ++i) dst[i] = values[i];
    }
  }

  // Rows [first, first + count) of `layer` widened to f32: out: [count, row_dim].
  void ReadF32(int64_t layer, int64_t first, int64_t count, float* out) const {
    const int64_t begin = (layer * capacity_ + first) * row_dim_, size = count * row_dim_;
    if (dtype_ == DType::kBF16) {
      const bf16* src = data_.as<bf16>() + begin;
      for (int64_t i = 0; i < size; ++i) out[i] = Bf16ToF32(src[i]);
    } else {
      const float* src = data_.as<float>() + begin;
      for (int64_t i = 0; i < size; ++i) out[i] = src[i];
    }
  }

  // All rows of `layer`: [capacity, row_dim] of dtype(), row stride row_dim.
  const void* Rows(int64_t layer) const {
    return data_.data() + static_cast<size_t>(layer * capacity_ * row_dim_) * DTypeSize(dtype_);
  }

  int64_t length() const { return length_; }  // positions [0, length) hold tokens
  void set_length(int64_t length) { length_ = length; }
  int64_t capacity() const { return capacity_; }
  int64_t row_dim() const { return row_dim_; }
  DType dtype() const { return dtype_; }
  size_t Bytes() const { return data_.size(); }

 private:
  // Write and ReadF32 round and widen f32 and bf16 only: a cache of any other dtype is a
  // caller's bug, stopped here rather than stored as something else.
  static DType CheckedRowDType(DType dtype) {
    if (dtype != DType::kF32 && dtype != DType::kBF16) {
      const std::string_view name = DTypeName(dtype);
      std::fprintf(stderr, "LatentCache: rows of dtype %.*s are not supported (F32 or BF16)\n",
                   static_cast<int>(name.size()), name.data());
      std::abort();
    }
    return dtype;
  }

  int64_t layers_;
  int64_t row_dim_;
  int64_t capacity_;
  DType dtype_;
  int64_t length_ = 0;
  AlignedBuffer data_;
};

// The tokens of one sequence that a forward pass runs: positions [start, start + count),
// appended after the `start` tokens already in `cache`.
struct SequenceSpan {
  LatentCache* cache = nullptr;
  int64_t start = 0;
  int64_t count = 0;
};

}  // namespace latte

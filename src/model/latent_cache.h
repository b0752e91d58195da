// One sequence's latent KV cache: for every layer, one row per token holding
// c_kv (d_c values) then k_r (d_r values) — 576 on V3 — and nothing else.
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"

namespace latte {

class LatentCache {
 public:
  // rows: [layers, capacity, row_dim] f32.
  LatentCache(int64_t layers, int64_t row_dim, int64_t capacity)
      : layers_(layers), row_dim_(row_dim), capacity_(capacity),
        data_(static_cast<size_t>(layers * row_dim * capacity) * sizeof(float)) {}

  float* Row(int64_t layer, int64_t position) {
    return data_.as<float>() + (layer * capacity_ + position) * row_dim_;
  }
  const float* Rows(int64_t layer) const { return data_.as<float>() + layer * capacity_ * row_dim_; }

  int64_t length() const { return length_; }  // positions [0, length) hold tokens
  void set_length(int64_t length) { length_ = length; }
  int64_t capacity() const { return capacity_; }
  int64_t row_dim() const { return row_dim_; }
  size_t Bytes() const { return data_.size(); }

 private:
  int64_t layers_;
  int64_t row_dim_;
  int64_t capacity_;
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

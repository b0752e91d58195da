#include "model/kv_cache.h"

#include "base/check.h"

#include <algorithm>
#include <cmath>

namespace latte {
namespace {

constexpr float kFp8Max = 448.0f;  // the largest finite e4m3 value

}  // namespace

std::optional<KvCacheDtype> ParseKvCacheDtype(std::string_view name) {
  if (name == "auto") return KvCacheDtype::kAuto;
  if (name == "bf16") return KvCacheDtype::kBf16;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFp8;
  return std::nullopt;
}

DType ResolveKvCacheDtype(KvCacheDtype requested, DType compute) {
  switch (requested) {
    case KvCacheDtype::kBf16: return DType::kBF16;
    case KvCacheDtype::kFp8: return DType::kF8E4M3;
    case KvCacheDtype::kAuto: break;
  }
  return compute == DType::kF32 ? DType::kF32 : DType::kBF16;
}

int64_t KvCache::BlockBytes(int64_t layers, int64_t row_dim, int64_t block_size, DType dtype) {
  const int64_t per_row = row_dim * static_cast<int64_t>(DTypeSize(dtype)) +
                          (dtype == DType::kF8E4M3 ? static_cast<int64_t>(sizeof(float)) : 0);
  return layers * block_size * per_row;
}

KvCache::KvCache(int64_t layers, int64_t row_dim, int64_t num_blocks, int64_t block_size, DType dtype)
    : layers_(layers), row_dim_(row_dim), num_blocks_(num_blocks), block_size_(block_size), dtype_(dtype) {
  LATTE_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF8E4M3, "KvCache: rows of ",
              DTypeName(dtype), " are not supported (F32, BF16 or F8_E4M3)");
  LATTE_CHECK(layers >= 1 && row_dim >= 1 && num_blocks >= 0 && block_size >= 1, "KvCache: ", layers,
              " layers, rows of ", row_dim, ", ", num_blocks, " blocks of ", block_size);
  const size_t rows = static_cast<size_t>(layers * num_blocks * block_size);
  // Pages on first touch: the pool is sized for the whole budget, memory is taken as
  // blocks are first used (the block pool hands out low blocks and reuses freed ones first).
  rows_ = AlignedBuffer(rows * static_cast<size_t>(row_dim) * DTypeSize(dtype), AlignedBuffer::Pages::kOnFirstTouch);
  if (dtype == DType::kF8E4M3) scales_ = AlignedBuffer(rows * sizeof(float), AlignedBuffer::Pages::kOnFirstTouch);
}

size_t KvCache::RowOffset(int64_t layer, std::span<const int32_t> block_table, int64_t position) const {
  const int64_t block = block_table[static_cast<size_t>(position / block_size_)];
  return static_cast<size_t>((layer * num_blocks_ + block) * block_size_ + position % block_size_);
}

void KvCache::Write(int64_t layer, std::span<const int32_t> block_table, int64_t position, const float* values) {
  const size_t row = RowOffset(layer, block_table, position);
  const size_t first = row * static_cast<size_t>(row_dim_);
  switch (dtype_) {
    case DType::kBF16: {
      bf16* dst = rows_.as<bf16>() + first;
      for (int64_t i = 0; i < row_dim_; ++i) dst[i] = F32ToBf16(values[i]);
      break;
    }
    case DType::kF8E4M3: {
      float amax = 0;
      for (int64_t i = 0; i < row_dim_; ++i) amax = std::max(amax, std::fabs(values[i]));
      const float scale = amax > 0 ? amax / kFp8Max : 1.0f;
      const float inverse = 1.0f / scale;
      uint8_t* dst = rows_.as<uint8_t>() + first;
      for (int64_t i = 0; i < row_dim_; ++i) dst[i] = F32ToFp8E4M3(values[i] * inverse);
      scales_.as<float>()[row] = scale;
      break;
    }
    default: {
      float* dst = rows_.as<float>() + first;
      std::copy(values, values + row_dim_, dst);
    }
  }
}

void KvCache::ReadF32(int64_t layer, std::span<const int32_t> block_table, int64_t first, int64_t count,
                      float* out) const {
  const PagedRows rows = Rows(layer, block_table);
  for (int64_t t = first; t < first + count;) {
    const int64_t run = std::min(rows.RunLength(t), first + count - t);
    float* dst = out + (t - first) * row_dim_;
    const size_t n = static_cast<size_t>(run * row_dim_);
    switch (dtype_) {
      case DType::kBF16: {
        const bf16* src = static_cast<const bf16*>(rows.Row(t));
        for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(src[i]);
        break;
      }
      case DType::kF8E4M3: {
        const uint8_t* src = static_cast<const uint8_t*>(rows.Row(t));
        for (int64_t r = 0; r < run; ++r) {
          const float scale = rows.Scale(t + r);
          for (int64_t j = 0; j < row_dim_; ++j) dst[r * row_dim_ + j] = Fp8E4M3ToF32(src[r * row_dim_ + j]) * scale;
        }
        break;
      }
      default: {
        const float* src = static_cast<const float*>(rows.Row(t));
        std::copy(src, src + n, dst);
      }
    }
    t += run;
  }
}

PagedRows KvCache::Rows(int64_t layer, std::span<const int32_t> block_table) const {
  PagedRows r;
  const size_t layer_rows = static_cast<size_t>(layer * num_blocks_ * block_size_);
  r.data = rows_.data() + layer_rows * static_cast<size_t>(row_dim_) * DTypeSize(dtype_);
  r.dtype = dtype_;
  r.row_dim = row_dim_;
  r.block_rows = block_size_;
  r.block_table = block_table.data();
  if (dtype_ == DType::kF8E4M3) r.row_scales = scales_.as<float>() + layer_rows;
  return r;
}

namespace {

int64_t BlocksFor(int64_t tokens, int64_t block_size) { return (tokens + block_size - 1) / block_size; }

}  // namespace

SequenceCaches::SequenceCaches(int64_t layers, int64_t row_dim, int64_t sequences, int64_t capacity, int64_t block_size,
                               DType dtype)
    : capacity_(capacity), cache_(layers, row_dim, sequences * BlocksFor(capacity, block_size), block_size, dtype) {
  const int64_t per_sequence = BlocksFor(capacity, block_size);
  for (int64_t s = 0; s < sequences; ++s) {
    std::vector<int32_t>& table = tables_.emplace_back();
    for (int64_t b = 0; b < per_sequence; ++b) table.push_back(static_cast<int32_t>(s * per_sequence + b));
  }
}

}  // namespace latte

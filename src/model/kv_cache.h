// The latent KV cache: one pool of fixed-size blocks shared by every sequence. A block
// holds block_size tokens' rows in every layer; a row is c_kv then k_r (d_c + d_r
// values, 576 on V3) and nothing else. Which blocks a sequence owns is its block table
// (engine/kv_cache_manager.h); this class only stores rows and hands out views.
//
// Row dtypes (--kv-cache-dtype):
//   bf16   2 B per value: 1,152 B per token per layer on V3; what bf16 / fp8 models use
//   f32    4 B per value: f32 checkpoints (their tests hold modes to 1e-5)
//   fp8    e4m3 + one f32 scale per row (amax / 448): 580 B per token per layer on V3,
//          about half of bf16; a row is rounded once, when written
// Every reader (latent attention, the decompress path) sees the same rounded values,
// so the modes agree and incremental decode equals a full forward.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/dtype.h"
#include "kernels/paged_rows.h"

namespace latte {

// FlashMLA's block size: 64 tokens × 576 bf16 values = 72 KiB per layer, a run the
// attention kernel reads whole (kSharedKeyBlock rows).
inline constexpr int64_t kDefaultKvBlockSize = 64;

enum class KvCacheDtype {
  kAuto,  // the model's compute dtype: bf16, or f32 for f32 checkpoints
  kBf16,
  kFp8,  // e4m3 with a per-row scale
};
std::optional<KvCacheDtype> ParseKvCacheDtype(std::string_view name);  // "auto" | "bf16" | "fp8"
// The row dtype for a model computing in `compute` (kBF16 or kF32).
DType ResolveKvCacheDtype(KvCacheDtype requested, DType compute);

class KvCache {
 public:
  // rows: [layers, num_blocks, block_size, row_dim] of `dtype` (kF32, kBF16 or kF8E4M3).
  KvCache(int64_t layers, int64_t row_dim, int64_t num_blocks, int64_t block_size, DType dtype);

  // Bytes one block takes (rows of every layer, fp8 scales included).
  static int64_t BlockBytes(int64_t layers, int64_t row_dim, int64_t block_size, DType dtype);

  // The pool's pages are taken as blocks are first written; this takes them all now.
  void CommitPages() {
    rows_.CommitPages();
    scales_.CommitPages();
  }

  // Stores values: [row_dim] as the row of `position` in `layer`, rounded to dtype().
  void Write(int64_t layer, std::span<const int32_t> block_table, int64_t position, const float* values);
  // Rows [first, first + count) of `layer` widened to f32: out: [count, row_dim].
  void ReadF32(int64_t layer, std::span<const int32_t> block_table, int64_t first, int64_t count, float* out) const;
  // A view of one sequence's rows in `layer` for the attention kernels.
  PagedRows Rows(int64_t layer, std::span<const int32_t> block_table) const;

  int64_t layers() const { return layers_; }
  int64_t row_dim() const { return row_dim_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  size_t Bytes() const { return rows_.size() + scales_.size(); }

 private:
  size_t RowOffset(int64_t layer, std::span<const int32_t> block_table, int64_t position) const;

  int64_t layers_, row_dim_, num_blocks_, block_size_;
  DType dtype_;
  AlignedBuffer rows_;    // rows: [layers, num_blocks, block_size, row_dim] of dtype_
  AlignedBuffer scales_;  // scales: [layers, num_blocks, block_size] f32 (fp8 only)
};

// A KvCache with a fixed block table per sequence, blocks handed out in order:
// for tests, benchmarks and tools that run a known set of sequences (the engine
// shares one pool between requests instead, engine/kv_cache_manager.h).
class SequenceCaches {
 public:
  SequenceCaches(int64_t layers, int64_t row_dim, int64_t sequences, int64_t capacity, int64_t block_size, DType dtype);
  KvCache& cache() { return cache_; }
  // Sequence s's blocks, covering `capacity` positions.
  std::span<const int32_t> table(int64_t s) const { return tables_[static_cast<size_t>(s)]; }
  int64_t capacity() const { return capacity_; }

 private:
  int64_t capacity_;
  KvCache cache_;
  std::vector<std::vector<int32_t>> tables_;
};

}  // namespace latte

// One memory budget for the whole process (--memory-gb): the weights and the forward
// pass's scratch come first, the paged KV pool gets what they leave, in whole blocks.
// In materialized mode W_Q_UK and W_UV_O are part of the weights, so the same budget
// holds fewer cached tokens than in absorbed mode; the start-up log gives the tokens
// the budget holds in every mode (KvTokensInMode, DescribeMemoryPlan).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model_weights.h"

namespace latte {

// The default budget's share of MemAvailable, read at start: the rest is left to the
// OS, the page cache and other processes.
inline constexpr double kDefaultMemoryFraction = 0.85;

// The default budget's share for the decompressed prefix of the prompt being prefilled.
inline constexpr double kDefaultDecompressedPrefixShare = 0.1;

// The most tokens one KV block holds.
inline constexpr int64_t kMaxKvBlockSize = 4096;

struct MemoryOptions {
  std::optional<double> memory_gb;       // the budget (1e9 bytes); default: kDefaultMemoryFraction of MemAvailable
  std::optional<int64_t> num_kv_blocks;  // the pool's size, whatever the budget says
  int64_t block_size = kDefaultKvBlockSize;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  // Take the pool's memory at start (latte serve) rather than as blocks are first used.
  bool commit_kv_pool = false;
  // The decompressed K/V kept across a prompt's prefill chunks (model/decompressed_prefix.h);
  // default: kDefaultDecompressedPrefixShare of the budget, at most what one prompt of
  // max_position_embeddings tokens needs. 0: every chunk decompresses every cached row.
  std::optional<double> decompressed_prefix_gb;

  // The values on their own: block_size in [1, kMaxKvBlockSize], num_kv_blocks >= 1,
  // memory_gb > 0; an error names the field.
  Status Validate() const;
};

struct MemoryPlan {
  int64_t budget_bytes = 0;
  bool budget_is_default = false;
  int64_t available_bytes = 0;                     // MemAvailable when the plan was made
  int64_t weight_bytes = 0;                        // the loaded weights, prepared tensors included
  int64_t scratch_bytes = 0;                       // the forward pass's buffers at the largest step
  int64_t decompressed_prefix_bytes = 0;           // kept across a prompt's prefill chunks
  int64_t decompressed_prefix_position_bytes = 0;  // what one position takes there, every layer
  int64_t block_bytes = 0;                         // one KV block, every layer
  int64_t kv_bytes_per_token = 0;
  DType kv_dtype = DType::kBF16;
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  bool num_blocks_overridden = false;

  int64_t pool_bytes() const { return num_blocks * block_bytes; }
  // The positions of a prompt whose decompressed K/V the plan keeps.
  int64_t decompressed_prefix_positions() const {
    return decompressed_prefix_position_bytes > 0 ? decompressed_prefix_bytes / decompressed_prefix_position_bytes : 0;
  }
  int64_t pool_tokens() const { return num_blocks * block_size; }
};

// The forward pass's scratch at the engine's largest step: a chunk of
// max_num_batched_tokens tokens and logits for every running sequence's sampled row
// or a whole chunk of prompt rows, with `threads` compute threads.
// Under data-parallel attention (`shard`) a MoE layer runs every rank's tokens.
int64_t EngineScratchBytes(const ModelConfig& config, const SchedulerConfig& scheduler, int threads,
                           const TensorShard& shard = {});

// The decompressed-prefix store a budget of `budget_bytes` keeps: `gb` (1e9 bytes)
// when given, else kDefaultDecompressedPrefixShare of the budget, at most what one
// prompt of max_position_embeddings positions needs. `local`: this rank's heads.
int64_t DecompressedPrefixBytes(const ModelConfig& local, int64_t budget_bytes, std::optional<double> gb);

// The KV blocks a budget holds: whole blocks of what the weights and scratch leave.
int64_t KvBlocksInBudget(int64_t budget_bytes, int64_t weight_bytes, int64_t scratch_bytes, int64_t block_bytes);

// MemAvailable from /proc/meminfo, in bytes (0 when it cannot be read).
int64_t AvailableMemoryBytes();

// Checks the options (Validate) and the budget against the machine before anything
// is loaded: a budget over MemAvailable is an error (not an OOM kill later).
// `available`: AvailableMemoryBytes().
Status CheckMemoryBudget(const MemoryOptions& options, int64_t available);

// The plan for `weights` under `options`, with the scratch of `scheduler`'s largest
// step. Errors: a budget the weights and scratch do not fit in (naming the figures),
// a pool of no block, a num_kv_blocks pool that does not fit in the memory the
// machine has.
Result<MemoryPlan> PlanMemory(const ModelWeights& weights, const MemoryOptions& options,
                              const SchedulerConfig& scheduler, int64_t available);

// The tokens the plan's budget would hold with the same weights loaded in `mode`
// (the materialized products in or out of the weights), scratch and blocks.
int64_t KvTokensInMode(const MemoryPlan& plan, const ModelWeights& weights, MlaMode mode);

// The start-up log: the budget, weights, scratch, the pool's bytes, blocks and
// tokens, and what the same budget would hold in each MLA mode.
std::string DescribeMemoryPlan(const MemoryPlan& plan, const ModelWeights& weights);

}  // namespace latte

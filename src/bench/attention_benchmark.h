// `latte bench attn`: one MLA layer at a model's shapes with random bf16 weights,
// decoding B sequences of context C, in each mode. Reports time per step beside the
// weight bytes and FLOPs the step needs (model/cost_model.h), so whether absorbed
// decode beats materialized (fewer weight bytes and FLOPs per step) is measured rather
// than asserted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/mla_mode.h"

namespace latte {

struct AttentionBenchPoint {
  MlaMode mode;
  int64_t batch = 1;
  int64_t context = 0;
  double ms_per_step = 0;
  int64_t steps = 0;
  int64_t weight_bytes = 0;  // weights one step reads (bf16)
  int64_t kv_bytes = 0;      // latent cache rows one step reads (bf16 rows)
  int64_t flops = 0;         // projections + attention core, whole batch
  double achieved_gbps = 0;  // (weight_bytes + kv_bytes) / time
  double achieved_gflops = 0;
  // With AttentionBenchOptions::compare_block_size: the same steps over the second
  // layout, timed alternating with the first step by step.
  std::optional<double> compared_ms_per_step;
};

struct AttentionBenchOptions {
  std::vector<MlaMode> modes;
  std::vector<int64_t> batches;
  std::vector<int64_t> contexts;
  double min_seconds = 1.0;  // per point, after one warm-up step
  int64_t max_steps = 50;
  uint64_t seed = 1;
  // Latent rows in blocks of this many tokens (the paged cache's --block-size), the
  // blocks of all sequences shuffled in the pool as a busy engine leaves them; 0: each
  // sequence's rows in one contiguous block.
  int64_t block_size = 0;
  // Also time each point over a second cache with the same rows in blocks of this size
  // (0: contiguous), steps on the two alternating (A B B A ...), so that the host's
  // bandwidth, which moves from second to second, cancels in their ratio.
  std::optional<int64_t> compare_block_size;
};

// Runs every (mode, batch, context) point, calling `report` after each.
Status RunAttentionBenchmark(const ModelConfig& config, const AttentionBenchOptions& options,
                             void (*report)(const AttentionBenchPoint&, void*), void* user);

// The attention core alone, as absorbed and materialized decode run it: for each of B
// sequences, SharedKeyAttention of H heads (random q) over its context + 1 bf16 latent
// rows, split over the threads by context. Its costs are exact: every row read once
// and 2·H·(d_c + d_r) + 2·H·d_c FLOPs per row (ComputeAttentionCoreStepCosts).
struct AttentionCorePoint {
  int64_t batch = 1;
  int64_t context = 0;
  double ms_per_step = 0;
  int64_t steps = 0;
  int64_t kv_bytes = 0;  // bf16 rows read per step, whole batch
  int64_t flops = 0;     // scores + weighted sums, whole batch
  double achieved_gbps = 0;
  double achieved_gflops = 0;
};

// Runs every (batch, context) point of `options` (modes are ignored).
Status RunAttentionCoreBenchmark(const ModelConfig& config, const AttentionBenchOptions& options,
                                 void (*report)(const AttentionCorePoint&, void*), void* user);

}  // namespace latte

#include "engine/memory_plan.h"

#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "model/cost_model.h"
#include "model/decompressed_prefix.h"
#include "model/deepseek.h"

namespace latte {
namespace {

std::string Gb(int64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB", static_cast<double>(bytes) / static_cast<double>(kBytesPerGB));
  return s;
}

// Bytes the weights would take in `mode`: the loaded ones with this mode's derived
// tensors (W_UK copies, W_Q_UK / W_UV_O) swapped for that mode's, at the compute dtype.
int64_t WeightBytesInMode(const ModelWeights& weights, MlaMode mode) {
  const WeightMemory& m = weights.memory();
  const int64_t value = static_cast<int64_t>(DTypeSize(weights.compute_dtype()));
  const auto derived = [&](MlaMode which) {
    // shard_config: this rank's heads under tensor parallelism (its share of the derived tensors).
    const WeightComponents& p = ComputeWeightCosts(weights.shard_config(), which).model_params;
    // fp8 checkpoints: kv_b_proj is dequantized to bf16 and the products derived from it are bf16.
    const int64_t derived_value = p.kv_b_bf16 > 0 ? kBf16Bytes : value;
    return (p.kv_b_bf16 + p.w_uk_t + p.materialized) * derived_value;
  };
  return static_cast<int64_t>(m.Total()) - derived(weights.mode()) + derived(mode);
}

}  // namespace

int64_t EngineScratchBytes(const ModelConfig& config, const SchedulerConfig& scheduler, int threads,
                           const TensorShard& shard) {
  const int64_t logit_rows = std::max(scheduler.max_num_seqs, scheduler.max_num_batched_tokens);
  const int dp_ranks = shard.expert_size / shard.size;  // data-parallel replicas
  return DeepSeekModel::ScratchBytes(config, scheduler.max_num_batched_tokens, logit_rows, threads, MlaSettings{},
                                     shard.size, dp_ranks);
}

int64_t DecompressedPrefixBytes(const ModelConfig& local, int64_t budget_bytes, std::optional<double> gb) {
  if (gb) return static_cast<int64_t>(std::llround(*gb * static_cast<double>(kBytesPerGB)));
  const int64_t per_position = DecompressedPrefix::BytesPerPosition(local.num_hidden_layers, local.num_attention_heads,
                                                                    local.QkHeadDim(), local.v_head_dim);
  return std::min(static_cast<int64_t>(kDefaultDecompressedPrefixShare * static_cast<double>(budget_bytes)),
                  local.max_position_embeddings * per_position);
}

int64_t KvBlocksInBudget(int64_t budget_bytes, int64_t weight_bytes, int64_t scratch_bytes, int64_t block_bytes) {
  const int64_t free = budget_bytes - weight_bytes - scratch_bytes;
  return free > 0 ? free / block_bytes : 0;
}

int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

Status MemoryOptions::Validate() const {
  if (block_size < 1 || block_size > kMaxKvBlockSize) {
    return Status::InvalidArgument(
        "block_size must be in [1, " + std::to_string(kMaxKvBlockSize) + "], got " + std::to_string(block_size),
        "block_size");
  }
  if (num_kv_blocks && *num_kv_blocks < 1) {
    return Status::InvalidArgument("num_kv_blocks must be at least 1, got " + std::to_string(*num_kv_blocks),
                                   "num_kv_blocks");
  }
  if (memory_gb && !(*memory_gb > 0 && std::isfinite(*memory_gb))) {
    return Status::InvalidArgument("memory_gb must be > 0", "memory_gb");
  }
  if (decompressed_prefix_gb && !(*decompressed_prefix_gb >= 0 && std::isfinite(*decompressed_prefix_gb))) {
    return Status::InvalidArgument("decompressed_prefix_gb must be >= 0", "decompressed_prefix_gb");
  }
  return Status::Ok();
}

Status CheckMemoryBudget(const MemoryOptions& options, int64_t available) {
  LATTE_RETURN_IF_ERROR(options.Validate());
  if (!options.memory_gb) return Status::Ok();
  const double bytes = *options.memory_gb * static_cast<double>(kBytesPerGB);
  if (available > 0 && bytes > static_cast<double>(available)) {
    return Status::OutOfRange("memory_gb " + Gb(static_cast<int64_t>(bytes)) +
                                  " is more than this machine has available (" + Gb(available) + ")",
                              "memory_gb");
  }
  return Status::Ok();
}

Result<MemoryPlan> PlanMemory(const ModelWeights& weights, const MemoryOptions& options,
                              const SchedulerConfig& scheduler, int64_t available) {
  LATTE_RETURN_IF_ERROR(CheckMemoryBudget(options, available));
  const ModelConfig& c = weights.config();
  MemoryPlan plan;
  plan.available_bytes = available;
  plan.budget_is_default = !options.memory_gb;
  plan.budget_bytes = options.memory_gb
                          ? static_cast<int64_t>(std::llround(*options.memory_gb * static_cast<double>(kBytesPerGB)))
                          : static_cast<int64_t>(kDefaultMemoryFraction * static_cast<double>(available));
  plan.weight_bytes = static_cast<int64_t>(weights.memory().Total());
  plan.scratch_bytes = EngineScratchBytes(c, scheduler, omp_get_max_threads(), weights.shard());
  if (weights.mtp()) {
    // Speculative decoding: the step's final hidden rows kept for the MTP layer, its
    // [T, 2d] input and its output rows.
    plan.scratch_bytes += 4 * scheduler.max_num_batched_tokens * c.hidden_size * static_cast<int64_t>(sizeof(float));
  }
  const ModelConfig& local = weights.shard_config();  // this rank's heads
  plan.decompressed_prefix_position_bytes = DecompressedPrefix::BytesPerPosition(
      local.num_hidden_layers, local.num_attention_heads, local.QkHeadDim(), local.v_head_dim);
  plan.decompressed_prefix_bytes = DecompressedPrefixBytes(local, plan.budget_bytes, options.decompressed_prefix_gb);
  plan.kv_dtype = ResolveKvCacheDtype(options.kv_cache_dtype, weights.compute_dtype());
  plan.block_size = options.block_size;
  // The MTP layer, when loaded, keeps latent rows of its own in every block.
  const int64_t cache_layers = c.num_hidden_layers + (weights.mtp() ? 1 : 0);
  plan.block_bytes = KvCache::BlockBytes(cache_layers, c.LatentDim(), options.block_size, plan.kv_dtype);
  plan.kv_bytes_per_token = plan.block_bytes / options.block_size;
  if (options.num_kv_blocks) {
    plan.num_blocks = *options.num_kv_blocks;
    plan.num_blocks_overridden = true;
    const int64_t total = plan.weight_bytes + plan.scratch_bytes + plan.decompressed_prefix_bytes + plan.pool_bytes();
    if (available > 0 && total > available) {
      return Status::OutOfRange("num_kv_blocks " + std::to_string(plan.num_blocks) + " needs " + Gb(plan.pool_bytes()) +
                                    " for the KV cache; with the weights (" + Gb(plan.weight_bytes) + "), scratch (" +
                                    Gb(plan.scratch_bytes) + ") and decompressed prefix (" +
                                    Gb(plan.decompressed_prefix_bytes) +
                                    ") that is more than this machine has available (" + Gb(available) + ")",
                                "num_kv_blocks");
    }
    return plan;
  }
  plan.num_blocks = KvBlocksInBudget(plan.budget_bytes, plan.weight_bytes,
                                     plan.scratch_bytes + plan.decompressed_prefix_bytes, plan.block_bytes);
  if (plan.num_blocks < 1) {
    return Status::OutOfRange("a memory budget of " + Gb(plan.budget_bytes) +
                              " leaves no room for the KV cache: weights " + Gb(plan.weight_bytes) + " + scratch " +
                              Gb(plan.scratch_bytes) + " + decompressed prefix " + Gb(plan.decompressed_prefix_bytes) +
                              ", and one block of " + std::to_string(plan.block_size) + " tokens takes " +
                              std::to_string(plan.block_bytes) +
                              " bytes (raise --memory-gb, lower --max-num-batched-tokens or --decompressed-prefix-gb)");
  }
  return plan;
}

int64_t KvTokensInMode(const MemoryPlan& plan, const ModelWeights& weights, MlaMode mode) {
  return KvBlocksInBudget(plan.budget_bytes, WeightBytesInMode(weights, mode),
                          plan.scratch_bytes + plan.decompressed_prefix_bytes, plan.block_bytes) *
         plan.block_size;
}

std::string DescribeMemoryPlan(const MemoryPlan& plan, const ModelWeights& weights) {
  std::ostringstream out;
  out << "memory: budget " << Gb(plan.budget_bytes)
      << (plan.budget_is_default ? " (default: " + std::to_string(static_cast<int>(kDefaultMemoryFraction * 100)) +
                                       "% of " + Gb(plan.available_bytes) + " available; --memory-gb sets it)"
                                 : "")
      << "; weights " << Gb(plan.weight_bytes) << " (mla-mode " << MlaModeName(weights.mode()) << "), scratch "
      << Gb(plan.scratch_bytes) << ", decompressed prefix " << Gb(plan.decompressed_prefix_bytes) << " ("
      << plan.decompressed_prefix_positions() << " positions of a prompt in prefill)\n";
  out << "kv cache: " << plan.num_blocks << " blocks of " << plan.block_size << " tokens (" << plan.pool_tokens()
      << " tokens, " << Gb(plan.pool_bytes()) << ", " << plan.kv_bytes_per_token << " bytes per token in "
      << DTypeName(plan.kv_dtype) << ")" << (plan.num_blocks_overridden ? ", set by --num-kv-blocks" : "") << "\n";
  out << "the same budget in each mla-mode:";
  for (MlaMode mode : kMlaModesInPrintOrder) {
    out << " " << MlaModeName(mode) << ": weights " << Gb(WeightBytesInMode(weights, mode)) << ", "
        << KvTokensInMode(plan, weights, mode) << " tokens;";
  }
  out << "\n";
  return out.str();
}

}  // namespace latte

#include "engine/serving_stack.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "dist/runtime.h"
#include "engine/model_files.h"
#include "model/tensor_parallel.h"

namespace latte {
namespace {

namespace fs = std::filesystem;

// What the engine itself needs: the config's scheduling and cache choices, the pool's
// size as the plan made it.
EngineOptions EngineOptionsFor(const EngineConfig& config, const MemoryPlan& plan) {
  EngineOptions options;
  options.scheduler = config.scheduler;
  options.block_size = plan.block_size;
  options.num_blocks = plan.num_blocks;
  options.prefix_caching = config.prefix_caching;
  options.kv_cache_dtype = config.memory.kv_cache_dtype;
  options.decompressed_prefix_bytes = plan.decompressed_prefix_bytes;
  options.num_speculative_tokens = config.speculates() ? config.num_speculative_tokens : 0;
  return options;
}

int64_t SmallestAcrossRanks(Comm& comm, int64_t value) {
  std::vector<int64_t> every(comm.size());
  comm.AllGatherBytes(&value, sizeof value, every.data());
  return *std::min_element(every.begin(), every.end());
}

double LargestAcrossRanks(Comm& comm, double value) {
  std::vector<double> every(comm.size());
  comm.AllGatherBytes(&value, sizeof value, every.data());
  return *std::max_element(every.begin(), every.end());
}

// Each rank's plan, prefixed with its rank when there are several.
void LogMemoryPlan(const MemoryPlan& plan, const ModelWeights& weights, const ParallelLayout& layout) {
  std::string text = DescribeMemoryPlan(plan, weights);
  const std::string prefix = RankPrefix();
  if (!prefix.empty()) {
    std::string prefixed = prefix + LayoutName(layout) + ", rank's shard:\n";
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = text.find('\n', start);
      prefixed += prefix + text.substr(start, end == std::string::npos ? std::string::npos : end + 1 - start);
      if (end == std::string::npos) break;
      start = end + 1;
    }
    text = prefixed;
  }
  std::fputs(text.c_str(), stderr);
}

// Takes the pool's memory now, timed: the plan's budget was checked against
// MemAvailable before the load; a pool that memory cannot back ends here, at start.
void CommitKvPool(Engine& engine, const MemoryPlan& plan, bool log) {
  const auto start = std::chrono::steady_clock::now();
  engine.CommitKvPool();
  if (!log) return;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%skv pool: %.2f GB committed (every page backed now) in %.1f s\n", RankPrefix().c_str(),
               static_cast<double>(plan.pool_bytes()) / 1e9, seconds);
}

// How deep prompts are chunked: the cap, where it starts to bind, and what happens past
// the positions the decompressed prefix keeps (latent keys, capped at their cost; or, with
// no latent form, whole chunks that decompress their prefix again).
void LogPrefillPairCap(const SchedulerConfig& config) {
  const int64_t pairs = config.MaxPrefillAttentionPairs();
  if (pairs == SchedulerConfig::kNoPairCap || config.kept_prefix_positions == 0) {
    std::fprintf(stderr, "%sprefill chunks: sized by tokens only\n", RankPrefix().c_str());
    return;
  }
  const int64_t step = config.max_num_batched_tokens;
  char past_kept[160];
  if (config.latent_key_pair_cost > 0) {
    std::snprintf(past_kept, sizeof(past_kept), "past them keys are latent, a pair counted %.2f",
                  config.latent_key_pair_cost);
  } else {
    std::snprintf(past_kept, sizeof(past_kept), "not capped past them");
  }
  std::fprintf(stderr,
               "%sprefill chunks: at most %lld query-key pairs each (%s): a %lld-token chunk up to %lld "
               "tokens deep; --decompressed-prefix-gb keeps %lld positions, %s\n",
               RankPrefix().c_str(), static_cast<long long>(pairs),
               config.max_prefill_attention_pairs == 0 ? "derived from the model" : "--max-prefill-attention-pairs",
               static_cast<long long>(step), static_cast<long long>(std::max<int64_t>(0, pairs / step - step)),
               static_cast<long long>(config.kept_prefix_positions), past_kept);
}

}  // namespace

Result<ModelPreview> PreviewModel(const std::string& dir) {
  LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(dir));
  ModelPreview preview;
  LATTE_ASSIGN_OR_RETURN(preview.config, files.Config());
  if (files.HasTokenizer()) {
    LATTE_ASSIGN_OR_RETURN(preview.tokenizer, files.LoadTokenizer());
  }
  return preview;
}

Result<std::unique_ptr<ServingStack>> BuildServingStack(const EngineConfig& config, bool log,
                                                        std::unique_ptr<Tokenizer> tokenizer) {
  LATTE_RETURN_IF_ERROR(config.Validate());
  // Ranks on one host share its memory: each plans with its share of what is available.
  const int64_t available = AvailableMemoryBytes() / (config.load.parallel.world_size() > 1 ? LocalRanks() : 1);
  LATTE_RETURN_IF_ERROR(CheckMemoryBudget(config.memory, available));
  SetThreads(config.threads);

  auto stack = std::make_unique<ServingStack>();
  LoadOptions load = config.load;
  // Under tensor parallelism each rank loads its shard; the leader (rank 0) logs the
  // load, every rank its memory plan.
  Comm& world = WorldComm();
  const bool split = load.parallel.world_size() > 1;
  // A rank that dies or hangs leaves the others waiting inside a collective: past the
  // limit they end the job, naming it.
  world.set_wait_limit(config.dist_timeout_s);
  load.shard = ShardOf(load.parallel, world.rank());
  load.progress = log && world.rank() == 0;
  load.mtp = config.speculates();
  LATTE_ASSIGN_OR_RETURN(stack->weights, ModelWeights::Load(config.model, load));
  SetThreadsForModel(config.threads, stack->weights->memory().Total());
  stack->model = std::make_unique<DeepSeekModel>(*stack->weights, MlaSettings{},
                                                 RanksOf(load.parallel, world, ReplicaComm(load.parallel.tp)));
  stack->model->set_dist_check(config.dist_check);
  stack->tokenizer = std::move(tokenizer);
  if (!stack->tokenizer) {
    LATTE_ASSIGN_OR_RETURN(const ModelFiles files, ModelFiles::Find(config.model));
    if (files.HasTokenizer()) {
      LATTE_ASSIGN_OR_RETURN(stack->tokenizer, files.LoadTokenizer());
    }
  }
  LATTE_ASSIGN_OR_RETURN(stack->plan, PlanMemory(*stack->weights, config.memory, config.scheduler, available));
  // Ranks that run the same schedule need the same pool (a preemption depends on its
  // size): each takes the smallest any rank's budget gave.
  if (split) stack->plan.num_blocks = SmallestAcrossRanks(world, stack->plan.num_blocks);
  if (log) LogMemoryPlan(stack->plan, *stack->weights, load.parallel);
  EngineOptions options = EngineOptionsFor(config, stack->plan);
  if (split) {
    // Ranks schedule in lockstep: how deep prompt chunks are capped by their pairs has
    // to agree too (the decompressed prefix is part of each rank's own budget).
    options.decompressed_prefix_bytes = SmallestAcrossRanks(world, options.decompressed_prefix_bytes);
    options.scheduler.auto_prefill_attention_pairs =
        SmallestAcrossRanks(world, PrefillAttentionPairsFor(*stack->model));
    // The slowest rank's latent attention sets how deep chunks past the kept prefix go.
    options.scheduler.latent_key_pair_cost = LargestAcrossRanks(
        world, LatentKeyPairCostFor(*stack->model, ResolveKvCacheDtype(options.kv_cache_dtype,
                                                                       stack->model->weights().compute_dtype())));
  }
  stack->engine = std::make_unique<Engine>(*stack->model, stack->tokenizer.get(), options, split ? &world : nullptr,
                                           load.parallel.dp);
  if (config.memory.commit_kv_pool) CommitKvPool(*stack->engine, stack->plan, log);
  if (log) LogPrefillPairCap(stack->engine->scheduler_config());
  stack->engine->Start();
  return stack;
}

}  // namespace latte

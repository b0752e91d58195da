#include "cli/engine_flags.h"

#include <cstdio>
#include <filesystem>

#include "cli/arg_checks.h"
#include "cli/commands.h"

namespace latte::cli {

void AddEngineFlags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--model", f.model, "Model directory (config.json, safetensors, tokenizer.json)")->required();
  cmd.add_option("--mla-mode", f.mla_mode, "absorbed | materialized | naive")
      ->check(OneOf({"absorbed", "materialized", "naive"}))
      ->capture_default_str();
  cmd.add_option("--fp8", f.fp8,
                 "fp8 checkpoints: keep (weights stay e4m3 with their block scales, converted in "
                 "registers: ~1 byte per weight per token) | bf16 (dequantized to bf16 at load)")
      ->check(OneOf({"keep", "bf16"}))
      ->capture_default_str();
  AddQuantizeOption(cmd, f.quantize);
  cmd.add_flag("--huge-pages", f.huge_pages,
               "Read the weights into memory on 2 MiB pages instead of serving them from an mmap of the checkpoint");
  AddThreadsOption(cmd, f.threads);
  cmd.add_option("--memory-gb", f.memory_gb,
                 "Memory budget in GB (weights + KV cache + scratch; default: 85% of MemAvailable)")
      ->check(NumberIn(0, 1e9, /*lo_open=*/true));
  cmd.add_option("--num-kv-blocks", f.num_kv_blocks, "KV cache blocks, overriding what the budget gives")
      ->check(IntIn(1, int64_t{1} << 40));
  cmd.add_option("--block-size", f.block_size, "Tokens per KV cache block")
      ->check(IntIn(1, 4096))
      ->capture_default_str();
  cmd.add_option("--kv-cache-dtype", f.kv_cache_dtype,
                 "auto (the model's: bf16, f32 for f32 checkpoints) | bf16 | fp8 (e4m3 + a scale per row)")
      ->check(OneOf({"auto", "bf16", "fp8"}))
      ->capture_default_str();
  cmd.add_option("--max-num-seqs", f.max_num_seqs, "Sequences running at once")
      ->check(IntIn(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "Tokens in one engine step (decodes + prefill chunks)")
      ->check(IntIn(1, 1 << 24))
      ->capture_default_str();
  cmd.add_option("--max-prefill-burst-tokens", f.max_prefill_burst_tokens,
                 "Prompt tokens run between two tokens of a decoding sequence: while prompts wait, decodes sit "
                 "out steps until this many have run (llama.cpp's n_batch); --max-num-batched-tokens' value gives "
                 "vLLM's schedule, a decode token in every step")
      ->check(IntIn(1, 1 << 30))
      ->capture_default_str();
  cmd.add_flag("--no-prefix-cache", f.no_prefix_cache, "Do not reuse the KV blocks of shared prompt prefixes");
}

void AddQuantizeOption(CLI::App& cmd, std::string& quantize) {
  cmd.add_option("--quantize", quantize,
                 "none | fp8: quantize the linear weights not stored in fp8 at load (bf16 checkpoints: every "
                 "projection, expert and lm_head; fp8 checkpoints: lm_head) to e4m3 with an f32 scale per "
                 "128x128 block, DeepSeek's fp8 format, then kept as fp8 (~1 byte per weight per token); "
                 "embed_tokens stays as stored")
      ->check(OneOf({"none", "fp8"}))
      ->capture_default_str();
}

Result<LoadOptions> LoadOptionsFromFlags(const std::string& mla_mode, const std::string& fp8,
                                         const std::string& quantize, bool huge_pages) {
  LoadOptions load;
  const auto mode = ParseMlaMode(mla_mode);
  if (!mode) return Status::Error("--mla-mode must be absorbed, materialized or naive, got \"" + mla_mode + "\"");
  load.mode = *mode;
  const auto fp8_weights = ParseFp8Weights(fp8);
  if (!fp8_weights) return Status::Error("--fp8 must be keep or bf16, got \"" + fp8 + "\"");
  load.fp8 = *fp8_weights;
  const auto quantization = ParseWeightQuantization(quantize);
  if (!quantization) return Status::Error("--quantize must be none or fp8, got \"" + quantize + "\"");
  load.quantize = *quantization;
  if (huge_pages) load.residency = FileResidency::kHugePageCopy;
  LATTE_RETURN_IF_ERROR(CheckLoadOptions(load));
  return load;
}

Result<ModelPreview> PreviewModel(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::Error("--model " + dir + " is not a folder");
  ModelPreview preview;
  LATTE_ASSIGN_OR_RETURN(preview.config, ModelConfig::FromFile((fs::path(dir) / "config.json").string()));
  if (fs::exists(fs::path(dir) / "tokenizer.json", ec)) {
    LATTE_ASSIGN_OR_RETURN(preview.tokenizer, Tokenizer::FromDirectory(dir));
  }
  return preview;
}

Result<std::unique_ptr<ServingStack>> StartServingStack(const EngineFlags& f, bool log,
                                                        std::unique_ptr<Tokenizer> tokenizer) {
  LATTE_ASSIGN_OR_RETURN(LoadOptions load, LoadOptionsFromFlags(f.mla_mode, f.fp8, f.quantize, f.huge_pages));
  load.progress = log;
  const auto kv_dtype = ParseKvCacheDtype(f.kv_cache_dtype);
  if (!kv_dtype) return Status::Error("--kv-cache-dtype must be auto, bf16 or fp8, got \"" + f.kv_cache_dtype + "\"");
  if (f.max_num_seqs < 1) return Status::Error("--max-num-seqs must be at least 1");
  if (f.max_num_batched_tokens < 1) return Status::Error("--max-num-batched-tokens must be at least 1");
  MemoryOptions memory;
  memory.memory_gb = f.memory_gb;
  memory.num_kv_blocks = f.num_kv_blocks;
  memory.block_size = f.block_size;
  memory.kv_cache_dtype = *kv_dtype;
  if (f.max_prefill_burst_tokens < 1) return Status::Error("--max-prefill-burst-tokens must be at least 1");
  memory.scheduler = {f.max_num_seqs, f.max_num_batched_tokens, f.max_prefill_burst_tokens};
  const int64_t available = AvailableMemoryBytes();
  LATTE_RETURN_IF_ERROR(CheckMemoryBudget(memory, available));
  SetThreads(f.threads);

  auto stack = std::make_unique<ServingStack>();
  LATTE_ASSIGN_OR_RETURN(stack->weights, ModelWeights::Load(f.model, load));
  SetThreadsForModel(f.threads, stack->weights->memory().Total());
  stack->model = std::make_unique<DeepSeekModel>(*stack->weights);
  stack->tokenizer = std::move(tokenizer);
  if (!stack->tokenizer && std::filesystem::exists(std::filesystem::path(f.model) / "tokenizer.json")) {
    LATTE_ASSIGN_OR_RETURN(stack->tokenizer, Tokenizer::FromDirectory(f.model));
  }
  LATTE_ASSIGN_OR_RETURN(stack->plan, PlanMemory(*stack->weights, memory, available));
  if (log) std::fputs(DescribeMemoryPlan(stack->plan, *stack->weights).c_str(), stderr);
  EngineOptions options;
  options.scheduler = memory.scheduler;
  options.block_size = stack->plan.block_size;
  options.num_blocks = stack->plan.num_blocks;
  options.prefix_caching = !f.no_prefix_cache;
  options.kv_cache_dtype = *kv_dtype;
  stack->engine = std::make_unique<Engine>(*stack->model, stack->tokenizer.get(), options);
  stack->engine->Start();
  return stack;
}

}  // namespace latte::cli

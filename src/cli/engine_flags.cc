#include "cli/engine_flags.h"

#include <string>
#include <utility>
#include <vector>

#include "cli/arg_checks.h"

namespace latte::cli {
namespace {

// An option that takes one of `names` and stores what `parse` (the model layer's one
// reading of those names) makes of it: the text is checked by OneOf while parsing (its
// message), then parsed. `default_name` is what --help shows.
template <typename Enum, typename Parse>
CLI::Option* AddChoiceOption(CLI::App& cmd, const std::string& flag, Enum& value, std::vector<std::string> names,
                             Parse parse, const std::string& default_name, const std::string& help) {
  const auto set = [&value, parse](const std::string& text) {
    if (const auto parsed = parse(text)) value = *parsed;
  };
  return cmd.add_option_function<std::string>(flag, set, help)
      ->check(OneOf(std::move(names)))
      ->default_str(default_name);
}

}  // namespace

void AddLoadFlags(CLI::App& cmd, LoadOptions& load) {
  AddChoiceOption(cmd, "--mla-mode", load.mode, {"absorbed", "materialized", "naive"}, ParseMlaMode,
                  std::string(MlaModeName(load.mode)), "absorbed | materialized | naive");
  AddChoiceOption(cmd, "--fp8", load.fp8, {"keep", "bf16"}, ParseFp8Weights, std::string(Fp8WeightsName(load.fp8)),
                  "fp8 checkpoints: keep (weights stay e4m3 with their block scales, converted in "
                  "registers: ~1 byte per weight per token) | bf16 (dequantized to bf16 at load)");
  AddChoiceOption(cmd, "--quantize", load.quantize, {"none", "fp8"}, ParseWeightQuantization,
                  std::string(WeightQuantizationName(load.quantize)),
                  "none | fp8: quantize the linear weights not stored in fp8 at load (bf16 checkpoints: every "
                  "projection, expert and lm_head; fp8 checkpoints: lm_head) to e4m3 with an f32 scale per "
                  "128x128 block, DeepSeek's fp8 format, then kept as fp8 (~1 byte per weight per token); "
                  "embed_tokens stays as stored");
  cmd.add_flag_callback(
      "--huge-pages", [&load] { load.residency = FileResidency::kHugePageCopy; },
      "Read the weights into memory on 2 MiB pages instead of serving them from an mmap of the checkpoint");
  cmd.add_option("--tp", load.parallel.tp,
                 "Tensor-parallel ranks (under mpirun -np N): heads, MLP and expert widths and lm_head split "
                 "N ways, partial outputs summed across ranks")
      ->capture_default_str();
  cmd.add_option("--dp", load.parallel.dp,
                 "Data-parallel attention replicas (mpirun -np tp x dp): each runs its own requests with the "
                 "whole attention (split --tp ways inside it), routed experts spread over every rank")
      ->capture_default_str();
  AddChoiceOption(cmd, "--moe-exchange", load.parallel.moe_exchange, {"allgather", "alltoall"}, ParseMoeExchange,
                  "allgather",
                  "--dp: how MoE layers exchange rows: allgather (every rank's rows to every rank, sums "
                  "reduce-scattered back) | alltoall (each row to the ranks holding its experts; needs --ep)");
  cmd.add_option(
         "--ep", load.parallel.ep,
         "Expert-parallel ranks: 1 (routed experts split by width) or every rank, tp x dp (each rank holds whole "
         "experts)")
      ->capture_default_str();
}

void AddEngineFlags(CLI::App& cmd, EngineConfig& c) {
  cmd.add_option("--model", c.model, "Model directory (config.json, safetensors, tokenizer.json)")->required();
  AddLoadFlags(cmd, c.load);
  AddThreadsOption(cmd, c.threads);
  cmd.add_option("--memory-gb", c.memory.memory_gb,
                 "Memory budget in GB (weights + KV cache + scratch; default: 85% of MemAvailable)");
  cmd.add_option("--num-kv-blocks", c.memory.num_kv_blocks, "KV cache blocks, overriding what the budget gives");
  cmd.add_option("--decompressed-prefix-gb", c.memory.decompressed_prefix_gb,
                 "Memory in GB for the decompressed K/V of the prompt being prefilled, kept across its chunks so that "
                 "each chunk decompresses only its own rows, not every cached one again (part of the budget; "
                 "default: 10% of it, at most what a prompt of the model's longest context needs; 0: none)");
  cmd.add_option("--block-size", c.memory.block_size, "Tokens per KV cache block")->capture_default_str();
  AddChoiceOption(cmd, "--kv-cache-dtype", c.memory.kv_cache_dtype, {"auto", "bf16", "fp8"}, ParseKvCacheDtype, "auto",
                  "auto (the model's: bf16, f32 for f32 checkpoints) | bf16 | fp8 (e4m3 + a scale per row)");
  cmd.add_option("--max-num-seqs", c.scheduler.max_num_seqs, "Sequences running at once")->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", c.scheduler.max_num_batched_tokens,
                 "Tokens in one engine step (decodes + prefill chunks)")
      ->capture_default_str();
  cmd.add_option("--max-prefill-burst-tokens", c.scheduler.max_prefill_burst_tokens,
                 "Prompt tokens run between two tokens of a decoding sequence: while prompts wait, decodes sit "
                 "out steps until this many have run (llama.cpp's n_batch); --max-num-batched-tokens' value gives "
                 "vLLM's schedule, a decode token in every step")
      ->capture_default_str();
  cmd.add_option("--long-prefill-token-threshold", c.scheduler.long_prefill_token_threshold,
                 "While other prompts wait for tokens, one prompt chunk takes at most this many tokens of a step "
                 "(0: half of --max-num-batched-tokens), so a short request is not queued behind a long prefill; "
                 "a waiting prompt this short runs in a step of its own, the long ones sitting it out (never two "
                 "steps in a row). --max-num-batched-tokens' value turns both off")
      ->capture_default_str();
  cmd.add_option("--max-prefill-attention-pairs", c.scheduler.max_prefill_attention_pairs,
                 "The most query-key pairs one prompt chunk attends over in a step, c x (L + c) for c tokens "
                 "after L (0: derived from the model, the pairs whose attention costs about twice a step's weight "
                 "reads; -1: no cap; while other prompts wait, at most --long-prefill-token-threshold x "
                 "--max-num-batched-tokens), so a step beside a deep prefill stays short; only within the "
                 "positions --decompressed-prefix-gb keeps")
      ->capture_default_str();
  cmd.add_flag_callback(
      "--no-prefix-cache", [&c] { c.prefix_caching = false; }, "Do not reuse the KV blocks of shared prompt prefixes");
  cmd.add_option("--speculative", c.speculative,
                 "none | mtp: decode with drafts from the checkpoint's multi-token-prediction layer (DeepSeek-V3/R1's "
                 "model.layers.61), verified in the same forward pass as the last token (vLLM's deepseek_mtp)")
      ->check(CLI::IsMember({"none", "mtp"}))
      ->capture_default_str();
  cmd.add_option("--num-speculative-tokens", c.num_speculative_tokens,
                 "--speculative mtp: tokens drafted per sequence per step (the MTP layer run again on its own "
                 "output past the first, as vLLM does)")
      ->check(CLI::Range(int64_t{1}, kMaxSpeculativeTokens))
      ->capture_default_str();
  cmd.add_flag("--dist-check", c.dist_check,
               "Under --tp: hash the replicated residual stream after every sublayer on every rank and stop "
               "naming the layer where ranks differ");
  cmd.add_option("--dist-timeout", c.dist_timeout_s,
                 "Under mpirun: a rank that waits this many seconds for the others inside a collective ends "
                 "the job, naming the ranks that stopped answering (0: no limit)")
      ->capture_default_str();
}

}  // namespace latte::cli

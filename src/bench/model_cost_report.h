// The cost report of an MLA model (what `latte calc` prints): its weight bytes and
// params per component in the three attention modes (docs/mla.md), one GPU's share
// under TP or DP attention, the extra bytes of materializing, decode and attention-core
// FLOPs per token, latent KV bytes per token and, given a memory budget, how many
// cached tokens fit per GPU and what latte's engine would hold in it. Computed once
// from a ModelConfig (model/cost_model.h, engine/memory_plan.h; no weights read), with
// the report's JSON form, whose keys are stable:
//   source                  "preset r1" or the config path
//   architecture            config "architectures"[0]
//   checkpoint_dtype        "fp8_e4m3" (quantization_config present) or "bf16"
//   bytes_per_gb            1000000000
//   tp, dp_attention, context, memory_gb (null without a memory budget)
//   shape                   hidden_size, num_attention_heads, q_lora_rank (null: q_proj),
//                           kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
//                           num_hidden_layers, dense_layers, moe_layers
//   per_layer_params        attention_projections (q_a+q_b|q_proj+kv_a+kv_b+o_proj, no norms),
//                           kv_b, w_uk_t, w_q_uk, w_uv_o
//   layer_kinds             [{kind "dense"|"moe", count, first_layer,
//                             params {naive|absorbed|materialized: components},
//                             bytes  {naive|absorbed|materialized: components}}]
//   model                   {params {mode: components}, bytes {mode: components}}
//     components: attention, dense_mlp, routed_experts, shared_experts, router, norms,
//                 embeddings, kv_b_bf16, w_uk_t, materialized, checkpoint, total
//   per_gpu_weight_bytes    {naive, absorbed, materialized} under tp / dp_attention
//   materialize_extra_bytes {per_layer, whole_model, per_gpu_tp, per_gpu_dp_attention}
//   decode_projection_flops_per_token
//                           {per_layer, whole_model}: {absorbed, materialized, naive_fixed,
//                            naive_per_cached_token, naive_at_context}
//   attention_core_flops_per_cached_token {per_layer, whole_model}: {absorbed, naive}
//   kv_cache_bytes_per_token {latent_per_layer, latent_whole_model, mha_per_layer, mha_whole_model}
//   kv_fit                  null without a memory budget, else {memory_bytes,
//                           absorbed {weight_bytes, free_bytes, tokens}, materialized {...},
//                           token_ratio (absorbed / materialized tokens; null when 0)}
//   collectives_per_decode_step  null in one process, else {layout, batch, ranks,
//                           all_reduce|all_gather|reduce_scatter|all_to_all {calls, bytes_sent},
//                           seconds {shm, 25gbe, 100gbe, ib200}}: one decode step of `batch`
//                           sequences as latte's ranks run it (rank 0's sends; --tp: heads
//                           split, --dp: data-parallel attention)
//   engine_fit              null without a memory budget, else {scratch_bytes, block_bytes, block_size,
//                           naive|absorbed|materialized {weight_bytes, blocks, tokens}}: what
//                           latte's engine holds in that budget (one process, TP 1)
// GB = 1e9 bytes throughout (kBytesPerGB).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"
#include "model/config.h"
#include "model/cost_model.h"
#include "model/kv_cache.h"
#include "model/mla_mode.h"

namespace latte {

// How the model is laid out and what it is measured against.
struct ModelCostOptions {
  int64_t tp = 1;  // tensor-parallel GPUs (ranks)
  bool dp_attention = false;
  int64_t attention_tp = 1;         // dp_attention: ranks per replica (tp divides them)
  int64_t ep = 1;                   // 1: experts split by width; tp: whole experts per rank
  int64_t batch = 1;                // sequences in the decode step the collectives table describes
  std::optional<double> memory_gb;  // one GPU's memory (1e9 bytes); none: no fit tables
  int64_t context = 4096;           // cached tokens for the naive-mode FLOPs
  // latte's engine on this machine, for the engine fit within memory_gb.
  int64_t block_size = kDefaultKvBlockSize;
  SchedulerConfig scheduler;
  int threads = 0;  // 0: every core
  // The decompressed-prefix store (--decompressed-prefix-gb); none: the budget's default share.
  std::optional<double> decompressed_prefix_gb;
  // A checkpoint's own tensors (calc --model): their stored bytes instead of the release's dtypes.
  std::optional<StoredCheckpoint> stored;
  // Speculative decoding with the MTP layer (calc --speculative-tokens K): the projection
  // for `batch` sequences at `context`, with acceptance[j] the share of steps whose
  // draft j is accepted (as bench engine and /metrics report it; absent: 0).
  int64_t speculative_tokens = 0;
  std::vector<double> acceptance;
};

// Bytes per decode step with and without drafts (model/cost_model.h's
// SpeculativeStepCosts, absorbed mode, the release's dtypes: fp8 linears for fp8
// checkpoints, bf16 otherwise) and what the acceptance makes of them.
struct SpeculativeProjection {
  int64_t drafts = 0;
  SpeculativeStepBytes bytes;
  double tokens_per_step = 1;  // 1 + the accepted drafts, per sequence
  double speedup = 1;          // bandwidth-bound: tokens/s with drafts over without
};

// What `latte serve` / `generate` with the same --memory-gb log at start (one CPU
// process, TP 1): engine/memory_plan's arithmetic on the bytes latte's loader holds.
struct EngineFit {
  int64_t scratch_bytes = 0;
  int64_t decompressed_prefix_bytes = 0;  // kept across a prompt's prefill chunks
  int64_t block_bytes = 0;                // bf16 latent rows, every layer
  int threads = 0;                        // the compute threads the scratch is sized for
  struct Mode {
    MlaMode mode;
    int64_t weight_bytes = 0, blocks = 0, tokens = 0;
  };
  std::vector<Mode> modes;  // naive, absorbed, materialized
};

// Every figure of the report, computed once.
struct ModelCostReport {
  std::string source;  // where the config came from: "preset r1" or its path
  ModelConfig config;
  ModelCostOptions options;
  WeightCosts naive, absorbed, materialized;
  int64_t dense_layers = 0, moe_layers = 0;
  int64_t first_dense = -1, first_moe = -1;  // -1: no layer of the kind
  Parallelism parallel;
  MaterializeExtra extra;
  DecodeProjectionFlops decode;
  AttentionCoreFlops core;
  KvCacheBytes kv;
  int64_t per_gpu_naive = 0, per_gpu_absorbed = 0, per_gpu_materialized = 0;
  std::optional<int64_t> memory_bytes;               // with memory_gb
  KvFit fit_absorbed, fit_materialized;              // with memory_gb
  std::optional<EngineFit> engine_fit;               // with memory_gb
  ParallelLayout layout;                             // latte's ranks: tp, or dp under dp_attention
  ForwardCollectives collectives;                    // one decode step of options.batch sequences
  std::optional<SpeculativeProjection> speculative;  // with options.speculative_tokens

  const WeightCosts& Mode(MlaMode mode) const {
    return mode == MlaMode::kNaive ? naive : mode == MlaMode::kAbsorbed ? absorbed : materialized;
  }
  int64_t PerGpu(MlaMode mode) const {
    return mode == MlaMode::kNaive      ? per_gpu_naive
           : mode == MlaMode::kAbsorbed ? per_gpu_absorbed
                                        : per_gpu_materialized;
  }
};

// The report of `config` under `options`; `source` names where the config came from.
ModelCostReport BuildModelCostReport(std::string source, const ModelConfig& config, const ModelCostOptions& options);

// The report as one JSON object with the keys listed above.
nlohmann::json ModelCostReportJson(const ModelCostReport& report);

}  // namespace latte

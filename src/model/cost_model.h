// What an MLA model costs in memory and FLOPs in each of the three attention modes
// of docs/mla.md (naive, absorbed, materialized): weight bytes per component, the
// extra bytes of materializing, decode FLOPs per token, latent KV bytes per token,
// and how many cached tokens fit beside the weights. Pure functions over ModelConfig
// (no I/O); `latte calc` prints them.
//
// Symbols (docs/mla.md, V3/R1 values): d hidden_size 7168, H heads 128, d_cq
// q_lora_rank 1536 (null on V2-Lite: q_proj reads x, so d takes its place), d_c
// kv_lora_rank 512, d_n 128, d_r 64, d_v 128, L layers 61.
//
// Bytes: the checkpoint's own tensors (model/tensor_specs.h) at their stored dtype:
// with quantization_config every linear is fp8 e4m3 (1 B/value) plus an f32 scale_inv
// per 128x128 block; embeddings, router and norms are bf16 (the V3 release), except
// e_score_correction_bias, which the release stores as f32. Without
// quantization_config everything is bf16. Tensors latte derives at load are bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/mla_mode.h"

namespace latte {

// GB means 1e9 bytes everywhere in calc (what --memory-gb takes and what it prints).
inline constexpr int64_t kBytesPerGB = 1'000'000'000;
inline constexpr int64_t kBf16Bytes = 2;

// The three modes (model/mla_mode.h), in the order calc prints them.
inline constexpr MlaMode kMlaModesInPrintOrder[] = {MlaMode::kNaive, MlaMode::kAbsorbed,
                                                    MlaMode::kMaterialized};

// One number (values or bytes) per part of the weights. The first group is the
// checkpoint's own tensors; the last three are what latte derives at load.
struct WeightComponents {
  int64_t attention = 0;       // self_attn.*: q_a, q_b (or q_proj), kv_a, kv_b, o_proj + scale_inv,
                               // and the q_a / kv_a layernorms (latent-side norms)
  int64_t dense_mlp = 0;       // mlp.{gate,up,down}_proj of the first_k_dense_replace layers
  int64_t routed_experts = 0;  // mlp.experts.*
  int64_t shared_experts = 0;  // mlp.shared_experts.*
  int64_t router = 0;          // mlp.gate.weight (+ e_score_correction_bias)
  int64_t norms = 0;           // input_layernorm, post_attention_layernorm, model.norm
  int64_t embeddings = 0;      // embed_tokens + lm_head
  // Derived at load, bf16:
  int64_t kv_b_bf16 = 0;       // fp8 checkpoints only: kv_b_proj dequantized (W_UK, W_UV for the bmm),
                               // H·(d_n+d_v)·d_c per layer; every mode keeps it
  int64_t w_uk_t = 0;          // latte's transposed copy of W_UK, H·d_n·d_c per layer
                               // (absorbed and materialized)
  int64_t materialized = 0;    // W_Q_UK (H·d_c·d_cq) + W_UV_O (H·d_c·d) per layer (materialized)

  int64_t Checkpoint() const {
    return attention + dense_mlp + routed_experts + shared_experts + router + norms + embeddings;
  }
  int64_t Total() const { return Checkpoint() + kv_b_bf16 + w_uk_t + materialized; }
  // The attention side: what DP attention replicates on every GPU.
  int64_t AttentionSide() const { return attention + kv_b_bf16 + w_uk_t + materialized; }
  WeightComponents& operator+=(const WeightComponents& other);
};

// Values and bytes of every layer and of the whole model in one mode.
struct WeightCosts {
  MlaMode mode = MlaMode::kAbsorbed;
  std::vector<WeightComponents> layer_params;  // [L] values
  std::vector<WeightComponents> layer_bytes;   // [L]
  WeightComponents other_params;               // outside the layers: embed_tokens, model.norm, lm_head
  WeightComponents other_bytes;
  WeightComponents model_params;               // layers + outside
  WeightComponents model_bytes;
};
WeightCosts ComputeWeightCosts(const ModelConfig& config, MlaMode mode);

// Per-layer parameter counts of docs/mla.md.
// q_a + q_b (or q_proj) + kv_a + kv_b + o_proj, no norms: 187,105,280 on V3.
int64_t AttentionProjectionParams(const ModelConfig& config);
int64_t QInputDim(const ModelConfig& config);  // d_cq, or d when q_lora_rank is null
int64_t KvBParams(const ModelConfig& config);  // H·(d_n+d_v)·d_c
int64_t WUkTParams(const ModelConfig& config); // H·d_n·d_c
int64_t WQUkParams(const ModelConfig& config); // H·d_c·d_cq: 100,663,296 on V3
int64_t WUvOParams(const ModelConfig& config); // H·d_c·d: 469,762,048 on V3

// How weights sit on the GPUs. `gpus` is the TP degree; with dp_attention the
// attention side is replicated on each GPU and only the rest is split.
struct Parallelism {
  int64_t gpus = 1;
  bool dp_attention = false;
};
// One GPU's share, rounded up. An even split of everything but the replicated part:
// real TP also replicates norms and router (under 0.05% of V3's bytes).
int64_t PerGpuBytes(const WeightComponents& bytes, const Parallelism& parallel);

// The extra bytes of materializing (W_Q_UK + W_UV_O in bf16).
struct MaterializeExtra {
  int64_t per_layer = 0;             // 1,140,850,688 on V3
  int64_t whole_model = 0;           // 69,591,891,968 on V3
  int64_t per_gpu_tp = 0;            // whole_model / gpus (heads sharded), rounded up
  int64_t per_gpu_dp_attention = 0;  // whole_model: replicated on every GPU
};
MaterializeExtra ComputeMaterializeExtra(const ModelConfig& config, int64_t gpus);

// Decode FLOPs per token of one layer's attention projections, counted as docs/mla.md
// does: after c_q (q_a_proj and its norm excluded; on V2-Lite from x), before the residual.
struct DecodeProjectionFlops {
  int64_t absorbed = 0;                // 2·(q_b + W_UK bmm + W_UV bmm + o_proj): 343,932,928 on V3
  int64_t materialized = 0;            // 2·(W_Q_UK + q_b rope rows + W_UV_O): 1,166,016,512 on V3
  int64_t naive_fixed = 0;             // 2·(q_b + o_proj)
  int64_t naive_per_cached_token = 0;  // 2·H·(d_n+d_v)·d_c: kv_b decompression of one cached token
  int64_t NaiveAt(int64_t context) const { return naive_fixed + context * naive_per_cached_token; }
};
DecodeProjectionFlops ComputeDecodeProjectionFlops(const ModelConfig& config);

// Attention-core FLOPs per query token per cached token per layer (scores + weighted sum).
struct AttentionCoreFlops {
  int64_t absorbed = 0;  // 2·H·(d_c+d_r) score + 2·H·d_c value (materialized: the same)
  int64_t naive = 0;     // 2·H·(d_n+d_r) score + 2·H·d_v value, after decompression
};
AttentionCoreFlops ComputeAttentionCoreFlops(const ModelConfig& config);

// KV cache bytes per token, bf16.
struct KvCacheBytes {
  int64_t latent_per_layer = 0;  // (d_c+d_r)·2 = 1,152 on V3
  int64_t latent_model = 0;      // L·(d_c+d_r)·2 = 70,272 on V3
  int64_t mha_per_layer = 0;     // H·(d_n+d_r+d_v)·2: a plain multi-head cache, for comparison
  int64_t mha_model = 0;
};
KvCacheBytes ComputeKvCacheBytes(const ModelConfig& config);

// Cached tokens that fit in one GPU's memory beside its weights. The latent cache
// has no head axis, so under TP every GPU holds every token's full latent row.
struct KvFit {
  int64_t weight_bytes = 0;  // this GPU's weights
  int64_t free_bytes = 0;    // memory - weights; negative when the weights do not fit
  int64_t tokens = 0;        // max(free, 0) / kv bytes per token, rounded down
};
KvFit FitKvCache(int64_t memory_bytes, int64_t weight_bytes, int64_t kv_bytes_per_token);

}  // namespace latte

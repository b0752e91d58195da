// The cost model: what an MLA model costs in bytes and FLOPs, in each of the three
// attention modes of docs/mla.md (naive, absorbed, materialized), computed here and
// nowhere else. Three commands print it:
//   `latte calc`        weight bytes per component, the extra bytes of materializing,
//                       decode FLOPs per token, latent KV bytes per token, and how many
//                       cached tokens fit beside the weights;
//   `latte bench attn`  one MLA layer's decode step: weight bytes, KV bytes, FLOPs;
//   `latte bench model` the whole model's bytes and FLOPs per token, decode and prefill.
// Pure functions over ModelConfig (no I/O), except MeasureWeightValueBytes, which
// reads the dtypes of a loaded model.
//
// Symbols (docs/mla.md, V3/R1 values): d hidden_size 7168, H heads 128, d_cq
// q_lora_rank 1536 (null on V2-Lite: q_proj reads x, so d takes its place), d_c
// kv_lora_rank 512, d_n 128, d_r 64, d_v 128, L layers 61.
//
// calc's bytes: the checkpoint's own tensors (model/tensor_specs.h) at their stored
// dtype: with quantization_config every linear is fp8 e4m3 (1 B/value) plus an f32
// scale_inv per 128x128 block; embeddings, router and norms are bf16 (the V3 release),
// except e_score_correction_bias, which the release stores as f32. Without
// quantization_config everything is bf16. Tensors latte derives at load are bf16.
// Given a StoredCheckpoint (`latte calc --model`: a directory or GGUF file), the bytes
// are the files' own, tensor by tensor, and the derived tensors take latte's compute
// dtype for that checkpoint (f32 when every linear is f32, else bf16).
// The benchmarks' bytes: what a step reads in memory (WeightValueBytes below).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/dtype.h"

#include "dist/layout.h"
#include "model/config.h"
#include "model/mla_mode.h"

namespace latte {

class ModelWeights;

// GB means 1e9 bytes everywhere in calc (what --memory-gb takes and what it prints).
inline constexpr int64_t kBytesPerGB = 1'000'000'000;
inline constexpr int64_t kBf16Bytes = 2;

// The three modes (model/mla_mode.h), in the order calc prints them.
inline constexpr MlaMode kMlaModesInPrintOrder[] = {MlaMode::kNaive, MlaMode::kAbsorbed, MlaMode::kMaterialized};

// ---- One layer's attention projections, in values ----

// The weight values of each attention projection of one layer (and of the tensors
// latte derives from them). d_in is d_cq, or d when q_lora_rank is null (q_proj reads x).
struct AttentionWeightCounts {
  int64_t q_a = 0;       // q_a_proj [d_cq, d]; 0 without q_lora_rank
  int64_t q_b = 0;       // q_b_proj (or q_proj) [H·(d_n+d_r), d_in]
  int64_t q_b_rope = 0;  // q_b's q_r rows, H·d_r·d_in (materialized still runs them)
  int64_t kv_a = 0;      // kv_a_proj_with_mqa [d_c+d_r, d]
  int64_t kv_b = 0;      // kv_b_proj [H·(d_n+d_v), d_c]: W_UK and W_UV
  int64_t w_uk = 0;      // W_UK's part of kv_b, H·d_n·d_c (latte keeps a transposed copy)
  int64_t o_proj = 0;    // [d, H·d_v]
  int64_t w_q_uk = 0;    // H·d_c·d_in: 100,663,296 on V3 (materialized)
  int64_t w_uv_o = 0;    // H·d_c·d: 469,762,048 on V3 (materialized)

  // The checkpoint's five projections, no norms: 187,105,280 on V3.
  int64_t Checkpoint() const { return q_a + q_b + kv_a + kv_b + o_proj; }
  // What a decoded token multiplies after c_q: q_b, W_UK and W_UV (the per-head bmm),
  // o_proj; materialized W_Q_UK, q_b's rope rows, W_UV_O. Naive counts as absorbed
  // here (kv_b_proj once); its decompression of every cached row is DecodeFlopsPerCachedRow's.
  int64_t AfterCq(MlaMode mode) const;
  // Every value a decoded token multiplies: q_a and kv_a, then AfterCq(mode).
  int64_t Decode(MlaMode mode) const { return q_a + kv_a + AfterCq(mode); }
  // Of Decode(mode), the values derived from kv_b_proj at load (bf16 also in fp8
  // models): W_UK^T and W_UV (naive: kv_b_proj itself), or W_Q_UK and W_UV_O.
  int64_t KvbDerived(MlaMode mode) const;
};
AttentionWeightCounts CountAttentionWeights(const ModelConfig& config);

// ---- Weight bytes and values by component (calc) ----

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
  int64_t kv_b_bf16 = 0;     // fp8 checkpoints only: kv_b_proj dequantized (W_UK, W_UV for the bmm),
                             // H·(d_n+d_v)·d_c per layer; every mode keeps it
  int64_t w_uk_t = 0;        // latte's transposed copy of W_UK, H·d_n·d_c per layer
                             // (absorbed and materialized)
  int64_t materialized = 0;  // W_Q_UK (H·d_c·d_cq) + W_UV_O (H·d_c·d) per layer (materialized)

  int64_t Checkpoint() const {
    return attention + dense_mlp + routed_experts + shared_experts + router + norms + embeddings;
  }
  int64_t Total() const { return Checkpoint() + kv_b_bf16 + w_uk_t + materialized; }
  // The attention side: what DP attention replicates on every GPU.
  int64_t AttentionSide() const { return attention + kv_b_bf16 + w_uk_t + materialized; }
  WeightComponents& operator+=(const WeightComponents& other);
};

// A checkpoint's tensors as its files store them, by Hugging Face name.
struct StoredTensor {
  DType dtype = DType::kBF16;
  int64_t bytes = 0;        // as stored; an fp8 weight's with its scale_inv
  int64_t scale_bytes = 0;  // of `bytes`, the fp8 scale_inv's (held as f32: scale_values · 4)
  int64_t scale_values = 0;
};
struct StoredCheckpoint {
  std::unordered_map<std::string, StoredTensor> tensors;
  bool gguf = false;  // a GGUF's f16 matrices are held as stored (a directory's: converted)
};
struct TensorInfo;
// From a checkpoint's tensor list (model/safetensors.h): fp8 `<name>_scale_inv` tensors
// are folded into their weight's entry.
StoredCheckpoint StoredCheckpointOf(const std::vector<TensorInfo>& tensors, bool gguf);

// Values and bytes of every layer and of the whole model in one mode.
struct WeightCosts {
  MlaMode mode = MlaMode::kAbsorbed;
  std::vector<WeightComponents> layer_params;  // [L] values
  std::vector<WeightComponents> layer_bytes;   // [L]
  WeightComponents other_params;               // outside the layers: embed_tokens, model.norm, lm_head
  WeightComponents other_bytes;
  WeightComponents model_params;  // layers + outside
  WeightComponents model_bytes;
};
// `stored`: the bytes of that checkpoint's files instead of the release's dtypes.
WeightCosts ComputeWeightCosts(const ModelConfig& config, MlaMode mode, const StoredCheckpoint* stored = nullptr);

// The bytes latte's loader holds for a checkpoint of `config` (bf16 or fp8, as
// released; or `stored`) in `mode`: model_bytes.Total(), except that the vectors
// (norms, correction bias) and the router's gate are widened to f32 at load,
// kv_b_proj is kept only in the compute dtype (an fp8 or GGUF one dequantized: the
// kv_b_bf16 component), and a stored matrix the kernels do not compute on as stored
// (f32 or f16 in a bf16 model) is converted to the compute dtype.
// Equals ModelWeights::memory().Total() for default LoadOptions.
int64_t HeldWeightBytes(const ModelConfig& config, MlaMode mode, const StoredCheckpoint* stored = nullptr);

// How weights sit on the GPUs. `gpus` is the TP degree; with dp_attention the
// attention side is replicated on each GPU and only the rest is split.
struct Parallelism {
  int64_t gpus = 1;
  bool dp_attention = false;
  int64_t attention_tp = 1;  // dp_attention: each replica's attention split this many ways
};
// One GPU's share, rounded up. An even split of everything but the replicated part:
// real TP also replicates norms and router (under 0.05% of V3's bytes).
int64_t PerGpuBytes(const WeightComponents& bytes, const Parallelism& parallel);

// The extra bytes of materializing (W_Q_UK + W_UV_O in bf16).
struct MaterializeExtra {
  int64_t per_layer = 0;             // 1,140,850,688 on V3
  int64_t whole_model = 0;           // 69,591,891,968 on V3
  int64_t per_gpu_tp = 0;            // whole_model / gpus (heads sharded), rounded up
  int64_t per_gpu_dp_attention = 0;  // whole_model / attention_tp: replicated on every replica
};
MaterializeExtra ComputeMaterializeExtra(const ModelConfig& config, int64_t gpus, int64_t attention_tp = 1);

// ---- Decode FLOPs of one layer's attention ----

// Per token, the attention projections counted as docs/mla.md does: after c_q
// (q_a_proj and its norm excluded; on V2-Lite from x), before the residual.
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

// What a decoded token spends per cached row in one layer: the attention core, in
// naive mode after decompressing the row through kv_b_proj (2·H·(d_n+d_v)·d_c).
int64_t DecodeFlopsPerCachedRow(const ModelConfig& config, MlaMode mode);

// ---- The latent KV cache ----

// One cached token's row in one layer: d_c + d_r values of `value_bytes` each.
int64_t LatentRowBytes(const ModelConfig& config, int64_t value_bytes);

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

// ---- One MLA layer's decode step (bench attn) ----

// `batch` sequences of `context` cached tokens each, bf16 weights and latent rows;
// the new token attends to context + 1 rows (its own included).
struct AttentionStepCosts {
  int64_t weight_bytes = 0;  // Decode(mode) values, read once for the whole batch
  int64_t kv_bytes = 0;      // batch·(context + 1) latent rows
  int64_t flops = 0;         // batch·(2·Decode(mode) + (context + 1)·DecodeFlopsPerCachedRow)
};
AttentionStepCosts ComputeAttentionStepCosts(const ModelConfig& config, MlaMode mode, int64_t batch, int64_t context);
// The attention core alone, as absorbed and materialized decode run it: every row read
// once, AttentionCoreFlops::absorbed per row; no weights.
AttentionStepCosts ComputeAttentionCoreStepCosts(const ModelConfig& config, int64_t batch, int64_t context);

// ---- The whole model per token (bench model) ----

// Bytes per weight value as the model holds it, by kind of weight: 2 for bf16,
// 4 for f32; kept fp8 is 1 plus its share of the f32 block scales (4 bytes per
// 128×128 block) for the projections and MLP / expert matrices, while the
// kv_b_proj-derived W_UK / W_UV (and materialized products) are bf16. lm_head is
// bf16 in fp8 checkpoints and fp8 under --quantize fp8; the embedding stays as stored.
struct WeightValueBytes {
  double matrices = 2;    // q_a, q_b, kv_a, o_proj, dense MLP, routed and shared experts
  double kv_b = 2;        // W_UK, W_UV (kv_b_proj in naive), or W_Q_UK, W_UV_O
  double embeddings = 2;  // embed_tokens (a row per token)
  double lm_head = 2;
  static WeightValueBytes Uniform(double bytes) { return {bytes, bytes, bytes, bytes}; }
};

// What the loaded model holds (its views' dtypes, fp8 block scales included).
WeightValueBytes MeasureWeightValueBytes(const ModelWeights& weights);

// Costs of one token, from the shapes. Weights are counted at their in-memory
// precision (`wb`); norms, the router and e_score_correction_bias are f32 in memory;
// the latent cache is rows of LatentRowBytes(config, kv_value_bytes) per token per
// layer (kv_value_bytes 2: bf16 rows, 4: f32 rows).
struct TokenCosts {
  double weight_bytes = 0;  // weights read per token (a step's / B, a prefill's / P)
  double kv_bytes = 0;      // latent cache bytes read (decode) or written (prefill) per token
  double flops = 0;         // matmuls + attention core (norms, rope, softmax, SiLU left out)
  double Bytes() const { return weight_bytes + kv_bytes; }
};

// Expected number of distinct experts `tokens` tokens route to when each picks
// `per_token` of `experts` uniformly: E·(1 - (1 - k/E)^T); exactly k for one token.
// Random-weight routers route close to uniformly; real ones less so.
double ExpectedExpertsTouched(int64_t experts, int64_t per_token, int64_t tokens);

// One decode step of `batch` sequences that each hold `context` cached tokens
// (the new token attends to context + 1 rows), per token. Weights read per step:
// every layer's attention projections in `mode` (AttentionWeightCounts::Decode),
// the norms, dense MLPs, per MoE layer the experts the batch touches
// (ExpectedExpertsTouched), the shared experts and the router, the final norm,
// lm_head, and one embedding row per token. FLOPs per token: 2 per weight value a
// token multiplies (its own k experts), plus DecodeFlopsPerCachedRow over context + 1
// rows.
TokenCosts DecodeCostsPerToken(const ModelConfig& c, MlaMode mode, int64_t batch, double context,
                               const WeightValueBytes& wb, int64_t kv_value_bytes);

// Speculative decoding with the MTP layer (V3's layer L: eh_proj, a MoE decoder layer,
// shared_head), bytes read per step of `batch` sequences that hold `context` cached
// tokens, each verifying `drafts` drafts:
//   plain: one decode step of `batch` rows (DecodeCostsPerToken x batch);
//   verify: one decode forward of batch x (drafts + 1) rows (the weights once, each
//           row its own cached rows);
//   draft: `drafts` passes of the MTP layer over `batch` rows (its attention, the
//          experts the rows touch, eh_proj, its norms, the head; its own cached rows).
// Bandwidth-bound, a step that emits `tokens` tokens per sequence on average (1 + the
// expected accepted drafts) is plain / (verify + draft) x tokens times as fast.
struct SpeculativeStepBytes {
  double plain = 0, verify = 0, draft = 0;
  double Speedup(double tokens) const { return plain * tokens / (verify + draft); }
};
SpeculativeStepBytes SpeculativeStepCosts(const ModelConfig& c, MlaMode mode, int64_t batch, int64_t drafts,
                                          double context, const WeightValueBytes& wb, int64_t kv_value_bytes);

// One prefill forward of `prompt` tokens into an empty cache, per token: the
// attention runs decompressed (q_a, kv_a, q_b, kv_b, o_proj on every token, causal
// core of AttentionCoreFlops::naive per (query, key) pair, (P+1)/2 keys on average),
// MoE layers read the experts P tokens touch, lm_head runs on the last row only.
// kv_bytes: the latent rows written.
TokenCosts PrefillCostsPerToken(const ModelConfig& c, int64_t prompt, const WeightValueBytes& wb,
                                int64_t kv_value_bytes);

// The collectives of one forward pass over `rows` tokens, each with a row of logits, as
// DeepSeekModel issues them under `layout`, and the bytes rank 0 sends (dist/comm.h's
// accounting, what CommStats measures):
//   tp: an all-reduce of [rows, d] f32 after every attention and every FFN, and one
//       all-gather of the logits (rank 0's vocabulary rows, [rows, V_0]);
//   dp: each replica runs rows / dp of the tokens: one all-gather of the token counts,
//       then per MoE layer an all-gather of the normed rows and a reduce-scatter of the
//       expert sums ([rows / dp, d] to and from each other rank); lm_head split by
//       vocabulary: an all-gather of the logit-row counts and of the final rows, and an
//       all-to-all of the logits (rank 0's slice of the others' rows).
struct CollectiveCost {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
};
struct ForwardCollectives {
  CollectiveCost all_reduce, all_gather, reduce_scatter, all_to_all;
  int64_t calls() const { return all_reduce.calls + all_gather.calls + reduce_scatter.calls + all_to_all.calls; }
  int64_t bytes_sent() const {
    return all_reduce.bytes_sent + all_gather.bytes_sent + reduce_scatter.bytes_sent + all_to_all.bytes_sent;
  }
};
// `vocab_align`: the lm_head split's piece (fp8 block rows when lm_head is fp8).
ForwardCollectives ForwardCollectivesOf(const ModelConfig& c, const ParallelLayout& layout, int64_t rows,
                                        int64_t vocab_align = 1);

}  // namespace latte

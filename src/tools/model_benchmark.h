// `latte bench model`: whole-model throughput in the style of llama-bench.
//   pp<P>: one forward of P prompt tokens into a fresh cache (prefill: the latent
//          path's decompress-prefill, as `generate` runs it);
//   tg<N>: N decode steps after a short prompt, B sequences decoding together
//          (each its own cache; the weights are read once per step for all B);
//   tg<N>@d<D>: the same after D tokens already in each cache (-d, the attention
//          over the D cached rows is part of the step and of its costs).
// Each figure is mean ± sd tok/s over R runs after one warm-up run, printed beside
// the bytes and FLOPs per token computed from the config (below), so the achieved
// GB/s and GFLOP/s can be set against the machine's measured peaks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/mla_mode.h"
#include "model/model_weights.h"

namespace latte {

// Bytes per weight value as the model holds it, by kind of weight: 2 for bf16,
// 4 for f32; kept fp8 is 1 plus its share of the f32 block scales (4 bytes per
// 128×128 block) for the projections and MLP / expert matrices, while the
// kv_b_proj-derived W_UK / W_UV (and materialized products) are bf16.
struct WeightValueBytes {
  double matrices = 2;    // q_a, q_b, kv_a, o_proj, dense MLP, routed and shared experts
  double kv_b = 2;        // W_UK, W_UV (kv_b_proj in naive), or W_Q_UK, W_UV_O
  double embeddings = 2;  // embed_tokens, lm_head
  static WeightValueBytes Uniform(double bytes) { return {bytes, bytes, bytes}; }
};

// What the loaded model holds (its views' dtypes, fp8 block scales included).
WeightValueBytes MeasureWeightValueBytes(const ModelWeights& weights);

// Costs of one token, from the shapes. Weights are counted at their in-memory
// precision (`wb`); norms, the router and e_score_correction_bias are f32 in memory;
// the latent cache is rows of LatentDim() values per token per layer,
// `kv_value_bytes` each (2: bf16 rows, 4: f32 rows).
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
// every layer's attention projections in `mode` (model/mla_costs.h's decode set:
// absorbed q_a, kv_a, q_b, W_UK (transposed copy), W_UV, o_proj; materialized q_a,
// kv_a, W_Q_UK, q_b rope rows, W_UV_O), the norms, dense MLPs, per MoE layer the
// experts the batch touches (ExpectedExpertsTouched), the shared experts and the
// router, the final norm, lm_head, and one embedding row per token.
// FLOPs per token: 2 per weight value a token multiplies (its own k experts), plus
// the attention core over context + 1 rows.
TokenCosts DecodeCostsPerToken(const ModelConfig& c, MlaMode mode, int64_t batch, double context,
                               const WeightValueBytes& wb, int64_t kv_value_bytes);

// One prefill forward of `prompt` tokens into an empty cache, per token: the
// attention runs decompressed (q_a, kv_a, q_b, kv_b, o_proj on every token, causal
// core of 2·H·(d_n+d_r) + 2·H·d_v per (query, key) pair, (P+1)/2 keys on average),
// MoE layers read the experts P tokens touch, lm_head runs on the last row only.
// kv_bytes: the latent rows written.
TokenCosts PrefillCostsPerToken(const ModelConfig& c, int64_t prompt, const WeightValueBytes& wb,
                                int64_t kv_value_bytes);

struct ModelBenchOptions {
  std::string model_dir;
  int64_t prompt = 512;        // -p: pp test length (0: skip)
  int64_t gen = 128;           // -n: tg test length (0: skip)
  int64_t tg_prompt = 16;      // the short prompt before the timed decode steps (depth 0)
  // -d: tg decodes after `depth` tokens already in each sequence's cache (llama-bench's
  // --n-depth), filled by prefill in chunks of `depth_chunk` outside the timed region,
  // once: every run restarts from the same filled cache. 0: the tg_prompt prompt.
  int64_t depth = 0;
  int64_t depth_chunk = 512;
  int64_t repetitions = 5;     // -r, after one warm-up run
  int64_t batch = 1;           // sequences decoding together in tg
  MlaMode mode = MlaMode::kAbsorbed;
  Fp8Weights fp8 = Fp8Weights::kKeep;                      // --fp8
  FileResidency residency = FileResidency::kMapped;  // --huge-pages: kHugePageCopy
  bool progress = false;       // load progress on stderr
};

struct ModelBenchResult {
  std::string test;  // "pp512", "tg128", "tg128@d8192"
  int64_t batch = 1;
  int64_t tokens_per_run = 0;
  std::vector<double> tok_s;  // one per timed run
  double tok_s_mean = 0;
  double tok_s_sd = 0;        // sample standard deviation (0 for one run)
  TokenCosts costs;           // per token
  double achieved_gbps = 0;   // costs.Bytes() · tok_s_mean
  double achieved_gflops = 0; // costs.flops · tok_s_mean
};

// Loads the model once and runs pp then tg, calling `report` after each test.
Status RunModelBenchmark(const ModelBenchOptions& options,
                         void (*report)(const ModelBenchResult&, const ModelConfig&, void*), void* user);

}  // namespace latte

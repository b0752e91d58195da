// The cost model against figures computed by hand from docs/mla.md, the released
// shapes and the tiny preset (written here as literals, not through the helpers
// under test).
#include "model/cost_model.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "model/presets.h"

namespace latte {
namespace {

ModelConfig Released(const std::string& name) {
  Result<ModelConfig> config = ReleasedConfig(name);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return *config;
}

// ---- DeepSeek-V3 / R1 (fp8): d 7168, H 128, d_cq 1536, d_c 512, d_n 128, d_r 64, d_v 128, L 61 ----

TEST(CostModelV3, PerLayerWeightCounts) {
  const ModelConfig c = Released("r1");
  // q_a 1536·7168 + q_b 128·192·1536 + kv_a 576·7168 + kv_b 128·256·512 + o_proj 7168·128·128
  EXPECT_EQ(1536LL * 7168 + 128LL * 192 * 1536 + 576LL * 7168 + 128LL * 256 * 512 + 7168LL * 128 * 128, 187'105'280);
  const AttentionWeightCounts counts = CountAttentionWeights(c);
  EXPECT_EQ(counts.Checkpoint(), 187'105'280);
  EXPECT_EQ(counts.w_q_uk, 100'663'296);  // 1536 × 128 × 512
  EXPECT_EQ(counts.w_uv_o, 469'762'048);  // 128 × 512 × 7168
  EXPECT_EQ(counts.w_q_uk + counts.w_uv_o, 570'425'344);
  EXPECT_EQ(counts.kv_b, 128LL * 256 * 512);
  EXPECT_EQ(counts.w_uk, 128LL * 128 * 512);
}

TEST(CostModelV3, AttentionComponentAddsTheLatentNorms) {
  const ModelConfig c = Released("v3");
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  // q_a_layernorm 1536 + kv_a_layernorm 512 belong to self_attn.
  EXPECT_EQ(naive.layer_params[0].attention, 187'105'280 + 1536 + 512);
  EXPECT_EQ(naive.layer_params[10].attention, 187'105'280 + 1536 + 512);
}

TEST(CostModelV3, MaterializeExtraBytes) {
  const MaterializeExtra extra = ComputeMaterializeExtra(Released("r1"), 8);
  EXPECT_EQ(extra.per_layer, 570'425'344LL * 2);
  EXPECT_EQ(extra.whole_model, 69'591'891'968LL);  // 61 × 570,425,344 × 2
  EXPECT_EQ(extra.per_gpu_tp, 69'591'891'968LL / 8);
  EXPECT_EQ(extra.per_gpu_tp, 8'698'986'496LL);
  EXPECT_EQ(extra.per_gpu_dp_attention, 69'591'891'968LL);  // replicated, not divided
}

TEST(CostModelV3, ModeTotalsDifferByTheDerivedTensors) {
  const ModelConfig c = Released("r1");
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  const WeightCosts absorbed = ComputeWeightCosts(c, MlaMode::kAbsorbed);
  const WeightCosts mat = ComputeWeightCosts(c, MlaMode::kMaterialized);
  const int64_t kv_b_bf16 = 61LL * 128 * 256 * 512 * 2;  // fp8 kv_b dequantized for the bmm
  const int64_t w_uk_t = 61LL * 128 * 128 * 512 * 2;     // latte's transposed W_UK copy
  EXPECT_EQ(naive.model_bytes.kv_b_bf16, kv_b_bf16);
  EXPECT_EQ(naive.model_bytes.w_uk_t, 0);
  EXPECT_EQ(naive.model_bytes.Total(), naive.model_bytes.Checkpoint() + kv_b_bf16);
  EXPECT_EQ(absorbed.model_bytes.Total(), naive.model_bytes.Total() + w_uk_t);
  EXPECT_EQ(mat.model_bytes.Total(), absorbed.model_bytes.Total() + 69'591'891'968LL);
  EXPECT_EQ(mat.model_bytes.materialized, 69'591'891'968LL);
}

TEST(CostModelV3, WholeModelCheckpointParams) {
  const ModelConfig c = Released("r1");
  const int64_t d = 7168;
  const int64_t attention = 187'105'280 + 1536 + 512;
  const int64_t layer_norms = 2 * d;
  const int64_t dense = 3 * 18432 * d;
  const int64_t experts = 256LL * 3 * 2048 * d;
  const int64_t shared = 3LL * 2048 * d;
  const int64_t router = 256 * d + 256;  // gate.weight + e_score_correction_bias
  const int64_t embeddings = 2LL * 129280 * d;
  const int64_t expected =
      61 * (attention + layer_norms) + 3 * dense + 58 * (experts + shared + router) + embeddings + d /* model.norm */;
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  EXPECT_EQ(naive.model_params.Checkpoint(), expected);
  EXPECT_EQ(naive.model_params.Checkpoint(), 671'026'419'200LL);  // the "671B"
  EXPECT_EQ(naive.model_params.routed_experts, 58 * experts);
  EXPECT_EQ(naive.model_params.dense_mlp, 3 * dense);
}

TEST(CostModelV3, Fp8BytesCountScaleInvBlocks) {
  const ModelConfig c = Released("r1");
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  // One dense layer's MLP: three 18432×7168 linears at 1 B plus an f32 per 128×128 block.
  const int64_t blocks = (18432 / 128) * (7168 / 128);
  EXPECT_EQ(naive.layer_bytes[0].dense_mlp, 3 * (18432LL * 7168 + blocks * 4));
  // Embeddings stay bf16.
  EXPECT_EQ(naive.model_bytes.embeddings, 2LL * 129280 * 7168 * 2);
  // Router weight bf16 + correction bias f32.
  EXPECT_EQ(naive.layer_bytes[3].router, 256LL * 7168 * 2 + 256 * 4);
}

TEST(CostModelV3, DecodeProjectionFlops) {
  const DecodeProjectionFlops f = ComputeDecodeProjectionFlops(Released("r1"));
  // absorbed: 2·(q_b 128·192·1536 + W_UK bmm 128·128·512 + W_UV bmm 128·128·512 + o_proj 7168·128·128)
  const int64_t absorbed = 2 * (128LL * 192 * 1536 + 128LL * 128 * 512 + 128LL * 128 * 512 + 7168LL * 128 * 128);
  EXPECT_EQ(absorbed, 343'932'928);  // ≈ 344 MFLOP
  EXPECT_EQ(f.absorbed, absorbed);
  // materialized: 2·(W_Q_UK 128·512·1536 + q_b rope rows 128·64·1536 + W_UV_O 128·512·7168)
  const int64_t materialized = 2 * (128LL * 512 * 1536 + 128LL * 64 * 1536 + 128LL * 512 * 7168);
  EXPECT_EQ(materialized, 1'166'016'512);  // ≈ 1,166 MFLOP
  EXPECT_EQ(f.materialized, materialized);
  EXPECT_EQ(f.naive_fixed, 2 * (128LL * 192 * 1536 + 7168LL * 128 * 128));
  EXPECT_EQ(f.naive_per_cached_token, 2LL * 128 * (128 + 128) * 512);
  EXPECT_EQ(f.NaiveAt(4096), f.naive_fixed + 4096LL * 2 * 128 * 256 * 512);
}

TEST(CostModelV3, AttentionCoreFlops) {
  const AttentionCoreFlops f = ComputeAttentionCoreFlops(Released("r1"));
  EXPECT_EQ(f.absorbed, 2 * 128 * (512 + 64) + 2 * 128 * 512);
  EXPECT_EQ(f.naive, 2 * 128 * (128 + 64) + 2 * 128 * 128);
}

TEST(CostModelV3, KvCacheBytes) {
  const KvCacheBytes kv = ComputeKvCacheBytes(Released("r1"));
  EXPECT_EQ(kv.latent_per_layer, 576 * 2);
  EXPECT_EQ(kv.latent_model, 70'272);  // 61 × 576 × 2
  EXPECT_EQ(kv.mha_per_layer, 40'960 * 2);
  EXPECT_EQ(kv.mha_model, 61LL * 40'960 * 2);
}

TEST(CostModelV3, PerGpuBytes) {
  const WeightCosts mat = ComputeWeightCosts(Released("r1"), MlaMode::kMaterialized);
  const WeightComponents& b = mat.model_bytes;
  const int64_t total = b.Total();
  EXPECT_EQ(PerGpuBytes(b, {.gpus = 1, .dp_attention = false}), total);
  EXPECT_EQ(PerGpuBytes(b, {.gpus = 8, .dp_attention = false}), (total + 7) / 8);
  const int64_t attention = b.attention + b.kv_b_bf16 + b.w_uk_t + b.materialized;
  EXPECT_EQ(PerGpuBytes(b, {.gpus = 8, .dp_attention = true}), attention + (total - attention + 7) / 8);
}

// ---- DeepSeek-V2-Lite (bf16, q_lora_rank null): d 2048, H 16, d_c 512, d_n 128, d_r 64, d_v 128, L 27 ----

TEST(CostModelV2Lite, PerLayerWeightCounts) {
  const ModelConfig c = Released("v2-lite");
  const AttentionWeightCounts counts = CountAttentionWeights(c);
  EXPECT_EQ(counts.q_a, 0);
  EXPECT_EQ(counts.w_q_uk, 16LL * 512 * 2048);  // d takes d_cq's place
  EXPECT_EQ(counts.w_uv_o, 16LL * 512 * 2048);
  const int64_t projections = 16LL * 192 * 2048   // q_proj
                              + 576LL * 2048      // kv_a_proj_with_mqa
                              + 16LL * 256 * 512  // kv_b_proj
                              + 2048LL * 2048;    // o_proj
  EXPECT_EQ(counts.Checkpoint(), projections);
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  EXPECT_EQ(naive.layer_params[0].attention, projections + 512 /* kv_a_layernorm */);
  EXPECT_EQ(naive.layer_params[0].attention, 13'763'072);
  // bf16 checkpoint: 2 B per value, nothing dequantized.
  EXPECT_EQ(naive.layer_bytes[0].attention, 13'763'072LL * 2);
  EXPECT_EQ(naive.model_bytes.kv_b_bf16, 0);
}

TEST(CostModelV2Lite, DerivedTensorsAndKv) {
  const ModelConfig c = Released("v2-lite");
  const WeightCosts absorbed = ComputeWeightCosts(c, MlaMode::kAbsorbed);
  const WeightCosts mat = ComputeWeightCosts(c, MlaMode::kMaterialized);
  EXPECT_EQ(absorbed.model_bytes.w_uk_t, 27LL * 16 * 128 * 512 * 2);
  EXPECT_EQ(mat.model_bytes.materialized, 27LL * 2 * (16 * 512 * 2048) * 2);
  EXPECT_EQ(ComputeMaterializeExtra(c, 1).whole_model, 27LL * 2 * (16 * 512 * 2048) * 2);
  EXPECT_EQ(ComputeKvCacheBytes(c).latent_model, 27 * 576 * 2);
  const DecodeProjectionFlops f = ComputeDecodeProjectionFlops(c);
  EXPECT_EQ(f.absorbed, 2 * (16LL * 192 * 2048 + 16LL * 128 * 512 * 2 + 2048LL * 16 * 128));
  EXPECT_EQ(f.materialized, 2 * (16LL * 512 * 2048 + 16LL * 64 * 2048 + 16LL * 512 * 2048));
  // 1 dense layer then 26 MoE layers.
  EXPECT_EQ(absorbed.layer_params[0].routed_experts, 0);
  EXPECT_EQ(absorbed.layer_params[1].routed_experts, 64LL * 3 * 1408 * 2048);
}

TEST(CostModel, FitKvCache) {
  const KvFit fit = FitKvCache(80 * kBytesPerGB, 30 * kBytesPerGB, 70'272);
  EXPECT_EQ(fit.free_bytes, 50 * kBytesPerGB);
  EXPECT_EQ(fit.tokens, 50 * kBytesPerGB / 70'272);
  const KvFit none = FitKvCache(80 * kBytesPerGB, 90 * kBytesPerGB, 70'272);
  EXPECT_EQ(none.free_bytes, -10 * kBytesPerGB);
  EXPECT_EQ(none.tokens, 0);
}

// ---- The tiny make-model preset: the whole model per token ----

ModelConfig Tiny() {
  Result<ModelConfig> c = MakeModelPreset("tiny");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

// The tiny preset, written out: V 512, d 64, I 96, I_moe 32, L 3 (layer 0 dense,
// 1-2 MoE), H 4, d_cq 48, d_c 32, d_n 16, d_r 8, d_v 16, 8 routed experts (3 per
// token), 1 shared, noaux_tc (f32 score bias), bf16 weights (2 B), f32 norms/router.
TEST(CostModelTiny, TinyShapesAreWhatTheHandCountAssumes) {
  const ModelConfig c = Tiny();
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.q_lora_rank.value_or(0), 48);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_head_dim, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 3);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_FALSE(c.tie_word_embeddings);
}

// Per-layer pieces of the hand count.
constexpr double kAttnAbsorbed = 48 * 64                // q_a_proj [d_cq, d]
                                 + 40 * 64              // kv_a_proj_with_mqa [d_c + d_r, d]
                                 + 4 * 24 * 48          // q_b_proj [H (d_n + d_r), d_cq]
                                 + 4 * 32 * 32          // kv_b_proj [H (d_n + d_v), d_c] (W_UK^T copy + W_UV)
                                 + 64 * 64;             // o_proj [d, H d_v]
constexpr double kAttnMaterialized = 48 * 64 + 40 * 64  // q_a, kv_a
                                     + 4 * 32 * 48      // W_Q_UK [H d_c, d_cq]
                                     + 4 * 8 * 48       // q_b rope rows [H d_r, d_cq]
                                     + 64 * 4 * 32;     // W_UV_O [d, H d_c]
constexpr double kNormValues = 64 + 64 + 48 + 32;       // input, post-attn, q_a, kv_a norms (f32)
constexpr double kDense = 3 * 64 * 96;                  // gate, up, down [96, 64]
constexpr double kExpert = 3 * 64 * 32;                 // one expert
constexpr double kRouterValues = 8 * 64 + 8;            // gate.weight + e_score_correction_bias (f32)
constexpr double kLmHead = 512 * 64;
constexpr double kEmbedRow = 64;
constexpr double kFinalNorm = 64;

// One layer's decode step (bench attn): 3 sequences of 10 cached tokens, 11 rows each.
TEST(CostModelTiny, AttentionStepMatchesHandCount) {
  EXPECT_DOUBLE_EQ(kAttnAbsorbed, 18432);  // the sum, added up by hand
  EXPECT_DOUBLE_EQ(kAttnMaterialized, 21504);
  const double rows = 3 * 11;
  const double core_per_row = 2 * 4 * 40 + 2 * 4 * 32;                     // scores over c_kv|k_r, values over c_kv
  const double naive_per_row = 2 * 4 * 32 * 32 + 2 * 4 * 24 + 2 * 4 * 16;  // kv_b decompression, then the core
  const AttentionStepCosts a = ComputeAttentionStepCosts(Tiny(), MlaMode::kAbsorbed, 3, 10);
  EXPECT_EQ(a.weight_bytes, kAttnAbsorbed * 2);
  EXPECT_EQ(a.kv_bytes, rows * 40 * 2);
  EXPECT_EQ(a.flops, 3 * 2 * kAttnAbsorbed + rows * core_per_row);
  EXPECT_EQ(a.flops, 129'600);
  const AttentionStepCosts m = ComputeAttentionStepCosts(Tiny(), MlaMode::kMaterialized, 3, 10);
  EXPECT_EQ(m.weight_bytes, kAttnMaterialized * 2);
  EXPECT_EQ(m.kv_bytes, a.kv_bytes);
  EXPECT_EQ(m.flops, 3 * 2 * kAttnMaterialized + rows * core_per_row);
  const AttentionStepCosts n = ComputeAttentionStepCosts(Tiny(), MlaMode::kNaive, 3, 10);
  EXPECT_EQ(n.weight_bytes, a.weight_bytes);  // q_a, kv_a, q_b, kv_b_proj, o_proj
  EXPECT_EQ(n.flops, 3 * 2 * kAttnAbsorbed + rows * naive_per_row);
  EXPECT_EQ(n.flops, 391'488);
  const AttentionStepCosts core = ComputeAttentionCoreStepCosts(Tiny(), 3, 10);
  EXPECT_EQ(core.weight_bytes, 0);
  EXPECT_EQ(core.kv_bytes, a.kv_bytes);
  EXPECT_EQ(core.flops, rows * core_per_row);
}

TEST(CostModelTiny, DecodeBatch1AbsorbedMatchesHandCount) {
  const double context = 10, S = context + 1;
  const TokenCosts t = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, WeightValueBytes::Uniform(2), 2);
  const double weights = 3 * (kAttnAbsorbed * 2 + kNormValues * 4)          // 3 layers of attention + norms
                         + kDense * 2                                       // layer 0
                         + 2 * ((3 + 1) * kExpert * 2 + kRouterValues * 4)  // layers 1-2: 3 routed + 1 shared
                         + kFinalNorm * 4 + kLmHead * 2 + kEmbedRow * 2;
  EXPECT_DOUBLE_EQ(weights, 318336);  // the same sum, added up by hand
  EXPECT_DOUBLE_EQ(t.weight_bytes, weights);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 3 * S * 40 * 2);                                   // bf16 rows of d_c + d_r per layer
  const double flops = 3 * (2 * kAttnAbsorbed + 2 * S * 4 * 40 + 2 * S * 4 * 32)  // projections + core
                       + 2 * kDense + 2 * (2 * 4 * kExpert + 2 * 8 * 64)          // MLP, experts + router
                       + 2 * kLmHead;
  EXPECT_DOUBLE_EQ(flops, 332352);
  EXPECT_DOUBLE_EQ(t.flops, flops);
}

// Kept fp8: the projections and MLP / expert matrices at ~1 byte, W_UK / W_UV
// (from kv_b_proj, bf16) and the embeddings at 2.
TEST(CostModelTiny, DecodeFp8KeptCountsEachKindAtItsWidth) {
  const double context = 10;
  const WeightValueBytes fp8{1.25, 2, 2};  // 1.25: any width other than 2 shows where it lands
  const TokenCosts t = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, fp8, 2);
  const double kv_b = 4 * 32 * 32;  // W_UK^T copy + W_UV per layer
  const double weights = 3 * ((kAttnAbsorbed - kv_b) * 1.25 + kv_b * 2 + kNormValues * 4) + kDense * 1.25 +
                         2 * ((3 + 1) * kExpert * 1.25 + kRouterValues * 4) + kFinalNorm * 4 + kLmHead * 2 +
                         kEmbedRow * 2;
  EXPECT_DOUBLE_EQ(t.weight_bytes, weights);
  EXPECT_DOUBLE_EQ(t.flops,
                   DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, WeightValueBytes::Uniform(2), 2).flops);
}

// --quantize fp8: lm_head at its own width (fp8 + scales), the embedding rows still bf16.
TEST(CostModelTiny, LmHeadCountsAtItsOwnWidth) {
  const double context = 10;
  const WeightValueBytes q{1.25, 2, 2, 1.5};
  const TokenCosts t = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, q, 2);
  const TokenCosts bf16_head = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, {1.25, 2, 2, 2}, 2);
  EXPECT_DOUBLE_EQ(bf16_head.weight_bytes - t.weight_bytes, kLmHead * 0.5);
  const TokenCosts p = PrefillCostsPerToken(Tiny(), 16, q, 2);
  const TokenCosts p_bf16_head = PrefillCostsPerToken(Tiny(), 16, {1.25, 2, 2, 2}, 2);
  EXPECT_DOUBLE_EQ(p_bf16_head.weight_bytes - p.weight_bytes, kLmHead * 0.5 / 16);
  const TokenCosts rows = PrefillCostsPerToken(Tiny(), 16, {1.25, 2, 1, 1.5}, 2);  // embedding rows at 1 byte
  EXPECT_DOUBLE_EQ(p.weight_bytes - rows.weight_bytes, kEmbedRow * 1.0);           // 16 rows of 64 values / 16 tokens
}

TEST(CostModelTiny, DecodeMaterializedReadsTheProducts) {
  const TokenCosts a = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, 10, WeightValueBytes::Uniform(2), 2);
  const TokenCosts m = DecodeCostsPerToken(Tiny(), MlaMode::kMaterialized, 1, 10, WeightValueBytes::Uniform(2), 2);
  EXPECT_DOUBLE_EQ(m.weight_bytes - a.weight_bytes, 3 * (kAttnMaterialized - kAttnAbsorbed) * 2);
  EXPECT_DOUBLE_EQ(m.flops - a.flops, 3 * 2 * (kAttnMaterialized - kAttnAbsorbed));
  EXPECT_DOUBLE_EQ(m.kv_bytes, a.kv_bytes);
}

TEST(CostModelTiny, DecodeBatchSharesTheWeightsOfAStep) {
  const int64_t B = 4;
  const TokenCosts t = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, B, 10, WeightValueBytes::Uniform(2), 2);
  const double experts = 8 * (1 - std::pow(1 - 3.0 / 8, 4));  // distinct experts 4 tokens touch
  EXPECT_DOUBLE_EQ(ExpectedExpertsTouched(8, 3, 4), experts);
  EXPECT_DOUBLE_EQ(ExpectedExpertsTouched(8, 3, 1), 3);
  const double step = 3 * (kAttnAbsorbed * 2 + kNormValues * 4) + kDense * 2 +
                      2 * ((experts + 1) * kExpert * 2 + kRouterValues * 4) + kFinalNorm * 4 + kLmHead * 2 +
                      B * kEmbedRow * 2;
  EXPECT_NEAR(t.weight_bytes, step / B, 1e-6);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 3 * 11 * 40 * 2);  // per sequence: not shared
  EXPECT_DOUBLE_EQ(t.flops,
                   DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, 10, WeightValueBytes::Uniform(2), 2).flops);
}

TEST(CostModelTiny, PrefillMatchesHandCount) {
  const double P = 8;
  const TokenCosts t = PrefillCostsPerToken(Tiny(), 8, WeightValueBytes::Uniform(2), 2);
  const double experts = 8 * (1 - std::pow(1 - 3.0 / 8, 8));
  const double forward = 3 * (kAttnAbsorbed * 2 + kNormValues * 4)  // decompressed: q_a, kv_a, q_b, kv_b, o
                         + kDense * 2 + 2 * ((experts + 1) * kExpert * 2 + kRouterValues * 4) + kFinalNorm * 4 +
                         kLmHead * 2 + P * kEmbedRow * 2;
  EXPECT_NEAR(t.weight_bytes, forward / P, 1e-6);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 3 * 40 * 2);
  const double keys = (P + 1) / 2;
  const double flops = 3 * (2 * kAttnAbsorbed + keys * (2 * 4 * 24 + 2 * 4 * 16)) + 2 * kDense +
                       2 * (2 * 4 * kExpert + 2 * 8 * 64) + 2 * kLmHead / P;
  EXPECT_DOUBLE_EQ(flops, 260320);
  EXPECT_DOUBLE_EQ(t.flops, flops);
}

}  // namespace
}  // namespace latte

namespace latte {
namespace {

// A verify step of K + 1 rows per sequence reads the weights once: on R1 its extra
// bytes are the experts the extra rows touch (ExpectedExpertsTouched, 58 MoE layers of
// 256 experts, 8 per token) and their cached rows; the MTP passes read one MoE layer,
// eh_proj and the head each.
TEST(CostModelSpeculative, VerifyReadsTheExtraExpertsOnce) {
  const ModelConfig c = ReleasedConfig("r1").value();
  WeightValueBytes wb = WeightValueBytes::Uniform(2);
  wb.matrices = 1;
  const SpeculativeStepBytes none = SpeculativeStepCosts(c, MlaMode::kAbsorbed, 1, 0, 4096, wb, 2);
  EXPECT_DOUBLE_EQ(none.verify, none.plain);
  EXPECT_EQ(none.draft, 0);
  const SpeculativeStepBytes one = SpeculativeStepCosts(c, MlaMode::kAbsorbed, 1, 1, 4096, wb, 2);
  const double expert = 3.0 * c.moe_intermediate_size * c.hidden_size;  // fp8: a byte per value
  const double extra_experts = ExpectedExpertsTouched(256, 8, 2) - 8;
  const double kv_row = 4096.5 * 61 * c.LatentDim() * 2;  // the second row's cached rows (and its own)
  const double expected = none.plain + 58 * extra_experts * expert + kv_row + c.hidden_size * 2.0;
  EXPECT_NEAR(one.verify, expected, 1e-3 * expected);
  // One MTP pass: more than one MoE layer's 8 experts and the bf16 head (1.85 GB), less than 3 GB.
  EXPECT_GT(one.draft, 8 * expert + c.vocab_size * double(c.hidden_size) * 2);
  EXPECT_LT(one.draft, 3e9);
  EXPECT_DOUBLE_EQ(one.Speedup(1.0), one.plain / (one.verify + one.draft));
}

}  // namespace
}  // namespace latte

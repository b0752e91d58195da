// mla_costs against figures computed by hand from docs/mla.md and the released
// shapes (written here as literals, not through the helpers under test), and
// `latte calc` end to end.
#include "model/cost_model.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/presets.h"

namespace latte {
namespace {

ModelConfig Released(const std::string& name) {
  Result<ModelConfig> config = ReleasedConfig(name);
  EXPECT_TRUE(config.ok()) << config.status().message();
  return *config;
}

// ---- DeepSeek-V3 / R1 (fp8): d 7168, H 128, d_cq 1536, d_c 512, d_n 128, d_r 64, d_v 128, L 61 ----

TEST(MlaCostsV3, PerLayerParamsMatchDoc) {
  const ModelConfig c = Released("r1");
  // q_a 1536·7168 + q_b 128·192·1536 + kv_a 576·7168 + kv_b 128·256·512 + o_proj 7168·128·128
  EXPECT_EQ(1536LL * 7168 + 128LL * 192 * 1536 + 576LL * 7168 + 128LL * 256 * 512 + 7168LL * 128 * 128,
            187'105'280);
  EXPECT_EQ(AttentionProjectionParams(c), 187'105'280);
  EXPECT_EQ(WQUkParams(c), 100'663'296);  // 1536 × 128 × 512
  EXPECT_EQ(WUvOParams(c), 469'762'048);  // 128 × 512 × 7168
  EXPECT_EQ(WQUkParams(c) + WUvOParams(c), 570'425'344);
  EXPECT_EQ(KvBParams(c), 128LL * 256 * 512);
  EXPECT_EQ(WUkTParams(c), 128LL * 128 * 512);
}

TEST(MlaCostsV3, AttentionComponentAddsTheLatentNorms) {
  const ModelConfig c = Released("v3");
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  // q_a_layernorm 1536 + kv_a_layernorm 512 belong to self_attn.
  EXPECT_EQ(naive.layer_params[0].attention, 187'105'280 + 1536 + 512);
  EXPECT_EQ(naive.layer_params[10].attention, 187'105'280 + 1536 + 512);
}

TEST(MlaCostsV3, MaterializeExtraBytes) {
  const MaterializeExtra extra = ComputeMaterializeExtra(Released("r1"), 8);
  EXPECT_EQ(extra.per_layer, 570'425'344LL * 2);
  EXPECT_EQ(extra.whole_model, 69'591'891'968LL);  // 61 × 570,425,344 × 2
  EXPECT_EQ(extra.per_gpu_tp, 69'591'891'968LL / 8);
  EXPECT_EQ(extra.per_gpu_tp, 8'698'986'496LL);
  EXPECT_EQ(extra.per_gpu_dp_attention, 69'591'891'968LL);  // replicated, not divided
}

TEST(MlaCostsV3, ModeTotalsDifferByTheDerivedTensors) {
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

TEST(MlaCostsV3, WholeModelCheckpointParams) {
  const ModelConfig c = Released("r1");
  const int64_t d = 7168;
  const int64_t attention = 187'105'280 + 1536 + 512;
  const int64_t layer_norms = 2 * d;
  const int64_t dense = 3 * 18432 * d;
  const int64_t experts = 256LL * 3 * 2048 * d;
  const int64_t shared = 3LL * 2048 * d;
  const int64_t router = 256 * d + 256;  // gate.weight + e_score_correction_bias
  const int64_t embeddings = 2LL * 129280 * d;
  const int64_t expected = 61 * (attention + layer_norms) + 3 * dense +
                           58 * (experts + shared + router) + embeddings + d /* model.norm */;
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  EXPECT_EQ(naive.model_params.Checkpoint(), expected);
  EXPECT_EQ(naive.model_params.Checkpoint(), 671'026'419'200LL);  // the "671B"
  EXPECT_EQ(naive.model_params.routed_experts, 58 * experts);
  EXPECT_EQ(naive.model_params.dense_mlp, 3 * dense);
}

TEST(MlaCostsV3, Fp8BytesCountScaleInvBlocks) {
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

TEST(MlaCostsV3, DecodeProjectionFlops) {
  const DecodeProjectionFlops f = ComputeDecodeProjectionFlops(Released("r1"));
  // absorbed: 2·(q_b 128·192·1536 + W_UK bmm 128·128·512 + W_UV bmm 128·128·512 + o_proj 7168·128·128)
  const int64_t absorbed =
      2 * (128LL * 192 * 1536 + 128LL * 128 * 512 + 128LL * 128 * 512 + 7168LL * 128 * 128);
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

TEST(MlaCostsV3, AttentionCoreFlops) {
  const AttentionCoreFlops f = ComputeAttentionCoreFlops(Released("r1"));
  EXPECT_EQ(f.absorbed, 2 * 128 * (512 + 64) + 2 * 128 * 512);
  EXPECT_EQ(f.naive, 2 * 128 * (128 + 64) + 2 * 128 * 128);
}

TEST(MlaCostsV3, KvCacheBytes) {
  const KvCacheBytes kv = ComputeKvCacheBytes(Released("r1"));
  EXPECT_EQ(kv.latent_per_layer, 576 * 2);
  EXPECT_EQ(kv.latent_model, 70'272);  // 61 × 576 × 2
  EXPECT_EQ(kv.mha_per_layer, 40'960 * 2);
  EXPECT_EQ(kv.mha_model, 61LL * 40'960 * 2);
}

TEST(MlaCostsV3, PerGpuBytes) {
  const WeightCosts mat = ComputeWeightCosts(Released("r1"), MlaMode::kMaterialized);
  const WeightComponents& b = mat.model_bytes;
  const int64_t total = b.Total();
  EXPECT_EQ(PerGpuBytes(b, {.gpus = 1, .dp_attention = false}), total);
  EXPECT_EQ(PerGpuBytes(b, {.gpus = 8, .dp_attention = false}), (total + 7) / 8);
  const int64_t attention = b.attention + b.kv_b_bf16 + b.w_uk_t + b.materialized;
  EXPECT_EQ(PerGpuBytes(b, {.gpus = 8, .dp_attention = true}), attention + (total - attention + 7) / 8);
}

// ---- DeepSeek-V2-Lite (bf16, q_lora_rank null): d 2048, H 16, d_c 512, d_n 128, d_r 64, d_v 128, L 27 ----

TEST(MlaCostsV2Lite, PerLayerParams) {
  const ModelConfig c = Released("v2-lite");
  EXPECT_EQ(WQUkParams(c), 16LL * 512 * 2048);  // d takes d_cq's place
  EXPECT_EQ(WUvOParams(c), 16LL * 512 * 2048);
  const int64_t projections = 16LL * 192 * 2048  // q_proj
                              + 576LL * 2048     // kv_a_proj_with_mqa
                              + 16LL * 256 * 512 // kv_b_proj
                              + 2048LL * 2048;   // o_proj
  EXPECT_EQ(AttentionProjectionParams(c), projections);
  const WeightCosts naive = ComputeWeightCosts(c, MlaMode::kNaive);
  EXPECT_EQ(naive.layer_params[0].attention, projections + 512 /* kv_a_layernorm */);
  EXPECT_EQ(naive.layer_params[0].attention, 13'763'072);
  // bf16 checkpoint: 2 B per value, nothing dequantized.
  EXPECT_EQ(naive.layer_bytes[0].attention, 13'763'072LL * 2);
  EXPECT_EQ(naive.model_bytes.kv_b_bf16, 0);
}

TEST(MlaCostsV2Lite, DerivedTensorsAndKv) {
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

TEST(MlaCosts, FitKvCache) {
  const KvFit fit = FitKvCache(80 * kBytesPerGB, 30 * kBytesPerGB, 70'272);
  EXPECT_EQ(fit.free_bytes, 50 * kBytesPerGB);
  EXPECT_EQ(fit.tokens, 50 * kBytesPerGB / 70'272);
  const KvFit none = FitKvCache(80 * kBytesPerGB, 90 * kBytesPerGB, 70'272);
  EXPECT_EQ(none.free_bytes, -10 * kBytesPerGB);
  EXPECT_EQ(none.tokens, 0);
}

// ---- `latte calc` end to end ----

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult RunLatte(const std::string& args) {
  const std::string dir = ::testing::TempDir();
  const std::string out_path = dir + "/mla_costs_test_out.txt";
  const std::string err_path = dir + "/mla_costs_test_err.txt";
  const std::string command =
      std::string(LATTE_BINARY) + " " + args + " >" + out_path + " 2>" + err_path;
  const int status = std::system(command.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

TEST(CalcCommand, PresetR1Json) {
  const RunResult r = RunLatte("calc --preset r1 --tp 8 --memory-gb 141 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bytes_per_gb"], 1'000'000'000);
  EXPECT_EQ(j["checkpoint_dtype"], "fp8_e4m3");
  EXPECT_EQ(j["tp"], 8);
  EXPECT_EQ(j["shape"]["q_lora_rank"], 1536);
  EXPECT_EQ(j["per_layer_params"]["attention_projections"], 187'105'280);
  EXPECT_EQ(j["per_layer_params"]["w_q_uk"], 100'663'296);
  EXPECT_EQ(j["per_layer_params"]["w_uv_o"], 469'762'048);
  EXPECT_EQ(j["materialize_extra_bytes"]["whole_model"], 69'591'891'968LL);
  EXPECT_EQ(j["materialize_extra_bytes"]["per_gpu_tp"], 8'698'986'496LL);
  EXPECT_EQ(j["decode_projection_flops_per_token"]["per_layer"]["absorbed"], 343'932'928);
  EXPECT_EQ(j["decode_projection_flops_per_token"]["per_layer"]["materialized"], 1'166'016'512);
  EXPECT_EQ(j["kv_cache_bytes_per_token"]["latent_whole_model"], 70'272);
  EXPECT_EQ(j["layer_kinds"].size(), 2u);
  EXPECT_EQ(j["model"]["bytes"]["materialized"]["materialized"], 69'591'891'968LL);
  // 141 GB per GPU holds the TP8 share of either mode; absorbed fits more tokens.
  const auto& fit = j["kv_fit"];
  EXPECT_GT(fit["absorbed"]["tokens"].get<int64_t>(), fit["materialized"]["tokens"].get<int64_t>());
  EXPECT_GT(fit["token_ratio"].get<double>(), 1.0);
}

TEST(CalcCommand, HumanOutputHasThousandsSeparators) {
  const RunResult r = RunLatte("calc --preset r1 --tp 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("69,591,891,968"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("70,272"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB = 1e9 bytes"), std::string::npos) << r.out;
}

TEST(CalcCommand, ConfigFileMatchesPreset) {
  const std::string path = ::testing::TempDir() + "/mla_costs_test_v2_lite_config.json";
  std::ofstream(path) << Released("v2-lite").ToJsonText();
  const RunResult r = RunLatte("calc --config " + path + " --dp-attention --tp 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["checkpoint_dtype"], "bf16");
  EXPECT_TRUE(j["shape"]["q_lora_rank"].is_null());
  EXPECT_EQ(j["kv_cache_bytes_per_token"]["latent_whole_model"], 27 * 576 * 2);
  EXPECT_EQ(j["per_layer_params"]["w_q_uk"], 16 * 512 * 2048);
  EXPECT_TRUE(j["dp_attention"].get<bool>());
  EXPECT_TRUE(j["kv_fit"].is_null());
}

TEST(CalcCommand, MissingConfigIsOneLineError) {
  const RunResult r = RunLatte("calc --config /nonexistent/latte/config.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(r.err.rfind("latte calc: error: ", 0), 0u) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // exactly one line
}

TEST(CalcCommand, ConfigAndPresetTogetherIsAnError) {
  const RunResult r = RunLatte("calc --preset r1 --config x.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("latte calc: error: ", 0), 0u) << r.err;
}

}  // namespace
}  // namespace latte

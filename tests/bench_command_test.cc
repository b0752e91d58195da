// latte bench model / machine: the per-token bytes and FLOPs against a hand count
// on the tiny preset, and both commands end to end (JSON sanity only: no speed is
// ever asserted).
#include "tools/model_benchmark.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_models.h"
#include "tools/random_checkpoint.h"

namespace latte {
namespace {

ModelConfig Tiny() {
  auto c = MakeModelConfig("tiny", {});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.value();
}

// The tiny preset, written out: V 512, d 64, I 96, I_moe 32, L 3 (layer 0 dense,
// 1-2 MoE), H 4, d_cq 48, d_c 32, d_n 16, d_r 8, d_v 16, 8 routed experts (3 per
// token), 1 shared, noaux_tc (f32 score bias), bf16 weights (2 B), f32 norms/router.
TEST(ModelBenchCosts, TinyShapesAreWhatTheHandCountAssumes) {
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
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_FALSE(c.tie_word_embeddings);
}

// Per-layer pieces of the hand count.
constexpr double kAttnAbsorbed = 48 * 64      // q_a_proj [d_cq, d]
                                 + 40 * 64    // kv_a_proj_with_mqa [d_c + d_r, d]
                                 + 4 * 24 * 48  // q_b_proj [H (d_n + d_r), d_cq]
                                 + 4 * 32 * 32  // kv_b_proj [H (d_n + d_v), d_c] (W_UK^T copy + W_UV)
                                 + 64 * 64;   // o_proj [d, H d_v]
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

TEST(ModelBenchCosts, DecodeBatch1AbsorbedMatchesHandCount) {
  const double context = 10, S = context + 1;
  const TokenCosts t = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, WeightValueBytes::Uniform(2), 2);
  const double weights = 3 * (kAttnAbsorbed * 2 + kNormValues * 4)  // 3 layers of attention + norms
                         + kDense * 2                                // layer 0
                         + 2 * ((3 + 1) * kExpert * 2 + kRouterValues * 4)  // layers 1-2: 3 routed + 1 shared
                         + kFinalNorm * 4 + kLmHead * 2 + kEmbedRow * 2;
  EXPECT_DOUBLE_EQ(weights, 318336);  // the same sum, added up by hand
  EXPECT_DOUBLE_EQ(t.weight_bytes, weights);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 3 * S * 40 * 2);  // bf16 rows of d_c + d_r per layer
  const double flops = 3 * (2 * kAttnAbsorbed + 2 * S * 4 * 40 + 2 * S * 4 * 32)  // projections + core
                       + 2 * kDense + 2 * (2 * 4 * kExpert + 2 * 8 * 64)           // MLP, experts + router
                       + 2 * kLmHead;
  EXPECT_DOUBLE_EQ(flops, 332352);
  EXPECT_DOUBLE_EQ(t.flops, flops);
}

// Kept fp8: the projections and MLP / expert matrices at ~1 byte, W_UK / W_UV
// (from kv_b_proj, bf16) and the embeddings at 2.
TEST(ModelBenchCosts, DecodeFp8KeptCountsEachKindAtItsWidth) {
  const double context = 10;
  const WeightValueBytes fp8{1.25, 2, 2};  // 1.25: any width other than 2 shows where it lands
  const TokenCosts t = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context, fp8, 2);
  const double kv_b = 4 * 32 * 32;  // W_UK^T copy + W_UV per layer
  const double weights = 3 * ((kAttnAbsorbed - kv_b) * 1.25 + kv_b * 2 + kNormValues * 4) + kDense * 1.25 +
                         2 * ((3 + 1) * kExpert * 1.25 + kRouterValues * 4) + kFinalNorm * 4 + kLmHead * 2 +
                         kEmbedRow * 2;
  EXPECT_DOUBLE_EQ(t.weight_bytes, weights);
  EXPECT_DOUBLE_EQ(t.flops, DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, context,
                                                WeightValueBytes::Uniform(2), 2).flops);
}

TEST(ModelBenchCosts, DecodeMaterializedReadsTheProducts) {
  const TokenCosts a = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, 10, WeightValueBytes::Uniform(2), 2);
  const TokenCosts m = DecodeCostsPerToken(Tiny(), MlaMode::kMaterialized, 1, 10, WeightValueBytes::Uniform(2), 2);
  EXPECT_DOUBLE_EQ(m.weight_bytes - a.weight_bytes, 3 * (kAttnMaterialized - kAttnAbsorbed) * 2);
  EXPECT_DOUBLE_EQ(m.flops - a.flops, 3 * 2 * (kAttnMaterialized - kAttnAbsorbed));
  EXPECT_DOUBLE_EQ(m.kv_bytes, a.kv_bytes);
}

TEST(ModelBenchCosts, DecodeBatchSharesTheWeightsOfAStep) {
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
  EXPECT_DOUBLE_EQ(t.flops, DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, 10, WeightValueBytes::Uniform(2), 2).flops);
}

TEST(ModelBenchCosts, PrefillMatchesHandCount) {
  const double P = 8;
  const TokenCosts t = PrefillCostsPerToken(Tiny(), 8, WeightValueBytes::Uniform(2), 2);
  const double experts = 8 * (1 - std::pow(1 - 3.0 / 8, 8));
  const double forward = 3 * (kAttnAbsorbed * 2 + kNormValues * 4)  // decompressed: q_a, kv_a, q_b, kv_b, o
                         + kDense * 2 + 2 * ((experts + 1) * kExpert * 2 + kRouterValues * 4) +
                         kFinalNorm * 4 + kLmHead * 2 + P * kEmbedRow * 2;
  EXPECT_NEAR(t.weight_bytes, forward / P, 1e-6);
  EXPECT_DOUBLE_EQ(t.kv_bytes, 3 * 40 * 2);
  const double keys = (P + 1) / 2;
  const double flops = 3 * (2 * kAttnAbsorbed + keys * (2 * 4 * 24 + 2 * 4 * 16)) + 2 * kDense +
                       2 * (2 * 4 * kExpert + 2 * 8 * 64) + 2 * kLmHead / P;
  EXPECT_DOUBLE_EQ(flops, 260320);
  EXPECT_DOUBLE_EQ(t.flops, flops);
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult RunLatte(const std::string& args) {
  const std::string path = ::testing::TempDir() + "/model_benchmark_test_out.txt";
  const int status = std::system((std::string(LATTE_BINARY) + " " + args + " >" + path + " 2>&1").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.out = ss.str();
  return r;
}

bool PositiveFinite(const nlohmann::json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
}

TEST(BenchModelCommand, JsonLinesAreSane) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r =
      RunLatte("bench model --model " + dir + " -p 8 -n 4 -r 2 --batch 2 -t 2 --mla-mode materialized --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') objects.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(objects.size(), 2u) << r.out;
  EXPECT_EQ(objects[0]["test"], "pp8");
  EXPECT_EQ(objects[0]["batch"], 1);
  EXPECT_EQ(objects[1]["test"], "tg4");
  EXPECT_EQ(objects[1]["batch"], 2);
  for (const nlohmann::json& j : objects) {
    EXPECT_EQ(j["mla_mode"], "materialized");
    EXPECT_EQ(j["threads"], 2);
    for (const char* key : {"tok_s_mean", "bytes_per_token", "flops_per_token", "achieved_gbps",
                            "achieved_gflops", "machine_read_gbps", "fraction_of_roofline"}) {
      EXPECT_TRUE(PositiveFinite(j[key])) << key << " in " << j.dump();
    }
    EXPECT_TRUE(j["tok_s_sd"].is_number() && j["tok_s_sd"].get<double>() >= 0) << j.dump();
    EXPECT_TRUE(j["machine_bf16_gflops"].is_null() || PositiveFinite(j["machine_bf16_gflops"])) << j.dump();
    // The figures agree with each other: GB/s = bytes per token x tok/s.
    EXPECT_NEAR(j["achieved_gbps"].get<double>(),
                j["bytes_per_token"].get<double>() * j["tok_s_mean"].get<double>() / 1e9,
                1e-9 * j["achieved_gbps"].get<double>() + 1e-12);
  }
}

std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::istringstream lines(out);
  std::string line;
  std::vector<nlohmann::json> objects;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') objects.push_back(nlohmann::json::parse(line));
  }
  return objects;
}

// -d D: tg decodes after D tokens prefilled into each cache (600: two chunks of the
// 512-token fill), and its per-token costs count the attention over them: the average
// context is D + (n - 1) / 2 (without -d: the 16-token prompt, 16 + (n - 1) / 2).
TEST(BenchModelCommand, DepthCountsTheCachedRowsInTheCosts) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult deep = RunLatte("bench model --model " + dir + " -p 0 -n 3 -r 1 -t 2 -d 600 --json");
  ASSERT_EQ(deep.exit_code, 0) << deep.out;
  const CommandResult shallow = RunLatte("bench model --model " + dir + " -p 0 -n 3 -r 1 -t 2 --json");
  ASSERT_EQ(shallow.exit_code, 0) << shallow.out;
  const std::vector<nlohmann::json> d = JsonLines(deep.out), s = JsonLines(shallow.out);
  ASSERT_EQ(d.size(), 1u) << deep.out;
  ASSERT_EQ(s.size(), 1u) << shallow.out;
  EXPECT_EQ(d[0]["test"], "tg3@d600");
  EXPECT_EQ(d[0]["depth"], 600);
  EXPECT_EQ(s[0]["test"], "tg3");
  EXPECT_EQ(s[0]["depth"], 0);
  EXPECT_TRUE(PositiveFinite(d[0]["tok_s_mean"])) << d[0].dump();
  // Tiny: 3 layers, bf16 rows of d_c + d_r = 40 values, H 4, d_c 32.
  const double rows = 600 + 1 + 1;  // average context 601, plus the new token's own row
  EXPECT_DOUBLE_EQ(d[0]["kv_bytes_per_token"].get<double>(), 3 * rows * 40 * 2);
  EXPECT_DOUBLE_EQ(s[0]["kv_bytes_per_token"].get<double>(), 3 * (16 + 1 + 1) * 40 * 2);
  EXPECT_DOUBLE_EQ(d[0]["flops_per_token"].get<double>() - s[0]["flops_per_token"].get<double>(),
                   3 * (601 - 17) * (2 * 4 * 40 + 2 * 4 * 32));
  EXPECT_DOUBLE_EQ(d[0]["weight_bytes_per_token"].get<double>(), s[0]["weight_bytes_per_token"].get<double>());
  const TokenCosts want = DecodeCostsPerToken(Tiny(), MlaMode::kAbsorbed, 1, 601, WeightValueBytes::Uniform(2), 2);
  EXPECT_DOUBLE_EQ(d[0]["flops_per_token"].get<double>(), want.flops);
  EXPECT_DOUBLE_EQ(d[0]["bytes_per_token"].get<double>(), want.Bytes());
}

TEST(BenchModelCommand, RejectsANegativeDepth) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r = RunLatte("bench model --model " + dir + " -p 0 -n 2 -r 1 -d -5");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("-d"), std::string::npos) << r.out;
}

// bench attn's core rows: the bf16 rows one step reads and the core's FLOPs, exactly,
// beside the machine peaks measured in the same run.
TEST(BenchAttnCommand, CoreRowsCountBytesAndFlops) {
  const CommandResult r = RunLatte(
      "bench attn --preset v2-lite --mode absorbed --batch 1 --batch 2 --context 100 --min-seconds 0 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<nlohmann::json> objects = JsonLines(r.out);
  ASSERT_EQ(objects.size(), 4u) << r.out;  // absorbed x 2 batches, then core x 2
  for (int i = 0; i < 4; ++i) {
    const nlohmann::json& j = objects[i];
    const double batch = j["batch"].get<double>();
    EXPECT_EQ(j["mode"], i < 2 ? "absorbed" : "core") << j.dump();
    // V2-Lite: 16 heads, rows of 576 bf16 values, d_c 512; 101 rows per sequence.
    EXPECT_DOUBLE_EQ(j["kv_bytes"].get<double>(), batch * 101 * 576 * 2) << j.dump();
    if (i >= 2) {
      EXPECT_DOUBLE_EQ(j["flops"].get<double>(), batch * 101 * (2 * 16 * 576 + 2 * 16 * 512)) << j.dump();
      for (const char* key : {"ms_per_step", "achieved_gbps", "achieved_gflops", "machine_read_gbps",
                              "fraction_of_read_gbps", "fraction_of_flop_peak"}) {
        EXPECT_TRUE(PositiveFinite(j[key])) << key << " in " << j.dump();
      }
      EXPECT_TRUE(j["roofline"] == "flops" || j["roofline"] == "read_gbps") << j.dump();
    }
  }
}

TEST(BenchModelCommand, RejectsABadMode) {
  const std::string dir = testing_models::MakeModel("tiny", {});
  const CommandResult r = RunLatte("bench model --model " + dir + " -p 4 -n 2 -r 1 --mla-mode fast");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--mla-mode"), std::string::npos) << r.out;
}

TEST(BenchMachineCommand, JsonParses) {
  const CommandResult r = RunLatte("bench machine --json -t 2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_TRUE(PositiveFinite(j["read_gbps"])) << r.out;
  EXPECT_TRUE(PositiveFinite(j["read_gbps_1thread"])) << r.out;
  EXPECT_TRUE(PositiveFinite(j["f32_gflops"])) << r.out;
  EXPECT_TRUE(j["bf16_gflops"].is_null() || PositiveFinite(j["bf16_gflops"])) << r.out;
  EXPECT_TRUE(j["f32_kernel"] == "avx512-fma" || j["f32_kernel"] == "portable") << r.out;
}

}  // namespace
}  // namespace latte

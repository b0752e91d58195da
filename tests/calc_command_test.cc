// `latte calc` end to end: the figures of the cost model (tests/cost_model_test.cc)
// as the command prints them, in JSON and in tables, and its one-line errors; and the
// report it prints (bench/model_cost_report.h) built directly.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/gguf_file.h"
#include "bench/model_cost_report.h"
#include "gguf_test_models.h"
#include "model/model_weights.h"
#include "model/presets.h"

namespace latte {
namespace {

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
  // Files named for the running test: ctest runs the test cases as parallel processes.
  const std::string prefix =
      ::testing::TempDir() + "/calc_command_test_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string out_path = prefix + "_out.txt";
  const std::string err_path = prefix + "_err.txt";
  const std::string command = std::string(LATTE_BINARY) + " " + args + " >" + out_path + " 2>" + err_path;
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
  const std::string path = ::testing::TempDir() + "/calc_command_test_v2_lite_config.json";
  const Result<ModelConfig> v2_lite = ReleasedConfig("v2-lite");
  ASSERT_TRUE(v2_lite.ok()) << v2_lite.status().message();
  std::ofstream(path) << v2_lite->ToJsonText();
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

// --model FILE.gguf: the checkpoint bytes are the file's, by its own types, and the
// engine table's weights are what loading that file holds.
TEST(CalcCommand, GgufModelCountsItsStoredBytes) {
  using testing_models::GgufShape;
  const std::string src = testing_models::GgufTestModel(
      "calc-gguf-src", testing_models::GgufTestConfig(GgufShape::kV3, 2), CheckpointDType::kBf16, 4);
  const std::string path = testing_models::ExportTestGguf(src, "Q4_K_M", GgufExportLayout::kSplitKvB);
  const RunResult r = RunLatte("calc --model " + path + " --memory-gb 1 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["checkpoint_dtype"], "as_stored");
  auto gguf = GgufModel::Open(path);
  ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  int64_t file_bytes = 0;
  for (const GgufTensor& t : gguf->tensors()) file_bytes += static_cast<int64_t>(t.nbytes);
  int64_t listed = 0;
  for (const auto& [type, bytes] : j["stored_bytes_by_type"].items()) listed += bytes.get<int64_t>();
  EXPECT_EQ(listed, file_bytes);
  EXPECT_TRUE(j["stored_bytes_by_type"].contains("Q4_K")) << j["stored_bytes_by_type"].dump();
  EXPECT_TRUE(j["stored_bytes_by_type"].contains("Q6_K")) << j["stored_bytes_by_type"].dump();
  EXPECT_EQ(j["model"]["bytes"]["absorbed"]["checkpoint"], file_bytes);
  LoadOptions options;
  options.progress = false;
  for (const char* mode : {"naive", "absorbed", "materialized"}) {
    SCOPED_TRACE(mode);
    options.mode = *ParseMlaMode(mode);
    auto w = ModelWeights::Load(path, options);
    ASSERT_TRUE(w.ok()) << w.status().message();
    EXPECT_EQ(j["engine_fit"][mode]["weight_bytes"], static_cast<int64_t>((*w)->memory().Total()));
  }
}

TEST(CalcCommand, ModelAndConfigTogetherIsAnError) {
  const RunResult r = RunLatte("calc --model /nonexistent.gguf --config x.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("latte calc: error: give exactly one of --model", 0), 0u) << r.err;
}

TEST(CalcCommand, BrokenGgufIsOneLineError) {
  const std::string path = ::testing::TempDir() + "/calc_broken.gguf";
  std::ofstream(path) << "GGUF not really";
  const RunResult r = RunLatte("calc --model " + path);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("latte calc: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

TEST(CalcCommand, ConfigAndPresetTogetherIsAnError) {
  const RunResult r = RunLatte("calc --preset r1 --config x.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("latte calc: error: ", 0), 0u) << r.err;
}

// The command's JSON is the report's: the same object BuildModelCostReport gives for
// the same flags (threads fixed, as the engine table's scratch depends on them).
TEST(CalcCommand, JsonIsTheModelCostReport) {
  const RunResult r =
      RunLatte("calc --preset r1 --tp 8 --dp-attention --memory-gb 141 --context 8192 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Result<ModelConfig> r1 = ReleasedConfig("r1");
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  ModelCostOptions options;
  options.tp = 8;
  options.dp_attention = true;
  options.memory_gb = 141;
  options.context = 8192;
  options.threads = 2;
  const ModelCostReport report = BuildModelCostReport("preset r1", r1.value(), options);
  EXPECT_EQ(nlohmann::json::parse(r.out), ModelCostReportJson(report));
}

// R1's layers by kind, and no fit tables without a memory budget.
TEST(CalcReport, LayerKindsAndNoFitWithoutMemory) {
  const Result<ModelConfig> r1 = ReleasedConfig("r1");
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  const ModelCostReport report = BuildModelCostReport("preset r1", r1.value(), ModelCostOptions{});
  EXPECT_EQ(report.dense_layers, 3);
  EXPECT_EQ(report.moe_layers, 58);
  EXPECT_EQ(report.first_dense, 0);
  EXPECT_EQ(report.first_moe, 3);
  EXPECT_EQ(report.kv.latent_model, 70'272);
  EXPECT_FALSE(report.memory_bytes.has_value());
  EXPECT_FALSE(report.engine_fit.has_value());
  const nlohmann::json j = ModelCostReportJson(report);
  EXPECT_TRUE(j["kv_fit"].is_null());
  EXPECT_TRUE(j["engine_fit"].is_null());
  EXPECT_TRUE(j["memory_gb"].is_null());
}

// With a budget: every mode's engine fit, the materialized weights the largest.
TEST(CalcReport, EngineFitInEveryMode) {
  const Result<ModelConfig> v2_lite = ReleasedConfig("v2-lite");
  ASSERT_TRUE(v2_lite.ok()) << v2_lite.status().message();
  ModelCostOptions options;
  options.memory_gb = 100;
  options.threads = 2;
  const ModelCostReport report = BuildModelCostReport("preset v2-lite", v2_lite.value(), options);
  ASSERT_TRUE(report.engine_fit.has_value());
  EXPECT_EQ(*report.memory_bytes, 100 * kBytesPerGB);
  const EngineFit& e = *report.engine_fit;
  EXPECT_EQ(e.threads, 2);
  ASSERT_EQ(e.modes.size(), 3u);
  for (const EngineFit::Mode& m : e.modes) {
    EXPECT_GT(m.blocks, 0) << MlaModeName(m.mode);
    EXPECT_EQ(m.tokens, m.blocks * options.block_size);
  }
  EXPECT_EQ(e.modes[2].mode, MlaMode::kMaterialized);
  EXPECT_GT(e.modes[2].weight_bytes, e.modes[1].weight_bytes);
}

}  // namespace
}  // namespace latte

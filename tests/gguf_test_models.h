// The models the GGUF tests write: shapes whose matrix rows are whole 256-value blocks
// wherever DeepSeek's shapes allow (hidden, q_lora, kv_lora, the MLP widths), so each K
// format is exercised on every projection but those whose rows are per-head widths
// (o_proj's 64 and k_b's 32 columns: the exporter's fallback, llama-quantize's, Q5_0 under
// Q4_K, Q5_1 under Q5_K, Q8_0 under Q6_K); and their GGUF files.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "synth/gguf_export.h"
#include "synth/random_checkpoint.h"
#include "test_models.h"

namespace latte::testing_models {

enum class GgufShape { kV3, kV2Lite };

// V3-like: q_lora, sigmoid routing with groups and bias, YaRN. V2-Lite-like: plain
// q_proj, softmax routing over all experts, no YaRN. 3 layers (1 dense), 8 experts of
// which each token takes `experts_per_token` (8: every group too).
inline ModelConfig GgufTestConfig(GgufShape shape, int64_t experts_per_token) {
  MakeModelOverrides o;
  o.num_hidden_layers = 3;
  ModelConfig c = MakeModelConfig("tiny", o).value();
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.moe_intermediate_size = 256;
  c.num_attention_heads = 2;
  c.kv_lora_rank = 256;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 32;
  c.v_head_dim = 32;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = experts_per_token;
  if (experts_per_token == c.n_routed_experts) c.topk_group = c.n_group;
  if (shape == GgufShape::kV3) {
    c.q_lora_rank = 256;
  } else {
    c.architecture = "DeepseekV2ForCausalLM";
    c.q_lora_rank = std::nullopt;
    c.scoring_func = ScoringFunc::kSoftmax;
    c.topk_method = TopkMethod::kGreedy;
    c.n_group = 1;
    c.topk_group = 1;
    c.rope_scaling = std::nullopt;
  }
  return c;
}

// The directory TempRoot()/`name`, written once.
inline std::string GgufTestModel(const std::string& name, const ModelConfig& config, CheckpointDType dtype,
                                 uint64_t seed) {
  const std::string dir = TempRoot() + "/" + name;
  if (!std::filesystem::exists(dir + "/config.json")) {
    RandomCheckpointOptions options;
    options.dtype = dtype;
    options.seed = seed;
    const Status st = WriteRandomCheckpoint(config, options, dir);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return dir;
}

// `dir` written as a GGUF of `type` ("Q4_K", "Q4_K_M", ...) beside it.
inline std::string ExportTestGguf(const std::string& dir, const std::string& type, GgufExportLayout layout) {
  auto options = ParseGgufExportType(type);
  EXPECT_TRUE(options.ok()) << options.status().message();
  options->layout = layout;
  const std::string path = dir + "-" + type + (layout == GgufExportLayout::kKvB ? "-joined" : "-split") + ".gguf";
  const Status st = ExportGguf(dir, path, *options);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

}  // namespace latte::testing_models

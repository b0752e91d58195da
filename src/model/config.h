// config.json of a DeepSeek-V2 / V3 / R1 checkpoint, parsed and validated once.
// Field names are the config.json keys; symbols from docs/mla.md in comments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace latte {

// scoring_func: how router logits become expert scores.
enum class ScoringFunc {
  kSoftmax,  // "softmax" (V2)
  kSigmoid,  // "sigmoid" (V3)
};

// topk_method: how the num_experts_per_tok experts are chosen from the scores.
enum class TopkMethod {
  kGreedy,              // "greedy": top-k over all experts
  kGroupLimitedGreedy,  // "group_limited_greedy": top-k inside the topk_group best groups (V2)
  kNoauxTc,             // "noaux_tc": as above on scores + e_score_correction_bias (V3)
};

// The config.json spelling of each value (what ToJsonText writes).
const char* ScoringFuncName(ScoringFunc f);
const char* TopkMethodName(TopkMethod m);

// rope_scaling {"type": "yarn", ...} (DeepSeek-V2/V3), the only scaling type supported;
// rope_scaling absent or null means plain rope.
struct YarnScaling {
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

// quantization_config of the fp8 release (V3/R1): e4m3 weights in 128x128 blocks.
struct Fp8Quantization {
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

struct ModelConfig {
  std::string architecture;  // "DeepseekV2ForCausalLM" or "DeepseekV3ForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;            // d
  int64_t intermediate_size = 0;      // dense MLP width
  int64_t moe_intermediate_size = 0;  // one expert's width
  int64_t num_hidden_layers = 0;      // L
  // V3's multi-token-prediction layers, stored after the L layers as model.layers.L.*
  // (enorm, hnorm, eh_proj, a MoE decoder layer, shared_head); 0: none.
  int64_t num_nextn_predict_layers = 0;
  int64_t num_attention_heads = 0;     // H
  std::optional<int64_t> q_lora_rank;  // d_cq; nullopt: plain q_proj (V2-Lite)
  int64_t kv_lora_rank = 0;            // d_c
  int64_t qk_nope_head_dim = 0;        // d_n
  int64_t qk_rope_head_dim = 0;        // d_r
  int64_t v_head_dim = 0;              // d_v
  int64_t n_routed_experts = 0;        // 0: every layer dense
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  TopkMethod topk_method = TopkMethod::kGreedy;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 4096;
  std::optional<YarnScaling> rope_scaling;  // nullopt: plain rope
  std::optional<Fp8Quantization> quantization;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;

  // Parses and validates; errors name the key.
  static Result<ModelConfig> FromJsonText(const std::string& text);
  static Result<ModelConfig> FromFile(const std::string& path);
  // The config.json text for this config (what make-model writes).
  std::string ToJsonText() const;

  int64_t QkHeadDim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // c_kv and k_r: the values the latent cache holds per token per layer (576 on V3).
  int64_t LatentDim() const { return kv_lora_rank + qk_rope_head_dim; }
  // The router adds gate.e_score_correction_bias to the scores it ranks (noaux_tc).
  bool HasScoreCorrectionBias() const { return topk_method == TopkMethod::kNoauxTc; }
  bool IsMoeLayer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // 1/sqrt(d_n + d_r), times YarnMscale(factor, mscale_all_dim)^2 under YaRN (docs/mla.md).
  double SoftmaxScale() const;
};

// The one check of a length against the model's context: OK when `tokens` fit in
// max_position_embeddings, else an error with both numbers: "<what> is N tokens, more
// than the model's context length of M (max_position_embeddings)".
Status CheckContextLength(const ModelConfig& config, int64_t tokens, const std::string& what);

}  // namespace latte

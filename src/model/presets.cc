#include "model/presets.h"

namespace latte {
namespace {

ModelConfig DeepSeekV3() {
  ModelConfig c;
  c.architecture = "DeepseekV3ForCausalLM";
  c.vocab_size = 129280;
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.moe_intermediate_size = 2048;
  c.num_hidden_layers = 61;
  c.num_attention_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 256;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 8;
  c.n_group = 8;
  c.topk_group = 4;
  c.first_k_dense_replace = 3;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopkMethod::kNoauxTc;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000;
  c.max_position_embeddings = 163840;
  c.rope_scaling = YarnScaling{40, 4096, 32, 1, 1.0, 1.0};
  c.quantization = Fp8Quantization{128, 128};
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  return c;
}

ModelConfig DeepSeekV2() {
  ModelConfig c;
  c.architecture = "DeepseekV2ForCausalLM";
  c.vocab_size = 102400;
  c.hidden_size = 5120;
  c.intermediate_size = 12288;
  c.moe_intermediate_size = 1536;
  c.num_hidden_layers = 60;
  c.num_attention_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 160;
  c.n_shared_experts = 2;
  c.num_experts_per_tok = 6;
  c.n_group = 8;
  c.topk_group = 3;
  c.first_k_dense_replace = 1;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 16.0;
  c.scoring_func = ScoringFunc::kSoftmax;
  c.topk_method = TopkMethod::kGroupLimitedGreedy;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000;
  c.max_position_embeddings = 163840;
  c.rope_scaling = YarnScaling{40, 4096, 32, 1, 0.707, 0.707};
  c.bos_token_id = 100000;
  c.eos_token_id = 100001;
  return c;
}

ModelConfig DeepSeekV2Lite() {
  ModelConfig c = DeepSeekV2();
  c.hidden_size = 2048;
  c.intermediate_size = 10944;
  c.moe_intermediate_size = 1408;
  c.num_hidden_layers = 27;
  c.num_attention_heads = 16;
  c.q_lora_rank = std::nullopt;
  c.n_routed_experts = 64;
  c.n_shared_experts = 2;
  c.num_experts_per_tok = 6;
  c.n_group = 1;
  c.topk_group = 1;
  c.routed_scaling_factor = 1.0;
  c.topk_method = TopkMethod::kGreedy;
  return c;
}

// The released attention shapes and routing with the MoE and dense MLP shrunk (16
// experts of width 256, dense width 2048) and 4 layers: a few GB.
ModelConfig ShrunkMoe(ModelConfig c) {
  c.num_hidden_layers = 4;
  c.intermediate_size = 2048;
  c.moe_intermediate_size = 256;
  c.n_routed_experts = 16;
  c.num_experts_per_tok = 4;
  c.n_group = 4;
  c.topk_group = 2;
  c.first_k_dense_replace = 1;
  c.quantization = std::nullopt;  // set by --dtype fp8
  return c;
}

std::string UnknownPreset(const std::string& name) { return "unknown preset \"" + name + "\" (" + PresetList() + ")"; }

ModelConfig Tiny() {
  ModelConfig c = DeepSeekV3();
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.moe_intermediate_size = 32;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.q_lora_rank = 48;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.n_routed_experts = 8;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 3;
  c.n_group = 4;
  c.topk_group = 2;
  c.first_k_dense_replace = 1;
  c.max_position_embeddings = 4096;
  c.rope_scaling = YarnScaling{4, 256, 32, 1, 1.0, 1.0};
  c.quantization = std::nullopt;
  return c;
}

}  // namespace

const std::vector<std::string>& PresetNames() {
  static const std::vector<std::string> names = {"tiny", "v2", "v2-lite", "v3", "r1"};
  return names;
}

std::string PresetList() {
  std::string list;
  for (const std::string& n : PresetNames()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

Result<ModelConfig> ReleasedConfig(const std::string& name) {
  if (name == "tiny") return Tiny();
  if (name == "v3" || name == "r1") return DeepSeekV3();
  if (name == "v2") return DeepSeekV2();
  if (name == "v2-lite") return DeepSeekV2Lite();
  return Status::InvalidArgument(UnknownPreset(name), "preset");
}

Result<ModelConfig> MakeModelPreset(const std::string& name) {
  if (name == "tiny") return Tiny();
  if (name == "v2-lite") return DeepSeekV2Lite();
  if (name == "v3" || name == "r1") return ShrunkMoe(DeepSeekV3());
  if (name == "v2") return ShrunkMoe(DeepSeekV2());
  return Status::InvalidArgument(UnknownPreset(name), "preset");
}

}  // namespace latte

#include "model/tensor_specs.h"

#include <cctype>

namespace latte {

std::string LayerPrefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

int64_t LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return -1;
  size_t i = kPrefix.size();
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  int64_t layer = 0;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i) {
    layer = layer * 10 + (name[i] - '0');
    if (layer > (int64_t{1} << 40)) return -1;
  }
  return layer;
}

std::vector<int64_t> ScaleInvShape(const std::vector<int64_t>& shape, const Fp8Quantization& q) {
  return {(shape[0] + q.block_rows - 1) / q.block_rows, (shape[1] + q.block_cols - 1) / q.block_cols};
}

namespace {

void AddMlp(std::vector<TensorSpec>& out, const std::string& prefix, int64_t width, int64_t d) {
  out.push_back({prefix + "gate_proj.weight", {width, d}, TensorKind::kLinear});
  out.push_back({prefix + "up_proj.weight", {width, d}, TensorKind::kLinear});
  out.push_back({prefix + "down_proj.weight", {d, width}, TensorKind::kLinear});
}

// One decoder layer's tensors (attention, then a dense MLP or a MoE by `layer`).
void AddLayer(std::vector<TensorSpec>& out, const ModelConfig& c, int64_t layer) {
  const int64_t d = c.hidden_size;
  const int64_t heads = c.num_attention_heads;
  const std::string p = LayerPrefix(layer);
  out.push_back({p + "input_layernorm.weight", {d}, TensorKind::kVector});
  out.push_back({p + "post_attention_layernorm.weight", {d}, TensorKind::kVector});
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank) {
    out.push_back({a + "q_a_proj.weight", {*c.q_lora_rank, d}, TensorKind::kLinear});
    out.push_back({a + "q_a_layernorm.weight", {*c.q_lora_rank}, TensorKind::kVector});
    out.push_back({a + "q_b_proj.weight", {heads * c.QkHeadDim(), *c.q_lora_rank}, TensorKind::kLinear});
  } else {
    out.push_back({a + "q_proj.weight", {heads * c.QkHeadDim(), d}, TensorKind::kLinear});
  }
  out.push_back({a + "kv_a_proj_with_mqa.weight", {c.LatentDim(), d}, TensorKind::kLinear});
  out.push_back({a + "kv_a_layernorm.weight", {c.kv_lora_rank}, TensorKind::kVector});
  out.push_back(
      {a + "kv_b_proj.weight", {heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, TensorKind::kLinear});
  out.push_back({a + "o_proj.weight", {d, heads * c.v_head_dim}, TensorKind::kLinear});
  const std::string m = p + "mlp.";
  if (!c.IsMoeLayer(layer)) {
    AddMlp(out, m, c.intermediate_size, d);
    return;
  }
  out.push_back({m + "gate.weight", {c.n_routed_experts, d}, TensorKind::kRouter});
  if (c.HasScoreCorrectionBias()) {
    out.push_back({m + "gate.e_score_correction_bias", {c.n_routed_experts}, TensorKind::kVector});
  }
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    AddMlp(out, m + "experts." + std::to_string(e) + ".", c.moe_intermediate_size, d);
  }
  if (c.n_shared_experts > 0) {
    AddMlp(out, m + "shared_experts.", c.n_shared_experts * c.moe_intermediate_size, d);
  }
}

}  // namespace

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, TensorKind::kEmbedding});
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) AddLayer(out, c, layer);
  out.push_back({"model.norm.weight", {d}, TensorKind::kVector});
  if (!c.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {c.vocab_size, d}, TensorKind::kEmbedding});
  }
  return out;
}

std::vector<TensorSpec> ExpectedMtpTensors(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  std::vector<TensorSpec> out;
  for (int64_t k = 0; k < c.num_nextn_predict_layers; ++k) {
    const int64_t layer = c.num_hidden_layers + k;
    const std::string p = LayerPrefix(layer);
    out.push_back({p + "embed_tokens.weight", {c.vocab_size, d}, TensorKind::kEmbedding});
    out.push_back({p + "enorm.weight", {d}, TensorKind::kVector});
    out.push_back({p + "hnorm.weight", {d}, TensorKind::kVector});
    out.push_back({p + "eh_proj.weight", {d, 2 * d}, TensorKind::kLinear});
    AddLayer(out, c, layer);
    out.push_back({p + "shared_head.norm.weight", {d}, TensorKind::kVector});
    out.push_back({p + "shared_head.head.weight", {c.vocab_size, d}, TensorKind::kEmbedding});
  }
  return out;
}

}  // namespace latte

#include "model/cost_model.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "model/tensor_specs.h"

namespace latte {
namespace {

int64_t NumValues(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

using ComponentField = int64_t WeightComponents::*;

// The field of WeightComponents a checkpoint tensor counts toward, by its Hugging Face
// name (the names come from ExpectedTensors, so the two cannot disagree).
ComponentField ComponentOf(const TensorSpec& spec) {
  const std::string_view name = spec.name;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    return &WeightComponents::embeddings;
  }
  if (Contains(name, ".self_attn.")) return &WeightComponents::attention;
  if (Contains(name, ".mlp.experts.")) return &WeightComponents::routed_experts;
  if (Contains(name, ".mlp.shared_experts.")) return &WeightComponents::shared_experts;
  if (Contains(name, ".mlp.gate.")) return &WeightComponents::router;
  if (Contains(name, ".mlp.")) return &WeightComponents::dense_mlp;
  return &WeightComponents::norms;  // input/post_attention layernorms, model.norm
}

// Stored bytes of one checkpoint tensor (see the header for the dtype rules).
int64_t StoredBytes(const TensorSpec& spec, const ModelConfig& config) {
  const int64_t values = NumValues(spec.shape);
  if (spec.kind == TensorKind::kLinear && config.quantization) {
    return values + NumValues(ScaleInvShape(spec.shape, *config.quantization)) * 4;
  }
  // The V3 release keeps the router's correction bias in f32; other vectors are bf16.
  if (spec.kind == TensorKind::kVector && spec.name.ends_with("e_score_correction_bias")) {
    return values * 4;
  }
  return values * kBf16Bytes;
}

// Layer index of "model.layers.<n>.*", or -1 for tensors outside the layers.
int64_t LayerOf(std::string_view name) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!StartsWith(name, kPrefix)) return -1;
  int64_t layer = 0;
  for (size_t i = kPrefix.size(); i < name.size() && name[i] != '.'; ++i) {
    layer = layer * 10 + (name[i] - '0');
  }
  return layer;
}

// Adds what latte derives at load in `mode` to one layer's values (bytes = values·2, bf16).
void AddDerived(const ModelConfig& config, MlaMode mode, WeightComponents* values) {
  if (config.quantization) values->kv_b_bf16 += KvBParams(config);
  if (mode == MlaMode::kNaive) return;
  values->w_uk_t += WUkTParams(config);
  if (mode == MlaMode::kMaterialized) {
    values->materialized += WQUkParams(config) + WUvOParams(config);
  }
}

WeightComponents DerivedBytes(const WeightComponents& values) {
  WeightComponents bytes;
  bytes.kv_b_bf16 = values.kv_b_bf16 * kBf16Bytes;
  bytes.w_uk_t = values.w_uk_t * kBf16Bytes;
  bytes.materialized = values.materialized * kBf16Bytes;
  return bytes;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

WeightComponents& WeightComponents::operator+=(const WeightComponents& o) {
  attention += o.attention;
  dense_mlp += o.dense_mlp;
  routed_experts += o.routed_experts;
  shared_experts += o.shared_experts;
  router += o.router;
  norms += o.norms;
  embeddings += o.embeddings;
  kv_b_bf16 += o.kv_b_bf16;
  w_uk_t += o.w_uk_t;
  materialized += o.materialized;
  return *this;
}

WeightCosts ComputeWeightCosts(const ModelConfig& config, MlaMode mode) {
  const auto layers = static_cast<size_t>(config.num_hidden_layers);
  WeightCosts costs;
  costs.mode = mode;
  costs.layer_params.resize(layers);
  costs.layer_bytes.resize(layers);
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const int64_t layer = LayerOf(spec.name);
    WeightComponents& params = layer < 0 ? costs.other_params : costs.layer_params[layer];
    WeightComponents& bytes = layer < 0 ? costs.other_bytes : costs.layer_bytes[layer];
    const ComponentField field = ComponentOf(spec);
    params.*field += NumValues(spec.shape);
    bytes.*field += StoredBytes(spec, config);
  }
  for (size_t layer = 0; layer < layers; ++layer) {
    WeightComponents derived;
    AddDerived(config, mode, &derived);
    costs.layer_params[layer] += derived;
    costs.layer_bytes[layer] += DerivedBytes(derived);
    costs.model_params += costs.layer_params[layer];
    costs.model_bytes += costs.layer_bytes[layer];
  }
  costs.model_params += costs.other_params;
  costs.model_bytes += costs.other_bytes;
  return costs;
}

int64_t QInputDim(const ModelConfig& c) { return c.q_lora_rank.value_or(c.hidden_size); }

int64_t AttentionProjectionParams(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  const int64_t q_a = c.q_lora_rank ? *c.q_lora_rank * d : 0;
  const int64_t q_b = c.num_attention_heads * c.QkHeadDim() * QInputDim(c);  // or q_proj
  const int64_t q = q_a + q_b;
  const int64_t kv_a = c.LatentDim() * d;
  const int64_t o = d * c.num_attention_heads * c.v_head_dim;
  return q + kv_a + KvBParams(c) + o;
}

int64_t KvBParams(const ModelConfig& c) {
  return c.num_attention_heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank;
}
int64_t WUkTParams(const ModelConfig& c) {
  return c.num_attention_heads * c.qk_nope_head_dim * c.kv_lora_rank;
}
int64_t WQUkParams(const ModelConfig& c) {
  return c.num_attention_heads * c.kv_lora_rank * QInputDim(c);
}
int64_t WUvOParams(const ModelConfig& c) {
  return c.num_attention_heads * c.kv_lora_rank * c.hidden_size;
}

int64_t PerGpuBytes(const WeightComponents& bytes, const Parallelism& parallel) {
  const int64_t gpus = std::max<int64_t>(parallel.gpus, 1);
  if (!parallel.dp_attention) return CeilDiv(bytes.Total(), gpus);
  return bytes.AttentionSide() + CeilDiv(bytes.Total() - bytes.AttentionSide(), gpus);
}

MaterializeExtra ComputeMaterializeExtra(const ModelConfig& c, int64_t gpus) {
  MaterializeExtra extra;
  extra.per_layer = (WQUkParams(c) + WUvOParams(c)) * kBf16Bytes;
  extra.whole_model = c.num_hidden_layers * extra.per_layer;
  extra.per_gpu_tp = CeilDiv(extra.whole_model, std::max<int64_t>(gpus, 1));
  extra.per_gpu_dp_attention = extra.whole_model;
  return extra;
}

DecodeProjectionFlops ComputeDecodeProjectionFlops(const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads;
  const int64_t q_b = heads * c.QkHeadDim() * QInputDim(c);        // q_b_proj (or q_proj)
  const int64_t q_b_rope = heads * c.qk_rope_head_dim * QInputDim(c);  // its q_r rows
  const int64_t w_uk_bmm = heads * c.qk_nope_head_dim * c.kv_lora_rank;
  const int64_t w_uv_bmm = heads * c.v_head_dim * c.kv_lora_rank;
  const int64_t o_proj = c.hidden_size * heads * c.v_head_dim;
  DecodeProjectionFlops flops;
  flops.absorbed = 2 * (q_b + w_uk_bmm + w_uv_bmm + o_proj);
  flops.materialized = 2 * (WQUkParams(c) + q_b_rope + WUvOParams(c));
  flops.naive_fixed = 2 * (q_b + o_proj);
  flops.naive_per_cached_token = 2 * KvBParams(c);
  return flops;
}

AttentionCoreFlops ComputeAttentionCoreFlops(const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads;
  AttentionCoreFlops flops;
  flops.absorbed = 2 * heads * c.LatentDim() + 2 * heads * c.kv_lora_rank;
  flops.naive = 2 * heads * c.QkHeadDim() + 2 * heads * c.v_head_dim;
  return flops;
}

KvCacheBytes ComputeKvCacheBytes(const ModelConfig& c) {
  KvCacheBytes kv;
  kv.latent_per_layer = c.LatentDim() * kBf16Bytes;
  kv.latent_model = c.num_hidden_layers * kv.latent_per_layer;
  kv.mha_per_layer = c.num_attention_heads * (c.QkHeadDim() + c.v_head_dim) * kBf16Bytes;
  kv.mha_model = c.num_hidden_layers * kv.mha_per_layer;
  return kv;
}

KvFit FitKvCache(int64_t memory_bytes, int64_t weight_bytes, int64_t kv_bytes_per_token) {
  KvFit fit;
  fit.weight_bytes = weight_bytes;
  fit.free_bytes = memory_bytes - weight_bytes;
  fit.tokens = fit.free_bytes > 0 && kv_bytes_per_token > 0 ? fit.free_bytes / kv_bytes_per_token : 0;
  return fit;
}

}  // namespace latte

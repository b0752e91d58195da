#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/rope.h"

namespace latte {
namespace {

using nlohmann::json;

// One accepted config.json spelling of an enum value.
template <typename Enum> struct EnumName {
  Enum value;
  const char* name;
};

constexpr EnumName<ScoringFunc> kScoringFuncNames[] = {
    {ScoringFunc::kSoftmax, "softmax"},
    {ScoringFunc::kSigmoid, "sigmoid"},
};

constexpr EnumName<TopkMethod> kTopkMethodNames[] = {
    {TopkMethod::kGreedy, "greedy"},
    {TopkMethod::kGroupLimitedGreedy, "group_limited_greedy"},
    {TopkMethod::kNoauxTc, "noaux_tc"},
};

template <typename Enum, size_t N> const char* NameOf(const EnumName<Enum> (&names)[N], Enum value) {
  for (const EnumName<Enum>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// The value spelled `text`, or an error naming the key, the value and the accepted ones.
template <typename Enum, size_t N>
Result<Enum> ParseEnum(const EnumName<Enum> (&names)[N], const std::string& key, const std::string& text) {
  std::string accepted;
  for (const EnumName<Enum>& n : names) {
    if (text == n.name) return n.value;
    accepted += (accepted.empty() ? "" : ", ") + std::string(n.name);
  }
  return Status::Unimplemented("key \"" + key + "\" has unsupported value \"" + text + "\" (accepted: " + accepted +
                               ")");
}

// Reads a required integer key; the message names the key and what was found.
Status ReadInt(const json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::InvalidArgument(std::string("missing key \"") + key + "\"");
  if (!it->is_number_integer()) {
    return Status::InvalidArgument(std::string("key \"") + key + "\" must be an integer, got " + it->dump());
  }
  *out = it->get<int64_t>();
  return Status::Ok();
}

Status ReadOptionalInt(const json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  return ReadInt(j, key, out);
}

Status ReadOptionalNumber(const json& j, const char* key, double* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) {
    return Status::InvalidArgument(std::string("key \"") + key + "\" must be a number, got " + it->dump());
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status ReadOptionalString(const json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) {
    return Status::InvalidArgument(std::string("key \"") + key + "\" must be a string, got " + it->dump());
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

// Reads an optional string key into an enum; `out` keeps its default when the key is
// absent or null.
template <typename Enum, size_t N>
Status ReadOptionalEnum(const json& j, const char* key, const EnumName<Enum> (&names)[N], Enum* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  std::string text;
  LATTE_RETURN_IF_ERROR(ReadOptionalString(j, key, &text));
  LATTE_ASSIGN_OR_RETURN(*out, ParseEnum(names, key, text));
  return Status::Ok();
}

Status ReadOptionalBool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) {
    return Status::InvalidArgument(std::string("key \"") + key + "\" must be a boolean, got " + it->dump());
  }
  *out = it->get<bool>();
  return Status::Ok();
}

// eos_token_id may be one id or a list (generation configs); the first one is used.
Status ReadTokenId(const json& j, const char* key, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
    *out = (*it)[0].get<int64_t>();
    return Status::Ok();
  }
  return ReadInt(j, key, out);
}

Status ParseRopeScaling(const json& j, ModelConfig* c) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return Status::InvalidArgument("key \"rope_scaling\" must be an object or null");
  // DeepSeek's configs spell the key "type"; newer Hugging Face configs "rope_type".
  const char* type_key = "type";
  std::string type;
  LATTE_RETURN_IF_ERROR(ReadOptionalString(*it, type_key, &type));
  if (type.empty()) {
    type_key = "rope_type";
    LATTE_RETURN_IF_ERROR(ReadOptionalString(*it, type_key, &type));
  }
  if (type.empty()) {
    return Status::InvalidArgument("key \"rope_scaling\" has no \"type\" (accepted: yarn)");
  }
  if (type != "yarn") {
    return Status::Unimplemented(std::string("key \"rope_scaling.") + type_key + "\" has unsupported value \"" + type +
                                 "\" (accepted: yarn; rope_scaling null or absent for plain rope)");
  }
  YarnScaling y;
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(*it, "factor", &y.factor));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(*it, "original_max_position_embeddings", &y.original_max_position_embeddings));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(*it, "beta_fast", &y.beta_fast));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(*it, "beta_slow", &y.beta_slow));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(*it, "mscale", &y.mscale));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(*it, "mscale_all_dim", &y.mscale_all_dim));
  for (const auto& [v, key] : {std::pair{y.factor, "factor"},
                               {y.beta_fast, "beta_fast"},
                               {y.beta_slow, "beta_slow"},
                               {y.mscale, "mscale"},
                               {y.mscale_all_dim, "mscale_all_dim"}}) {
    if (!std::isfinite(v)) {
      return Status::InvalidArgument(std::string("key \"rope_scaling.") + key + "\" must be a finite number");
    }
  }
  if (!(y.factor >= 1.0)) return Status::InvalidArgument("rope_scaling.factor must be >= 1");
  // The rope magnitude is YarnMscale(mscale) / YarnMscale(mscale_all_dim) and the softmax
  // scale takes YarnMscale(mscale_all_dim)^2: each must be a positive, finite number.
  for (const auto& [m, key] : {std::pair{y.mscale, "mscale"}, {y.mscale_all_dim, "mscale_all_dim"}}) {
    const double v = YarnMscale(y.factor, m);
    if (!(v > 0) || !std::isfinite(v) || !std::isfinite(v * v)) {
      return Status::InvalidArgument(std::string("key \"rope_scaling.") + key + "\" = " + std::to_string(m) +
                                     " gives a YaRN mscale of " + std::to_string(v) + " (0.1 * " + key +
                                     " * ln(factor) + 1); it must be positive and finite");
    }
  }
  if (y.original_max_position_embeddings <= 0) {
    return Status::InvalidArgument("rope_scaling.original_max_position_embeddings must be positive");
  }
  c->rope_scaling = y;
  return Status::Ok();
}

Status ParseQuantization(const json& j, ModelConfig* c) {
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return Status::Ok();
  std::string method, fmt;
  LATTE_RETURN_IF_ERROR(ReadOptionalString(*it, "quant_method", &method));
  LATTE_RETURN_IF_ERROR(ReadOptionalString(*it, "fmt", &fmt));
  if (method != "fp8") {
    return Status::Unimplemented("quantization_config.quant_method \"" + method + "\" is not supported (only fp8)");
  }
  if (!fmt.empty() && fmt != "e4m3") {
    return Status::Unimplemented("quantization_config.fmt \"" + fmt + "\" is not supported (only e4m3)");
  }
  Fp8Quantization q;
  auto block = it->find("weight_block_size");
  if (block != it->end()) {
    if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
        !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
      return Status::InvalidArgument("quantization_config.weight_block_size must be two positive integers");
    }
    q.block_rows = (*block)[0].get<int64_t>();
    q.block_cols = (*block)[1].get<int64_t>();
  }
  c->quantization = q;
  return Status::Ok();
}

// The largest value a size key may take: 2^20, 57x DeepSeek-V3's largest (its
// intermediate_size 18432; vocab_size 129280). What the weights' shapes multiply is
// bounded as a whole below, so that no product of sizes overflows int64 anywhere.
constexpr int64_t kMaxSize = int64_t{1} << 20;
// The tensors the config lists (ExpectedTensors, before fp8 scales), counted as
// layers x (3 per expert + 20) + 3: at most 2^20, 21x DeepSeek-V3's 48k.
constexpr double kMaxTensors = double(int64_t{1} << 20);
// The weight values, bounded as if every matrix of a layer had the largest of the
// config's dimensions on both sides: at most 2^52, 64x that bound on DeepSeek-V3
// (2^46). Every product the cost model forms (values, bytes at <= 4 per value,
// FLOPs at 2 per value) is a part of it and stays far inside int64.
constexpr double kMaxValuesBound = double(int64_t{1} << 52);

Status CheckSize(int64_t v, const std::string& key) {
  if (v <= kMaxSize) return Status::Ok();
  return Status::InvalidArgument("key \"" + key + "\" is " + std::to_string(v) +
                                 ", more than latte accepts (2^20 = " + std::to_string(kMaxSize) + ")");
}

// Bounds on what the sizes multiply to (each size already <= kMaxSize and >= 0).
Status CheckProducts(const ModelConfig& c) {
  const double L = double(c.num_hidden_layers), H = double(c.num_attention_heads);
  const double experts = double(c.n_routed_experts), shared = double(c.n_shared_experts);
  const double tensors = L * (3 * experts + 20) + 3;
  if (tensors > kMaxTensors) {
    return Status::InvalidArgument("num_hidden_layers " + std::to_string(c.num_hidden_layers) + " x n_routed_experts " +
                                   std::to_string(c.n_routed_experts) + " make ~" + std::to_string(int64_t(tensors)) +
                                   " tensors, more than latte accepts (2^20)");
  }
  double d = 0;  // the largest dimension inside a layer
  for (int64_t v : {c.hidden_size, c.intermediate_size, c.moe_intermediate_size, c.q_lora_rank.value_or(0),
                    c.kv_lora_rank + c.qk_rope_head_dim, c.qk_nope_head_dim + c.qk_rope_head_dim,
                    c.qk_nope_head_dim + c.v_head_dim}) {
    d = std::max(d, double(v));
  }
  // Attention: q_a, q_b, kv_a, kv_b, o_proj, W_UK^T and the materialized W_Q_UK and
  // W_UV_O, each <= 2·H·d²; the MLP: dense, or experts + shared + router, <= 4·(E+S+1)·d².
  const double per_layer = 16 * H * d * d + 4 * (experts + shared + 1) * d * d + 8 * d;
  const double values = L * per_layer + 2 * double(c.vocab_size) * double(c.hidden_size);
  if (values > kMaxValuesBound) {
    char approx[32];
    std::snprintf(approx, sizeof approx, "%.3g", values);
    return Status::InvalidArgument(
        std::string("the sizes describe up to ~") + approx + " weight values (num_hidden_layers " +
        std::to_string(c.num_hidden_layers) + ", num_attention_heads " + std::to_string(c.num_attention_heads) +
        ", n_routed_experts " + std::to_string(c.n_routed_experts) + ", largest layer dimension " +
        std::to_string(int64_t(d)) + "), more than latte accepts (2^52)");
  }
  return Status::Ok();
}

// Keys whose other values change the model in ways latte does not implement: refused
// by name rather than ignored.
Status RefuseUnimplemented(const json& j) {
  std::string act = "silu";
  LATTE_RETURN_IF_ERROR(ReadOptionalString(j, "hidden_act", &act));
  if (act != "silu") {
    return Status::Unimplemented("key \"hidden_act\" has unsupported value \"" + act + "\" (latte implements silu)");
  }
  bool attention_bias = false;
  LATTE_RETURN_IF_ERROR(ReadOptionalBool(j, "attention_bias", &attention_bias));
  if (attention_bias) {
    return Status::InvalidArgument(
        "key \"attention_bias\" is true: latte implements attention projections without bias");
  }
  return Status::Ok();
}

Status Validate(const ModelConfig& c) {
  auto positive = [](int64_t v, const char* key) {
    return v > 0
               ? Status::Ok()
               : Status::InvalidArgument(std::string("key \"") + key + "\" must be positive, got " + std::to_string(v));
  };
  for (const auto& [v, key] : {std::pair{c.vocab_size, "vocab_size"},
                               {c.hidden_size, "hidden_size"},
                               {c.intermediate_size, "intermediate_size"},
                               {c.moe_intermediate_size, "moe_intermediate_size"},
                               {c.num_hidden_layers, "num_hidden_layers"},
                               {c.num_attention_heads, "num_attention_heads"},
                               {c.q_lora_rank.value_or(0), "q_lora_rank"},
                               {c.kv_lora_rank, "kv_lora_rank"},
                               {c.qk_nope_head_dim, "qk_nope_head_dim"},
                               {c.qk_rope_head_dim, "qk_rope_head_dim"},
                               {c.v_head_dim, "v_head_dim"},
                               {c.n_routed_experts, "n_routed_experts"},
                               {c.n_shared_experts, "n_shared_experts"}}) {
    LATTE_RETURN_IF_ERROR(CheckSize(v, key));
  }
  if (c.quantization) {
    LATTE_RETURN_IF_ERROR(CheckSize(c.quantization->block_rows, "quantization_config.weight_block_size[0]"));
    LATTE_RETURN_IF_ERROR(CheckSize(c.quantization->block_cols, "quantization_config.weight_block_size[1]"));
  }
  LATTE_RETURN_IF_ERROR(positive(c.vocab_size, "vocab_size"));
  LATTE_RETURN_IF_ERROR(positive(c.hidden_size, "hidden_size"));
  LATTE_RETURN_IF_ERROR(positive(c.intermediate_size, "intermediate_size"));
  LATTE_RETURN_IF_ERROR(positive(c.num_hidden_layers, "num_hidden_layers"));
  LATTE_RETURN_IF_ERROR(positive(c.num_attention_heads, "num_attention_heads"));
  LATTE_RETURN_IF_ERROR(positive(c.kv_lora_rank, "kv_lora_rank"));
  LATTE_RETURN_IF_ERROR(positive(c.qk_nope_head_dim, "qk_nope_head_dim"));
  LATTE_RETURN_IF_ERROR(positive(c.qk_rope_head_dim, "qk_rope_head_dim"));
  LATTE_RETURN_IF_ERROR(positive(c.v_head_dim, "v_head_dim"));
  if (c.q_lora_rank) LATTE_RETURN_IF_ERROR(positive(*c.q_lora_rank, "q_lora_rank"));
  if (c.qk_rope_head_dim % 2 != 0) return Status::InvalidArgument("qk_rope_head_dim must be even");
  if (c.n_routed_experts < 0) return Status::InvalidArgument("n_routed_experts must be >= 0");
  if (c.n_routed_experts > 0) {
    LATTE_RETURN_IF_ERROR(positive(c.moe_intermediate_size, "moe_intermediate_size"));
    LATTE_RETURN_IF_ERROR(positive(c.num_experts_per_tok, "num_experts_per_tok"));
    LATTE_RETURN_IF_ERROR(positive(c.n_group, "n_group"));
    LATTE_RETURN_IF_ERROR(positive(c.moe_layer_freq, "moe_layer_freq"));
    if (c.n_routed_experts % c.n_group != 0) {
      return Status::InvalidArgument("n_routed_experts must be a multiple of n_group");
    }
    if (c.topk_group < 1 || c.topk_group > c.n_group) {
      return Status::InvalidArgument("topk_group must be in [1, n_group]");
    }
    if (c.num_experts_per_tok > c.n_routed_experts) {
      return Status::InvalidArgument("num_experts_per_tok must be <= n_routed_experts");
    }
    if (c.topk_method != TopkMethod::kGreedy &&
        c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group)) {
      return Status::InvalidArgument("num_experts_per_tok exceeds the experts in topk_group groups");
    }
  }
  if (c.n_shared_experts < 0) return Status::InvalidArgument("n_shared_experts must be >= 0");
  if (c.num_nextn_predict_layers < 0 || c.num_nextn_predict_layers > 64) {
    return Status::InvalidArgument("num_nextn_predict_layers must be in [0, 64]");
  }
  if (!(c.rms_norm_eps > 0)) return Status::InvalidArgument("rms_norm_eps must be positive");
  if (!(c.rope_theta > 0)) return Status::InvalidArgument("rope_theta must be positive");
  if (c.bos_token_id < 0 || c.bos_token_id >= c.vocab_size || c.eos_token_id < 0 || c.eos_token_id >= c.vocab_size) {
    return Status::InvalidArgument("bos_token_id/eos_token_id must be inside vocab_size");
  }
  return CheckProducts(c);
}

}  // namespace

const char* ScoringFuncName(ScoringFunc f) { return NameOf(kScoringFuncNames, f); }
const char* TopkMethodName(TopkMethod m) { return NameOf(kTopkMethodNames, m); }

Result<ModelConfig> ModelConfig::FromJsonText(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::DataLoss("not valid JSON");
  if (!j.is_object()) return Status::InvalidArgument("top level must be a JSON object");

  ModelConfig c;
  auto arch = j.find("architectures");
  if (arch != j.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string()) {
    c.architecture = (*arch)[0].get<std::string>();
  } else {
    return Status::InvalidArgument("missing key \"architectures\"");
  }
  if (c.architecture != "DeepseekV2ForCausalLM" && c.architecture != "DeepseekV3ForCausalLM") {
    return Status::Unimplemented("architecture \"" + c.architecture +
                                 "\" is not supported (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM)");
  }
  LATTE_RETURN_IF_ERROR(ReadInt(j, "vocab_size", &c.vocab_size));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "hidden_size", &c.hidden_size));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "intermediate_size", &c.intermediate_size));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "num_hidden_layers", &c.num_hidden_layers));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "num_attention_heads", &c.num_attention_heads));
  // q_lora_rank must be present; null selects the plain q_proj of V2-Lite.
  if (!j.contains("q_lora_rank")) return Status::InvalidArgument("missing key \"q_lora_rank\"");
  if (!j["q_lora_rank"].is_null()) {
    int64_t rank = 0;
    LATTE_RETURN_IF_ERROR(ReadInt(j, "q_lora_rank", &rank));
    c.q_lora_rank = rank;
  }
  LATTE_RETURN_IF_ERROR(ReadInt(j, "kv_lora_rank", &c.kv_lora_rank));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "qk_nope_head_dim", &c.qk_nope_head_dim));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "qk_rope_head_dim", &c.qk_rope_head_dim));
  LATTE_RETURN_IF_ERROR(ReadInt(j, "v_head_dim", &c.v_head_dim));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "n_routed_experts", &c.n_routed_experts));
  if (c.n_routed_experts > 0) {
    LATTE_RETURN_IF_ERROR(ReadInt(j, "moe_intermediate_size", &c.moe_intermediate_size));
    LATTE_RETURN_IF_ERROR(ReadInt(j, "num_experts_per_tok", &c.num_experts_per_tok));
  }
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "n_shared_experts", &c.n_shared_experts));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "n_group", &c.n_group));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "topk_group", &c.topk_group));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "first_k_dense_replace", &c.first_k_dense_replace));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "moe_layer_freq", &c.moe_layer_freq));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "num_nextn_predict_layers", &c.num_nextn_predict_layers));
  LATTE_RETURN_IF_ERROR(ReadOptionalBool(j, "norm_topk_prob", &c.norm_topk_prob));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(j, "routed_scaling_factor", &c.routed_scaling_factor));
  if (c.architecture == "DeepseekV3ForCausalLM") {  // Hugging Face's V3 defaults (V2's: softmax, greedy)
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopkMethod::kNoauxTc;
  }
  LATTE_RETURN_IF_ERROR(ReadOptionalEnum(j, "scoring_func", kScoringFuncNames, &c.scoring_func));
  LATTE_RETURN_IF_ERROR(ReadOptionalEnum(j, "topk_method", kTopkMethodNames, &c.topk_method));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(j, "rms_norm_eps", &c.rms_norm_eps));
  LATTE_RETURN_IF_ERROR(ReadOptionalNumber(j, "rope_theta", &c.rope_theta));
  LATTE_RETURN_IF_ERROR(ReadOptionalInt(j, "max_position_embeddings", &c.max_position_embeddings));
  if (c.max_position_embeddings < 1) return Status::InvalidArgument("key \"max_position_embeddings\" must be positive");
  LATTE_RETURN_IF_ERROR(ReadOptionalBool(j, "tie_word_embeddings", &c.tie_word_embeddings));
  LATTE_RETURN_IF_ERROR(ReadTokenId(j, "bos_token_id", &c.bos_token_id));
  LATTE_RETURN_IF_ERROR(ReadTokenId(j, "eos_token_id", &c.eos_token_id));
  LATTE_RETURN_IF_ERROR(ParseRopeScaling(j, &c));
  LATTE_RETURN_IF_ERROR(ParseQuantization(j, &c));
  LATTE_RETURN_IF_ERROR(RefuseUnimplemented(j));
  LATTE_RETURN_IF_ERROR(Validate(c));
  return c;
}

Result<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = FromJsonText(ss.str());
  if (!config.ok()) return config.status().WithContext(path);
  return config;
}

std::string ModelConfig::ToJsonText() const {
  json j;
  j["architectures"] = json::array({architecture});
  j["model_type"] = architecture == "DeepseekV3ForCausalLM" ? "deepseek_v3" : "deepseek_v2";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["moe_intermediate_size"] = moe_intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_attention_heads;
  j["q_lora_rank"] = q_lora_rank ? json(*q_lora_rank) : json(nullptr);
  j["kv_lora_rank"] = kv_lora_rank;
  j["qk_nope_head_dim"] = qk_nope_head_dim;
  j["qk_rope_head_dim"] = qk_rope_head_dim;
  j["v_head_dim"] = v_head_dim;
  j["n_routed_experts"] = n_routed_experts > 0 ? json(n_routed_experts) : json(nullptr);
  j["n_shared_experts"] = n_shared_experts;
  j["num_experts_per_tok"] = num_experts_per_tok;
  j["n_group"] = n_group;
  j["topk_group"] = topk_group;
  j["first_k_dense_replace"] = first_k_dense_replace;
  j["moe_layer_freq"] = moe_layer_freq;
  if (num_nextn_predict_layers > 0) j["num_nextn_predict_layers"] = num_nextn_predict_layers;
  j["norm_topk_prob"] = norm_topk_prob;
  j["routed_scaling_factor"] = routed_scaling_factor;
  j["scoring_func"] = ScoringFuncName(scoring_func);
  j["topk_method"] = TopkMethodName(topk_method);
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["max_position_embeddings"] = max_position_embeddings;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["bos_token_id"] = bos_token_id;
  j["eos_token_id"] = eos_token_id;
  j["hidden_act"] = "silu";
  j["torch_dtype"] = "bfloat16";
  if (rope_scaling) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", rope_scaling->factor},
                         {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings},
                         {"beta_fast", rope_scaling->beta_fast},
                         {"beta_slow", rope_scaling->beta_slow},
                         {"mscale", rope_scaling->mscale},
                         {"mscale_all_dim", rope_scaling->mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (quantization) {
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", "e4m3"},
                                {"quant_method", "fp8"},
                                {"weight_block_size", {quantization->block_rows, quantization->block_cols}}};
  }
  return j.dump(2) + "\n";
}

double ModelConfig::SoftmaxScale() const {
  double scale = 1.0 / std::sqrt(static_cast<double>(QkHeadDim()));
  if (rope_scaling) {
    // 1 when mscale_all_dim is 0 (absent) or factor is 1: the scale is then unchanged.
    const double mscale = YarnMscale(rope_scaling->factor, rope_scaling->mscale_all_dim);
    scale *= mscale * mscale;
  }
  return scale;
}

Status CheckContextLength(const ModelConfig& config, int64_t tokens, const std::string& what) {
  if (tokens <= config.max_position_embeddings) return Status::Ok();
  return Status::InvalidArgument(what + " is " + std::to_string(tokens) +
                                 " tokens, more than the model's context length of " +
                                 std::to_string(config.max_position_embeddings) + " (max_position_embeddings)");
}

}  // namespace latte

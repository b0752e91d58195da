#include "synth/gguf_export.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include "base/gguf_file.h"
#include "kernels/block_quant.h"
#include "kernels/weight_rows.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/tensor_specs.h"
#include "text/gguf_vocabulary.h"

namespace latte {
namespace {

namespace fs = std::filesystem;

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A checkpoint matrix or vector as f32 values, row-major.
class TensorReader {
 public:
  TensorReader(const Checkpoint& checkpoint, const ModelConfig& config) : checkpoint_(checkpoint), config_(config) {}

  // Present: ExportGguf checks every expected tensor first.
  const std::vector<int64_t>& Shape(const std::string& name) const { return checkpoint_.Find(name)->shape; }

  Result<std::vector<float>> Values(const std::string& name) const {
    const TensorInfo* t = checkpoint_.Find(name);
    if (t == nullptr) return Status::NotFound("missing tensor \"" + name + "\"");
    const int64_t rows = t->shape.size() == 2 ? t->shape[0] : 1;
    const int64_t cols = t->shape.back();
    WeightView view{t->dtype, rows, cols, cols, t->data};
    if (t->dtype == DType::kF8E4M3) {
      const TensorInfo* s = checkpoint_.Find(name + "_scale_inv");
      if (s == nullptr || s->dtype != DType::kF32 || !config_.quantization) {
        return Status::NotFound("fp8 tensor \"" + name + "\" without an F32 _scale_inv and quantization_config");
      }
      const Fp8Quantization& q = *config_.quantization;
      view = Fp8WeightView(rows, cols, cols, t->data, reinterpret_cast<const float*>(s->data), s->shape[1],
                           q.block_rows, q.block_cols);
    }
    std::vector<float> out(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) WeightRowToF32(view, r, out.data() + r * cols);
    return out;
  }

 private:
  const Checkpoint& checkpoint_;
  const ModelConfig& config_;
};

// The bytes of `values` ([rows, cols]) in `type`.
std::vector<uint8_t> Encode(const std::vector<float>& values, int64_t cols, DType type) {
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  std::vector<uint8_t> out(DTypeRowBytes(type, cols) * static_cast<size_t>(rows));
  switch (type) {
    case DType::kF32: std::memcpy(out.data(), values.data(), out.size()); break;
    case DType::kF16:
    case DType::kBF16:
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t v = type == DType::kF16 ? F32ToF16(values[i]) : F32ToBf16(values[i]);
        std::memcpy(out.data() + 2 * i, &v, 2);
      }
      break;
    default:
      for (int64_t r = 0; r < rows; ++r) {
        QuantizeToBlocks(type, values.data() + r * cols, cols, out.data() + DTypeRowBytes(type, cols) * r);
      }
      break;
  }
  return out;
}

// The type a matrix with rows of `cols` values is stored in: `wanted` when its blocks
// divide the row, else llama-quantize's fallback (llama_tensor_get_type): a K format's
// 32-value counterpart, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> Q4_0,
// IQ4_XS, IQ2_XXS, IQ3_XXS, IQ1_S -> IQ4_NL (so
// a Q4_K_M file holds Q5_0 attn_k_b and Q8_0 ffn_down where the rows are not whole
// 256-value blocks), and F16 where 32 does not divide the row either.
DType StorableType(DType wanted, int64_t cols) {
  if (cols % DTypeBlockElements(wanted) == 0) return wanted;
  DType fallback = DType::kF16;
  switch (wanted) {
    case DType::kQ4_K: fallback = DType::kQ5_0; break;
    case DType::kQ5_K: fallback = DType::kQ5_1; break;
    case DType::kQ6_K: fallback = DType::kQ8_0; break;
    case DType::kQ3_K:
    case DType::kQ2_K: fallback = DType::kQ4_0; break;
    case DType::kIQ4_XS:
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ1_S: fallback = DType::kIQ4_NL; break;
    default: break;
  }
  return cols % DTypeBlockElements(fallback) == 0 ? fallback : DType::kF16;
}

class GgufExporter {
 public:
  GgufExporter(const ModelConfig& config, const Checkpoint& checkpoint, const GgufExportOptions& options)
      : c_(config), reader_(checkpoint, config), options_(options) {}

  Status AddTensors() {
    const ModelConfig& c = c_;
    LATTE_RETURN_IF_ERROR(Matrix("model.embed_tokens.weight", "token_embd.weight"));
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
      const std::string p = LayerPrefix(layer), b = "blk." + std::to_string(layer) + ".";
      LATTE_RETURN_IF_ERROR(Vector(p + "input_layernorm.weight", b + "attn_norm.weight"));
      const std::string a = p + "self_attn.";
      if (c.q_lora_rank) {
        LATTE_RETURN_IF_ERROR(Matrix(a + "q_a_proj.weight", b + "attn_q_a.weight"));
        LATTE_RETURN_IF_ERROR(Vector(a + "q_a_layernorm.weight", b + "attn_q_a_norm.weight"));
        LATTE_RETURN_IF_ERROR(Matrix(a + "q_b_proj.weight", b + "attn_q_b.weight"));
      } else {
        LATTE_RETURN_IF_ERROR(Matrix(a + "q_proj.weight", b + "attn_q.weight"));
      }
      LATTE_RETURN_IF_ERROR(Matrix(a + "kv_a_proj_with_mqa.weight", b + "attn_kv_a_mqa.weight"));
      LATTE_RETURN_IF_ERROR(Vector(a + "kv_a_layernorm.weight", b + "attn_kv_a_norm.weight"));
      LATTE_RETURN_IF_ERROR(KvB(a + "kv_b_proj.weight", b));
      LATTE_RETURN_IF_ERROR(Matrix(a + "o_proj.weight", b + "attn_output.weight"));
      LATTE_RETURN_IF_ERROR(Vector(p + "post_attention_layernorm.weight", b + "ffn_norm.weight"));
      const std::string m = p + "mlp.";
      if (!c.IsMoeLayer(layer)) {
        LATTE_RETURN_IF_ERROR(Matrix(m + "gate_proj.weight", b + "ffn_gate.weight"));
        LATTE_RETURN_IF_ERROR(Matrix(m + "up_proj.weight", b + "ffn_up.weight"));
        LATTE_RETURN_IF_ERROR(Matrix(m + "down_proj.weight", b + "ffn_down.weight", Role::kDown));
        continue;
      }
      LATTE_RETURN_IF_ERROR(Vector(m + "gate.weight", b + "ffn_gate_inp.weight"));
      if (c.HasScoreCorrectionBias()) {
        LATTE_RETURN_IF_ERROR(Vector(m + "gate.e_score_correction_bias", b + "exp_probs_b.bias"));
      }
      for (const auto& [hf, gguf, role] :
           {std::tuple{"gate_proj", "ffn_gate_exps", Role::kPlain}, std::tuple{"up_proj", "ffn_up_exps", Role::kPlain},
            std::tuple{"down_proj", "ffn_down_exps", Role::kDown}}) {
        LATTE_RETURN_IF_ERROR(Experts(m, hf, b + gguf + ".weight", role));
      }
      if (c.n_shared_experts > 0) {
        LATTE_RETURN_IF_ERROR(Matrix(m + "shared_experts.gate_proj.weight", b + "ffn_gate_shexp.weight"));
        LATTE_RETURN_IF_ERROR(Matrix(m + "shared_experts.up_proj.weight", b + "ffn_up_shexp.weight"));
        LATTE_RETURN_IF_ERROR(Matrix(m + "shared_experts.down_proj.weight", b + "ffn_down_shexp.weight", Role::kDown));
      }
    }
    LATTE_RETURN_IF_ERROR(Vector("model.norm.weight", "output_norm.weight"));
    if (!c.tie_word_embeddings) LATTE_RETURN_IF_ERROR(Matrix("lm_head.weight", "output.weight", Role::kOutput));
    return Status::Ok();
  }

  void AddConfig() {
    const ModelConfig& c = c_;
    const std::string a = "deepseek2.";
    const auto u32 = [&](const std::string& key, int64_t v) { w_.SetUint32(a + key, static_cast<uint32_t>(v)); };
    w_.SetString("general.architecture", "deepseek2");
    u32("context_length", c.max_position_embeddings);
    u32("embedding_length", c.hidden_size);
    u32("block_count", c.num_hidden_layers);
    u32("feed_forward_length", c.intermediate_size);
    u32("attention.head_count", c.num_attention_heads);
    w_.SetFloat32(a + "rope.freq_base", static_cast<float>(c.rope_theta));
    w_.SetFloat32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
    u32("leading_dense_block_count", c.first_k_dense_replace);
    u32("vocab_size", c.vocab_size);
    // 0 for a plain q_proj: what llama.cpp reads a V2-Lite of any layer count by
    // (convert_hf_to_gguf.py writes no key, which llama.cpp takes for Lite only at 26 or
    // 27 layers).
    u32("attention.q_lora_rank", c.q_lora_rank.value_or(0));
    u32("attention.kv_lora_rank", c.kv_lora_rank);
    if (options_.layout == GgufExportLayout::kSplitKvB) {
      // llama.cpp's MLA reads the latent as one KV head of d_c + d_r keys and d_c values.
      u32("attention.head_count_kv", 1);
      u32("attention.key_length", c.LatentDim());
      u32("attention.value_length", c.kv_lora_rank);
      u32("attention.key_length_mla", c.QkHeadDim());
      u32("attention.value_length_mla", c.v_head_dim);
    } else {
      u32("attention.head_count_kv", c.num_attention_heads);
      u32("attention.key_length", c.QkHeadDim());
      u32("attention.value_length", c.v_head_dim);
    }
    u32("rope.dimension_count", c.qk_rope_head_dim);
    if (c.n_routed_experts > 0) {
      u32("expert_count", c.n_routed_experts);
      u32("expert_used_count", c.num_experts_per_tok);
      u32("expert_feed_forward_length", c.moe_intermediate_size);
      u32("expert_shared_count", c.n_shared_experts);
      w_.SetFloat32(a + "expert_weights_scale", static_cast<float>(c.routed_scaling_factor));
      w_.SetBool(a + "expert_weights_norm", c.norm_topk_prob);
      u32("expert_gating_func", c.scoring_func == ScoringFunc::kSigmoid ? 2 : 1);
      if (c.topk_method != TopkMethod::kGreedy) {
        u32("expert_group_count", c.n_group);
        u32("expert_group_used_count", c.topk_group);
      }
    }
    if (c.rope_scaling) {
      w_.SetString(a + "rope.scaling.type", "yarn");
      w_.SetFloat32(a + "rope.scaling.factor", static_cast<float>(c.rope_scaling->factor));
      u32("rope.scaling.original_context_length", c.rope_scaling->original_max_position_embeddings);
      w_.SetFloat32(a + "rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * c.rope_scaling->mscale_all_dim));
    }
  }

  Status AddVocabulary(const std::string& model_dir) {
    LATTE_ASSIGN_OR_RETURN(const std::string tokenizer_json, ReadText(model_dir + "/tokenizer.json"));
    std::optional<std::string> tokenizer_config;
    if (Result<std::string> text = ReadText(model_dir + "/tokenizer_config.json"); text.ok()) tokenizer_config = *text;
    std::string pre = options_.pre;
    if (pre.empty()) pre = c_.architecture == "DeepseekV3ForCausalLM" ? "deepseek-v3" : "deepseek-llm";
    std::optional<std::string_view> config_text;
    if (tokenizer_config) config_text = *tokenizer_config;
    LATTE_ASSIGN_OR_RETURN(const GgufVocabulary v,
                           GgufVocabularyFromTokenizerJson(tokenizer_json, c_.vocab_size, pre, config_text));
    w_.SetString(kGgufTokenizerModelKey, v.model);
    w_.SetString(kGgufTokenizerPreKey, v.pre);
    w_.SetStringArray(kGgufTokensKey, v.tokens);
    w_.SetIntArray(kGgufTokenTypeKey, GgufValueType::kInt32,
                   std::vector<int64_t>(v.token_types.begin(), v.token_types.end()));
    w_.SetStringArray(kGgufMergesKey, v.merges);
    for (auto [key, id] : {std::pair{kGgufBosIdKey, v.bos_id}, std::pair{kGgufEosIdKey, v.eos_id},
                           std::pair{kGgufPaddingIdKey, v.padding_id}}) {
      if (id) w_.SetUint32(key, static_cast<uint32_t>(*id));
    }
    for (auto [key, flag] : {std::pair{kGgufAddBosKey, v.add_bos}, std::pair{kGgufAddEosKey, v.add_eos}}) {
      if (flag) w_.SetBool(key, *flag);
    }
    if (v.chat_template) w_.SetString(kGgufChatTemplateKey, *v.chat_template);
    return Status::Ok();
  }

  Status Write(const std::string& path) const { return w_.Write(path); }

 private:
  // Where Q4_K_M gives a tensor more bits.
  enum class Role { kPlain, kDown, kValue, kOutput };

  DType TypeFor(Role role, int64_t cols) const {
    DType type = options_.type;
    if (options_.q4_k_m && role != Role::kPlain) type = DType::kQ6_K;
    return StorableType(type, cols);
  }

  Status Vector(const std::string& hf, const std::string& gguf) {
    LATTE_ASSIGN_OR_RETURN(std::vector<float> v, reader_.Values(hf));
    const std::vector<int64_t> shape = checkpoint_shape(hf);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w_.AddTensor(gguf, DType::kF32, shape, std::move(bytes));
    return Status::Ok();
  }

  Status Matrix(const std::string& hf, const std::string& gguf, Role role = Role::kPlain) {
    LATTE_ASSIGN_OR_RETURN(std::vector<float> v, reader_.Values(hf));
    const std::vector<int64_t> shape = checkpoint_shape(hf);
    const DType type = TypeFor(role, shape[1]);
    w_.AddTensor(gguf, type, shape, Encode(v, shape[1], type));
    return Status::Ok();
  }

  // experts.e.<hf> for every e, stacked: [E, rows, cols].
  Status Experts(const std::string& mlp, const std::string& hf, const std::string& gguf, Role role) {
    std::vector<float> stacked;
    std::vector<int64_t> shape;
    for (int64_t e = 0; e < c_.n_routed_experts; ++e) {
      const std::string name = mlp + "experts." + std::to_string(e) + "." + hf + ".weight";
      LATTE_ASSIGN_OR_RETURN(std::vector<float> v, reader_.Values(name));
      shape = checkpoint_shape(name);
      stacked.insert(stacked.end(), v.begin(), v.end());
    }
    const DType type = TypeFor(role, shape[1]);
    w_.AddTensor(gguf, type, {c_.n_routed_experts, shape[0], shape[1]}, Encode(stacked, shape[1], type));
    return Status::Ok();
  }

  // kv_b_proj [H·(d_n + d_v), d_c] as attn_kv_b, or as attn_k_b [H, d_c, d_n] (W_UK,hᵀ)
  // and attn_v_b [H, d_v, d_c].
  Status KvB(const std::string& hf, const std::string& b) {
    if (options_.layout == GgufExportLayout::kKvB) return Matrix(hf, b + "attn_kv_b.weight", Role::kValue);
    LATTE_ASSIGN_OR_RETURN(std::vector<float> kv, reader_.Values(hf));
    const int64_t H = c_.num_attention_heads, d_c = c_.kv_lora_rank, d_n = c_.qk_nope_head_dim, d_v = c_.v_head_dim;
    std::vector<float> k_b(static_cast<size_t>(H * d_c * d_n)), v_b(static_cast<size_t>(H * d_v * d_c));
    for (int64_t h = 0; h < H; ++h) {
      const float* head = kv.data() + h * (d_n + d_v) * d_c;
      for (int64_t n = 0; n < d_n; ++n) {
        for (int64_t j = 0; j < d_c; ++j) k_b[(h * d_c + j) * d_n + n] = head[n * d_c + j];
      }
      std::copy(head + d_n * d_c, head + (d_n + d_v) * d_c, v_b.begin() + h * d_v * d_c);
    }
    const DType k_type = TypeFor(Role::kPlain, d_n), v_type = TypeFor(Role::kValue, d_c);
    w_.AddTensor(b + "attn_k_b.weight", k_type, {H, d_c, d_n}, Encode(k_b, d_n, k_type));
    w_.AddTensor(b + "attn_v_b.weight", v_type, {H, d_v, d_c}, Encode(v_b, d_c, v_type));
    return Status::Ok();
  }

  std::vector<int64_t> checkpoint_shape(const std::string& name) const { return reader_.Shape(name); }

  const ModelConfig& c_;
  TensorReader reader_;
  GgufExportOptions options_;
  GgufWriter w_;
};

}  // namespace

Result<GgufExportOptions> ParseGgufExportType(const std::string& name) {
  GgufExportOptions o;
  if (name == "Q4_K_M") {
    o.type = DType::kQ4_K;
    o.q4_k_m = true;
    return o;
  }
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ5_1,
                  DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS,
                  DType::kIQ2_XXS, DType::kIQ3_XXS, DType::kIQ1_S}) {
    if (name == DTypeName(d)) {
      o.type = d;
      return o;
    }
  }
  return Status::InvalidArgument(
      "unknown GGUF type \"" + name +
          "\": F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, "
          "IQ3_XXS, IQ1_S or Q4_K_M",
      "type");
}

Status ExportGguf(const std::string& model_dir, const std::string& out_path, const GgufExportOptions& options) {
  LATTE_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfig::FromFile(model_dir + "/config.json"));
  LATTE_ASSIGN_OR_RETURN(const Checkpoint checkpoint, Checkpoint::Open(model_dir));
  for (const TensorSpec& spec : ExpectedTensors(config)) {
    const TensorInfo* t = checkpoint.Find(spec.name);
    if (t == nullptr || t->shape != spec.shape) {
      return Status::NotFound(model_dir + ": no tensor \"" + spec.name + "\" of shape " + ShapeString(spec.shape));
    }
  }
  GgufExporter exporter(config, checkpoint, options);
  exporter.AddConfig();
  LATTE_RETURN_IF_ERROR(exporter.AddVocabulary(model_dir));
  LATTE_RETURN_IF_ERROR(exporter.AddTensors());
  return exporter.Write(out_path);
}

}  // namespace latte

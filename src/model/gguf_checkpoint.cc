#include "model/gguf_checkpoint.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/block_quant.h"
#include "model/tensor_specs.h"

namespace latte {
namespace {

namespace fs = std::filesystem;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "-00002-of-00003.gguf": a split file other than the first.
bool IsLaterSplit(const std::string& name) {
  const size_t of = name.rfind("-of-");
  return of != std::string::npos && of >= 6 && name[of - 6] == '-' && name.compare(of - 5, 5, "00001") != 0;
}

// ---- Config ------------------------------------------------------------------------

// Reads `prefix`.`key` from the metadata, naming the key in every error.
class MetadataReader {
 public:
  MetadataReader(const GgufModel& gguf, std::string prefix) : gguf_(gguf), prefix_(std::move(prefix)) {}

  Result<int64_t> Int(std::string_view key) const { return gguf_.GetInt(prefix_ + std::string(key)); }
  std::optional<int64_t> OptionalInt(std::string_view key, Status& error) const {
    return Optional<int64_t>(key, error, [&](const std::string& k) { return gguf_.GetInt(k); });
  }
  std::optional<double> OptionalFloat(std::string_view key, Status& error) const {
    return Optional<double>(key, error, [&](const std::string& k) { return gguf_.GetFloat(k); });
  }
  std::optional<bool> OptionalBool(std::string_view key, Status& error) const {
    return Optional<bool>(key, error, [&](const std::string& k) { return gguf_.GetBool(k); });
  }
  std::optional<std::string> OptionalString(std::string_view key, Status& error) const {
    return Optional<std::string>(key, error, [&](const std::string& k) { return gguf_.GetString(k); });
  }

 private:
  // The value, or nullopt when the key is absent; a value of the wrong type sets `error`.
  template <typename T, typename Get> std::optional<T> Optional(std::string_view key, Status& error, Get get) const {
    const std::string full = prefix_ + std::string(key);
    if (gguf_.Find(full) == nullptr) return std::nullopt;
    Result<T> v = get(full);
    if (!v.ok()) {
      if (error.ok()) error = v.status();
      return std::nullopt;
    }
    return *v;
  }

  const GgufModel& gguf_;
  std::string prefix_;
};

// llama.cpp's expert_gating_func values (LLAMA_EXPERT_GATING_FUNC_TYPE_*).
constexpr int64_t kGatingSoftmax = 1;
constexpr int64_t kGatingSigmoid = 2;

Result<ModelConfig> ReadConfig(const GgufModel& gguf) {
  LATTE_ASSIGN_OR_RETURN(const std::string arch, gguf.GetString("general.architecture"));
  if (arch != "deepseek2") {
    return Status::Unimplemented("general.architecture is \"" + arch +
                                 "\": latte reads only \"deepseek2\" (DeepSeek-V2, V2-Lite, V3, R1)");
  }
  const MetadataReader m(gguf, arch + ".");
  Status error;
  ModelConfig c;
  LATTE_ASSIGN_OR_RETURN(c.max_position_embeddings, m.Int("context_length"));
  LATTE_ASSIGN_OR_RETURN(c.hidden_size, m.Int("embedding_length"));
  LATTE_ASSIGN_OR_RETURN(const int64_t blocks, m.Int("block_count"));
  // Newer converters count V3's multi-token-prediction layers in block_count.
  c.num_hidden_layers = blocks - m.OptionalInt("nextn_predict_layers", error).value_or(0);
  LATTE_ASSIGN_OR_RETURN(c.intermediate_size, m.Int("feed_forward_length"));
  LATTE_ASSIGN_OR_RETURN(c.num_attention_heads, m.Int("attention.head_count"));
  LATTE_ASSIGN_OR_RETURN(c.kv_lora_rank, m.Int("attention.kv_lora_rank"));
  // Absent or 0: plain q_proj (V2-Lite; convert_hf_to_gguf.py writes no key, some
  // converters write 0).
  if (const int64_t q_lora = m.OptionalInt("attention.q_lora_rank", error).value_or(0); q_lora != 0) {
    c.q_lora_rank = q_lora;
  }
  LATTE_ASSIGN_OR_RETURN(c.qk_rope_head_dim, m.Int("rope.dimension_count"));
  // Files written for llama.cpp's MLA (attn_k_b / attn_v_b) give the latent's widths as
  // key_length / value_length (d_c + d_r, d_c) and the heads' as *_mla.
  const bool mla_keys = gguf.Find(arch + ".attention.key_length_mla") != nullptr;
  LATTE_ASSIGN_OR_RETURN(const int64_t qk_head, m.Int(mla_keys ? "attention.key_length_mla" : "attention.key_length"));
  LATTE_ASSIGN_OR_RETURN(c.v_head_dim, m.Int(mla_keys ? "attention.value_length_mla" : "attention.value_length"));
  c.qk_nope_head_dim = qk_head - c.qk_rope_head_dim;
  c.rms_norm_eps = m.OptionalFloat("attention.layer_norm_rms_epsilon", error).value_or(1e-6);
  c.rope_theta = m.OptionalFloat("rope.freq_base", error).value_or(10000.0);

  c.n_routed_experts = m.OptionalInt("expert_count", error).value_or(0);
  if (c.n_routed_experts > 0) {
    LATTE_ASSIGN_OR_RETURN(c.moe_intermediate_size, m.Int("expert_feed_forward_length"));
    LATTE_ASSIGN_OR_RETURN(c.num_experts_per_tok, m.Int("expert_used_count"));
  }
  c.n_shared_experts = m.OptionalInt("expert_shared_count", error).value_or(0);
  c.first_k_dense_replace = m.OptionalInt("leading_dense_block_count", error).value_or(0);
  c.routed_scaling_factor = m.OptionalFloat("expert_weights_scale", error).value_or(1.0);
  c.norm_topk_prob = m.OptionalBool("expert_weights_norm", error).value_or(false);
  c.n_group = m.OptionalInt("expert_group_count", error).value_or(1);
  c.topk_group = m.OptionalInt("expert_group_used_count", error).value_or(1);
  // Older V2 files have no gating key: llama.cpp reads them as softmax.
  const int64_t gating = m.OptionalInt("expert_gating_func", error).value_or(kGatingSoftmax);
  if (gating == kGatingSigmoid) {
    c.architecture = "DeepseekV3ForCausalLM";
    c.scoring_func = ScoringFunc::kSigmoid;
    c.topk_method = TopkMethod::kNoauxTc;  // with the exp_probs_b bias, as V3 ships it
  } else if (gating == kGatingSoftmax) {
    c.architecture = "DeepseekV2ForCausalLM";
    c.scoring_func = ScoringFunc::kSoftmax;
    c.topk_method = c.n_group > 1 ? TopkMethod::kGroupLimitedGreedy : TopkMethod::kGreedy;
  } else {
    return Status::Unimplemented(arch + ".expert_gating_func is " + std::to_string(gating) +
                                 ": latte knows 1 (softmax) and 2 (sigmoid)");
  }

  if (const auto scaling = m.OptionalString("rope.scaling.type", error); scaling && *scaling != "none") {
    if (*scaling != "yarn") {
      return Status::Unimplemented(arch + ".rope.scaling.type is \"" + *scaling + "\": latte supports yarn");
    }
    YarnScaling y;
    y.factor = m.OptionalFloat("rope.scaling.factor", error).value_or(1.0);
    y.original_max_position_embeddings = m.OptionalInt("rope.scaling.original_context_length", error).value_or(4096);
    // convert_hf_to_gguf.py writes yarn_log_multiplier = 0.1 · mscale_all_dim, and
    // llama.cpp's deepseek2 graph leaves rope's cos/sin unscaled (mscale = mscale_all_dim
    // in Hugging Face's terms), scaling the softmax by YarnMscale(factor, mscale_all_dim)².
    y.mscale_all_dim = m.OptionalFloat("rope.scaling.yarn_log_multiplier", error).value_or(0.0) / 0.1;
    y.mscale = y.mscale_all_dim;
    y.beta_fast = m.OptionalFloat("rope.scaling.yarn_beta_fast", error).value_or(32.0);
    y.beta_slow = m.OptionalFloat("rope.scaling.yarn_beta_slow", error).value_or(1.0);
    c.rope_scaling = y;
  }

  if (const auto vocab = m.OptionalInt("vocab_size", error)) {
    c.vocab_size = *vocab;
  } else if (const GgufTensor* embd = gguf.FindTensor("token_embd.weight"); embd && embd->shape.size() == 2) {
    c.vocab_size = embd->shape[0];
  } else {
    return Status::NotFound(arch + ".vocab_size is missing and there is no 2-D token_embd.weight to take it from");
  }
  const MetadataReader tokenizer(gguf, "tokenizer.ggml.");
  c.bos_token_id = tokenizer.OptionalInt("bos_token_id", error).value_or(0);
  c.eos_token_id = tokenizer.OptionalInt("eos_token_id", error).value_or(1);
  LATTE_RETURN_IF_ERROR(error);
  // One validation for both formats: the config.json this config is.
  Result<ModelConfig> checked = ModelConfig::FromJsonText(c.ToJsonText());
  if (!checked.ok()) {
    return Status(checked.status().code(), "the config its metadata gives is not valid: " + checked.status().message());
  }
  return checked;
}

// ---- Tensors -----------------------------------------------------------------------

// blk.N.<GGUF> → model.layers.N.<Hugging Face>, one to one.
constexpr std::array<std::pair<std::string_view, std::string_view>, 18> kGgufLayerNames{{
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
}};

// Stacked routed experts: blk.N.<GGUF> [E, rows, cols] → experts.e.<projection>.
constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kGgufExpertNames{{
    {"ffn_gate_exps.weight", "gate_proj.weight"},
    {"ffn_up_exps.weight", "up_proj.weight"},
    {"ffn_down_exps.weight", "down_proj.weight"},
}};

// "blk.12.attn_q_a.weight" → {12, "attn_q_a.weight"}; {-1, ""} for other names.
std::pair<int64_t, std::string_view> SplitLayerName(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return {-1, {}};
  size_t i = kPrefix.size();
  int64_t layer = 0;
  const size_t digits = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - digits < 9) layer = layer * 10 + (name[i++] - '0');
  if (i == digits || i >= name.size() || name[i] != '.') return {-1, {}};
  return {layer, name.substr(i + 1)};
}

std::string SupportedTypes() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, IQ2_XXS, IQ3_XXS, "
         "IQ1_S";
}

// What the Checkpoint keeps alive: the file and the rebuilt kv_b_proj matrices.
struct GgufOwner {
  std::shared_ptr<const GgufModel> gguf;
  std::vector<AlignedBuffer> rebuilt;
};

// `count` values of a tensor's data as f32.
void ValuesToF32(DType dtype, const uint8_t* data, int64_t count, float* out) {
  switch (dtype) {
    case DType::kF32: std::memcpy(out, data, static_cast<size_t>(count) * sizeof(float)); return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        out[i] = dtype == DType::kF16 ? F16ToF32(v) : Bf16ToF32(v);
      }
      return;
    default: DequantizeToF32(dtype, data, count, out); return;
  }
}

class GgufTensorMapper {
 public:
  // `rebuild_kv_b` false: a split kv_b_proj is only listed (see GgufTensorTable).
  GgufTensorMapper(std::shared_ptr<const GgufModel> gguf, const ModelConfig& config, bool rebuild_kv_b)
      : config_(config), rebuild_kv_b_(rebuild_kv_b), owner_(std::make_shared<GgufOwner>()) {
    owner_->gguf = std::move(gguf);
  }

  Result<Checkpoint> Map() {
    LATTE_RETURN_IF_ERROR(MapTensors());
    return Checkpoint::FromTensors(std::move(tensors_), owner_);
  }

  Result<std::vector<TensorInfo>> Table() {
    LATTE_RETURN_IF_ERROR(MapTensors());
    return std::move(tensors_);
  }

 private:
  Status MapTensors() {
    const GgufModel& gguf = *owner_->gguf;
    std::map<int64_t, KvB> split_kv_b;  // layer → its attn_k_b / attn_v_b
    for (const GgufTensor& t : gguf.tensors()) {
      const auto [layer, rest] = SplitLayerName(t.name);
      // Layers past num_hidden_layers (V3's multi-token prediction) keep their names'
      // layer number, so the loader skips them with its note, whatever their type.
      if (layer < 0 || layer < config_.num_hidden_layers) LATTE_RETURN_IF_ERROR(CheckType(t));
      if (layer < 0) {
        Add(t, TopLevelName(t.name));
        continue;
      }
      if (rest == "attn_k_b.weight" || rest == "attn_v_b.weight") {
        (rest == "attn_k_b.weight" ? split_kv_b[layer].k_b : split_kv_b[layer].v_b) = &t;
        continue;
      }
      if (MapExperts(t, layer, rest)) continue;
      Add(t, LayerName(layer, rest));
    }
    for (const auto& [layer, kv_b] : split_kv_b) LATTE_RETURN_IF_ERROR(RebuildKvB(layer, kv_b));
    return Status::Ok();
  }

  struct KvB {
    const GgufTensor* k_b = nullptr;
    const GgufTensor* v_b = nullptr;
  };

  static std::string TopLevelName(const std::string& name) {
    if (name == "token_embd.weight") return "model.embed_tokens.weight";
    if (name == "output_norm.weight") return "model.norm.weight";
    if (name == "output.weight") return "lm_head.weight";
    return name;  // unknown: kept, so the loader notes it as unused
  }

  static std::string LayerName(int64_t layer, std::string_view rest) {
    for (const auto& [gguf_name, hf_name] : kGgufLayerNames) {
      if (rest == gguf_name) return LayerPrefix(layer) + std::string(hf_name);
    }
    // Unknown (nextn.*, ...): under the layer's prefix, so a layer past
    // num_hidden_layers is skipped as a whole and others are noted as unused.
    return LayerPrefix(layer) + std::string(rest);
  }

  Status CheckType(const GgufTensor& t) const {
    if (t.dtype) return Status::Ok();
    return Status::Unimplemented(File(t) + ": tensor \"" + t.name + "\" is " + GgmlTypeName(t.ggml_type) +
                                 ", which latte does not compute on (supported: " + SupportedTypes() + ")");
  }

  static std::string File(const GgufTensor& t) { return fs::path(t.file).filename().string(); }

  void Add(const GgufTensor& t, std::string name) {
    TensorInfo info;
    info.name = std::move(name);
    info.dtype = *t.dtype;
    info.shape = t.shape;
    info.data = t.data;
    info.nbytes = t.nbytes;
    info.file = t.file;
    tensors_.push_back(std::move(info));
  }

  // A stacked expert tensor [E, rows, cols] as E matrices; false for other names.
  bool MapExperts(const GgufTensor& t, int64_t layer, std::string_view rest) {
    for (const auto& [gguf_name, projection] : kGgufExpertNames) {
      if (rest != gguf_name) continue;
      if (t.shape.size() != 3) {
        Add(t, LayerPrefix(layer) + "mlp." + std::string(rest));  // the loader reports it missing
        return true;
      }
      const int64_t experts = t.shape[0], rows = t.shape[1], cols = t.shape[2];
      const size_t expert_bytes = DTypeRowBytes(*t.dtype, cols) * static_cast<size_t>(rows);
      for (int64_t e = 0; e < experts; ++e) {
        TensorInfo info;
        info.name = LayerPrefix(layer) + "mlp.experts." + std::to_string(e) + "." + std::string(projection);
        info.dtype = *t.dtype;
        info.shape = {rows, cols};
        info.data = t.data + static_cast<size_t>(e) * expert_bytes;
        info.nbytes = expert_bytes;
        info.file = t.file;
        tensors_.push_back(std::move(info));
      }
      return true;
    }
    return false;
  }

  // kv_b_proj [H·(d_n + d_v), d_c] in f32 from attn_k_b [H, d_c, d_n] and attn_v_b
  // [H, d_v, d_c]: head h's rows are W_UK,h (k_b[h] transposed) then W_UV,h (v_b[h]).
  Status RebuildKvB(int64_t layer, const KvB& kv_b) {
    const ModelConfig& c = config_;
    const int64_t H = c.num_attention_heads, d_c = c.kv_lora_rank, d_n = c.qk_nope_head_dim, d_v = c.v_head_dim;
    if (kv_b.k_b == nullptr || kv_b.v_b == nullptr) {
      const GgufTensor& present = kv_b.k_b ? *kv_b.k_b : *kv_b.v_b;
      return Status::NotFound(File(present) + ": layer " + std::to_string(layer) + " has \"" + present.name +
                              "\" without its " + (kv_b.k_b ? "attn_v_b" : "attn_k_b") + " half");
    }
    const std::vector<int64_t> k_shape{H, d_c, d_n}, v_shape{H, d_v, d_c};
    for (const auto& [t, shape] : {std::pair{kv_b.k_b, k_shape}, std::pair{kv_b.v_b, v_shape}}) {
      if (t->shape != shape) {
        return Status::DataLoss(File(*t) + ": tensor \"" + t->name + "\" has shape " + ShapeString(t->shape) +
                                ", the metadata implies " + ShapeString(shape));
      }
    }
    const int64_t rows_per_head = d_n + d_v;
    TensorInfo info;
    info.name = LayerPrefix(layer) + "self_attn.kv_b_proj.weight";
    info.dtype = DType::kF32;
    info.shape = {H * rows_per_head, d_c};
    info.file = kv_b.k_b->file;
    if (!rebuild_kv_b_) {  // listed with the type and bytes its halves take in the file, no data
      info.dtype = *kv_b.k_b->dtype;
      info.nbytes = kv_b.k_b->nbytes + kv_b.v_b->nbytes;
      tensors_.push_back(std::move(info));
      return Status::Ok();
    }
    std::vector<float> k_b(static_cast<size_t>(H * d_c * d_n)), v_b(static_cast<size_t>(H * d_v * d_c));
    ValuesToF32(*kv_b.k_b->dtype, kv_b.k_b->data, static_cast<int64_t>(k_b.size()), k_b.data());
    ValuesToF32(*kv_b.v_b->dtype, kv_b.v_b->data, static_cast<int64_t>(v_b.size()), v_b.data());
    AlignedBuffer buffer(static_cast<size_t>(H * rows_per_head * d_c) * sizeof(float));
    float* kv = buffer.as<float>();  // kv: [H, d_n + d_v, d_c]
    for (int64_t h = 0; h < H; ++h) {
      float* head = kv + h * rows_per_head * d_c;
      for (int64_t n = 0; n < d_n; ++n) {
        for (int64_t j = 0; j < d_c; ++j) head[n * d_c + j] = k_b[(h * d_c + j) * d_n + n];
      }
      std::memcpy(head + d_n * d_c, v_b.data() + h * d_v * d_c, static_cast<size_t>(d_v * d_c) * sizeof(float));
    }
    info.data = reinterpret_cast<const uint8_t*>(kv);
    info.nbytes = buffer.size();
    tensors_.push_back(std::move(info));
    owner_->rebuilt.push_back(std::move(buffer));
    return Status::Ok();
  }

  const ModelConfig& config_;
  bool rebuild_kv_b_ = true;
  std::shared_ptr<GgufOwner> owner_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace

Result<std::optional<std::string>> FindGgufFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (EndsWith(path, ".gguf")) return std::optional<std::string>(path);
    return std::optional<std::string>();
  }
  std::vector<std::string> models;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && EndsWith(name, ".gguf") && !IsLaterSplit(name)) {
      models.push_back(entry.path().string());
    }
  }
  if (models.empty()) return std::optional<std::string>();
  if (models.size() > 1) {
    std::sort(models.begin(), models.end());
    return Status::InvalidArgument(path + " holds several GGUF models (" + fs::path(models[0]).filename().string() +
                                       ", " + fs::path(models[1]).filename().string() +
                                       (models.size() > 2 ? ", ..." : "") + "): pass --model the file to load",
                                   "model");
  }
  return std::optional<std::string>(models.front());
}

Result<ModelConfig> ConfigFromGguf(const GgufModel& gguf, const std::string& name) {
  Result<ModelConfig> config = ReadConfig(gguf);
  if (!config.ok()) return config.status().WithContext(fs::path(name).filename().string());
  return config;
}

Result<Checkpoint> CheckpointFromGguf(std::shared_ptr<const GgufModel> gguf, const ModelConfig& config) {
  return GgufTensorMapper(std::move(gguf), config, /*rebuild_kv_b=*/true).Map();
}

Result<std::vector<TensorInfo>> GgufTensorTable(std::shared_ptr<const GgufModel> gguf, const ModelConfig& config) {
  return GgufTensorMapper(std::move(gguf), config, /*rebuild_kv_b=*/false).Table();
}

}  // namespace latte

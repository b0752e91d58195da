// A loaded model: config, the mapped checkpoint, and every weight as a view in
// its compute precision, prepared once at load (kv_b_proj split into w_uk_t /
// w_uv, and — in materialized mode only — the absorbed products). fp8 checkpoints
// keep their projections as e4m3 views into the mapping with f32 block scales
// (the kernels convert in registers: ~1 byte per weight read per token), except
// kv_b_proj, which is dequantized to bf16 for the per-head W_UKᵀ / W_UV products;
// LoadOptions::fp8 = kDequantizeBf16 dequantizes every fp8 weight to bf16 instead.
// LoadOptions::quantize = kFp8 (--quantize fp8) makes any checkpoint one of those: the
// linear weights not stored in fp8 are quantized at load in DeepSeek's own scheme
// (kernels/fp8_quantize.h) and held exactly as an fp8 checkpoint's are.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "dist/layout.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/mla_mode.h"
#include "model/safetensors.h"
#include "model/tensor_parallel.h"

namespace latte {

struct MlpWeights {
  WeightView gate_proj;  // [width, d]
  WeightView up_proj;    // [width, d]
  WeightView down_proj;  // [d, width]
};

struct MoeWeights {
  std::vector<float> router;        // router: [n_routed_experts, d] (f32: routing is precision-sensitive)
  std::vector<float> score_bias;    // e_score_correction_bias: [n_routed_experts] (noaux_tc only)
  std::vector<MlpWeights> experts;  // [n_routed_experts]; under whole-expert sharding only this rank's are held
  bool Holds(int64_t expert) const { return experts[expert].gate_proj.data != nullptr; }
  std::optional<MlpWeights> shared;  // width n_shared_experts · moe_intermediate_size
};

struct MlaWeights {
  std::optional<WeightView> q_a_proj;  // [d_cq, d] (q_lora_rank set)
  std::vector<float> q_a_layernorm;    // [d_cq]
  WeightView q_b_proj;                 // [H·(d_n+d_r), d_cq], or q_proj [H·(d_n+d_r), d]
  WeightView kv_a_proj_with_mqa;       // [d_c + d_r, d]
  std::vector<float> kv_a_layernorm;   // [d_c]
  WeightView kv_b_proj;                // [H·(d_n+d_v), d_c]: per head d_n rows of W_UK then d_v of W_UV
  WeightView o_proj;                   // [d, H·d_v]

  // Prepared at load from kv_b_proj (absorbed and materialized modes):
  std::vector<WeightView> w_uk_t;  // [H] of [d_c, d_n]: W_UK,hᵀ (a transposed copy)
  std::vector<WeightView> w_uv;    // [H] of [d_v, d_c]: W_UV,h (views into kv_b_proj)
  std::vector<WeightView> q_rope;  // [H] of [d_r, d_cq]: the rope rows of q_b_proj (views)

  // Materialized mode only:
  std::optional<WeightView> w_q_uk;  // [H·d_c, d_cq]: row h·d_c + c = (W_UK,hᵀ · q_b_nope,h)[c]
  std::optional<WeightView> w_uv_o;  // [d, H·d_c]: columns h·d_c.. = o_proj,h · W_UV,h
};

struct LayerWeights {
  std::vector<float> input_layernorm;           // [d]
  std::vector<float> post_attention_layernorm;  // [d]
  MlaWeights attn;
  bool is_moe = false;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

// V3's multi-token-prediction (MTP) layer, model.layers.L.* (L = num_hidden_layers): it
// drafts the token after next from the main model's final hidden row h_i (after its
// final norm) and the next token t_{i+1} at position i:
//   x = eh_proj · [enorm(embed(t_{i+1})); hnorm(h_i)]   (the embedding is 0 at position 0)
//   y = block(x)                                         (a MoE decoder layer, its own latent cache)
//   logits = shared_head.head · shared_head.norm(y)
struct MtpWeights {
  WeightView embed_tokens;          // [vocab, d]
  std::vector<float> enorm, hnorm;  // [d]
  WeightView eh_proj;               // [d, 2d]
  LayerWeights block;
  std::vector<float> head_norm;  // shared_head.norm: [d]
  WeightView head;               // shared_head.head: [vocab, d]
};

// Resident bytes per component, for the load report and `latte bench`.
struct WeightMemory {
  size_t attention = 0;           // checkpoint attention projections (+ norms) as held (fp8: + f32 scales)
  size_t attention_prepared = 0;  // w_uk_t copies (and dequantized kv_b for fp8)
  size_t materialized = 0;        // W_Q_UK + W_UV_O
  size_t dense_mlp = 0;
  size_t experts = 0;     // routed + shared + routers
  size_t embeddings = 0;  // embed_tokens + lm_head + final norm
  size_t mtp = 0;         // the multi-token-prediction layer (LoadOptions::mtp)
  size_t Total() const {
    return attention + attention_prepared + materialized + dense_mlp + experts + embeddings + mtp;
  }
};

// What to do with F8_E4M3 weights (checkpoints with quantization_config).
enum class Fp8Weights {
  kKeep,            // e4m3 views into the checkpoint + f32 block scales (kv_b_proj: bf16)
  kDequantizeBf16,  // every fp8 weight dequantized to bf16 at load (2 bytes per weight)
};
std::optional<Fp8Weights> ParseFp8Weights(std::string_view name);  // "keep" | "bf16"
std::string_view Fp8WeightsName(Fp8Weights fp8);

// What to do with the linear weights a checkpoint does not store in fp8 (--quantize).
enum class WeightQuantization {
  kNone,  // held as stored
  // Quantized at load to e4m3 with one f32 scale per 128x128 block (an fp8 checkpoint's
  // weight_block_size), w = q · scale_inv, then held as an fp8 checkpoint's weights:
  // kept e4m3 views (decode reads ~1 byte per weight), kv_b_proj dequantized to bf16 for
  // the per-head products. Every projection, dense MLP, expert and lm_head of a bf16 /
  // f16 / f32 checkpoint; of an fp8 checkpoint, lm_head (the release ships it in bf16).
  // embed_tokens stays as stored: a token reads one row of it, not the matrix. The
  // router's gate stays f32. The source bytes leave the resident set (ReleasePages).
  kFp8,
};
std::optional<WeightQuantization> ParseWeightQuantization(std::string_view name);  // "none" | "fp8"
std::string_view WeightQuantizationName(WeightQuantization q);

struct LoadOptions {
  MlaMode mode = MlaMode::kAbsorbed;
  bool progress = true;  // progress line and memory report on stderr
  Fp8Weights fp8 = Fp8Weights::kKeep;
  // kFp8 with fp8 = kDequantizeBf16 is an error: one keeps fp8, the other removes it.
  WeightQuantization quantize = WeightQuantization::kNone;
  // Checkpoint files mmapped (zero-copy), or read into memory on 2 MiB pages
  // (--huge-pages; base/mapped_file.h).
  FileResidency residency = FileResidency::kMapped;
  // This process's share under tensor parallelism (model/tensor_parallel.h): only its
  // slices are read, each copied out of the mapping into memory of its own (2 MiB pages
  // for large ones) and the mapping's pages given back, so a rank's resident set is its
  // shard. The file is never copied whole (residency's huge-page copy is for one process).
  TensorShard shard = {};
  // The job's layout as the flags give it (--tp, --dp, --ep); `shard` is this process's
  // part of it, filled in once the rank is known.
  ParallelLayout parallel = {};
  // Load the first multi-token-prediction layer too (--speculative mtp); a checkpoint
  // without one is an error. Only in one process (not sharded).
  bool mtp = false;
};

// The options on their own (ModelWeights::Load checks them first; commands check
// them before any other work): --quantize fp8 with --fp8 bf16 is an error.
Status CheckLoadOptions(const LoadOptions& options);

class ModelWeights {
 public:
  // `dir`: a Hugging Face directory (config.json, safetensors), or a GGUF file, or a
  // directory holding one (model/gguf_checkpoint.h).
  static Result<std::unique_ptr<ModelWeights>> Load(const std::string& dir, const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  // The shapes this process computes with: config() with num_attention_heads cut to
  // the local heads under tensor parallelism (config() itself otherwise).
  const ModelConfig& shard_config() const { return shard_config_; }
  const TensorShard& shard() const { return shard_; }
  // Every rank's lm_head rows, in rank order ({0, vocab} in one process).
  const std::vector<IndexRange>& vocab_ranges() const { return vocab_ranges_; }
  DType compute_dtype() const { return compute_dtype_; }  // kBF16 or kF32
  // True when some projections are fp8 views (1 byte per weight + block scales).
  bool fp8_kept() const { return fp8_kept_; }
  MlaMode mode() const { return mode_; }
  const WeightView& embed_tokens() const { return embed_tokens_; }  // [vocab, d]
  const WeightView& lm_head() const { return lm_head_; }            // [vocab, d] (sharded: this rank's rows)
  const std::vector<float>& final_norm() const { return final_norm_; }
  const std::vector<LayerWeights>& layers() const { return layers_; }
  // The MTP layer, when LoadOptions::mtp loaded it.
  const std::optional<MtpWeights>& mtp() const { return mtp_; }
  const WeightMemory& memory() const { return memory_; }

 private:
  friend class WeightLoader;
  static Result<std::unique_ptr<ModelWeights>> LoadGguf(const std::string& path, const LoadOptions& options);
  // Checks options.shard against the config and sets shard_ and shard_config_.
  Status CheckShard(const LoadOptions& options);
  ModelConfig config_;
  ModelConfig shard_config_;
  TensorShard shard_;
  std::vector<IndexRange> vocab_ranges_;
  DType compute_dtype_ = DType::kBF16;
  bool fp8_kept_ = false;
  MlaMode mode_ = MlaMode::kAbsorbed;
  std::unique_ptr<Checkpoint> checkpoint_;  // keeps the mappings alive
  std::vector<AlignedBuffer> owned_;        // converted / prepared weights
  WeightView embed_tokens_;
  WeightView lm_head_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
  std::optional<MtpWeights> mtp_;
  WeightMemory memory_;
};

}  // namespace latte

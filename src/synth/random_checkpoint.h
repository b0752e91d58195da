// Random-weight checkpoints in the exact Hugging Face DeepSeek layout, for tests and
// benchmarks without downloading hundreds of GB (`latte make-model`).
//
// A model directory holds config.json, the tensors of ExpectedTensors(config) in
// safetensors (model.safetensors, or model-0000i-of-0000N.safetensors shards plus
// model.safetensors.index.json once the total passes shard_bytes), and a tiny
// byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json).
//
// Weights: every tensor draws from its own counter-based stream keyed by
// (seed, hash of its name), element i of a tensor being splitmix64's output i + 1
// from that key (base/splitmix64.h).
// So the bytes depend only on the seed and the config: not on tensor order,
// sharding, thread count, or dtype (the fp8 and bf16 exports of a seed hold the
// same values up to rounding). Values are uniform with a standard deviation chosen
// so activations stay near RMS 1 through every layer:
//   linear [out, in]                    std 1/sqrt(in)  (a projection keeps the RMS)
//   o_proj, down_proj (into residual)   std 1/sqrt(in) / sqrt(2 L)  (L layers' sum stays O(1))
//   embed_tokens                        std 1
//   lm_head, router gate [E, d]         std 1/sqrt(d)   (logits of std ~1)
//   norms                               1 +- 0.1
//   e_score_correction_bias             +-0.1
// Dtypes (what DeepSeek ships): bf16 (bias f32 as in V3), f32, or fp8 = V3 release
// format: linears F8_E4M3 with an F32 <name>_scale_inv per 128x128 block
// (weight = fp8 value * scale_inv, scale_inv = max|w| of the block / 448);
// embeddings, router gate and norms bf16, bias f32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/config.h"

namespace latte {

enum class CheckpointDType { kBf16, kF32, kFp8 };

// "bf16", "f32", "fp8".
std::optional<CheckpointDType> ParseCheckpointDType(const std::string& name);

// Bounds on make-model's --layers and --vocab.
inline constexpr int64_t kMaxMakeModelLayers = 1024;
inline constexpr int64_t kMaxMakeModelVocab = int64_t{1} << 20;

// make-model's command-line changes to a preset.
struct MakeModelOverrides {
  std::optional<int64_t> num_hidden_layers;        // --layers
  std::optional<int64_t> vocab_size;               // --vocab
  bool no_q_lora = false;                          // --no-q-lora: q_lora_rank null (plain q_proj)
  std::optional<int64_t> mtp_layers;               // --mtp-layers: num_nextn_predict_layers
  std::optional<std::string> rope;                 // --rope plain|yarn
  CheckpointDType dtype = CheckpointDType::kBf16;  // fp8 sets quantization_config
};

// The preset's config with the overrides applied and validated. bos/eos ids that
// fall outside a reduced vocab move to 0/1 (DeepSeek-V3's ids) so the tokenizer
// and config.json agree.
Result<ModelConfig> MakeModelConfig(const std::string& preset, const MakeModelOverrides& overrides);

struct RandomCheckpointOptions {
  CheckpointDType dtype = CheckpointDType::kBf16;
  uint64_t seed = 0;
  uint64_t shard_bytes = 4'000'000'000;  // a shard closes before it would pass this
};

struct RandomCheckpointSummary {
  int64_t tensors = 0;  // including fp8 scale_inv tensors
  uint64_t bytes = 0;   // tensor data over all shards
  int64_t shards = 0;   // 1: model.safetensors, no index
};

// Writes the model directory `dir` (created if missing). Stale model*.safetensors
// and the index from an earlier run are removed first, so the directory always
// reads back as this checkpoint. Holds at most one tensor in memory at a time.
// config.quantization must be set exactly when options.dtype is kFp8.
Status WriteRandomCheckpoint(const ModelConfig& config, const RandomCheckpointOptions& options, const std::string& dir,
                             RandomCheckpointSummary* summary = nullptr);

// make-model's write into `dir`: refuses a folder that already holds safetensors
// files (or an index) unless `replace`, writes the whole checkpoint into a temporary
// folder beside `dir`, then moves it into place (config.json last), so a failure or a
// kill never leaves a half-written model in `dir`.
Status WriteModelDirectory(const ModelConfig& config, const RandomCheckpointOptions& options, const std::string& dir,
                           bool replace, RandomCheckpointSummary* summary = nullptr);

}  // namespace latte

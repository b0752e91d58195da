// The tensors a DeepSeek-V2/V3 checkpoint holds for a config, with their shapes,
// as Hugging Face names them. The loader checks a directory against this list and
// make-model writes exactly this list, so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace latte {

enum class TensorKind {
  kLinear,     // 2-D projection: stored bf16/f16/f32, or fp8 e4m3 with <name>_scale_inv
  kEmbedding,  // embed_tokens, lm_head: never fp8 in the V3 release
  kRouter,     // mlp.gate.weight: kept in higher precision, never fp8
  kVector,     // norms and e_score_correction_bias: 1-D, read as f32
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // outermost first: a linear is [out_features, in_features]
  TensorKind kind;
};

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);
// The multi-token-prediction layers' tensors (num_nextn_predict_layers of them, after
// the L layers), as V3's release names them: model.layers.L.{embed_tokens, enorm,
// hnorm, eh_proj, shared_head.norm, shared_head.head} and a decoder layer's tensors.
std::vector<TensorSpec> ExpectedMtpTensors(const ModelConfig& config);

// Shape of `<name>_scale_inv` for an fp8 linear of `shape`: [ceil(out/128), ceil(in/128)].
std::vector<int64_t> ScaleInvShape(const std::vector<int64_t>& shape, const Fp8Quantization& q);

std::string LayerPrefix(int64_t layer);  // "model.layers.3."

// The layer of a "model.layers.<n>.*" tensor, or -1 for tensors outside the layers
// (and for a <n> that is not a number, or absurdly large).
int64_t LayerOf(std::string_view name);

}  // namespace latte

#include "model/deepseek.h"

#include <algorithm>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"

namespace latte {

DeepSeekModel::DeepSeekModel(const ModelWeights& weights, const MlaSettings& settings)
    : w_(weights), mla_(weights.config(), weights.mode(), settings) {}

std::unique_ptr<LatentCache> DeepSeekModel::NewCache(int64_t capacity) const {
  // Rows in the compute precision: bf16 for bf16 / fp8 checkpoints, f32 for f32 ones.
  return std::make_unique<LatentCache>(config().num_hidden_layers, config().LatentDim(), capacity,
                                       w_.compute_dtype());
}

Status DeepSeekModel::Forward(const std::vector<int32_t>& tokens, const std::vector<SequenceSpan>& spans,
                              LogitRows which, std::vector<float>& logits) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  int64_t T = 0;
  for (const SequenceSpan& span : spans) {
    if (span.cache == nullptr || span.count <= 0) return Status::Error("empty sequence span");
    if (span.start != span.cache->length()) {
      return Status::Error("span starts at " + std::to_string(span.start) + " but the cache holds " +
                           std::to_string(span.cache->length()) + " tokens");
    }
    if (span.start + span.count > span.cache->capacity()) {
      return Status::Error("sequence of " + std::to_string(span.start + span.count) +
                           " tokens exceeds the cache capacity " + std::to_string(span.cache->capacity()));
    }
    T += span.count;
  }
  if (T != static_cast<int64_t>(tokens.size())) return Status::Error("token count does not match the spans");
  for (int32_t id : tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(c.vocab_size) + ")");
    }
  }

  // hidden: [T, d], the residual stream.
  hidden_.resize(T * d);
  normed_.resize(T * d);
  delta_.resize(T * d);
  const WeightView& embed = w_.embed_tokens();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < d; ++j) hidden_[t * d + j] = embed.At(tokens[t], j);
  }

  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerWeights& lw = w_.layers()[layer];
    RmsNorm(hidden_.data(), lw.input_layernorm.data(), T, d, eps, normed_.data());
    mla_.Forward(lw.attn, layer, normed_.data(), spans, delta_.data(), mla_scratch_);
    for (int64_t i = 0; i < T * d; ++i) hidden_[i] += delta_[i];

    RmsNorm(hidden_.data(), lw.post_attention_layernorm.data(), T, d, eps, normed_.data());
    if (lw.is_moe) {
      MoeForward(c, lw.moe, normed_.data(), T, delta_.data(), ffn_scratch_);
    } else {
      MlpForward(lw.mlp, normed_.data(), T, delta_.data(), ffn_scratch_);
    }
    for (int64_t i = 0; i < T * d; ++i) hidden_[i] += delta_[i];
  }
  for (const SequenceSpan& span : spans) span.cache->set_length(span.start + span.count);

  // Final norm and lm_head on the rows that need logits.
  std::vector<int64_t>& rows = logit_rows_;
  rows.clear();
  if (which == LogitRows::kAll) {
    for (int64_t t = 0; t < T; ++t) rows.push_back(t);
  } else {
    int64_t end = 0;
    for (const SequenceSpan& span : spans) rows.push_back((end += span.count) - 1);
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  final_rows_.resize(n * d);
  for (int64_t i = 0; i < n; ++i) {
    RmsNorm(hidden_.data() + rows[i] * d, w_.final_norm().data(), 1, d, eps, final_rows_.data() + i * d);
  }
  logits.resize(n * c.vocab_size);
  Matmul(final_rows_.data(), n, w_.lm_head(), logits.data());
  return Status::Ok();
}

}  // namespace latte

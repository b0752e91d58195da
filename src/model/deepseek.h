// The DeepSeek-V2/V3 block stack: embedding, L × (MLA + MLP/MoE), final norm, lm_head.
//   h = embed(tokens)
//   for each layer: h += attn(rmsnorm(h)); h += ffn(rmsnorm(h))
//   logits = lm_head · rmsnorm(h)
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/latent_cache.h"
#include "model/mla.h"
#include "model/model_weights.h"
#include "model/moe.h"

namespace latte {

enum class LogitRows {
  kAll,          // logits for every row: [T, vocab]
  kLastOfSpan,   // logits for the last row of each span: [num_spans, vocab]
};

class DeepSeekModel {
 public:
  // Attention runs in the mode the weights were prepared for (weights.mode()).
  explicit DeepSeekModel(const ModelWeights& weights, const MlaSettings& settings = {});

  // A cache sized for `capacity` tokens of one sequence, rows in the weights' compute
  // dtype (bf16, or f32 for f32 checkpoints).
  std::unique_ptr<LatentCache> NewCache(int64_t capacity) const;

  // tokens: the ids of every span, concatenated in span order ([T]).
  // Each span appends to its cache (span.start must equal the cache's length).
  // logits: [T or num_spans, vocab], written per `which`.
  Status Forward(const std::vector<int32_t>& tokens, const std::vector<SequenceSpan>& spans,
                 LogitRows which, std::vector<float>& logits);

  const ModelConfig& config() const { return w_.config(); }
  const ModelWeights& weights() const { return w_; }

 private:
  const ModelWeights& w_;
  MlaLayer mla_;
  MlaScratch mla_scratch_;
  FfnScratch ffn_scratch_;
  std::vector<float> hidden_, normed_, delta_, final_rows_;
  std::vector<int64_t> logit_rows_;
};

}  // namespace latte

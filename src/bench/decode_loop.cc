#include "bench/decode_loop.h"

namespace latte {

Status DecodeSteps(DeepSeekModel& model, SequenceCaches& caches, std::span<int64_t> lengths, std::span<int32_t> tokens,
                   int64_t max_steps, const NextTokens& next_tokens, std::vector<float>& logits) {
  if (tokens.size() != lengths.size()) return Status::Internal("decode steps need one token per sequence");
  // One step's ids and spans, rewritten in place.
  std::vector<int32_t> step_tokens(tokens.size());
  std::vector<SequenceSpan> spans(lengths.size());
  for (int64_t step = 0; step < max_steps; ++step) {
    for (size_t b = 0; b < lengths.size(); ++b) {
      if (lengths[b] >= caches.capacity()) return Status::Internal("a sequence ran past its cache's capacity");
      step_tokens[b] = tokens[b];
      spans[b] = SequenceSpan{caches.table(static_cast<int64_t>(b)), lengths[b], 1, SpanLogits::kLast};
    }
    LATTE_RETURN_IF_ERROR(model.Forward(step_tokens, spans, caches.cache(), logits));
    for (int64_t& length : lengths) ++length;
    if (!next_tokens(logits, tokens)) break;
  }
  return Status::Ok();
}

int32_t ArgMax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace latte

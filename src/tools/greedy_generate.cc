#include "tools/greedy_generate.h"

#include "tools/decode_loop.h"

namespace latte {

int32_t ArgMax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Result<GenerateResult> GreedyGenerate(DeepSeekModel& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                                      bool keep_logits) {
  LATTE_RETURN_IF_ERROR(CheckSequenceRequest(model.config(), prompt, max_tokens));
  const int64_t vocab = model.config().vocab_size;
  GenerateResult result;
  result.tokens.reserve(max_tokens);
  const int64_t P = static_cast<int64_t>(prompt.size());
  if (keep_logits) result.logits.reserve((P + max_tokens - 1) * vocab);
  // The prefill's rows (all P of them when keep_logits), then one row per step.
  const auto next_token = [&](std::span<const float> logits) -> std::optional<int32_t> {
    if (keep_logits) result.logits.insert(result.logits.end(), logits.begin(), logits.end());
    result.tokens.push_back(ArgMax(logits.last(vocab).data(), vocab));
    return result.tokens.back();
  };
  LATTE_ASSIGN_OR_RETURN(
      const SequenceTimes times,
      RunSequence(model, prompt, max_tokens, keep_logits ? SpanLogits::kAll : SpanLogits::kLast, next_token));
  result.prefill_seconds = times.prefill_seconds;
  result.decode_seconds = times.decode_seconds;
  return result;
}

}  // namespace latte

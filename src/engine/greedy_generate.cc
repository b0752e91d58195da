#include "engine/greedy_generate.h"

#include <chrono>

namespace latte {

int32_t ArgMax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Result<GenerateResult> GreedyGenerate(DeepSeekModel& model, const std::vector<int32_t>& prompt,
                                      int64_t max_tokens, bool keep_logits) {
  if (prompt.empty()) return Status::Error("the prompt is empty");
  if (max_tokens < 1) return Status::Error("max_tokens must be at least 1");
  const int64_t vocab = model.config().vocab_size;
  const int64_t P = static_cast<int64_t>(prompt.size());
  auto cache = model.NewCache(P + max_tokens);
  GenerateResult result;
  result.tokens.reserve(max_tokens);
  if (keep_logits) result.logits.reserve((P + max_tokens - 1) * vocab);
  std::vector<float> logits;
  // One step's token and span, rewritten in place: a decode step allocates nothing here.
  std::vector<int32_t> step_token(1);
  std::vector<SequenceSpan> step_span(1, SequenceSpan{cache.get(), 0, 1});
  using Clock = std::chrono::steady_clock;

  auto t0 = Clock::now();
  LATTE_RETURN_IF_ERROR(model.Forward(prompt, {SequenceSpan{cache.get(), 0, P}},
                                      keep_logits ? LogitRows::kAll : LogitRows::kLastOfSpan, logits));
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (keep_logits) result.logits = logits;
  result.tokens.push_back(ArgMax(logits.data() + logits.size() - vocab, vocab));

  t0 = Clock::now();
  for (int64_t step = 1; step < max_tokens; ++step) {
    step_token[0] = result.tokens.back();
    step_span[0].start = P + step - 1;
    LATTE_RETURN_IF_ERROR(model.Forward(step_token, step_span, LogitRows::kLastOfSpan, logits));
    if (keep_logits) result.logits.insert(result.logits.end(), logits.begin(), logits.end());
    result.tokens.push_back(ArgMax(logits.data(), vocab));
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

}  // namespace latte

#include "greedy_generate.h"

#include <chrono>

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Status CheckSequenceRequest(const ModelConfig& config, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty", "prompt");
  if (max_tokens < 1) return Status::InvalidArgument("max_tokens must be at least 1", "max_tokens");
  const int64_t P = static_cast<int64_t>(prompt.size());
  return CheckContextLength(
      config, P + max_tokens,
      "the prompt (" + std::to_string(P) + " tokens) plus max_tokens (" + std::to_string(max_tokens) + ")");
}

Result<SequenceTimes> RunSequence(DeepSeekModel& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                                  SpanLogits prefill_rows, const NextToken& next_token) {
  LATTE_RETURN_IF_ERROR(CheckSequenceRequest(model.config(), prompt, max_tokens));
  const int64_t P = static_cast<int64_t>(prompt.size());
  SequenceCaches caches = model.NewCaches(1, P + max_tokens);
  std::vector<float> logits;
  SequenceTimes times;

  auto t0 = Clock::now();
  const SequenceSpan prefill[] = {{caches.table(0), 0, P, prefill_rows}};
  LATTE_RETURN_IF_ERROR(model.Forward(prompt, prefill, caches.cache(), logits));
  times.prefill_seconds = SecondsSince(t0);

  t0 = Clock::now();
  const std::optional<int32_t> first = next_token(logits);
  if (first) {
    int32_t token = *first;
    int64_t length = P;
    const auto next = [&next_token](std::span<const float> step_logits, std::span<int32_t> tokens) {
      const std::optional<int32_t> t = next_token(step_logits);
      if (t) tokens[0] = *t;
      return t.has_value();
    };
    LATTE_RETURN_IF_ERROR(DecodeSteps(model, caches, std::span<int64_t>(&length, 1), std::span<int32_t>(&token, 1),
                                      max_tokens - 1, next, logits));
  }
  times.decode_seconds = SecondsSince(t0);
  return times;
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

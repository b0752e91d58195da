#include "tools/decode_loop.h"

#include <chrono>

namespace latte {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

Status DecodeSteps(DeepSeekModel& model, SequenceCaches& caches, std::span<int64_t> lengths, std::span<int32_t> tokens,
                   int64_t max_steps, const NextTokens& next_tokens, std::vector<float>& logits) {
  if (tokens.size() != lengths.size()) return Status::Error("decode steps need one token per sequence");
  // One step's ids and spans, rewritten in place.
  std::vector<int32_t> step_tokens(tokens.size());
  std::vector<SequenceSpan> spans(lengths.size());
  for (int64_t step = 0; step < max_steps; ++step) {
    for (size_t b = 0; b < lengths.size(); ++b) {
      if (lengths[b] >= caches.capacity()) return Status::Error("a sequence ran past its cache's capacity");
      step_tokens[b] = tokens[b];
      spans[b] = SequenceSpan{caches.table(static_cast<int64_t>(b)), lengths[b], 1, SpanLogits::kLast};
    }
    LATTE_RETURN_IF_ERROR(model.Forward(step_tokens, spans, caches.cache(), logits));
    for (int64_t& length : lengths) ++length;
    if (!next_tokens(logits, tokens)) break;
  }
  return Status::Ok();
}

Status CheckSequenceRequest(const ModelConfig& config, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  if (prompt.empty()) return Status::Error("the prompt is empty");
  if (max_tokens < 1) return Status::Error("max_tokens must be at least 1");
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

}  // namespace latte

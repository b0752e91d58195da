#include "engine/text_generation.h"

#include <chrono>

#include "engine/stop_matcher.h"
#include "text/detokenizer.h"

namespace latte {

Result<TextResult> GenerateText(DeepSeekModel& model, const Tokenizer& tokenizer, const TextRequest& request,
                                const std::function<void(std::string_view)>& on_text) {
  if (request.prompt.empty()) return Status::Error("the prompt is empty");
  if (request.max_tokens < 1) return Status::Error("max_tokens must be at least 1");
  LATTE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(request.sampling));
  std::vector<int32_t> stop_ids = request.stop_token_ids;
  const std::optional<int32_t> eos = tokenizer.eos_id();
  if (!request.ignore_eos) stop_ids.push_back(eos ? *eos : static_cast<int32_t>(model.config().eos_token_id));
  LATTE_ASSIGN_OR_RETURN(StopMatcher stops, StopMatcher::Create(request.stop, stop_ids));

  const int64_t vocab = model.config().vocab_size;
  const int64_t P = static_cast<int64_t>(request.prompt.size());
  auto cache = model.NewCache(P + request.max_tokens);
  StreamingDetokenizer detokenizer(tokenizer, /*skip_special=*/true);
  TextResult result;
  result.finish_reason = "length";
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    result.text += piece;
    on_text(piece);
  };

  using Clock = std::chrono::steady_clock;
  std::vector<float> logits;
  result.tokens.reserve(request.max_tokens);
  result.sampled.reserve(request.max_tokens);
  // One step's token and span, rewritten in place: a decode step allocates nothing here.
  std::vector<int32_t> step_token(1);
  std::vector<SequenceSpan> step_span(1, SequenceSpan{cache.get(), 0, 1});
  auto t0 = Clock::now();
  LATTE_RETURN_IF_ERROR(model.Forward(request.prompt, {SequenceSpan{cache.get(), 0, P}}, LogitRows::kLastOfSpan, logits));
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int64_t step = 0; step < request.max_tokens; ++step) {
    if (step > 0) {
      step_token[0] = result.tokens.back();
      step_span[0].start = P + step - 1;
      LATTE_RETURN_IF_ERROR(model.Forward(step_token, step_span, LogitRows::kLastOfSpan, logits));
    }
    const SampledToken token = sampler.Sample(std::span<const float>(logits.data(), vocab), request.prompt,
                                              result.tokens);
    result.tokens.push_back(token.id);
    result.sampled.push_back(token);
    if (stops.IsStopToken(token.id)) {
      result.finish_reason = "stop";
      break;
    }
    const StopStep s = stops.Push(detokenizer.Add(token.id));
    emit(s.text);
    if (s.stopped) {
      result.finish_reason = "stop";
      break;
    }
  }
  if (!stops.stopped()) {
    const StopStep s = stops.Push(detokenizer.Flush());
    emit(s.text);
    if (s.stopped) {
      result.finish_reason = "stop";
    } else {
      emit(stops.Flush());
    }
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

}  // namespace latte

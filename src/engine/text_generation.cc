#include "engine/text_generation.h"

#include "engine/decode_loop.h"
#include "engine/stop_matcher.h"
#include "text/detokenizer.h"

namespace latte {

Result<TextResult> GenerateText(DeepSeekModel& model, const Tokenizer& tokenizer, const TextRequest& request,
                                const std::function<void(std::string_view)>& on_text) {
  LATTE_RETURN_IF_ERROR(CheckSequenceRequest(request.prompt, request.max_tokens));
  LATTE_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(request.sampling));
  std::vector<int32_t> stop_ids = request.stop_token_ids;
  const std::optional<int32_t> eos = tokenizer.eos_id();
  if (!request.ignore_eos) stop_ids.push_back(eos ? *eos : static_cast<int32_t>(model.config().eos_token_id));
  LATTE_ASSIGN_OR_RETURN(StopMatcher stops, StopMatcher::Create(request.stop, stop_ids));

  const int64_t vocab = model.config().vocab_size;
  StreamingDetokenizer detokenizer(tokenizer, /*skip_special=*/true);
  TextResult result;
  result.finish_reason = "length";
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    result.text += piece;
    on_text(piece);
  };

  result.tokens.reserve(request.max_tokens);
  result.sampled.reserve(request.max_tokens);
  const auto next_token = [&](std::span<const float> logits) -> std::optional<int32_t> {
    const SampledToken token = sampler.Sample(logits.last(vocab), request.prompt, result.tokens);
    result.tokens.push_back(token.id);
    result.sampled.push_back(token);
    if (stops.IsStopToken(token.id)) {
      result.finish_reason = "stop";
      return std::nullopt;
    }
    const StopStep s = stops.Push(detokenizer.Add(token.id));
    emit(s.text);
    if (s.stopped) {
      result.finish_reason = "stop";
      return std::nullopt;
    }
    return token.id;
  };
  LATTE_ASSIGN_OR_RETURN(const SequenceTimes times, RunSequence(model, request.prompt, request.max_tokens,
                                                                LogitRows::kLastOfSpan, next_token));
  if (!stops.stopped()) {
    const StopStep s = stops.Push(detokenizer.Flush());
    emit(s.text);
    if (s.stopped) {
      result.finish_reason = "stop";
    } else {
      emit(stops.Flush());
    }
  }
  result.prefill_seconds = times.prefill_seconds;
  result.decode_seconds = times.decode_seconds;
  return result;
}

}  // namespace latte

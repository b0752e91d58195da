// A fixed set of sequences decoded straight through the model, without the serving
// engine: a prompt is prefilled into a fresh cache, then every step feeds one token
// per sequence and hands the logits to the caller, who picks the next tokens or stops.
// `latte bench model`'s tg (the model alone, as llama-bench measures it) and the
// greedy reference the tests compare the engine with run on it; requests go through
// engine/engine.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/deepseek.h"
#include "model/kv_cache.h"

namespace latte {

// Reads one step's logits ([B, vocab]: one row per sequence, in cache order), writes
// each sequence's next token into `tokens` ([B]) and returns false to stop.
using NextTokens = std::function<bool(std::span<const float> logits, std::span<int32_t> tokens)>;

// Decode steps of B sequences together, sequence b in caches' table b holding
// lengths[b] rows: a step feeds tokens[b] at position lengths[b] in one forward (the
// weights are read once for all B), advances lengths, then calls next_tokens. Stops
// after `max_steps` steps or when next_tokens returns false. `logits` is the forward's
// output buffer, passed in so that a warm one is reused: the steps themselves allocate
// nothing.
Status DecodeSteps(DeepSeekModel& model, SequenceCaches& caches, std::span<int64_t> lengths, std::span<int32_t> tokens,
                   int64_t max_steps, const NextTokens& next_tokens, std::vector<float>& logits);

// Reads one forward's logits (the prefill's rows as RunSequence's `prefill_rows` says,
// then one row per decode step) and returns the token to feed next, or nullopt to stop.
using NextToken = std::function<std::optional<int32_t>(std::span<const float> logits)>;

struct SequenceTimes {
  double prefill_seconds = 0;
  double decode_seconds = 0;  // from the prefill's logits to the last step's
};

// What RunSequence needs: a prompt, at least one token to generate, and the two inside
// the model's context. Callers that size buffers from the two check it first.
Status CheckSequenceRequest(const ModelConfig& config, const std::vector<int32_t>& prompt, int64_t max_tokens);

// One sequence: prefills `prompt` into a fresh cache, then decodes with DecodeSteps.
// next_token sees at most max_tokens forwards' logits (the prefill's, then up to
// max_tokens - 1 steps'): each token it returns but the last is fed back.
Result<SequenceTimes> RunSequence(DeepSeekModel& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                                  SpanLogits prefill_rows, const NextToken& next_token);

}  // namespace latte

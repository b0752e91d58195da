// Greedy generation of one sequence straight through the model: prefill the prompt
// into a fresh cache, then decode token by token (bench/decode_loop.h's DecodeSteps),
// timing both phases: the model-level reference the engine's greedy output is tested
// against.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "bench/decode_loop.h"
#include "model/deepseek.h"

namespace latte {

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

struct GenerateResult {
  std::vector<int32_t> tokens;  // the generated ids (max_tokens of them)
  std::vector<float> logits;    // [P + N - 1, vocab] when keep_logits, else empty
  double prefill_seconds = 0;
  double decode_seconds = 0;  // the N - 1 decode steps
};

// Stops after max_tokens (EOS does not stop it: the tests want fixed lengths).
Result<GenerateResult> GreedyGenerate(DeepSeekModel& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                                      bool keep_logits);

}  // namespace latte

// A fixed set of sequences decoded straight through the model, without the serving
// engine: every step feeds one token per sequence and hands the logits to the caller,
// who picks the next tokens or stops. `latte bench model`'s tg (the model alone, as
// llama-bench measures it) and the tests' greedy reference (tests/greedy_generate.h)
// run on it; requests go through engine/engine.h.
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

// The index of the largest of n logits (the first on ties): greedy decoding.
int32_t ArgMax(const float* logits, int64_t n);

}  // namespace latte

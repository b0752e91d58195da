// One request, text out: prefill the prompt ids, then sample token after token
// through the latent cache, streaming detokenized text that never splits a UTF-8
// character and never shows a stop string. Stops on a stop token (EOS unless
// ignore_eos), a stop string, or max_tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "model/deepseek.h"
#include "text/tokenizer.h"

namespace latte {

struct TextRequest {
  std::vector<int32_t> prompt;          // ids, BOS already there if the caller wants it
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<std::string> stop;        // stop strings (up to 4), not returned
  std::vector<int32_t> stop_token_ids;  // in addition to EOS
  bool ignore_eos = false;
};

struct TextResult {
  std::vector<int32_t> tokens;          // every sampled token, a final stop token included
  std::vector<SampledToken> sampled;    // id + logprobs per token
  std::string text;                     // what was streamed
  std::string finish_reason;            // "stop" (EOS, stop token or string) or "length"
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// on_text receives each piece of text as soon as it is safe to show.
Result<TextResult> GenerateText(DeepSeekModel& model, const Tokenizer& tokenizer, const TextRequest& request,
                                const std::function<void(std::string_view)>& on_text);

}  // namespace latte

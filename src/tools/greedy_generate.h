// Greedy generation of one sequence: prefill the prompt, then decode token by
// token through the latent cache (tools/decode_loop.h's RunSequence), timing both phases:
// the model-level reference the engine's greedy output is tested against.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/deepseek.h"

namespace latte {

struct GenerateResult {
  std::vector<int32_t> tokens;  // the generated ids (max_tokens of them)
  std::vector<float> logits;    // [P + N - 1, vocab] when keep_logits, else empty
  double prefill_seconds = 0;
  double decode_seconds = 0;  // the N - 1 decode steps
};

// Stops after max_tokens (EOS does not stop it: the tests want fixed lengths).
Result<GenerateResult> GreedyGenerate(DeepSeekModel& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                                      bool keep_logits);

int32_t ArgMax(const float* logits, int64_t n);

}  // namespace latte

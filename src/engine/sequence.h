// One sequence as the scheduler sees it: its tokens (prompt, then what was sampled),
// how many of them have rows in the KV cache, and its block table.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_cache_manager.h"

namespace latte {

// The engine's state of the request choice a sequence runs: its sampler, stop
// strings, detokenizer and request (defined in engine/engine.cc).
struct RequestChoice;

enum class SequenceState { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;               // engine-wide, in submission order
  std::vector<int32_t> tokens;  // prompt then output: [prompt_len + generated]
  int64_t prompt_len = 0;
  int64_t num_computed = 0;  // positions [0, num_computed) have rows in the cache
  SequenceBlocks blocks;
  SequenceState state = SequenceState::kWaiting;
  // Admitted only once `leader` has computed its whole prompt (the other choices of an
  // n > 1 request), so that they take its prompt blocks from the prefix cache.
  const Sequence* leader = nullptr;
  bool needs_prompt_logits = false;  // echo/prompt logprobs: logits for every prompt row,
                                     // so the prompt is never taken from the prefix cache
  int64_t preemptions = 0;
  RequestChoice* choice = nullptr;  // the choice this sequence runs
  // Speculative decoding: the last `drafts` of tokens are the MTP layer's guesses, not
  // yet verified; the next step's chunk runs them with the last sampled token.
  int64_t drafts = 0;

  // Forgets the last n drafts.
  void DropDrafts(int64_t n) {
    tokens.resize(tokens.size() - static_cast<size_t>(n));
    drafts -= n;
  }

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t generated() const { return num_tokens() - drafts - prompt_len; }
  bool prompt_computed() const { return num_computed >= prompt_len; }
};

}  // namespace latte

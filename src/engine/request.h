// What a client asks the engine for, and what comes back, step by step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"

namespace latte {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // ids, BOS already there if the caller wants it
  SamplingParams sampling;
  int64_t max_tokens = 16;              // >= 0; 0 with prompt_logprobs scores the prompt only
  std::vector<std::string> stop;        // stop strings (up to 4), not returned
  std::vector<int32_t> stop_token_ids;  // in addition to EOS
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // in the returned text
  int n = 1;                        // choices: separate sequences sharing the prompt's blocks
  // The logprob (and sampling.logprobs alternatives) of every prompt token after the
  // first, given the tokens before it: OpenAI's echo + logprobs, lm-eval's loglikelihood.
  bool prompt_logprobs = false;
  // Every row of logits the request's forward passes compute, [P + N - 1, vocab]
  // (`latte generate --logits-out`); implies computing the whole prompt.
  bool return_logits = false;
  // Output constrained to a grammar, as text/json_schema_grammar.h's
  // OutputConstraintGrammar reads it: {"type": "json_object"} or {"type":
  // "json_schema", "schema": S}; empty: none. Each step only tokens the grammar allows
  // may be sampled (EOS once the output is complete), and the choice stops when
  // nothing may follow.
  std::string output_constraint;
};

// What one engine accepts: the figures every request is checked against.
struct RequestLimits {
  int64_t vocab_size = 0;      // prompt and stop token ids are below it
  int64_t max_model_len = 0;   // prompt + max_tokens fit in the context (max_position_embeddings)
  int64_t pool_tokens = 0;     // ... and in the whole paged KV pool
  int64_t max_num_seqs = 0;    // n is at most this
  bool has_tokenizer = false;  // stop strings need one
};

// The one validation of a request: Engine::Submit runs it, and the server runs it
// on what it parsed before anything is queued. An error names the offending field
// in the request's own terms ("prompt", "n", "top_p", "stop", "max_tokens");
// `max_tokens_field` is what the caller's API calls max_tokens
// ("max_completion_tokens"). Too long for the context or the pool is kOutOfRange.
Status CheckRequest(const GenerationRequest& request, const RequestLimits& limits,
                    std::string_view max_tokens_field = "max_tokens");

enum class FinishReason { kStop, kLength, kAbort };
std::string_view FinishReasonName(FinishReason reason);  // "stop", "length", "abort"

// One step's news about one choice. Concatenating a choice's `text` gives its whole
// text; its `tokens` give every sampled token (a final stop token included).
struct GenerationOutput {
  int index = 0;                               // which of the request's n choices
  std::vector<SampledToken> tokens;            // sampled since the last output
  std::string text;                            // text now safe to show (never part of a stop string)
  std::optional<FinishReason> finish;          // set on the choice's last output
  std::string stop_reason;                     // the stop string that matched, if one did
  std::string error;                           // with kAbort: why the engine gave up, if not asked to
  std::vector<SampledToken> prompt_logprobs;   // first output of choice 0: [P - 1], positions 1..P-1
  std::vector<float> logits;                   // return_logits: the rows computed since the last output
  int64_t prompt_tokens = 0;                   // the prompt's length
  int64_t cached_tokens = 0;                   // of those, taken from the prefix cache
  std::chrono::steady_clock::time_point time;  // when the engine produced it
};

// The receiving end of a request: the engine pushes outputs, a client thread pops
// them. Thread-safe.
class RequestStream {
 public:
  RequestStream(int64_t id, int choices) : id_(id), open_choices_(choices) {}

  int64_t id() const { return id_; }
  // The next output, waiting until `deadline`; nullopt on timeout or once every
  // choice has finished and every output was taken.
  std::optional<GenerationOutput> Next(std::chrono::steady_clock::time_point deadline);
  // Every output until the end (waits as long as it takes).
  std::vector<GenerationOutput> Drain();
  // True once every choice has finished and every output was taken.
  bool done() const;
  // True once every choice has finished (outputs may still wait to be taken).
  bool finished() const;
  // Called on the engine thread after each push (e.g. to wake an event loop); set it
  // before the request can produce anything, or accept a missed first call.
  void set_notify(std::function<void()> notify);

  // Engine side.
  void Push(GenerationOutput output);
  // Outputs are dropped as they are pushed: a tensor-parallel follower's copy of a
  // request, which no client reads (the leader's copy streams the same outputs).
  void DiscardOutputs() { discard_ = true; }
  // Outputs go to `sink` as they are pushed, not to a reader: a data-parallel rank's
  // request, whose outputs travel to the rank that serves its client.
  void SendOutputsTo(std::function<void(GenerationOutput)> sink) { sink_ = std::move(sink); }

 private:
  const int64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationOutput> outputs_;
  int open_choices_;
  bool discard_ = false;
  std::function<void(GenerationOutput)> sink_;
  std::function<void()> notify_;
};

}  // namespace latte

// Token sampling as the OpenAI API (and vLLM's extensions) promise it: penalties,
// temperature, top-k, top-p, min-p, a per-request seed, and logprobs.
//
// Per call, over one row of logits l[0..V):
//   1. penalties (vLLM order; each skipped at its neutral value):
//        repetition r, for each token t seen in prompt + output:
//            l[t] = l[t] > 0 ? l[t] / r : l[t] * r
//        presence a, frequency f, over the OUTPUT tokens only (count c[t] in output):
//            l[t] -= a * [c[t] > 0] + f * c[t]
//   2. temperature T: T < kGreedyTemperature → greedy: argmax of the penalised logits,
//      ties to the lowest id (steps 3–4 skipped). Otherwise l /= T.
//   3. filters on p = softmax(l), each keeping a prefix of the tokens ordered by
//      (l descending, id ascending):
//        top-k  keep the k most likely (k = 0 or -1: off; k >= V: off)
//        top-p  on the top-k renormalised distribution, keep the smallest prefix whose
//               mass reaches top_p: token j is kept iff the mass strictly before it < top_p
//               (vLLM's "cumsum of the ascending sort <= 1 - top_p is removed")
//        min-p  keep p[t] >= min_p * max(p)   (a ratio, so renormalisation cannot change it)
//   4. draw from softmax of the kept logits with the request's std::mt19937_64, walking
//      the kept tokens in id order (so the draw moves little when the logits move little).
//
// logprobs (LogprobsMode): kRaw (default) reports log_softmax of the logits as given, before
// any processing — what OpenAI returns and vLLM V1's default "raw_logprobs". kProcessed
// reports log_softmax after step 1 and 2 (penalties, temperature; temperature is not applied
// when greedy) but before the top-k/top-p/min-p filters, so filtered tokens keep a finite
// logprob. In both modes `logprob` is of the chosen token and `top` lists the N most likely
// tokens of that same distribution (logprob descending, id ascending), chosen or not.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "base/status.h"

namespace latte {

// OpenAI's top_logprobs limit.
constexpr int kMaxTopLogprobs = 20;
// Temperatures below this sample greedily, as vLLM's _SAMPLING_EPS: dividing by ~0 would
// only reproduce the argmax at the cost of overflow risk.
constexpr float kGreedyTemperature = 1e-5f;

enum class LogprobsMode {
  kRaw,        // log_softmax(model logits)
  kProcessed,  // log_softmax(logits after penalties and temperature, before filtering)
};

// A seed from std::random_device: what a request without one samples with.
uint64_t RandomSeed();

struct SamplingParams {
  float temperature = 1.0f;         // [0, 2] (OpenAI); 0 (below kGreedyTemperature): greedy
  int top_k = 0;                    // >= -1; 0 and -1 (vLLM's old spelling): off
  float top_p = 1.0f;               // (0, 1]; 1: off
  float min_p = 0.0f;               // [0, 1]; 0: off
  float presence_penalty = 0.0f;    // [-2, 2] (OpenAI); over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2] (OpenAI); over output tokens
  float repetition_penalty = 1.0f;  // > 0 and finite (vLLM); over prompt + output tokens;
                                    // 1: off
  std::optional<uint64_t> seed;     // absent: seeded from std::random_device
  int logprobs = 0;                 // top-N alternatives to report, [0, kMaxTopLogprobs]
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;

  // Rejects NaN and out-of-range fields with a message naming the field and its range.
  Status Validate() const;
  bool greedy() const { return temperature < kGreedyTemperature; }
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

// Fixed capacity so Sample allocates nothing.
struct SampledToken {
  int32_t id = 0;
  float logprob = 0;                                // of `id`, in the distribution SamplingParams::logprobs_mode names
  int num_top = 0;                                  // = SamplingParams::logprobs (capped at V)
  std::array<TokenLogprob, kMaxTopLogprobs> top{};  // [num_top], logprob desc, id asc

  std::span<const TokenLogprob> top_logprobs() const { return {top.data(), static_cast<size_t>(num_top)}; }
};

// The logprob of `id` under log_softmax(logits) and the top_n (clamped to
// [0, kMaxTopLogprobs]) most likely tokens: what Sample reports, for a token the caller
// names (prompt logprobs: how likely each prompt token was given the ones before it).
SampledToken ScoreToken(std::span<const float> logits, int32_t id, int top_n);

// One per request: owns the request's RNG (same seed → same tokens for the same logits)
// and scratch buffers sized to the vocabulary on the first call (no allocation after it).
class Sampler {
 public:
  // `params` must be valid (Validate()); Create checks.
  explicit Sampler(const SamplingParams& params);
  static Result<Sampler> Create(const SamplingParams& params);

  // logits: [V], finite or -inf (masked); no NaN. prompt_tokens / output_tokens: the request's prompt and the tokens
  // generated so far (ids outside [0, V) are ignored). Returns the chosen id, its logprob
  // and the top-N alternatives.
  SampledToken Sample(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                      std::span<const int32_t> output_tokens);
  SampledToken Sample(std::span<const float> logits) { return Sample(logits, {}, {}); }

  // The logits after penalties and temperature (temperature skipped when greedy) of the
  // last Sample call: [V].
  std::span<const float> processed_logits() const { return {work_.data(), vocab_}; }
  const SamplingParams& params() const { return params_; }

 private:
  void ApplyPenalties(std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens);
  // Fills weights_ with exp(l - max) and order_[0, n) with the kept tokens; returns n.
  // With no filter active it returns V and leaves order_ alone.
  size_t Filter(float max_logit);
  // Draws from the n kept tokens (order_[0, n), or every token when n = V).
  int32_t Draw(size_t n);
  int32_t DrawFromAll();
  double NextUniform();  // the next draw's u in [0, 1)

  SamplingParams params_;
  std::mt19937_64 rng_;
  size_t vocab_ = 0;
  std::vector<float> work_;      // [V] processed logits
  std::vector<float> weights_;   // [V] exp(l - max) of the processed logits
  std::vector<int32_t> order_;   // [V] candidate ids
  std::vector<int32_t> counts_;  // [V] output-token counts; all zero between calls
  std::vector<uint8_t> seen_;    // [V] prompt+output marks; all zero between calls
  std::vector<uint8_t> kept_;    // [V] the filters' kept set during Draw; all zero between calls
  static constexpr int kTopPBuckets = 256, kTopPBucketsPerNat = 16;  // 16 nats, then one tail bin
  std::array<double, kTopPBuckets> bucket_mass_{};                   // top-p mass per log-probability bin
  double weight_sum_ = 0;   // the last Filter's sum of weights_ over every token
  double kept_weight_ = 0;  // the last Draw's sum of the kept tokens' weights_
};

}  // namespace latte

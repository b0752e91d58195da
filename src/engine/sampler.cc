#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "kernels/exp_sum.h"

namespace latte {

namespace {

// `lo <= x <= hi`, false for NaN.
bool InRange(float x, float lo, float hi) { return x >= lo && x <= hi; }

std::string RangeError(const char* field, float value, const char* range) {
  return std::string(field) + " must be in " + range + ", got " + std::to_string(value);
}

}  // namespace

uint64_t RandomSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

Status SamplingParams::Validate() const {
  if (!InRange(temperature, 0.0f, 2.0f))
    return Status::InvalidArgument(RangeError("temperature", temperature, "[0, 2]"), "temperature");
  if (top_k < -1) {
    return Status::InvalidArgument("top_k must be >= 1, or 0 or -1 to disable it, got " + std::to_string(top_k),
                                   "top_k");
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Status::InvalidArgument(RangeError("top_p", top_p, "(0, 1]"), "top_p");
  if (!InRange(min_p, 0.0f, 1.0f)) return Status::InvalidArgument(RangeError("min_p", min_p, "[0, 1]"), "min_p");
  if (!InRange(presence_penalty, -2.0f, 2.0f)) {
    return Status::InvalidArgument(RangeError("presence_penalty", presence_penalty, "[-2, 2]"), "presence_penalty");
  }
  if (!InRange(frequency_penalty, -2.0f, 2.0f)) {
    return Status::InvalidArgument(RangeError("frequency_penalty", frequency_penalty, "[-2, 2]"), "frequency_penalty");
  }
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    return Status::InvalidArgument(RangeError("repetition_penalty", repetition_penalty, "(0, inf)"),
                                   "repetition_penalty");
  }
  if (logprobs < 0 || logprobs > kMaxTopLogprobs) {
    return Status::InvalidArgument("logprobs (top alternatives) must be in [0, " + std::to_string(kMaxTopLogprobs) +
                                       "], got " + std::to_string(logprobs),
                                   "logprobs");
  }
  return Status::Ok();
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed.has_value() ? *params.seed : RandomSeed()) {}

Result<Sampler> Sampler::Create(const SamplingParams& params) {
  LATTE_RETURN_IF_ERROR(params.Validate());
  return Sampler(params);
}

void Sampler::ApplyPenalties(std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens) {
  float* l = work_.data();
  const auto valid = [this](int32_t t) { return t >= 0 && static_cast<size_t>(t) < vocab_; };

  const float rp = params_.repetition_penalty;
  if (rp != 1.0f) {
    // Once per distinct token of prompt + output (vLLM: prompt_mask | output_mask).
    const auto mark = [&](std::span<const int32_t> tokens) {
      for (int32_t t : tokens) {
        if (!valid(t) || seen_[t]) continue;
        seen_[t] = 1;
        l[t] = l[t] > 0 ? l[t] / rp : l[t] * rp;
      }
    };
    mark(prompt_tokens);
    mark(output_tokens);
    for (int32_t t : prompt_tokens)
      if (valid(t)) seen_[t] = 0;
    for (int32_t t : output_tokens)
      if (valid(t)) seen_[t] = 0;
  }

  const float fp = params_.frequency_penalty, pp = params_.presence_penalty;
  if (fp != 0.0f || pp != 0.0f) {
    for (int32_t t : output_tokens)
      if (valid(t)) ++counts_[t];
    for (int32_t t : output_tokens) {
      if (!valid(t) || counts_[t] == 0) continue;
      // Two subtractions, in vLLM's order (frequency, then presence).
      l[t] -= fp * static_cast<float>(counts_[t]);
      l[t] -= pp;
      counts_[t] = 0;
    }
  }
}

size_t Sampler::Filter(float max_logit) {
  const size_t V = vocab_;
  const float* l = work_.data();
  float* w = weights_.data();
  int32_t* ord = order_.data();
  weight_sum_ = ExpShiftedSum(l, static_cast<int64_t>(V), max_logit, w);

  // The total order every filter's prefix is taken in: logit descending, id ascending.
  const auto before = [l](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };
  const size_t k = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < V ? params_.top_k : V;
  const bool top_p_on = params_.top_p < 1.0f;
  const float min_p = params_.min_p;

  if (k == V && !top_p_on) {   // no ordering needed: min-p is a threshold on w = p / max(p)
    if (min_p <= 0) return V;  // every token kept: order_ is not needed (Draw(V))
    size_t n = 0;
    for (size_t i = 0; i < V; ++i) {
      if (w[i] >= min_p) ord[n++] = static_cast<int32_t>(i);
    }
    return n;
  }

  std::iota(ord, ord + V, 0);
  double mass_k = 0;  // top-p's normaliser: the mass of the top-k set
  if (k < V) {
    std::nth_element(ord, ord + (k - 1), ord + V, before);
    for (size_t j = 0; j < k; ++j) mass_k += w[ord[j]];
  } else {
    mass_k = weight_sum_;
  }
  size_t n = k;
  if (min_p > 0) {  // min-p removes a suffix of the order; top-p's prefix sums are unchanged
    size_t kept = 0;
    for (size_t j = 0; j < n; ++j) {
      if (w[ord[j]] >= min_p) ord[kept++] = ord[j];
    }
    n = kept;
  }
  if (!top_p_on) return n;

  // top-p without sorting the vocabulary: bucket the candidates by l_max - l (the log of
  // p_max / p) into kTopPBuckets bins of 1/kTopPBucketsPerNat nat. Buckets before the one
  // where the cumulative mass reaches top_p · mass_k are kept whole, later ones dropped, and
  // only the crossing bucket is sorted. O(V) plus a sort of the tokens within 1/16 nat of
  // the cut, where a full sort of V ~ 129k would cost milliseconds per token.
  const double target = static_cast<double>(params_.top_p) * mass_k;
  const auto bucket_of = [&](int32_t t) {
    const float d = max_logit - l[t];  // >= 0; +inf for masked tokens, NaN sorts last too
    return d < static_cast<float>(kTopPBuckets) / kTopPBucketsPerNat ? static_cast<int>(d * kTopPBucketsPerNat)
                                                                     : kTopPBuckets - 1;
  };
  bucket_mass_.fill(0.0);
  for (size_t j = 0; j < n; ++j) bucket_mass_[bucket_of(ord[j])] += w[ord[j]];
  double mass_before = 0;
  int cross = 0;
  for (; cross < kTopPBuckets; ++cross) {
    if (mass_before + bucket_mass_[cross] >= target) break;
    mass_before += bucket_mass_[cross];
  }
  if (cross == kTopPBuckets) return n;  // rounding kept the total below target: keep all
  int32_t* const whole_end = std::partition(ord, ord + n, [&](int32_t t) { return bucket_of(t) < cross; });
  int32_t* const cross_end = std::partition(whole_end, ord + n, [&](int32_t t) { return bucket_of(t) == cross; });
  std::sort(whole_end, cross_end, before);
  int32_t* kept_end = whole_end;
  for (; kept_end < cross_end && mass_before < target; ++kept_end) mass_before += w[*kept_end];
  return static_cast<size_t>(kept_end - ord);
}

double Sampler::NextUniform() {
  // 53 random bits → u in [0, 1), the same on every standard library (unlike
  // std::uniform_real_distribution, whose algorithm is unspecified).
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::DrawFromAll() {
  const float* w = weights_.data();
  kept_weight_ = weight_sum_;
  const double r = NextUniform() * kept_weight_;
  double acc = 0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < vocab_; ++i) {
    if (w[i] <= 0) continue;  // never draw a token of probability 0
    acc += w[i];
    last_positive = static_cast<int32_t>(i);
    if (r < acc) return last_positive;
  }
  return last_positive;  // r at or past the (vectorized) total: rounding
}

int32_t Sampler::Draw(size_t n) {
  if (n == vocab_) return DrawFromAll();
  const float* w = weights_.data();
  // The draw walks the kept tokens in id order, whatever order the filters left them
  // in: then a tiny change in the logits (another batch's rounding) moves the
  // cumulative sums by about as much and rarely changes the token drawn, where an order
  // that depends on the logits (top-p's buckets) could reshuffle it completely.
  uint8_t* kept = kept_.data();
  for (size_t j = 0; j < n; ++j) kept[order_[j]] = 1;
  double total = 0;
  for (size_t i = 0; i < vocab_; ++i) {
    if (kept[i]) total += w[i];
  }
  kept_weight_ = total;
  const double r = NextUniform() * total;
  double acc = 0;
  int32_t chosen = -1, last_positive = order_[0];
  for (size_t i = 0; i < vocab_; ++i) {
    if (!kept[i]) continue;
    kept[i] = 0;                             // all zero again between calls
    if (w[i] <= 0 || chosen >= 0) continue;  // never draw a token of probability 0
    acc += w[i];
    last_positive = static_cast<int32_t>(i);
    if (r < acc) chosen = static_cast<int32_t>(i);
  }
  return chosen >= 0 ? chosen : last_positive;  // r rounded up to the total
}

namespace {

// ScoreToken given lse = log(sum_i exp(x_i)).
SampledToken ScoreTokenWithLse(std::span<const float> x, int32_t id, int top_n, double lse) {
  SampledToken out;
  out.id = id;
  const size_t V = x.size();
  out.logprob = static_cast<float>(x[id] - lse);

  // Top N by insertion into a sorted array of at most 20: most tokens fail the first compare.
  const int want = static_cast<int>(std::min<size_t>(std::clamp(top_n, 0, kMaxTopLogprobs), V));
  int have = 0;
  for (size_t i = 0; i < V && want > 0; ++i) {
    const float v = x[i];
    if (have == want && !(v > x[out.top[have - 1].id])) continue;  // ties keep the lower id
    int pos = have == want ? want - 1 : have++;
    while (pos > 0 && v > x[out.top[pos - 1].id]) {
      out.top[pos] = out.top[pos - 1];
      --pos;
    }
    out.top[pos].id = static_cast<int32_t>(i);
  }
  out.num_top = have;
  for (int j = 0; j < have; ++j) out.top[j].logprob = static_cast<float>(x[out.top[j].id] - lse);
  return out;
}

}  // namespace

SampledToken ScoreToken(std::span<const float> x, int32_t id, int top_n) {
  const auto n = static_cast<int64_t>(x.size());
  const float max_x = MaxValue(x.data(), n);
  const double sum = ExpShiftedSum(x.data(), n, max_x, nullptr);  // f32 exp, f64 sum
  return ScoreTokenWithLse(x, id, top_n, max_x + std::log(sum));
}

SampledToken Sampler::Sample(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                             std::span<const int32_t> output_tokens) {
  const size_t V = logits.size();
  if (V != vocab_) {  // the first call (or a new vocabulary): the only allocations
    vocab_ = V;
    work_.resize(V);
    weights_.resize(V);
    order_.resize(V);
    counts_.assign(V, 0);
    seen_.assign(V, 0);
    kept_.assign(V, 0);
  }
  SampledToken out;
  if (V == 0) return out;

  std::copy(logits.begin(), logits.end(), work_.begin());
  ApplyPenalties(prompt_tokens, output_tokens);

  float* l = work_.data();
  if (params_.greedy()) {
    size_t best = 0;
    for (size_t i = 1; i < V; ++i) {
      if (l[i] > l[best]) best = i;  // strict: ties go to the lowest id
    }
    out.id = static_cast<int32_t>(best);
  } else {
    const float t = params_.temperature;
    if (t != 1.0f) {
      for (size_t i = 0; i < V; ++i) l[i] /= t;
    }
    const float max_logit = MaxValue(l, static_cast<int64_t>(V));
    if (!std::isfinite(max_logit)) {  // every token masked to -inf (or +inf present): argmax
      out.id = static_cast<int32_t>(std::max_element(l, l + V) - l);
    } else {
      const size_t kept = Filter(max_logit);
      out.id = Draw(kept);
      // With nothing filtered the draw summed exp(l - max) over every token in id
      // order, as ScoreToken would: that is the logprobs' normaliser when they are of
      // these logits (processed, or raw ones that neither temperature nor a penalty moved).
      const bool penalised =
          params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
      const bool scored_are_weighted = params_.logprobs_mode == LogprobsMode::kProcessed || (t == 1.0f && !penalised);
      if (kept == V && scored_are_weighted) {
        const std::span<const float> scored =
            params_.logprobs_mode == LogprobsMode::kRaw ? logits : std::span<const float>(work_.data(), V);
        return ScoreTokenWithLse(scored, out.id, params_.logprobs, max_logit + std::log(kept_weight_));
      }
    }
  }
  const int32_t id = out.id;
  out = ScoreToken(params_.logprobs_mode == LogprobsMode::kRaw ? logits : std::span<const float>(work_.data(), V), id,
                   params_.logprobs);
  return out;
}

}  // namespace latte

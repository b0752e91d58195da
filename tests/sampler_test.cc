// Sampler (src/engine/sampler.h) against references written here in double precision:
// the target distribution of each temperature / top-k / top-p / min-p combination follows
// vLLM's formulation literally (top-p: sort ascending, cumsum, drop where cumsum <=
// 1 - top_p; min-p: drop p < min_p * max p), and the sampler's frequencies over a fixed
// seed's draws are checked per token and by a chi-square test. Penalties are checked
// against numbers worked out by hand, logprobs against a reference log-softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace latte {
namespace {

constexpr int kDraws = 20000;
// Per-token bound: 5 standard deviations of a binomial frequency plus 1e-3 for the f32
// vs f64 arithmetic; with a fixed seed the test is deterministic, the bound only has to
// separate a correct sampler from a wrong one (a wrong filter moves mass by >> 1e-2).
constexpr double kSigmas = 5.0;
constexpr double kFreqSlack = 1e-3;
// The sampler works in f32 and the reference in f64: logits of magnitude <= ~10 round to
// ~1e-6 relative; 1e-5 leaves a margin.
constexpr double kLogprobTol = 1e-5;
constexpr double kLogitTol = 1e-6;

std::vector<float> RandomLogits(int vocab, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> logits(vocab);
  for (float& l : logits) l = static_cast<float>(normal(rng));
  return logits;
}

struct RefParams {
  double temperature = 1.0;
  int top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
};

std::vector<double> Softmax(const std::vector<double>& l, const std::vector<bool>& keep) {
  double m = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < l.size(); ++i)
    if (keep[i]) m = std::max(m, l[i]);
  std::vector<double> p(l.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < l.size(); ++i)
    if (keep[i]) sum += p[i] = std::exp(l[i] - m);
  for (double& v : p) v /= sum;
  return p;
}

// The distribution vLLM samples from: temperature, then top-k, top-p, min-p, each on the
// distribution left by the one before.
std::vector<double> ReferenceDistribution(const std::vector<double>& logits, const RefParams& rp) {
  const size_t V = logits.size();
  std::vector<double> l(V);
  for (size_t i = 0; i < V; ++i) l[i] = logits[i] / rp.temperature;
  std::vector<bool> keep(V, true);
  // Ascending by logit; among equal logits the higher id first (so it is dropped first).
  std::vector<size_t> asc(V);
  std::iota(asc.begin(), asc.end(), 0);
  std::sort(asc.begin(), asc.end(), [&](size_t a, size_t b) { return l[a] < l[b] || (l[a] == l[b] && a > b); });
  if (rp.top_k > 0 && static_cast<size_t>(rp.top_k) < V) {
    for (size_t r = 0; r < V - rp.top_k; ++r) keep[asc[r]] = false;
  }
  if (rp.top_p < 1.0) {
    const std::vector<double> p = Softmax(l, keep);
    double cumsum = 0;
    std::vector<bool> drop(V, false);
    for (size_t r = 0; r < V; ++r) {
      cumsum += p[asc[r]];
      if (cumsum <= 1.0 - rp.top_p) drop[asc[r]] = true;
    }
    drop[asc[V - 1]] = false;  // the most likely token always stays
    for (size_t i = 0; i < V; ++i)
      if (drop[i]) keep[i] = false;
  }
  if (rp.min_p > 0.0) {
    const std::vector<double> p = Softmax(l, keep);
    const double top = *std::max_element(p.begin(), p.end());
    for (size_t i = 0; i < V; ++i)
      if (p[i] < rp.min_p * top) keep[i] = false;
  }
  return Softmax(l, keep);
}

std::vector<double> ToDouble(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Upper critical value of chi-square with `df` degrees of freedom at the standard normal
// quantile z (Wilson–Hilferty; within ~1% for df >= 3). z = 4.265: p = 1e-5.
double ChiSquareCritical(int df, double z = 4.265) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Draws kDraws tokens and checks their frequencies against `p`.
void ExpectSamplesFollow(Sampler& sampler, const std::vector<float>& logits, const std::vector<double>& p,
                         std::span<const int32_t> prompt = {}, std::span<const int32_t> output = {}) {
  const size_t V = logits.size();
  std::vector<int> counts(V, 0);
  for (int n = 0; n < kDraws; ++n) {
    const SampledToken t = sampler.Sample(logits, prompt, output);
    ASSERT_GE(t.id, 0);
    ASSERT_LT(static_cast<size_t>(t.id), V);
    ++counts[t.id];
  }
  double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  for (size_t i = 0; i < V; ++i) {
    const double freq = static_cast<double>(counts[i]) / kDraws;
    if (p[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double bound = kSigmas * std::sqrt(p[i] * (1 - p[i]) / kDraws) + kFreqSlack;
    EXPECT_NEAR(freq, p[i], bound) << "token " << i;
    const double expected = p[i] * kDraws;
    if (expected < 5) {  // chi-square needs expected counts >= 5: pool the rare tokens
      pooled_expected += expected;
      pooled_observed += counts[i];
      continue;
    }
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++bins;
  }
  if (pooled_expected > 0) {
    chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  if (bins >= 4) {  // df >= 3, where the Wilson–Hilferty critical value holds
    EXPECT_LT(chi2, ChiSquareCritical(bins - 1)) << bins << " bins";
  }
}

struct DistributionCase {
  const char* name;
  int vocab;
  double logit_scale;
  SamplingParams params;
};

SamplingParams Params(float temperature, int top_k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 1234;
  return p;
}

TEST(SamplerTest, DistributionMatchesReference) {
  const DistributionCase cases[] = {
      {"plain", 32, 1.5, Params(1.0f, 0, 1.0f, 0.0f)},
      {"temperature_0.5", 32, 1.5, Params(0.5f, 0, 1.0f, 0.0f)},
      {"temperature_2", 32, 1.5, Params(2.0f, 0, 1.0f, 0.0f)},
      {"top_k_5", 32, 1.5, Params(0.7f, 5, 1.0f, 0.0f)},
      {"top_k_1", 32, 1.5, Params(1.0f, 1, 1.0f, 0.0f)},
      {"top_k_above_vocab", 20, 1.5, Params(1.0f, 25, 1.0f, 0.0f)},
      {"top_k_minus_1", 20, 1.5, Params(1.0f, -1, 1.0f, 0.0f)},
      {"top_p_0.8", 32, 1.5, Params(1.3f, 0, 0.8f, 0.0f)},
      {"top_p_0.3", 40, 1.0, Params(1.0f, 0, 0.3f, 0.0f)},
      {"min_p_0.1", 32, 1.5, Params(1.0f, 0, 1.0f, 0.1f)},
      {"min_p_1", 16, 1.5, Params(1.0f, 0, 1.0f, 1.0f)},
      {"top_k_top_p", 48, 1.0, Params(1.0f, 12, 0.7f, 0.0f)},
      {"all_filters", 50, 1.2, Params(0.9f, 10, 0.9f, 0.05f)},
      {"top_p_min_p", 50, 1.2, Params(1.1f, 0, 0.95f, 0.02f)},
      // min-p drops much of the mass: top-p must still be measured on the top-k (here: all)
      // distribution, not on what min-p leaves.
      {"min_p_heavy_top_p", 40, 0.6, Params(1.0f, 0, 0.6f, 0.3f)},
      {"min_p_heavy_top_k_top_p", 40, 0.6, Params(1.0f, 30, 0.5f, 0.4f)},
      // The sampler bins tokens by log-probability (1/16 nat) for top-p: ~250 tokens kept
      // over many bins; all tokens in the bin that is cut; logits spread over > 16 nats
      // (the last, open-ended bin) with top_p near 1.
      {"top_p_wide", 300, 0.3, Params(1.0f, 0, 0.9f, 0.0f)},
      {"top_p_flat", 300, 0.005, Params(1.0f, 0, 0.5f, 0.0f)},
      {"top_p_long_tail", 50, 6.0, Params(1.0f, 0, 0.9999f, 0.0f)},
  };
  uint64_t seed = 7;
  for (const DistributionCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.params.Validate().ok()) << c.params.Validate().message();
    const std::vector<float> logits = RandomLogits(c.vocab, c.logit_scale, seed++);
    const RefParams rp{c.params.temperature, c.params.top_k, c.params.top_p, c.params.min_p};
    const std::vector<double> p = ReferenceDistribution(ToDouble(logits), rp);
    Sampler sampler(c.params);
    ExpectSamplesFollow(sampler, logits, p);
  }
}

TEST(SamplerTest, DistributionWithPenaltiesMatchesReference) {
  const std::vector<float> logits = RandomLogits(24, 1.5, 99);
  const std::vector<int32_t> prompt = {0, 1, 2, 3, 3, 5};
  const std::vector<int32_t> output = {3, 4, 4, 7, 7, 7};
  SamplingParams params = Params(0.8f, 0, 0.9f, 0.0f);
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.4f;
  params.frequency_penalty = 0.3f;
  // Reference penalties, in double: repetition on {0,1,2,3,5} ∪ {3,4,7}; counts over output.
  std::vector<double> l = ToDouble(logits);
  for (int t : {0, 1, 2, 3, 4, 5, 7}) l[t] = l[t] > 0 ? l[t] / 1.3 : l[t] * 1.3;
  const int count[24] = {0, 0, 0, 1, 2, 0, 0, 3};
  for (int t = 0; t < 24; ++t)
    if (count[t] > 0) l[t] -= 0.4 + 0.3 * count[t];
  const std::vector<double> p = ReferenceDistribution(l, RefParams{0.8, 0, 0.9, 0.0});
  Sampler sampler(params);
  ExpectSamplesFollow(sampler, logits, p, prompt, output);
}

TEST(SamplerTest, PenaltiesMatchHandComputation) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, -0.5f, 3.0f, 0.0f, 1.0f, -2.0f};
  const std::vector<int32_t> prompt = {0, 1, 1, 5, -3, 99};  // -3, 99: out of range, ignored
  const std::vector<int32_t> output = {2, 3, 3, 3, 0};
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.25f;
  params.seed = 1;
  // By hand: repetition on seen {0, 1, 2, 3, 5} once each (1 twice in the prompt is still
  // one division); presence + frequency·count on output counts {0:1, 2:1, 3:3}.
  const double expected[8] = {
      2.0 / 1.5 - 0.5 - 0.25 * 1,   // 0: prompt and output
      -1.0 * 1.5,                   // 1: prompt only: no presence/frequency
      0.5 / 1.5 - 0.5 - 0.25 * 1,   // 2
      -0.5 * 1.5 - 0.5 - 0.25 * 3,  // 3
      3.0,                          // 4: unseen
      0.0 * 1.5,                    // 5: zero stays zero
      1.0,                          // 6
      -2.0,                         // 7
  };
  Sampler sampler(params);
  sampler.Sample(logits, prompt, output);
  ASSERT_EQ(sampler.processed_logits().size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(sampler.processed_logits()[i], expected[i], kLogitTol) << i;

  // Temperature divides after the penalties.
  params.temperature = 0.5f;
  Sampler hot(params);
  hot.Sample(logits, prompt, output);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(hot.processed_logits()[i], expected[i] / 0.5, 2 * kLogitTol) << i;

  // Calls leave no state behind: a second call with no history sees the raw logits.
  sampler.Sample(logits);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sampler.processed_logits()[i], logits[i]) << i;
}

TEST(SamplerTest, PenaltiesChangeGreedyChoice) {
  // Token 0 leads by 1; a frequency penalty of 0.6 on two occurrences flips it to token 1.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  const std::vector<int32_t> output = {0, 0};
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_EQ(Sampler(params).Sample(logits, {}, output).id, 0);
  params.frequency_penalty = 0.6f;
  EXPECT_EQ(Sampler(params).Sample(logits, {}, output).id, 1);
  // Presence/frequency count output tokens only: the same ids in the prompt do nothing.
  EXPECT_EQ(Sampler(params).Sample(logits, output, {}).id, 0);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferent) {
  const std::vector<float> logits = RandomLogits(32, 1.0, 5);
  const auto draw = [&](std::optional<uint64_t> seed) {
    SamplingParams params = Params(1.0f, 0, 0.95f, 0.0f);
    params.seed = seed;
    Sampler sampler(params);
    std::vector<int32_t> ids;
    for (int i = 0; i < 200; ++i) ids.push_back(sampler.Sample(logits).id);
    return ids;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  // Unseeded samplers take their seed from std::random_device: two of them differ
  // (200 draws from ~30 tokens agree by chance with probability < 1e-100).
  EXPECT_NE(draw(std::nullopt), draw(std::nullopt));
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToLowestId) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = RandomLogits(50, 2.0, 100 + seed);
    const int32_t argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    SamplingParams params;
    params.temperature = 0.0f;
    params.top_k = 3;  // filters do not matter when greedy
    Sampler sampler(params);
    EXPECT_EQ(sampler.Sample(logits).id, argmax);
    params.temperature = 1e-6f;  // below kGreedyTemperature: greedy too
    EXPECT_EQ(Sampler(params).Sample(logits).id, argmax);
  }
  const std::vector<float> tied = {0.0f, 3.0f, 1.0f, 3.0f, 3.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_EQ(Sampler(params).Sample(tied).id, 1);
  // top_k = 1 samples the same token: ties broken the same way.
  params = Params(1.0f, 1, 1.0f, 0.0f);
  Sampler top1(params);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(top1.Sample(tied).id, 1);
}

std::vector<double> LogSoftmax(const std::vector<double>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double sum = 0;
  for (double v : l) sum += std::exp(v - m);
  std::vector<double> out(l.size());
  for (size_t i = 0; i < l.size(); ++i) out[i] = l[i] - m - std::log(sum);
  return out;
}

// The reference top N: ids by logprob descending, id ascending.
std::vector<int32_t> TopIds(const std::vector<double>& lp, int n) {
  std::vector<int32_t> ids(lp.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
  ids.resize(std::min<size_t>(n, ids.size()));
  return ids;
}

void ExpectLogprobs(const SampledToken& t, const std::vector<double>& ref_lp, int n) {
  EXPECT_NEAR(t.logprob, ref_lp[t.id], kLogprobTol);
  const std::vector<int32_t> top = TopIds(ref_lp, n);
  ASSERT_EQ(t.top_logprobs().size(), top.size());
  for (size_t j = 0; j < top.size(); ++j) {
    EXPECT_EQ(t.top_logprobs()[j].id, top[j]) << "rank " << j;
    EXPECT_NEAR(t.top_logprobs()[j].logprob, ref_lp[top[j]], kLogprobTol) << "rank " << j;
  }
}

TEST(SamplerTest, RawLogprobsMatchReferenceLogSoftmax) {
  std::vector<float> logits = RandomLogits(40, 2.0, 11);
  logits[7] = logits[30] = logits[12] = 9.0f;  // a three-way tie at the top: ids 7, 12, 30
  const std::vector<double> ref = LogSoftmax(ToDouble(logits));
  for (int n : {0, 1, 5, 20}) {
    SamplingParams params = Params(0.7f, 10, 0.9f, 0.0f);
    params.logprobs = n;
    params.repetition_penalty = 1.2f;  // raw logprobs ignore all processing
    Sampler sampler(params);
    const std::vector<int32_t> prompt = {7, 1, 2};
    for (int i = 0; i < 20; ++i) ExpectLogprobs(sampler.Sample(logits, prompt, {}), ref, n);
  }
  const std::vector<int32_t> top = TopIds(ref, 3);
  EXPECT_EQ(top, (std::vector<int32_t>{7, 12, 30}));  // the reference orders ties by id
  // More alternatives asked than the vocabulary has: all of them.
  SamplingParams params;
  params.logprobs = 20;
  params.seed = 3;
  const std::vector<float> small = {1.0f, 2.0f, 0.5f};
  ExpectLogprobs(Sampler(params).Sample(small), LogSoftmax(ToDouble(small)), 3);
}

TEST(SamplerTest, ProcessedLogprobsAfterPenaltiesAndTemperature) {
  const std::vector<float> logits = RandomLogits(30, 1.5, 12);
  const std::vector<int32_t> prompt = {1, 2};
  const std::vector<int32_t> output = {2, 5, 5};
  SamplingParams params = Params(0.6f, 4, 1.0f, 0.0f);
  params.logprobs = 8;
  params.logprobs_mode = LogprobsMode::kProcessed;
  params.repetition_penalty = 1.25f;
  params.presence_penalty = 0.3f;
  params.frequency_penalty = 0.2f;
  std::vector<double> l = ToDouble(logits);
  for (int t : {1, 2, 5}) l[t] = l[t] > 0 ? l[t] / 1.25 : l[t] * 1.25;
  l[2] -= 0.3 + 0.2 * 1;
  l[5] -= 0.3 + 0.2 * 2;
  std::vector<double> scaled = l;
  for (double& v : scaled) v /= 0.6;
  // Before top-k: the alternatives include tokens outside the top 4 with finite logprobs.
  const std::vector<double> ref = LogSoftmax(scaled);
  Sampler sampler(params);
  for (int i = 0; i < 20; ++i) ExpectLogprobs(sampler.Sample(logits, prompt, output), ref, 8);
  // Greedy: penalties only (no temperature).
  params.temperature = 0.0f;
  Sampler greedy(params);
  const SampledToken t = greedy.Sample(logits, prompt, output);
  const std::vector<double> ref_greedy = LogSoftmax(l);
  EXPECT_EQ(t.id, TopIds(ref_greedy, 1)[0]);
  ExpectLogprobs(t, ref_greedy, 8);
}

TEST(SamplerTest, BuffersAreReusedAcrossCalls) {
  const std::vector<float> logits = RandomLogits(64, 1.0, 13);
  SamplingParams params = Params(1.0f, 8, 0.9f, 0.05f);
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.1f;
  Sampler sampler(params);
  const std::vector<int32_t> history = {1, 2, 3};
  sampler.Sample(logits, history, history);
  const float* buffer = sampler.processed_logits().data();
  for (int i = 0; i < 100; ++i) sampler.Sample(logits, history, history);
  EXPECT_EQ(sampler.processed_logits().data(), buffer);
}

TEST(SamplerTest, ValidateRejectsOutOfRange) {
  EXPECT_TRUE(SamplingParams().Validate().ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad {
    const char* field;
    void (*set)(SamplingParams&, float);
    std::vector<float> values;
  };
  const Bad bad[] = {
      {"temperature", [](SamplingParams& p, float v) { p.temperature = v; }, {-0.1f, 2.01f, nan, inf}},
      {"top_p", [](SamplingParams& p, float v) { p.top_p = v; }, {0.0f, -0.5f, 1.01f, nan}},
      {"min_p", [](SamplingParams& p, float v) { p.min_p = v; }, {-0.01f, 1.01f, nan}},
      {"presence_penalty", [](SamplingParams& p, float v) { p.presence_penalty = v; }, {-2.01f, 2.01f, nan}},
      {"frequency_penalty", [](SamplingParams& p, float v) { p.frequency_penalty = v; }, {-2.01f, 2.01f, nan}},
      {"repetition_penalty", [](SamplingParams& p, float v) { p.repetition_penalty = v; }, {0.0f, -1.0f, nan, inf}},
      {"top_k", [](SamplingParams& p, float v) { p.top_k = static_cast<int>(v); }, {-2.0f, -100.0f}},
      {"logprobs", [](SamplingParams& p, float v) { p.logprobs = static_cast<int>(v); }, {-1.0f, 21.0f}},
  };
  for (const Bad& b : bad) {
    for (float v : b.values) {
      SamplingParams p;
      b.set(p, v);
      const Status s = p.Validate();
      EXPECT_FALSE(s.ok()) << b.field << " = " << v;
      EXPECT_NE(s.message().find(b.field), std::string::npos) << s.message();
      EXPECT_FALSE(Sampler::Create(p).ok());
    }
  }
  // The edges OpenAI and vLLM accept.
  SamplingParams edge;
  edge.temperature = 2.0f;
  edge.top_p = 1.0f;
  edge.min_p = 1.0f;
  edge.presence_penalty = -2.0f;
  edge.frequency_penalty = 2.0f;
  edge.repetition_penalty = 0.01f;
  edge.top_k = -1;
  edge.logprobs = 20;
  EXPECT_TRUE(edge.Validate().ok()) << edge.Validate().message();
  edge.temperature = 0.0f;
  edge.top_k = 0;
  edge.logprobs = 0;
  EXPECT_TRUE(Sampler::Create(edge).ok());
}

}  // namespace
}  // namespace latte

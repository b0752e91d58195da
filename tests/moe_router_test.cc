// RouteToken (src/model/moe.h) against an independent brute-force router written here
// in double: groups are kept by enumerating every subset of topk_group groups and taking
// the one with the largest total group score (for distinct scores that is exactly the
// top-topk_group set), and an expert is chosen when fewer than k eligible experts rank
// above it. The reference follows the Hugging Face MoEGate of DeepSeek-V2 (softmax,
// greedy / group_limited_greedy) and DeepSeek-V3 (sigmoid, noaux_tc).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/moe.h"

namespace latte {
namespace {

// RouteToken computes scores in f32 (sigmoid, or exp then a double sum) and rounds the
// normalised weight to f32: ~8 roundings of 2^-24 (6e-8) ≈ 5e-7 relative; 2e-6 leaves
// a 4x margin.
constexpr double kWeightRelTol = 2e-6;
// The kernel ranks f32 scores (error <= ~3e-7 on scores <= 1, plus the f32 bias add,
// and twice that on a sum of two); the reference ranks doubles. Random draws whose k-th
// and (k+1)-th expert, or last kept and first dropped group, are closer than this are
// redrawn, because there the two rankings may legitimately differ. 1e-5 is ~15x the
// f32 error and rejects only a few percent of draws (checked below).
constexpr double kTieMargin = 1e-5;
constexpr int kTokensPerCase = 500;

struct RouterCase {
  const char* name;
  ScoringFunc scoring_func;
  TopkMethod topk_method;
  int64_t experts, n_group, topk_group, k;
  bool norm_topk_prob;
  double routed_scaling_factor;
};

ModelConfig MakeConfig(const RouterCase& rc) {
  ModelConfig c;
  c.n_routed_experts = rc.experts;
  c.n_group = rc.n_group;
  c.topk_group = rc.topk_group;
  c.num_experts_per_tok = rc.k;
  c.norm_topk_prob = rc.norm_topk_prob;
  c.routed_scaling_factor = rc.routed_scaling_factor;
  c.scoring_func = rc.scoring_func;
  c.topk_method = rc.topk_method;
  return c;
}

struct Routed {
  std::map<int64_t, double> weights;                        // chosen id → weight
  double margin = std::numeric_limits<double>::infinity();  // closest decision
};

Routed ReferenceRoute(const RouterCase& rc, const std::vector<float>& logits, const std::vector<float>& bias) {
  const int64_t E = rc.experts;
  const TopkMethod method = rc.topk_method;
  Routed r;

  // Scores s, in double.
  std::vector<double> s(E);
  if (rc.scoring_func == ScoringFunc::kSigmoid) {
    for (int64_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
  } else {
    double z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(double(logits[e]));
    for (int64_t e = 0; e < E; ++e) s[e] = std::exp(double(logits[e])) / z;
  }
  // What experts are ranked by: biased only under noaux_tc.
  std::vector<double> choice(E);
  for (int64_t e = 0; e < E; ++e) {
    choice[e] = s[e] + (method == TopkMethod::kNoauxTc && !bias.empty() ? double(bias[e]) : 0.0);
  }

  // Groups: every group kept unless the method limits groups.
  std::vector<bool> eligible(E, true);
  if (method != TopkMethod::kGreedy && rc.n_group > 1) {
    const int64_t per_group = E / rc.n_group;
    std::vector<double> group_score(rc.n_group);
    for (int64_t g = 0; g < rc.n_group; ++g) {
      double best = -1e300, second = -1e300;
      for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (choice[e] > best) {
          second = best;
          best = choice[e];
        } else if (choice[e] > second) {
          second = choice[e];
        }
      }
      // noaux_tc: sum of the two best; group_limited_greedy: the best.
      group_score[g] = method == TopkMethod::kNoauxTc ? best + second : best;
    }
    double best_sum = -1e300, second_sum = -1e300;
    uint32_t best_mask = 0;
    for (uint32_t mask = 0; mask < (1u << rc.n_group); ++mask) {
      if (std::popcount(mask) != rc.topk_group) continue;
      double sum = 0;
      for (int64_t g = 0; g < rc.n_group; ++g) {
        if (mask & (1u << g)) sum += group_score[g];
      }
      if (sum > best_sum) {
        second_sum = best_sum;
        best_sum = sum;
        best_mask = mask;
      } else if (sum > second_sum) {
        second_sum = sum;
      }
    }
    // The runner-up subset swaps the weakest kept group for the strongest dropped one.
    if (second_sum > -1e300) r.margin = std::min(r.margin, best_sum - second_sum);
    for (int64_t e = 0; e < E; ++e) eligible[e] = (best_mask >> (e / per_group)) & 1u;
  }

  // Experts: chosen when fewer than k eligible experts rank above.
  double lowest_chosen = 1e300, highest_dropped = -1e300;
  for (int64_t e = 0; e < E; ++e) {
    if (!eligible[e]) continue;
    int64_t above = 0;
    for (int64_t f = 0; f < E; ++f) above += eligible[f] && choice[f] > choice[e];
    if (above < rc.k) {
      r.weights[e] = s[e];
      lowest_chosen = std::min(lowest_chosen, choice[e]);
    } else {
      highest_dropped = std::max(highest_dropped, choice[e]);
    }
  }
  if (highest_dropped > -1e300) r.margin = std::min(r.margin, lowest_chosen - highest_dropped);

  // Hugging Face: normalise only when top_k > 1 and norm_topk_prob; then scale.
  double sum = 0;
  for (const auto& [e, w] : r.weights) sum += w;
  for (auto& [e, w] : r.weights) {
    if (rc.k > 1 && rc.norm_topk_prob) w /= sum;
    w *= rc.routed_scaling_factor;
  }
  return r;
}

std::set<int64_t> IdsOf(const Routed& r) {
  std::set<int64_t> ids;
  for (const auto& [e, w] : r.weights) ids.insert(e);
  return ids;
}

struct KernelRoute {
  std::vector<int64_t> ids;
  std::vector<float> weights;
};

KernelRoute RunRouteToken(const ModelConfig& c, const std::vector<float>& logits, const std::vector<float>& bias) {
  KernelRoute r{std::vector<int64_t>(c.num_experts_per_tok, -1), std::vector<float>(c.num_experts_per_tok, NAN)};
  RouteToken(c, logits.data(), bias.empty() ? nullptr : bias.data(), r.ids.data(), r.weights.data());
  return r;
}

// Compares ids as sets and the weight of each id; true when they match.
bool ExpectSameRoute(const KernelRoute& got, const Routed& want, const std::string& what) {
  std::set<int64_t> got_ids(got.ids.begin(), got.ids.end());
  const std::set<int64_t> want_ids = IdsOf(want);
  EXPECT_EQ(got_ids.size(), got.ids.size()) << what << ": duplicate ids";
  EXPECT_EQ(got_ids, want_ids) << what;
  if (got_ids != want_ids) return false;
  bool ok = true;
  for (size_t i = 0; i < got.ids.size(); ++i) {
    const double w = want.weights.at(got.ids[i]);
    const bool close = std::fabs(double(got.weights[i]) - w) <= kWeightRelTol * std::fabs(w);
    EXPECT_TRUE(close) << what << ": weight of expert " << got.ids[i] << " is " << got.weights[i] << ", want " << w;
    ok = ok && close;
  }
  return ok;
}

using enum ScoringFunc;
using enum TopkMethod;

const RouterCase kCases[] = {
    // V3 routing on a small shape, with and without normalisation.
    {"noaux_tc_E16_G4", kSigmoid, kNoauxTc, 16, 4, 2, 4, true, 2.5},
    {"noaux_tc_E16_G4_unnormalised", kSigmoid, kNoauxTc, 16, 4, 2, 4, false, 1.0},
    {"noaux_tc_E64_one_group", kSigmoid, kNoauxTc, 64, 1, 1, 6, true, 2.5},
    // k = 1: Hugging Face does not normalise a single weight even with norm_topk_prob.
    {"noaux_tc_k1", kSigmoid, kNoauxTc, 16, 4, 2, 1, true, 1.0},
    // DeepSeek-V3's shape: 256 experts in 8 groups, keep 4, top 8.
    {"noaux_tc_v3_shape", kSigmoid, kNoauxTc, 256, 8, 4, 8, true, 2.5},
    // V2 greedy (DeepSeek-V2-Lite: 64 experts, top 6).
    {"softmax_greedy_E64", kSoftmax, kGreedy, 64, 1, 1, 6, false, 1.0},
    {"softmax_greedy_E64_normalised", kSoftmax, kGreedy, 64, 1, 1, 6, true, 1.0},
    // greedy ignores n_group / topk_group.
    {"softmax_greedy_groups_ignored", kSoftmax, kGreedy, 16, 4, 2, 4, false, 16.0},
    {"group_limited_E16_G4", kSoftmax, kGroupLimitedGreedy, 16, 4, 2, 4, false, 1.0},
    {"group_limited_E16_G4_normalised", kSoftmax, kGroupLimitedGreedy, 16, 4, 2, 4, true, 1.0},
    // DeepSeek-V2's shape: 160 experts in 8 groups, keep 3, top 6, × 16.
    {"group_limited_v2_shape", kSoftmax, kGroupLimitedGreedy, 160, 8, 3, 6, false, 16.0},
};

TEST(RouterRandom, MatchesBruteForceReference) {
  for (const RouterCase& rc : kCases) {
    SCOPED_TRACE(rc.name);
    const ModelConfig c = MakeConfig(rc);
    const bool biased = rc.topk_method == TopkMethod::kNoauxTc;
    std::mt19937 rng(1000 + static_cast<uint32_t>(rc.experts * 31 + rc.k));
    // Sigmoid logits over [-4, 4] spread the scores over (0.02, 0.98); a bias of up to
    // ±0.2 is large enough to reorder them.
    std::uniform_real_distribution<float> logit_dist(-4.0f, 4.0f);
    std::uniform_real_distribution<float> bias_dist(-0.2f, 0.2f);
    std::vector<float> bias;
    if (biased) {
      bias.resize(rc.experts);
      for (float& b : bias) b = bias_dist(rng);
    }
    int accepted = 0, redrawn = 0, failures = 0, bias_mattered = 0, groups_mattered = 0;
    while (accepted < kTokensPerCase && failures < 5) {
      std::vector<float> logits(rc.experts);
      for (float& l : logits) l = logit_dist(rng);
      const bool distinct = std::set<float>(logits.begin(), logits.end()).size() == logits.size();
      const Routed want = ReferenceRoute(rc, logits, bias);
      if (!distinct || want.margin < kTieMargin) {
        ++redrawn;
        continue;
      }
      ++accepted;
      const KernelRoute got = RunRouteToken(c, logits, bias);
      if (!ExpectSameRoute(got, want, "token " + std::to_string(accepted))) ++failures;

      // Track that the bias and the group limit actually decide something here.
      const Routed unbiased = ReferenceRoute(rc, logits, {});
      if (biased) bias_mattered += IdsOf(unbiased) != IdsOf(want);
      RouterCase ungrouped = rc;
      ungrouped.topk_method = TopkMethod::kGreedy;
      groups_mattered += IdsOf(ReferenceRoute(ungrouped, logits, {})) != IdsOf(unbiased);
    }
    EXPECT_EQ(failures, 0);
    EXPECT_LT(redrawn, kTokensPerCase / 10) << "too many near-ties redrawn";
    if (biased) {
      EXPECT_GT(bias_mattered, 0) << "the bias never changed the choice";
    }
    if (rc.topk_method != TopkMethod::kGreedy && rc.n_group > 1) {
      EXPECT_GT(groups_mattered, 0) << "the group limit never changed the choice";
    }
  }
}

// noaux_tc without a bias (nullptr) ranks by the plain scores.
TEST(RouterRandom, NullBiasIsZeroBias) {
  const RouterCase rc = kCases[0];
  const ModelConfig c = MakeConfig(rc);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> logit_dist(-4.0f, 4.0f);
  const std::vector<float> zeros(rc.experts, 0.0f);
  for (int t = 0; t < 50; ++t) {
    std::vector<float> logits(rc.experts);
    for (float& l : logits) l = logit_dist(rng);
    const KernelRoute a = RunRouteToken(c, logits, {});
    const KernelRoute b = RunRouteToken(c, logits, zeros);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.weights, b.weights);
  }
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Group 0 holds the two best unbiased scores, but the bias lifts group 1: noaux_tc picks
// experts 4 and 5, and their weights are their unbiased sigmoid scores.
TEST(RouterHandMade, BiasChangesGroupChoiceNotWeight) {
  RouterCase rc{"hand", kSigmoid, kNoauxTc, 8, 2, 1, 2, false, 1.0};
  const std::vector<float> logits = {2.0f, 1.5f, -1.0f, -2.0f, 0.5f, 0.2f, -3.0f, -4.0f};
  const std::vector<float> bias = {0, 0, 0, 0, 0.5f, 0.5f, 0, 0};
  // Biased group scores: group 0: s0 + s1 = 0.881 + 0.818 = 1.699;
  // group 1: (0.622 + 0.5) + (0.550 + 0.5) = 2.172.
  {
    const KernelRoute got = RunRouteToken(MakeConfig(rc), logits, bias);
    std::map<int64_t, float> by_id;
    for (size_t i = 0; i < got.ids.size(); ++i) by_id[got.ids[i]] = got.weights[i];
    ASSERT_EQ(by_id.size(), 2u);
    ASSERT_TRUE(by_id.count(4) && by_id.count(5)) << got.ids[0] << " " << got.ids[1];
    EXPECT_NEAR(by_id[4], Sigmoid(0.5), kWeightRelTol * Sigmoid(0.5));
    EXPECT_NEAR(by_id[5], Sigmoid(0.2), kWeightRelTol * Sigmoid(0.2));
  }
  // Without the bias, group 0 wins: experts 0 and 1.
  {
    const KernelRoute got = RunRouteToken(MakeConfig(rc), logits, {});
    EXPECT_EQ(std::set<int64_t>(got.ids.begin(), got.ids.end()), (std::set<int64_t>{0, 1}));
  }
  // Normalised and scaled: s4 / (s4 + s5) × 2.5.
  rc.norm_topk_prob = true;
  rc.routed_scaling_factor = 2.5;
  {
    const KernelRoute got = RunRouteToken(MakeConfig(rc), logits, bias);
    const double s4 = Sigmoid(0.5), s5 = Sigmoid(0.2);
    for (size_t i = 0; i < got.ids.size(); ++i) {
      ASSERT_TRUE(got.ids[i] == 4 || got.ids[i] == 5);
      const double want = (got.ids[i] == 4 ? s4 : s5) / (s4 + s5) * 2.5;
      EXPECT_NEAR(got.weights[i], want, kWeightRelTol * want) << "expert " << got.ids[i];
    }
  }
}

// One group: the bias moves expert 2 (third by score) into the top 2, and its weight is
// its own sigmoid, not the biased 0.99.
TEST(RouterHandMade, BiasChangesExpertChoiceNotWeight) {
  const RouterCase rc{"hand", kSigmoid, kNoauxTc, 4, 1, 1, 2, false, 1.0};
  const std::vector<float> logits = {1.0f, 0.9f, 0.8f, 0.7f};
  const std::vector<float> bias = {0, 0, 0.3f, 0};
  const KernelRoute got = RunRouteToken(MakeConfig(rc), logits, bias);
  std::map<int64_t, float> by_id;
  for (size_t i = 0; i < got.ids.size(); ++i) by_id[got.ids[i]] = got.weights[i];
  ASSERT_EQ(by_id.size(), 2u);
  ASSERT_TRUE(by_id.count(0) && by_id.count(2)) << got.ids[0] << " " << got.ids[1];
  EXPECT_NEAR(by_id[0], Sigmoid(1.0), kWeightRelTol * Sigmoid(1.0));
  EXPECT_NEAR(by_id[2], Sigmoid(0.8), kWeightRelTol * Sigmoid(0.8));
}

// Softmax routing ignores score_bias (only noaux_tc uses e_score_correction_bias).
TEST(RouterHandMade, SoftmaxIgnoresBias) {
  const RouterCase rc{"hand", kSoftmax, kGreedy, 4, 1, 1, 2, false, 1.0};
  const std::vector<float> logits = {1.0f, 0.9f, 0.8f, 0.7f};
  const std::vector<float> bias = {0, 0, 0.3f, 0};
  const KernelRoute got = RunRouteToken(MakeConfig(rc), logits, bias);
  EXPECT_EQ(std::set<int64_t>(got.ids.begin(), got.ids.end()), (std::set<int64_t>{0, 1}));
}

}  // namespace
}  // namespace latte

#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/scratch.h"
#include "kernels/matmul.h"
#include "kernels/silu_mul.h"

namespace latte {
namespace {

// True when value a ranks before value b: larger first, ties to the lower index.
inline bool RanksBefore(const float* v, int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

// order[0, k) = indices of the k largest of values[0, n), descending; order has room for n.
void TopK(const float* values, int64_t n, int64_t k, int64_t* order) {
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + k, order + n, [values](int64_t a, int64_t b) { return RanksBefore(values, a, b); });
}

// What a group of experts is ranked by: the sum of its top two (noaux_tc) or its max.
float GroupScore(const float* members, int64_t n, bool sum_top2) {
  float first = -INFINITY, second = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (members[i] > first) {
      second = first;
      first = members[i];
    } else if (members[i] > second) {
      second = members[i];
    }
  }
  return sum_top2 && n > 1 ? first + second : first;
}

}  // namespace

void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids, float* weights) {
  RouterScratch scratch;
  RouteToken(c, logits, score_bias, ids, weights, scratch);
}

void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids, float* weights,
                RouterScratch& s) {
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  float* scores = Grow(s.scores, E);
  if (c.scoring_func == ScoringFunc::kSigmoid) {
    for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    const float max_logit = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (scores[e] = std::exp(logits[e] - max_logit));
    for (int64_t e = 0; e < E; ++e) scores[e] = static_cast<float>(scores[e] / sum);
  }
  // choice: what experts are ranked by (biased scores under noaux_tc).
  float* choice = Grow(s.choice, E);
  std::copy(scores, scores + E, choice);
  if (c.HasScoreCorrectionBias() && score_bias != nullptr) {
    for (int64_t e = 0; e < E; ++e) choice[e] += score_bias[e];
  }
  int64_t* order = Grow(s.order, std::max(E, c.n_group));
  if (c.topk_method != TopkMethod::kGreedy && c.n_group > 1) {
    const int64_t per_group = E / c.n_group;
    float* group_score = Grow(s.group_score, c.n_group);
    const bool sum_top2 = c.topk_method == TopkMethod::kNoauxTc;
    for (int64_t g = 0; g < c.n_group; ++g) {
      group_score[g] = GroupScore(choice + g * per_group, per_group, sum_top2);
    }
    TopK(group_score, c.n_group, c.topk_group, order);
    char* keep = Grow(s.keep_group, c.n_group);
    std::fill(keep, keep + c.n_group, 0);
    for (int64_t i = 0; i < c.topk_group; ++i) keep[order[i]] = 1;
    for (int64_t e = 0; e < E; ++e) {
      if (!keep[e / per_group]) choice[e] = -INFINITY;
    }
  }
  TopK(choice, E, k, order);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = scores[order[i]];
    sum += weights[i];
  }
  // Hugging Face adds 1e-20 to the denominator; kept for bit-level agreement.
  const double norm = (c.norm_topk_prob && k > 1) ? 1.0 / (sum + 1e-20) : 1.0;
  for (int64_t i = 0; i < k; ++i) {
    weights[i] = static_cast<float>(weights[i] * norm * c.routed_scaling_factor);
  }
}

void RouteRows(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, int64_t* ids, float* weights,
               FfnScratch& s) {
  const int64_t d = c.hidden_size, E = c.n_routed_experts, k = c.num_experts_per_tok;
  float* logits = Grow(s.logits, n * E);  // logits: [n, E]
  Matmul(x, n, WeightView{DType::kF32, E, d, d, w.router.data()}, logits);
  for (int64_t t = 0; t < n; ++t) {
    RouteToken(c, logits + t * E, w.score_bias.empty() ? nullptr : w.score_bias.data(), ids + t * k, weights + t * k,
               s.router);
  }
}

void MoeForward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out, FfnScratch& s,
                bool with_shared) {
  const int64_t k = c.num_experts_per_tok;
  int64_t* ids = Grow(s.route_ids, n * k);
  float* weights = Grow(s.route_weights, n * k);
  RouteRows(c, w, x, n, ids, weights, s);
  MoeExperts(c, w, x, n, ids, weights, out, s, with_shared);
}

void MoeExperts(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, const int64_t* ids,
                const float* weights, float* out, FfnScratch& s, bool with_shared) {
  const MlpWeights* shared = with_shared && w.shared ? &*w.shared : nullptr;
  const int64_t d = c.hidden_size, E = c.n_routed_experts, k = c.num_experts_per_tok;
  s.expert_rows.resize(E);
  s.expert_weights.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    s.expert_rows[e].clear();
    s.expert_weights[e].clear();
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      s.expert_rows[ids[t * k + i]].push_back(t);
      s.expert_weights[ids[t * k + i]].push_back(weights[t * k + i]);
    }
  }

  // The shared experts and every routed expert with rows run as two batches:
  // all gate/up products, then (after one SiLU-mul over all of them) all down
  // products, so a decode step pays two fork/joins for the whole MoE instead of
  // three per expert. Each expert runs once over its rows (its weights are read
  // once); the sum below adds shared, then experts by id, one fixed order, so the
  // output does not depend on how the products were batched.
  std::vector<MoePart>& parts = s.parts;
  parts.clear();
  int64_t in_rows = 0, hidden_total = 0;
  if (shared) {
    parts.push_back({shared, -1, n, shared->gate_proj.rows, x, 0, out});
    hidden_total += n * shared->gate_proj.rows;
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = static_cast<int64_t>(s.expert_rows[e].size());
    if (m == 0 || !w.Holds(e)) continue;  // another rank holds e (whole-expert sharding) and adds its part
    parts.push_back({&w.experts[e], e, m, w.experts[e].gate_proj.rows, nullptr, hidden_total, nullptr});
    hidden_total += m * w.experts[e].gate_proj.rows;
    in_rows += m;
  }
  float* xin = Grow(s.rows_in, in_rows * d);
  float* yout = Grow(s.rows_out, in_rows * d);
  float* gate = Grow(s.gate, hidden_total);
  float* up = Grow(s.up, hidden_total);
  int64_t row = 0;
  for (MoePart& p : parts) {
    if (p.expert < 0) continue;
    const std::vector<int64_t>& rows = s.expert_rows[p.expert];
    float* xe = xin + row * d;
    for (int64_t i = 0; i < p.m; ++i) std::memcpy(xe + i * d, x + rows[i] * d, d * sizeof(float));
    p.x = xe;
    p.y = yout + row * d;
    row += p.m;
  }
  std::vector<MatmulProblem>& problems = s.problems;
  problems.clear();
  for (const MoePart& p : parts) {
    problems.push_back({p.x, p.m, d, p.mlp->gate_proj, gate + p.hidden, p.width});
    problems.push_back({p.x, p.m, d, p.mlp->up_proj, up + p.hidden, p.width});
  }
  MatmulMany(problems.data(), static_cast<int64_t>(problems.size()));
  SiluMul(gate, up, hidden_total, gate);
  problems.clear();
  for (const MoePart& p : parts) {
    problems.push_back({gate + p.hidden, p.m, p.width, p.mlp->down_proj, p.y, d});
  }
  MatmulMany(problems.data(), static_cast<int64_t>(problems.size()));

  if (!shared) std::fill(out, out + n * d, 0.0f);
  for (const MoePart& p : parts) {
    if (p.expert < 0) continue;
    const std::vector<int64_t>& rows = s.expert_rows[p.expert];
    for (int64_t i = 0; i < p.m; ++i) {
      const float weight = s.expert_weights[p.expert][i];
      float* dst = out + rows[i] * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += weight * p.y[i * d + j];
    }
  }
}

}  // namespace latte

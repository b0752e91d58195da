#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/matmul.h"
#include "kernels/silu_mul.h"

namespace latte {
namespace {

template <typename T>
T* Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

// Indices of the k largest values (ties: lower index first), in descending order.
std::vector<int64_t> TopK(const std::vector<float>& values, int64_t k) {
  std::vector<int64_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

}  // namespace

void MlpForward(const MlpWeights& w, const float* x, int64_t n, float* out, FfnScratch& s) {
  const int64_t width = w.gate_proj.rows;
  float* gate = Grow(s.gate, n * width);
  float* up = Grow(s.up, n * width);
  Matmul(x, n, w.gate_proj, gate);
  Matmul(x, n, w.up_proj, up);
  SiluMul(gate, up, n * width, gate);
  Matmul(gate, n, w.down_proj, out);
}

void RouteToken(const ModelConfig& c, const float* logits, const float* score_bias, int64_t* ids,
                float* weights) {
  const int64_t E = c.n_routed_experts, k = c.num_experts_per_tok;
  std::vector<float> scores(E);
  if (c.scoring_func == "sigmoid") {
    for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    const float max_logit = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (scores[e] = std::exp(logits[e] - max_logit));
    for (float& v : scores) v = static_cast<float>(v / sum);
  }
  // choice: what experts are ranked by (biased scores under noaux_tc).
  std::vector<float> choice = scores;
  if (c.topk_method == "noaux_tc" && score_bias != nullptr) {
    for (int64_t e = 0; e < E; ++e) choice[e] += score_bias[e];
  }
  if (c.topk_method != "greedy" && c.n_group > 1) {
    const int64_t per_group = E / c.n_group;
    std::vector<float> group_score(c.n_group);
    for (int64_t g = 0; g < c.n_group; ++g) {
      std::vector<float> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
      if (c.topk_method == "noaux_tc") {
        const std::vector<int64_t> top2 = TopK(members, std::min<int64_t>(2, per_group));
        group_score[g] = 0;
        for (int64_t i : top2) group_score[g] += members[i];
      } else {
        group_score[g] = *std::max_element(members.begin(), members.end());
      }
    }
    std::vector<bool> keep(c.n_group, false);
    for (int64_t g : TopK(group_score, c.topk_group)) keep[g] = true;
    for (int64_t e = 0; e < E; ++e) {
      if (!keep[e / per_group]) choice[e] = -INFINITY;
    }
  }
  const std::vector<int64_t> chosen = TopK(choice, k);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = chosen[i];
    weights[i] = scores[chosen[i]];
    sum += weights[i];
  }
  // Hugging Face adds 1e-20 to the denominator; kept for bit-level agreement.
  const double norm = (c.norm_topk_prob && k > 1) ? 1.0 / (sum + 1e-20) : 1.0;
  for (int64_t i = 0; i < k; ++i) {
    weights[i] = static_cast<float>(weights[i] * norm * c.routed_scaling_factor);
  }
}

void MoeForward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out,
                FfnScratch& s) {
  const int64_t d = c.hidden_size, E = c.n_routed_experts, k = c.num_experts_per_tok;
  float* logits = Grow(s.logits, n * E);  // logits: [n, E]
  Matmul(x, n, WeightView{DType::kF32, E, d, d, w.router.data()}, logits);
  int64_t* ids = Grow(s.route_ids, n * k);
  float* weights = Grow(s.route_weights, n * k);
  s.expert_rows.resize(E);
  s.expert_weights.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    s.expert_rows[e].clear();
    s.expert_weights[e].clear();
  }
  for (int64_t t = 0; t < n; ++t) {
    RouteToken(c, logits + t * E, w.score_bias.empty() ? nullptr : w.score_bias.data(), ids + t * k,
               weights + t * k);
    for (int64_t i = 0; i < k; ++i) {
      s.expert_rows[ids[t * k + i]].push_back(t);
      s.expert_weights[ids[t * k + i]].push_back(weights[t * k + i]);
    }
  }

  if (w.shared) {
    MlpForward(*w.shared, x, n, out, s);
  } else {
    std::fill(out, out + n * d, 0.0f);
  }
  // Each expert runs once over the rows routed to it: its weights are read once per step.
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t>& rows = s.expert_rows[e];
    const int64_t m = static_cast<int64_t>(rows.size());
    if (m == 0) continue;
    float* xin = Grow(s.rows_in, m * d);
    for (int64_t i = 0; i < m; ++i) std::memcpy(xin + i * d, x + rows[i] * d, d * sizeof(float));
    float* y = Grow(s.rows_out, m * d);
    MlpForward(w.experts[e], xin, m, y, s);
    for (int64_t i = 0; i < m; ++i) {
      const float weight = s.expert_weights[e][i];
      float* dst = out + rows[i] * d;
      for (int64_t j = 0; j < d; ++j) dst[j] += weight * y[i * d + j];
    }
  }
}

}  // namespace latte
